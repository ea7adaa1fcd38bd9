"""The entry points: build the operator's plan on the driver (no state is touched here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError
from silt.tierkit import public_url

from . import (
    _aggregate,
    _dedup,
    _interval,
    _layout,
    _metrics,
    _processor,
    _shard,
    _watermark,
    _window,
)


def _spec(
    kind: str,
    state_url: str,
    num_shards: int,
    key_groups: int,
    take_over: bool,
    settings: Any,
    *,
    df: Any = None,
    reset: bool | None = None,
    **options: Any,
) -> _shard.OperatorSpec:
    """The operator's options, checked (``df``: refused unless streaming or in foreachBatch;
    ``reset``: the deprecated name of ``take_over``)."""
    import silt

    if df is not None:
        _check_streaming(df, kind)
    if reset is not None:
        import warnings

        warnings.warn(
            "reset= is renamed take_over= (it discards another streaming query's state)",
            DeprecationWarning, stacklevel=3,
        )
        take_over = take_over or bool(reset)
    if not isinstance(state_url, str) or "://" not in state_url:
        raise InvalidArgumentError(
            "state_url must be a store URL such as 'file:///data/state/op1', got "
            f"{public_url(state_url)!r}"
        )
    if state_url.startswith("memory://"):
        raise InvalidArgumentError(
            "memory:// state lives in one process; Spark runs tasks in other processes. Use "
            "file:// (one machine) or an object-store URL"
        )
    _layout.check_layout(num_shards, key_groups)
    if settings is not None and not isinstance(settings, silt.Settings):
        raise InvalidTypeError(
            f"settings must be a silt.Settings, got {type(settings).__name__}"
        )
    return _shard.OperatorSpec(
        kind=kind,
        root=state_url,
        num_shards=num_shards,
        key_groups=key_groups,
        take_over=bool(take_over),
        settings=settings.to_dict() if settings is not None else None,
        **options,
    )


def _check_streaming(df: Any, kind: str) -> None:
    """Refuse a batch DataFrame when the operator is built, before any state is touched,
    unless it is built inside ``foreachBatch`` (the micro-batch id is then known)."""
    from .errors import NotStreamingError

    if getattr(df, "isStreaming", False):
        return
    session = getattr(df, "sparkSession", None)
    if session is not None and session.sparkContext.getLocalProperty(
        "streaming.sql.batchId"
    ) is not None:
        return  # inside foreachBatch: the tasks see the micro-batch id and the query id
    raise NotStreamingError(
        f"silt_spark's {kind} operator needs a streaming DataFrame (spark.readStream...) or "
        "a micro-batch DataFrame inside foreachBatch: its state version is the micro-batch "
        "id, which a batch query has not"
    )


def _key_list(key_columns: Sequence[str] | str, df: Any) -> list[str]:
    keys = [key_columns] if isinstance(key_columns, str) else list(key_columns)
    if not keys:
        raise InvalidArgumentError("key_columns must name at least one column")
    missing = [c for c in keys if c not in df.columns]
    if missing:
        raise InvalidArgumentError(
            f"key columns {missing} are not in the DataFrame ({df.columns})"
        )
    return keys


#: Descriptor fields a restart must not change: the key columns' Spark types decide the key
#: groups (Spark's xxhash64 depends on them).
PINNED = ("key_columns",)


def _key_types(df: Any, keys: list[str]) -> list[list[str]]:
    fields = {f.name: f for f in df.schema.fields}
    return [[c, fields[c].dataType.simpleString()] for c in keys]


def _struct(schema: Any) -> Any:
    from pyspark.sql.types import DataType, StructType

    if isinstance(schema, str):
        schema = DataType.fromDDL(schema)
    if not isinstance(schema, StructType):
        raise InvalidTypeError(
            f"output_schema must be a StructType or DDL string, got {schema!r}"
        )
    return schema


def _route(df: Any, keys: list[str], spec: _shard.OperatorSpec, heartbeat: bool = False) -> Any:
    routed = _layout.with_routing_columns(df, keys, spec.num_shards, spec.key_groups)
    if heartbeat:
        routed = routed.union(_heartbeat(df, routed.schema))
    return routed.repartition(spec.num_shards, _layout.PARTITION_COLUMN)


def _heartbeat(df: Any, schema: Any) -> Any:
    """A 1 row/s ``rate`` stream shaped like the routed input, with key group ``-1`` (tasks
    drop such rows): it only makes micro-batches happen, and Spark then runs every shard."""
    from pyspark.sql import functions as F

    rate = df.sparkSession.readStream.format("rate").option("rowsPerSecond", 1).load()
    cols = []
    for f in schema.fields:
        if f.name == _layout.KG_COLUMN:
            cols.append(F.lit(-1).cast(f.dataType).alias(f.name))
        elif f.name == _layout.PARTITION_COLUMN:
            cols.append(F.lit(_layout.partition_values(1)[0]).cast(f.dataType).alias(f.name))
        else:
            cols.append(F.lit(None).cast(f.dataType).alias(f.name))
    return rate.select(*cols)


#: The longest duration an option may give: Spark timestamps are 64-bit microseconds.
MAX_DURATION_MS = _interval.MAX_DURATION_MS


def parse_delay_ms(delay: Any, name: str = "watermark_delay") -> int:
    """A delay (``watermark_delay``) in ms, ``0..MAX_DURATION_MS``: ``int`` ms, a
    ``datetime.timedelta`` or an interval string (``_interval.py``). Raises
    :class:`~silt.errors.InvalidTypeError` or :class:`~silt.errors.InvalidArgumentError` naming
    ``name`` otherwise (``inf``, ``nan`` included)."""
    return _interval.duration_ms(value=delay, name=name, positive=False, months_ok=True)


def _time_config(df: Any, mode: str, column: str | None, delay: Any) -> Any:
    from pyspark.sql import types as T

    m = str(mode).lower()
    if m not in _processor.TIME_MODES:
        raise InvalidArgumentError(
            f"time_mode must be one of {_processor.TIME_MODES}, got {mode!r}"
        )
    delay_ms = parse_delay_ms(delay)
    if m != "eventtime":
        if column is not None:
            raise InvalidArgumentError("event_time_column needs time_mode='eventtime'")
        if delay_ms:
            raise InvalidArgumentError("watermark_delay needs time_mode='eventtime'")
        return _processor.TimeConfig(m)
    if column is None:
        raise InvalidArgumentError("time_mode='eventtime' needs event_time_column")
    fields = {f.name: f.dataType for f in df.schema.fields}
    t = fields.get(column)
    if t is None:
        raise InvalidArgumentError(f"event_time_column {column!r} is not in the DataFrame")
    if not isinstance(t, (T.TimestampType, T.TimestampNTZType, T.LongType, T.IntegerType)):
        raise InvalidTypeError(
            f"event_time_column {column!r} must be a timestamp or ms, not {t}"
        )
    return _processor.TimeConfig(m, column, delay_ms)


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
    rows_format: str = "pandas",
    time_mode: str = "none",
    event_time_column: str | None = None,
    watermark_delay: Any = 0,
    heartbeat: bool = False,
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
    key_groups : int, default 256
        Number of key groups, fixed per root; the upper bound on ``num_shards``.
    take_over : bool, default False
        Take the state root over from another streaming query: discard the state that
        belongs to another query id (a new checkpoint means a new query id) instead of failing
        with :class:`~silt_spark.errors.ForeignStateError`. To start your own query's state
        over, use :func:`silt_spark.drop_state`. (``reset=`` is its deprecated old name.)
    settings : silt.Settings, optional
        LSM settings for the shards.
    rows_format : {"pandas", "arrow"}, default "pandas"
        What ``handleInputRows`` receives: an iterator of pandas DataFrames (PySpark's shape)
        or of ``pyarrow.Table`` slices (far cheaper per key when keys have few rows).
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
    keys = _key_list(key_columns, df)
    for method in ("init", "handleInputRows"):
        if not callable(getattr(processor, method, None)):
            raise InvalidTypeError(
                f"processor must have a {method}() method (see StatefulProcessor)"
            )
    struct = _struct(output_schema)
    if rows_format not in ("pandas", "arrow"):
        raise InvalidArgumentError(
            f"rows_format must be 'pandas' or 'arrow', got {rows_format!r}"
        )
    time_cfg = _time_config(df, time_mode, event_time_column, watermark_delay)
    spec = _spec(
        "processor", state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
        event_time_delays=(
            (time_cfg.watermark_delay_ms,) if time_cfg.mode == "eventtime" else ()
        ),
    )
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(struct, timezone="UTC")
    spec = _shard.ensure_descriptor(spec, {"key_columns": _key_types(df, keys)}, PINNED)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return _processor.process_partition(
            task, batches, processor, keys, arrow_schema, rows_format, time_cfg
        )

    report = _metrics.accumulator(df)

    def shard_fn(batches: Any) -> Any:
        return _shard.run_shard(spec, batches, process, report)

    return _route(df, keys, spec, heartbeat).mapInArrow(shard_fn, struct)


def aggregate(
    df: Any,
    key_columns: Sequence[str] | str,
    aggs: Sequence[str] | Mapping[str, str],
    state_url: str,
    num_shards: int,
    *,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    reset: bool | None = None,
) -> Any:
    """Keyed running aggregation (count, sum, min, max, avg) of a streaming DataFrame.

    The counterpart of ``df.groupBy(keys).agg(...)`` in update mode, vectorized end to end: a
    partial aggregation per input partition before the shuffle, then per shard one sorted
    ``multi_get`` of the batch's keys, numpy arithmetic and one write per key. Each micro-batch
    emits one row per key that received rows in that batch, with its aggregates over
    everything seen so far, so any sink works (append to files, ``foreachBatch`` upserts, ...).

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame.
    key_columns : str or list of str
        The grouping key columns.
    aggs : list of str or dict of str to str
        Aggregates such as ``["count", "sum(amount)", "avg(amount)"]`` (output columns named
        like the expressions, ``count`` for the row count), or ``{"name": "expr"}``. Functions:
        ``count`` / ``count(*)`` (rows), ``count(col)`` (non-null values), ``sum``, ``min``,
        ``max``, ``avg`` of integral or floating-point columns; nulls are ignored as in Spark.
    state_url : str
        Root URL of this operator's state (one operator per root).
    num_shards : int
        Number of shards (Spark partitions of the operator). Restarting the query with
        another number rescales without moving state (see ``docs/spark.md``, Rescaling).
    key_groups : int, default 256
        Number of key groups, fixed per root.
    take_over : bool, default False
        Take the state root over from another streaming query: discard the state that
        belongs to another query id (a new checkpoint means a new query id) instead of failing
        with :class:`~silt_spark.errors.ForeignStateError`. To start your own query's state
        over, use :func:`silt_spark.drop_state`. (``reset=`` is its deprecated old name.)
    settings : silt.Settings, optional
        LSM settings for the shards.

    Returns
    -------
    pyspark.sql.DataFrame
        Streaming DataFrame: the key columns, then one column per aggregate. ``count`` is
        ``long``; ``sum`` is ``long`` for integral and ``double`` for floating columns; ``avg`` is
        ``double``; ``min``/``max`` keep the column's type.

    Examples
    --------
    >>> import silt_spark
    >>> tx = spark.readStream.schema("card string, amount double").parquet("/data/tx")
    >>> totals = silt_spark.aggregate(
    ...     tx, ["card"], ["count", "sum(amount)", "max(amount)"],
    ...     state_url="file:///data/state/totals", num_shards=4)
    >>> query = (totals.writeStream.foreachBatch(lambda out, batch_id: out.show())
    ...          .option("checkpointLocation", "/data/chk/totals").start())
    """
    keys = _key_list(key_columns, df)
    parsed = _aggregate.parse_aggs(aggs)
    p, partial_struct, output_struct = _aggregate.plan(df.schema, keys, parsed)
    spec = _spec(
        "aggregate", state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
    )
    spec = _shard.ensure_descriptor(spec, {
        "key_columns": _key_types(df, keys),
        "state_columns": [[c, "f64" if f else "i64"] for c, f in zip(p.value_columns, p.floating)],
    }, (*PINNED, "state_columns"))

    def partial_fn(batches: Any) -> Any:
        return _aggregate.partial_aggregate(batches, p)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return _aggregate.merge_partition(task, batches, p)

    report = _metrics.accumulator(df)

    def shard_fn(batches: Any) -> Any:
        return _shard.run_shard(spec, batches, process, report)

    needed = list(dict.fromkeys([*keys, *p.value_columns]))
    partials = df.select(*needed).mapInArrow(partial_fn, partial_struct)
    return _route(partials, keys, spec).mapInArrow(shard_fn, output_struct)


def _timestamp_column(df: Any, column: str, name: str) -> None:
    """Refuse ``column`` unless it is a ``timestamp`` or ``timestamp_ntz`` column of ``df``."""
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise InvalidArgumentError(
            f"{name} {column!r} is not in the DataFrame ({sorted(fields)})"
        )
    t = fields[column]
    if not isinstance(t, (T.TimestampType, T.TimestampNTZType)):
        raise InvalidTypeError(
            f"{name} {column!r} has type {t.simpleString()}; it must be a timestamp column "
            "(cast epoch values with timestamp_millis(...) or to_timestamp(...))"
        )


def _duration_ms(value: Any, name: str) -> int:
    """A positive duration (a window, a slide, a TTL) in ms, ``1..MAX_DURATION_MS``: ``int``
    ms, a ``datetime.timedelta`` or an interval string (``_interval.py``)."""
    return _interval.duration_ms(value=value, name=name, positive=True, months_ok=False)


def window_aggregate(
    df: Any,
    key_columns: Sequence[str] | str,
    time_column: str,
    window_duration: Any,
    aggs: Sequence[str] | Mapping[str, str],
    state_url: str,
    num_shards: int,
    *,
    slide_duration: Any = None,
    watermark_delay: Any = 0,
    output: str = "append",
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    reset: bool | None = None,
    heartbeat: bool = False,
) -> Any:
    """Event-time window aggregation (tumbling or sliding) of a streaming DataFrame.

    The counterpart of ``df.withWatermark(time_column, delay).groupBy(window(time_column,
    window_duration, slide_duration), *keys).agg(...)``, vectorized as :func:`aggregate` is: a
    partial aggregation per input partition and window before the shuffle, then per shard one
    sorted ``multi_get`` of the touched windows, numpy arithmetic and one write batch.

    The watermark is query-wide, as in Spark: micro-batch ``b`` runs with the largest event
    time of the batches before it minus ``watermark_delay`` (at least 0), the same in every
    shard, whatever ``num_shards``, across retries, restarts and rescales. A row is late, and
    dropped, for each of its windows that the watermark has closed (window end ``<=``
    watermark); the count of rows dropped because all their windows were closed is kept per
    shard in the manifest meta (``spark.late_rows``). A window closes when the watermark reaches
    its end; its state is then evicted.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame.
    key_columns : str or list of str
        The grouping key columns (besides the window). An empty list is not allowed: add a
        constant column to aggregate all rows per window.
    time_column : str
        The event-time column: ``timestamp`` or ``timestamp_ntz``. Rows where it is null are
        dropped.
    window_duration : int, str or timedelta
        Window length: ms (int), a ``datetime.timedelta`` or a Spark interval string
        (``"10 minutes"``, ``"interval 1 hour 30 minutes"``, ``"2 weeks"``; see
        ``docs/spark.md``).
    aggs : list of str or dict of str to str
        As for :func:`aggregate`: ``count``, ``count(col)``, ``sum``, ``min``, ``max``,
        ``avg`` of integral or floating-point columns.
    state_url : str
        Root URL of this operator's state (one operator per root).
    num_shards : int
        Number of shards (Spark partitions of the operator). Restarting the query with
        another number rescales without moving state (see ``docs/spark.md``, Rescaling).
    slide_duration : int, str or timedelta, optional
        Slide of a sliding window (at most ``window_duration``); ``None`` (default) makes
        tumbling windows. Windows start at multiples of the slide since the epoch, as in Spark,
        so a row belongs to ``window_duration / slide_duration`` windows.
    watermark_delay : int, str or timedelta, default 0
        How late rows may arrive: ms (int), a ``datetime.timedelta`` or a Spark interval
        string (``"10 minutes"``, ``"interval 1 hour 30 minutes"``, ``"2 weeks"``; see
        ``docs/spark.md``).
    output : {"append", "update"}, default "append"
        ``"append"`` (Spark's append mode): each window is emitted **once**, with its final
        aggregates, in the first micro-batch whose watermark is at or past the window's end
        (Spark emits it in the no-data batch it runs right after the watermark moved; Spark
        runs none for a silt operator, so the window comes with the next batch: see
        ``heartbeat``). ``"update"``: every micro-batch emits each window that received rows in
        it, with its running aggregates (closed windows are evicted without output).
    key_groups : int, default 256
        Number of key groups, fixed per root.
    take_over : bool, default False
        Take the state root over from another streaming query: discard the state that
        belongs to another query id (a new checkpoint means a new query id) instead of failing
        with :class:`~silt_spark.errors.ForeignStateError`. To start your own query's state
        over, use :func:`silt_spark.drop_state`. (``reset=`` is its deprecated old name.)
    settings : silt.Settings, optional
        LSM settings for the shards.
    heartbeat : bool, default False
        Union a 1 row/s ``rate`` source into the operator so micro-batches keep running while
        the input is idle: windows the last input closed are then emitted without waiting for
        more input. Keep the setting across restarts (it is a source of the query).

    Returns
    -------
    pyspark.sql.DataFrame
        Streaming DataFrame: the key columns, ``window_start`` and ``window_end`` (of the time
        column's type), then one column per aggregate (types as in :func:`aggregate`).

    Raises
    ------
    TypeError
        ``time_column`` is not a timestamp column, or an aggregated column is not numeric.
    ValueError
        Non-positive durations, a slide longer than the window, an unknown ``output``.

    Examples
    --------
    >>> import silt_spark
    >>> tx = spark.readStream.schema("user string, ok boolean, ts timestamp").parquet("/data/tx")
    >>> failures = silt_spark.window_aggregate(
    ...     tx.where("not ok"), ["user"], "ts", "24 hours", ["count"],
    ...     state_url="file:///data/state/failures", num_shards=4,
    ...     slide_duration="1 hour", watermark_delay="10 minutes")
    >>> query = (failures.writeStream.format("parquet").option("path", "/data/out/failures")
    ...          .option("checkpointLocation", "/data/chk/failures").start())
    """
    keys = _key_list(key_columns, df)
    window_ms = _duration_ms(window_duration, "window_duration")
    slide_ms = window_ms if slide_duration is None else _duration_ms(
        slide_duration, "slide_duration"
    )
    if slide_ms > window_ms:
        raise InvalidArgumentError(
            f"slide_duration ({slide_ms} ms) must not be longer than window_duration "
            f"({window_ms} ms)"
        )
    delay_ms = parse_delay_ms(watermark_delay)
    if output not in _window.OUTPUTS:
        raise InvalidArgumentError(f"output must be one of {_window.OUTPUTS}, got {output!r}")
    parsed = _aggregate.parse_aggs(aggs)
    wp, partial_struct, output_struct = _window.plan(
        df.schema, keys, parsed, time_column, window_ms, slide_ms, delay_ms, output
    )
    spec = _spec(
        "window", state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
        event_time_delays=(delay_ms,),
    )
    p = wp.agg
    spec = _shard.ensure_descriptor(spec, {
        "key_columns": _key_types(df, keys),
        "state_columns": [[c, "f64" if f else "i64"] for c, f in zip(p.value_columns, p.floating)],
        "window": {"window_ms": window_ms, "slide_ms": slide_ms},
    }, (*PINNED, "state_columns", "window"))

    def partial_fn(batches: Any) -> Any:
        return _window.partial_aggregate(batches, wp)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return _window.merge_partition(task, batches, wp)

    report = _metrics.accumulator(df)

    def shard_fn(batches: Any) -> Any:
        return _shard.run_shard(spec, batches, process, report)

    needed = list(dict.fromkeys([*keys, time_column, *p.value_columns]))
    partials = df.select(*needed).mapInArrow(partial_fn, partial_struct)
    return _route(partials, keys, spec, heartbeat).mapInArrow(shard_fn, output_struct)


def deduplicate(
    df: Any,
    key_columns: Sequence[str] | str,
    state_url: str,
    num_shards: int,
    *,
    event_time_column: str | None = None,
    watermark_delay: Any = 0,
    ttl: Any = None,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    reset: bool | None = None,
) -> Any:
    """Drop duplicate rows of a streaming DataFrame: each key's first row only.

    The counterpart of ``df.dropDuplicates(keys)`` (no ``event_time_column``, no ``ttl``), of
    ``df.withWatermark(col, delay).dropDuplicatesWithinWatermark(keys)`` (with
    ``event_time_column`` and ``watermark_delay``: same results), or, with a ``ttl``, a
    deduplication that forgets keys in processing time. Vectorized: before the shuffle,
    duplicates within each input partition are dropped with ``pyarrow``; each shard then reads
    its batch's distinct keys with one sorted ``multi_get`` and writes the new ones with one
    write batch.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame.
    key_columns : str or list of str
        The columns that identify a duplicate (nulls compare equal, as in Spark).
    state_url : str
        Root URL of this operator's state (one operator per root).
    num_shards : int
        Number of shards (Spark partitions of the operator). Restarting the query with
        another number rescales without moving state (see ``docs/spark.md``, Rescaling).
    event_time_column : str, optional
        A timestamp column: deduplicate **in event time**, as ``dropDuplicatesWithinWatermark``.
        Micro-batch ``b`` runs with the query-wide watermark (the largest event time of the
        batches before ``b`` minus ``watermark_delay``, at least 0). Rows whose event time is at
        or before it are late and dropped; a key is remembered until the watermark reaches its
        first row's event time plus ``watermark_delay``, then its next row is emitted again.
    watermark_delay : int, str or timedelta, default 0
        With ``event_time_column``: how late rows may arrive (ms, ``"10 minutes"``, a
        ``timedelta``); also how long past its first event time a key is remembered.
    ttl : int, str or timedelta, optional
        Instead of ``event_time_column``: how long a key is remembered after its first row, in
        **processing time** (wall clock), so results depend on when batches run. Later
        duplicates do not extend it; once it has passed, the key's next row is emitted again.
        Neither option: keys are remembered forever.
    key_groups : int, default 256
        Number of key groups, fixed per root.
    take_over : bool, default False
        Take the state root over from another streaming query: discard the state that
        belongs to another query id (a new checkpoint means a new query id) instead of failing
        with :class:`~silt_spark.errors.ForeignStateError`. To start your own query's state
        over, use :func:`silt_spark.drop_state`. (``reset=`` is its deprecated old name.)
    settings : silt.Settings, optional
        LSM settings for the shards.

    Returns
    -------
    pyspark.sql.DataFrame
        Streaming DataFrame with ``df``'s columns: the first row of each key not seen before
        (within the TTL). Among one micro-batch's rows of a new key, the first in the batch's
        input order (input partition, then position) wins, so a re-run of the batch emits the
        same row.

    Examples
    --------
    >>> import silt_spark
    >>> clicks = spark.readStream.schema("event_id string, user string, ts timestamp") \\
    ...     .json("/data/clicks")
    >>> unique = silt_spark.deduplicate(
    ...     clicks, ["event_id"], state_url="file:///data/state/dedup", num_shards=4,
    ...     ttl="24 hours")
    >>> query = (unique.writeStream.format("parquet").option("path", "/data/out/clicks")
    ...          .option("checkpointLocation", "/data/chk/dedup").start())
    """
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    keys = _key_list(key_columns, df)
    ttl_ms = None if ttl is None else _duration_ms(ttl, "ttl")
    delay_ms = parse_delay_ms(watermark_delay)
    if event_time_column is not None:
        if ttl is not None:
            raise InvalidArgumentError(
                "pass event_time_column (forget keys in event time, as "
                "dropDuplicatesWithinWatermark) or ttl (forget keys in processing time), not both"
            )
        _timestamp_column(df, event_time_column, "event_time_column")
    elif delay_ms:
        raise InvalidArgumentError("watermark_delay needs event_time_column")
    for name in (_dedup.SEQ_COLUMN, _layout.KG_COLUMN, _layout.PARTITION_COLUMN):
        if name in df.columns:
            raise InvalidArgumentError(f"the DataFrame must not have a column named {name!r}")
    delays = (delay_ms,) if event_time_column is not None else ()
    spec = _spec(
        "dedup", state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
        event_time_delays=delays,
    )
    mode = "event_time" if event_time_column is not None else "processing_time"
    have = _shard.read_descriptor(state_url) if mode == "event_time" else None
    if have is not None and have.get("operator") == "dedup" and "dedup_time" not in have:
        from .errors import LayoutMismatchError

        raise LayoutMismatchError(
            f"the state root {public_url(state_url)!r} holds a processing-time deduplication's "
            "keys; "
            "event-time deduplication needs another state_url"
        )
    spec = _shard.ensure_descriptor(
        spec, {"key_columns": _key_types(df, keys), "dedup_time": mode}, (*PINNED, "dedup_time")
    )
    seq_struct = T.StructType([*df.schema.fields, T.StructField(_dedup.SEQ_COLUMN, T.LongType())])
    dp = _dedup.DedupPlan(
        tuple(keys), ttl_ms, to_arrow_schema(df.schema, timezone="UTC"),
        to_arrow_schema(seq_struct, timezone="UTC"), event_time_column, delay_ms,
    )
    root = spec.root

    def watermark() -> int:
        return _watermark.in_task(root, delays)

    def number_fn(batches: Any) -> Any:
        return _dedup.number_and_drop(batches, dp, watermark if delays else None)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return _dedup.merge_partition(task, batches, dp)

    report = _metrics.accumulator(df)

    def shard_fn(batches: Any) -> Any:
        return _shard.run_shard(spec, batches, process, report)

    numbered = df.mapInArrow(number_fn, seq_struct)
    return _route(numbered, keys, spec).mapInArrow(shard_fn, df.schema)
