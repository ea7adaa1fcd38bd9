"""The driver side of ``transform_batches``: options and declarations checked, the state
schema registry evolved and recorded in the operator root's descriptor, the query planned.

The operator is recorded as the per-key processor's kind (``"processor"``): the two share one
state layout and one schema registry, so ``read_state``, ``read_changes`` and ``state_size``
read either, and a query may switch between them on the same ``state_url``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ...runtime import _api, _layout, _schema, _shard, _types
from ...runtime._names import PROCESSOR_KIND
from .. import _initial, _varkeys
from .._registry import record_schemas
from .._timemode import time_config
from ._handle import BatchHandle


def transform_batches(
    df: Any,
    processor: Any,
    key_columns: Sequence[str] | str,
    output_schema: Any,
    state_url: str,
    num_shards: int,
    *,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    storage_options: dict[str, str] | None = None,
    initial_state: Any = None,
    time_mode: str = "none",
    event_time_column: str | None = None,
    watermark_delay: Any = 0,
    heartbeat: bool = False,
) -> Any:
    """Apply a :class:`~silt_spark.BatchProcessor` to a streaming DataFrame: its
    ``process(batch, state, timers)`` runs once per shard and micro-batch over all the shard's
    rows, reading and writing the state of many keys at once (no Python call per key).

    Rows are routed to ``num_shards`` shards by a stable hash of the key columns, as for every
    silt operator; each shard keeps its keys' state in its own LSM under ``state_url`` and
    commits version ``b`` when micro-batch ``b`` finishes there, so a retried task, a restart
    from the checkpoint or a rescale to another ``num_shards`` resumes from exactly the state of
    the last finished batch (exactly-once, as :func:`~silt_spark.transform_with_state`).

    The state layout is the per-key processor's: a query may switch between
    ``transform_with_state`` and ``transform_batches`` on the same ``state_url`` (restarting
    from its checkpoint) when both declare their variables with the same names, kinds and
    schemas (schemas evolve across restarts by the same rules).

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame (or a micro-batch DataFrame inside ``foreachBatch``).
    processor : BatchProcessor
        Any object with ``init(handle)`` and ``process(batch, state, timers)`` (``close()``
        optional), pickled to the executors; each task gets a fresh copy. ``init`` declares
        state variables with ``handle.getValueState(name, schema)``,
        ``handle.getListState(name, schema)`` and ``handle.getMapState(name, user_key_schema,
        value_schema)`` (schemas required), each with an optional ``ttlDurationMs`` (as the
        per-key processor's: processing time, restarted by every write of an entry);
        ``process`` gets the shard's rows as a
        ``pyarrow.Table`` (every input column), ``state`` (``state.value(name)``,
        ``state.list(name)``, ``state.map(name)``: vectorized ``get``/``put``/``delete`` and
        more for key rows of the batch; see ``docs/spark.md``) and ``timers`` (a
        :class:`~silt_spark.operators.batch.BatchTimers`: the batch's processing time and
        watermark as a :class:`~silt_spark.TimerValues`, and with a ``time_mode``
        ``register``/``delete``/``list`` of timers for key rows), and returns a
        ``pyarrow.Table``, ``RecordBatch``, pandas DataFrame or ``None``. With a
        ``time_mode``, ``expired(keys, times, state)`` (optional) gets the due timers.
    key_columns : str or list of str
        The grouping key columns.
    output_schema : pyspark.sql.types.StructType or str
        Schema of what ``process`` returns (columns matched by name, cast to these types).
    state_url, num_shards, key_groups, take_over, settings, storage_options
        As for :func:`~silt_spark.transform_with_state`.
    initial_state : pyspark.sql.DataFrame, optional
        A batch DataFrame (or its ``groupBy(...)``) with the key columns (same names and
        types) and any other columns, as :func:`~silt_spark.transform_with_state` takes it:
        in the query's first micro-batch each shard calls ``processor.process_initial(rows,
        state, timers)`` once with its initial rows (a ``pyarrow.Table``; the state calls take
        their keys too), before ``process``; what it returns is ignored. Never applied again
        (a restart, or a root that already has state other than with ``take_over=True``,
        ignores it). Building the query runs one Spark job that stores each shard's initial
        rows under ``state_url``.
    time_mode : {"none", "processingtime", "eventtime"}, default "none"
        As for :func:`~silt_spark.transform_with_state` (case-insensitive): what the timers
        ``process`` registers with ``timers.register(keys, times)`` (int64 ms) mean. The timers
        due in a micro-batch go to ``processor.expired(keys, times, state)`` in one call
        (``keys``: a ``pyarrow.Table`` of the key columns, ``times``: their int64 ms, in the
        per-key processor's firing order: by time, key group, key) whose output is added to
        the batch's; fired timers are removed. Processing time: after ``process``, the timers
        at or before the task's start. Event time: the timers at or before the watermark,
        those due when the batch starts before ``process`` (its late rows dropped first),
        those ``process`` registered at or before it after it, as the per-key processor.
        TTLs are refused in event time, as there.
    event_time_column, watermark_delay, heartbeat
        As for :func:`~silt_spark.transform_with_state`.

    Returns
    -------
    pyspark.sql.DataFrame
        A streaming DataFrame with ``output_schema``.

    Raises
    ------
    silt.errors.InvalidArgumentError
        A variable without a schema (a map without a user key schema), a list or map field
        named as a key column, a TTL that is not a positive number of ms (or any TTL with
        ``time_mode="eventtime"``), a bad ``time_mode`` or ``event_time_column``, or any other
        bad option; raised here, before anything is written.
    silt_spark.errors.StateSchemaError
        A variable's schema cannot evolve from the one its state was written with.
    silt_spark.errors.LayoutMismatchError
        ``state_url`` holds another operator's state, or other key groups or key columns.

    Examples
    --------
    >>> import pyarrow as pa
    >>> import pyarrow.compute as pc
    >>> class Totals(silt_spark.BatchProcessor):
    ...     def init(self, handle):
    ...         handle.getValueState("totals", "n long, amount long")
    ...     def process(self, batch, state, timers):
    ...         keys = batch.group_by("user").aggregate([([], "count_all"), ("amount", "sum")])
    ...         totals = state.value("totals")
    ...         old = totals.get(keys)
    ...         new = pa.table({
    ...             "n": pc.add(pc.fill_null(old["n"], 0), keys["count_all"]),
    ...             "amount": pc.add(pc.fill_null(old["amount"], 0), keys["amount_sum"])})
    ...         totals.put(keys, new)
    ...         return pa.table({"user": keys["user"], "n": new["n"], "amount": new["amount"]})
    >>> out = silt_spark.transform_batches(
    ...     events, Totals(), ["user"], "user string, n long, amount long",
    ...     state_url="file:///data/state/totals", num_shards=4)
    """
    keys = _api.key_list(key_columns, df)
    _api.require_methods(processor, ("init", "process"), "silt_spark.BatchProcessor")
    struct = _api._struct(output_schema)
    if initial_state is not None and not callable(getattr(processor, "process_initial", None)):
        raise InvalidTypeError(
            f"initial_state needs a process_initial(rows, state, timers) method on the "
            f"processor; {type(processor).__name__} has none"
        )
    init_df = None if initial_state is None else _initial.check(initial_state, df, keys)
    time_cfg = time_config(df, time_mode, event_time_column, watermark_delay)
    declared = declared_states(processor, keys, time_cfg.mode)
    spec = _api.operator_spec(
        PROCESSOR_KIND, state_url, num_shards, key_groups, take_over, settings, df=df,
        storage_options=storage_options,
        event_time_delays=time_cfg.event_time_delays,
    )
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(struct, timezone="UTC")
    key_schema = to_arrow_schema(df.select(*keys).schema, timezone="UTC")
    spec, registry = record_schemas(spec, df, keys, declared)
    arrow_schemas = {name: _arrow_schema(registry[name]["versions"][-1]) for name in declared}
    arrow_keys = {name: _arrow_schema(registry[name]["key"]) for name in declared
                  if registry[name]["kind"] == "map"}

    staging = None if init_df is None else _initial.stage(init_df, keys, spec)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        from ._task import process_partition

        return process_partition(task, batches, processor, keys, arrow_schema, registry,
                                 arrow_schemas, arrow_keys, staging, time_cfg, key_schema)

    return _api.shard_stage(_api.route(df, keys, spec, heartbeat), df, spec, process, struct)


def declared_states(processor: Any, key_columns: Sequence[str] = (),
                    time_mode: str = "none") -> dict[str, _schema.Declared]:
    """The state variables ``processor.init`` declares, checked and with their schemas parsed
    (driver side: DDL strings need the Spark session). ``init`` runs on a copy of the
    processor with a handle that only records the declarations. A list's or map's field named
    as a key column is refused (their ``get`` returns the key columns beside them), and so is a
    TTL in event time (processing time; as PySpark and the per-key processor refuse it)."""
    from pyspark import cloudpickle

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    handle = BatchHandle(None, type(processor).__name__)
    copy.init(handle)
    who = type(processor).__name__
    out = {}
    for name, (kind, key, value, ttl) in handle.declared.items():
        try:
            _varkeys.ttl_seconds(ttl)
        except (InvalidArgumentError, InvalidTypeError) as exc:
            raise type(exc)(f"{who} declares state {name!r}: {exc}") from None
        if ttl is not None and time_mode == "eventtime":
            raise InvalidArgumentError(
                f"{who} declares state {name!r} with a TTL (ttlDurationMs={ttl!r}), which is "
                "processing time, and the query runs with time_mode='eventtime': drop the TTL "
                "and clear the state from an event-time timer, or use "
                "time_mode='processingtime'"
            )
        if value is None or (kind == "map" and key is None):
            raise InvalidArgumentError(
                f"{who} declares {kind} state {name!r} without a "
                f"{'user key schema' if value is not None else 'schema'}: transform_batches "
                "needs them (get returns Arrow columns of them), e.g. "
                + _EXAMPLES[kind].format(name=name)
            )
        what = f"state {name!r}"
        parsed_key = None if key is None else _types.from_spark(key, f"{what} map key")
        parsed = _types.from_spark(value, what)
        if kind != "value":
            clash = sorted({f[0] for f in (*(parsed_key or ()), *parsed)} & set(key_columns))
            if clash:
                raise InvalidArgumentError(
                    f"{who} declares {kind} state {name!r} with the fields {clash}, named as "
                    f"key columns {list(key_columns)}: its get returns the key columns beside "
                    "them; rename the fields"
                )
        out[name] = _schema.Declared(kind, parsed_key, parsed, False)
    return out


_EXAMPLES = {
    "value": "handle.getValueState({name!r}, 'n long')",
    "list": "handle.getListState({name!r}, 'ts long')",
    "map": "handle.getMapState({name!r}, 'device string', 'n long')",
}


def _arrow_schema(fields: list[list[Any]]) -> Any:
    """The Arrow schema of a registry schema (fields ``[name, Spark type, nullable]``)."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    struct = T.StructType([
        T.StructField(n, T.DataType.fromDDL(t), bool(nullable)) for n, t, nullable in fields
    ])
    return to_arrow_schema(struct, timezone="UTC")
