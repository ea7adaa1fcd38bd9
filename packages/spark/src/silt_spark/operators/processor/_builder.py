"""``transform_with_state``: the processor operator's builder (driver side): checks the
processor and options, records the state schemas in the root's descriptor, and plans the
query (route rows by key group, one ``mapInArrow`` task per shard running ``_runner.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from silt.errors import InvalidArgumentError

from ...runtime import _api, _layout, _schema, _shard, _types
from .. import _initial
from .._registry import record_schemas
from .._timemode import time_config as _time_config
from . import _handover
from ._handle import KIND, StatefulProcessorHandle
from ._runner import process_partition


@_api.root_parameters
def transform_with_state(
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
    reset: bool | None = None,
    storage_options: dict[str, str] | None = None,
    rows_format: str = "pandas",
    time_mode: str = "none",
    event_time_column: str | None = None,
    watermark_delay: Any = 0,
    heartbeat: bool = False,
    initial_state: Any = None,
) -> Any:
    """Apply a :class:`StatefulProcessor` per key to a streaming DataFrame, state in silt.

    The silt counterpart of ``df.groupBy(keys).transformWithStateInPandas(...)``: rows are
    routed to ``num_shards`` shards by a stable hash of the key columns, and each shard keeps its
    keys' state in its own LSM under ``state_url``. State version ``b`` is committed when
    micro-batch ``b`` finishes on a shard, so restarting the query from its checkpoint resumes
    from exactly the state of its last finished batch. Output is what ``handleInputRows`` yields,
    per micro-batch; the result works with any sink and output mode that a ``mapInArrow``
    allows.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame (``spark.readStream...``).
    processor : StatefulProcessor
        The per-key logic (PySpark's own ``StatefulProcessor`` subclasses work too). It is
        pickled to the executors; each task gets a fresh copy.
    key_columns : str or list of str
        The grouping key columns.
    output_schema : pyspark.sql.types.StructType or str
        Schema of the DataFrames that ``handleInputRows`` yields (DDL strings allowed).
    state_url : str
        Root URL of this operator's state, e.g. ``"file:///data/state/sessions"`` or
        ``"s3://bucket/state/sessions"``. One operator per root.
    num_shards : int
        Number of shards (Spark partitions of the operator). Restarting the query with
        another number rescales without moving state (see ``docs/spark.md``, Rescaling).
    {root_parameters}
    rows_format : {"pandas", "row", "arrow"}, default "pandas"
        What ``handleInputRows`` receives. ``"pandas"``: an iterator of pandas DataFrames as
        ``transformWithStateInPandas`` gives them (Spark's dtypes, e.g. timestamps as naive
        ``datetime64[ns]`` in ``spark.sql.session.timeZone``, at most
        ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows per frame). ``"row"``: an
        iterator of ``pyspark.sql.Row`` as ``transformWithState`` gives them; the processor
        yields Rows (matched to ``output_schema`` by field name) and ``handleInitialState`` is
        called once per initial Row. ``"arrow"``: ``pyarrow.Table`` slices (far cheaper per
        key when keys have few rows).
    time_mode : {"none", "processingtime", "eventtime"}, default "none"
        What timers registered with ``handle.registerTimer`` mean (case-insensitive, as
        PySpark's ``timeMode``). Due timers call ``processor.handleExpiredTimer(key,
        timerValues, expiredTimerInfo)`` after the batch's rows were processed.
    event_time_column : str, optional
        With ``time_mode="eventtime"``: a timestamp column (or integral ms). The watermark is
        query-wide, as in Spark: micro-batch ``b`` runs with the largest event time of the
        batches before it minus ``watermark_delay`` (at least 0), in every shard, across
        retries, restarts and rescales. Rows at or before it are late and never reach the
        processor; timers at or before it fire, those set before the batch first.
    watermark_delay : int, str or timedelta, default 0
        How late rows may arrive: ms (int), a ``datetime.timedelta`` or a Spark interval
        string (``"10 minutes"``, ``"interval 1 hour 30 minutes"``, ``"2 weeks"``; see
        ``docs/spark.md``).
    heartbeat : bool, default False
        Union a 1 row/s ``rate`` source into the operator so micro-batches (and so timers) keep
        running while the input is idle; heartbeat rows never reach the processor. Set the
        cadence with the query's trigger, e.g. ``trigger(processingTime="10 seconds")``, and
        keep the setting across restarts (it is a source of the query).
    initial_state : pyspark.sql.DataFrame, optional
        A batch DataFrame (or its ``groupBy(...)``, as PySpark's ``initialState``) with the
        key columns (same names and types) and any other columns: in the query's first
        micro-batch, each key's rows (one pandas DataFrame, or ``pyarrow.Table`` with
        ``rows_format="arrow"``) go to ``processor.handleInitialState(key, rows,
        timerValues)``, before ``handleInputRows`` for that key (which runs only if the key
        has input rows in that batch). Never applied again: a restarted query, or one built on
        a root that has state (other than with ``take_over=True``), ignores it. Building the
        query runs one Spark job that stores each shard's initial rows under ``state_url``
        (see ``docs/spark.md``).

    Returns
    -------
    pyspark.sql.DataFrame
        A streaming DataFrame with ``output_schema``. ``handleInputRows`` may yield pandas
        DataFrames, Arrow tables or record batches, or single rows as tuples (in
        ``output_schema`` order, ``pyspark.sql.Row`` included) or dicts; rows are the cheapest
        when a key produces one output row.

    Raises
    ------
    silt_spark.errors.LayoutMismatchError
        ``state_url`` was created by another operator kind or with other shard or key-group
        counts.
    silt_spark.errors.StateSchemaError
        A state variable's schema changed in a way its stored state cannot evolve to
        (narrowing, another type, a map key schema...). ``processor.init`` runs once here, on
        the driver, on a copy of the processor with a handle that only records the state
        variables it declares; nothing is written when this is raised.

    Examples
    --------
    >>> import pandas as pd
    >>> import silt_spark
    >>> class Count(silt_spark.StatefulProcessor):
    ...     def init(self, handle):
    ...         self.n = handle.getValueState("n", "n long")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         n = (self.n.get() or (0,))[0] + sum(len(df) for df in rows)
    ...         self.n.update((n,))
    ...         yield pd.DataFrame({"user": [key[0]], "events": [n]})
    >>> events = spark.readStream.schema("user string, amount double").json("/data/in")
    >>> counts = silt_spark.transform_with_state(
    ...     events, Count(), ["user"], "user string, events long",
    ...     state_url="file:///data/state/counts", num_shards=4)
    >>> query = (counts.writeStream.format("parquet").option("path", "/data/out")
    ...          .option("checkpointLocation", "/data/chk").start())
    """
    keys = _api.key_list(key_columns, df)
    _api.require_methods(processor, ("init", "handleInputRows"), "StatefulProcessor")
    struct = _api._struct(output_schema)
    if rows_format not in _handover.FORMATS:
        raise InvalidArgumentError(
            f"rows_format must be one of {_handover.FORMATS} ('row' for processors written for "
            f"PySpark's transformWithState, which take and yield Rows), got {rows_format!r}"
        )
    fmt = _handover.RowsFormat.for_session(rows_format, df.sparkSession)
    time_cfg = _time_config(df, time_mode, event_time_column, watermark_delay)
    init_df = None if initial_state is None else _initial.check(initial_state, df, keys)
    spec = _api.operator_spec(
        KIND, state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
        storage_options=storage_options,
        event_time_delays=time_cfg.event_time_delays,
    )
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(struct, timezone="UTC")
    # Schemas are checked and evolved here, on the driver, before any state is written.
    spec, registry = record_schemas(spec, df, keys, declared_states(processor, time_cfg.mode))

    staging = None if init_df is None else _initial.stage(init_df, keys, spec)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return process_partition(
            task, batches, processor, keys, arrow_schema, fmt, time_cfg, registry,
            staging,
        )

    return _api.shard_stage(_api.route(df, keys, spec, heartbeat), df, spec, process, struct)


def declared_states(processor: Any, time_mode: str = "none") -> dict[str, _schema.Declared]:
    """The state variables ``processor.init`` declares, with their schemas parsed (driver
    side: DDL strings need the Spark session).

    ``init`` runs on a copy of the processor with a handle that only records what it is asked
    for; a variable declared without a schema is recorded by kind only.
    """
    from pyspark import cloudpickle

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    handle = StatefulProcessorHandle(None, time_mode, record=True)
    copy.init(handle)
    out = {}
    assert handle._declared is not None
    for name, (kind, key, value, reset) in handle._declared.items():
        if kind is None:  # deleted, not declared again
            out[name] = _schema.Declared(None, None, None, True)
            continue
        what = f"state {name!r}"
        out[name] = _schema.Declared(
            _schema.kind_name(kind),
            None if key is None else _types.from_spark(key, f"{what} map key"),
            None if value is None else _types.from_spark(value, what),
            reset,
        )
    return out
