"""The batch processor's contract: :class:`BatchProcessor`, the base class (optional: any
object with ``init`` and ``process`` is accepted) of the stateful logic that
:func:`silt_spark.transform_batches` applies to whole micro-batches. The handle it declares its
variables on is ``_handle.py``, the variables ``_state.py``, ``_lists.py`` and ``_maps.py``, the
timers ``_timers.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["BatchProcessor"]

if TYPE_CHECKING:
    from ._handle import BatchHandle, BatchStates


class BatchProcessor:
    """Stateful logic over whole micro-batches, applied with
    :func:`silt_spark.transform_batches`.

    ``init(handle)`` declares the state variables (``handle.getValueState(name, schema)``,
    ``getListState(name, schema)``, ``getMapState(name, user_key_schema, value_schema)``, each
    with an optional ``ttlDurationMs``, as a :class:`~silt_spark.StatefulProcessor` does);
    ``process(batch, state, timers)`` is called once per shard and micro-batch with the shard's
    rows (a ``pyarrow.Table`` with every input column, key columns included) and returns the
    output rows (a ``pyarrow.Table``, ``RecordBatch`` or pandas DataFrame with the operator's
    ``output_schema``, or ``None``); ``close()`` is optional, and so is
    ``process_initial(rows, state, timers)`` (required with ``initial_state=``: called once per
    shard in the query's first micro-batch with the shard's initial rows, before ``process``;
    what it returns is ignored), and so is ``expired(keys, times, state)`` (with a
    ``time_mode``: called once per shard and micro-batch with the timers that are due, ``keys``
    a ``pyarrow.Table`` of the key columns and ``times`` their int64 ms, one row per timer in
    firing order; returns output rows as ``process`` does; ``state.timers`` registers, deletes
    and lists timers there). ``timers`` (also ``state.timers``) is a
    :class:`~silt_spark.operators.batch.BatchTimers`: the batch's processing time and
    watermark, and ``register(keys, times)``, ``delete(keys, times)``, ``list(keys)``. Any
    object with ``init`` and ``process`` is accepted.

    Examples
    --------
    >>> import pyarrow as pa
    >>> import pyarrow.compute as pc
    >>> class RunningCount(BatchProcessor):
    ...     def init(self, handle):
    ...         handle.getValueState("count", "n long")
    ...     def process(self, batch, state, timers):
    ...         per_key = batch.group_by("user").aggregate([([], "count_all")])
    ...         count = state.value("count")
    ...         old = count.get(per_key)
    ...         n = pc.add(pc.fill_null(old["n"], 0), per_key["count_all"])
    ...         count.put(per_key, pa.table({"n": n}))
    ...         return pa.table({"user": per_key["user"], "n": n})
    """

    def init(self, handle: BatchHandle) -> None:
        """Declare the state variables (``handle.getValueState``, ``getListState``,
        ``getMapState``)."""
        raise NotImplementedError

    def process(self, batch: Any, state: BatchStates, timers: Any) -> Any:
        """The shard's output for its rows of one micro-batch (see the class docstring);
        ``timers`` is the batch's :class:`~silt_spark.operators.batch.BatchTimers`
        (its processing time and watermark, as a :class:`~silt_spark.TimerValues`)."""
        raise NotImplementedError

    def close(self) -> None:
        """Called after ``process``, also when it raised."""
