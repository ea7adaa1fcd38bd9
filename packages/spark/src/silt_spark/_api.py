"""The entry points: build the operator's plan on the driver (no state is touched here)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from . import _aggregate, _dedup, _layout, _metrics, _processor, _shard, _window


def _spec(
    kind: str,
    state_url: str,
    num_shards: int,
    key_groups: int,
    reset: bool,
    settings: Any,
    **hooks: Any,
) -> _shard.OperatorSpec:
    import silt

    if not isinstance(state_url, str) or "://" not in state_url:
        raise InvalidArgumentError(
            f"state_url must be a store URL such as 'file:///data/state/op1', got {state_url!r}"
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
        reset=bool(reset),
        settings=settings.to_dict() if settings is not None else None,
        **hooks,
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


_UNITS_MS = {
    "ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "minute": 60_000, "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000,
    "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}


#: The longest duration an option may give: Spark timestamps are 64-bit microseconds.
MAX_DURATION_MS = _processor.MAX_DURATION_MS


def parse_delay_ms(delay: int | str, name: str = "watermark_delay") -> int:
    """``1500`` or ``"10 seconds"`` / ``"5 minutes"`` / ``"2 hours"`` -> ms, in
    ``0..MAX_DURATION_MS``. Raises :class:`~silt.errors.InvalidTypeError` or
    :class:`~silt.errors.InvalidArgumentError` naming ``name`` otherwise (``inf``, ``nan``)."""
    if isinstance(delay, bool) or not isinstance(delay, (int, str)):
        raise InvalidTypeError(f"{name} must be ms or an interval string, got {delay!r:.80}")
    if isinstance(delay, int):
        ms = delay
    else:
        parts = delay.strip().lower().split()
        try:
            if len(parts) != 2 or parts[1] not in _UNITS_MS:
                raise ValueError
            amount = float(parts[0])
        except ValueError:
            raise InvalidArgumentError(
                f"{name}: cannot parse interval {delay!r:.80}: use e.g. '10 seconds'"
            ) from None
        if not math.isfinite(amount):
            raise InvalidArgumentError(f"{name} must be a finite interval, got {delay!r:.80}")
        ms = int(amount * _UNITS_MS[parts[1]])
    if ms < 0:
        raise InvalidArgumentError(f"{name} must not be negative, got {delay!r:.80}")
    if ms > MAX_DURATION_MS:
        raise InvalidArgumentError(
            f"{name} must be at most {MAX_DURATION_MS} ms (Spark timestamps are 64-bit "
            f"microseconds), got {delay!r:.80}"
        )
    return ms


def _time_config(df: Any, mode: str, column: str | None, delay: int | str) -> Any:
    from pyspark.sql import types as T

    m = str(mode).lower()
    if m not in _processor.TIME_MODES:
        raise InvalidArgumentError(
            f"time_mode must be one of {_processor.TIME_MODES}, got {mode!r}"
        )
    if m != "eventtime":
        if column is not None:
            raise InvalidArgumentError("event_time_column needs time_mode='eventtime'")
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
    return _processor.TimeConfig(m, column, parse_delay_ms(delay))


def transform_with_state(
    df: Any,
    processor: Any,
    key_columns: Sequence[str] | str,
    output_schema: Any,
    state_url: str,
    num_shards: int,
    *,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    reset: bool = False,
    settings: Any = None,
    rows_format: str = "pandas",
    time_mode: str = "none",
    event_time_column: str | None = None,
    watermark_delay: int | str = 0,
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
    reset : bool, default False
        Discard state that belongs to another streaming query instead of failing.
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
        With ``time_mode="eventtime"``: a timestamp column (or integral ms). Each shard's
        watermark is the largest event time it has seen minus ``watermark_delay``; it is kept
        in the shard's manifest, survives restarts, and applies from the next micro-batch on.
    watermark_delay : int or str, default 0
        Delay in ms, or a Spark-style interval such as ``"10 seconds"`` or ``"5 minutes"``.
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
        "processor", state_url, num_shards, key_groups, reset, settings,
        fail_after_commit=tuple(_shard.TEST_FAIL_AFTER_COMMIT),
        test_marker_dir=_shard.TEST_MARKER_DIR,
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
    reset: bool = False,
    settings: Any = None,
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
    reset : bool, default False
        Discard state that belongs to another streaming query instead of failing.
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
        "aggregate", state_url, num_shards, key_groups, reset, settings,
        fail_after_commit=tuple(_shard.TEST_FAIL_AFTER_COMMIT),
        test_marker_dir=_shard.TEST_MARKER_DIR,
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


def _duration_ms(value: Any, name: str) -> int:
    """A positive duration: ms (int), a ``datetime.timedelta``, or ``"10 minutes"`` style, at
    most ``MAX_DURATION_MS``."""
    import datetime

    if isinstance(value, datetime.timedelta):
        ms = value // datetime.timedelta(milliseconds=1)
        if ms > MAX_DURATION_MS:
            raise InvalidArgumentError(
                f"{name} must be at most {MAX_DURATION_MS} ms (Spark timestamps are 64-bit "
                f"microseconds), got {value!r}"
            )
    elif isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidTypeError(
            f"{name} must be ms, a timedelta or an interval string, got {value!r:.80}"
        )
    else:
        ms = parse_delay_ms(value, name)
    if ms <= 0:
        raise InvalidArgumentError(f"{name} must be positive, got {value!r:.80}")
    return ms


def window_aggregate(
    df: Any,
    key_columns: Sequence[str] | str,
    time_column: str,
    window_duration: int | str,
    aggs: Sequence[str] | Mapping[str, str],
    state_url: str,
    num_shards: int,
    *,
    slide_duration: int | str | None = None,
    watermark_delay: int | str = 0,
    output: str = "append",
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    reset: bool = False,
    settings: Any = None,
) -> Any:
    """Event-time window aggregation (tumbling or sliding) of a streaming DataFrame.

    The counterpart of ``df.withWatermark(time_column, delay).groupBy(window(time_column,
    window_duration, slide_duration), *keys).agg(...)``, vectorized as :func:`aggregate` is: a
    partial aggregation per input partition and window before the shuffle, then per shard one
    sorted ``multi_get`` of the touched windows, numpy arithmetic and one write batch.

    Each shard keeps an event-time watermark (the largest event time it has seen minus
    ``watermark_delay``) in its manifests. A row is late, and dropped, for each of its windows
    that the watermark had closed (window end ``<=`` watermark) when its micro-batch started; the
    count of rows dropped because all their windows were closed is kept per shard in the
    manifest meta (``spark.late_rows``). A window closes when the watermark reaches its end; its
    state is then evicted.

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
    window_duration : int or str
        Window length: ms, a ``datetime.timedelta``, or ``"10 minutes"`` / ``"24 hours"`` style.
    aggs : list of str or dict of str to str
        As for :func:`aggregate`: ``count``, ``count(col)``, ``sum``, ``min``, ``max``,
        ``avg`` of integral or floating-point columns.
    state_url : str
        Root URL of this operator's state (one operator per root).
    num_shards : int
        Number of shards (Spark partitions of the operator). Restarting the query with
        another number rescales without moving state (see ``docs/spark.md``, Rescaling).
    slide_duration : int or str, optional
        Slide of a sliding window (at most ``window_duration``); ``None`` (default) makes
        tumbling windows. Windows start at multiples of the slide since the epoch, as in Spark,
        so a row belongs to ``window_duration / slide_duration`` windows.
    watermark_delay : int or str, default 0
        How late rows may arrive: ms or an interval string.
    output : {"append", "update"}, default "append"
        ``"append"`` (Spark's append mode): each window is emitted **once**, with its final
        aggregates, in the micro-batch whose rows move the shard's watermark to or past the
        window's end. ``"update"``: every micro-batch emits each window that received rows in
        it, with its running aggregates (closed windows are evicted without output).
    key_groups : int, default 256
        Number of key groups, fixed per root.
    reset : bool, default False
        Discard state that belongs to another streaming query instead of failing.
    settings : silt.Settings, optional
        LSM settings for the shards.

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
        "window", state_url, num_shards, key_groups, reset, settings,
        fail_after_commit=tuple(_shard.TEST_FAIL_AFTER_COMMIT),
        test_marker_dir=_shard.TEST_MARKER_DIR,
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
    return _route(partials, keys, spec).mapInArrow(shard_fn, output_struct)


def deduplicate(
    df: Any,
    key_columns: Sequence[str] | str,
    state_url: str,
    num_shards: int,
    *,
    ttl: int | str | None = None,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    reset: bool = False,
    settings: Any = None,
) -> Any:
    """Drop duplicate rows of a streaming DataFrame: each key's first row only.

    The counterpart of ``df.dropDuplicates(keys)`` (``ttl=None``) and of
    ``dropDuplicatesWithinWatermark`` (with a ``ttl``, in processing time). Vectorized: before
    the shuffle, duplicates within each input partition are dropped with ``pyarrow``; each shard
    then reads its batch's distinct keys with one sorted ``multi_get`` and writes the new ones
    with one write batch.

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
    ttl : int or str, optional
        How long a key is remembered after its first row, in **processing time**: ms, a
        ``datetime.timedelta`` or ``"24 hours"`` style. Later duplicates do not extend it; once
        it has passed, the key's next row is emitted again. ``None`` (default): forever.
    key_groups : int, default 256
        Number of key groups, fixed per root.
    reset : bool, default False
        Discard state that belongs to another streaming query instead of failing.
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
    for name in (_dedup.SEQ_COLUMN, _layout.KG_COLUMN, _layout.PARTITION_COLUMN):
        if name in df.columns:
            raise InvalidArgumentError(f"the DataFrame must not have a column named {name!r}")
    spec = _spec(
        "dedup", state_url, num_shards, key_groups, reset, settings,
        fail_after_commit=tuple(_shard.TEST_FAIL_AFTER_COMMIT),
        test_marker_dir=_shard.TEST_MARKER_DIR,
    )
    spec = _shard.ensure_descriptor(spec, {"key_columns": _key_types(df, keys)}, PINNED)
    seq_struct = T.StructType([*df.schema.fields, T.StructField(_dedup.SEQ_COLUMN, T.LongType())])
    dp = _dedup.DedupPlan(
        tuple(keys), ttl_ms, to_arrow_schema(df.schema, timezone="UTC"),
        to_arrow_schema(seq_struct, timezone="UTC"),
    )

    def number_fn(batches: Any) -> Any:
        return _dedup.number_and_drop(batches, dp)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return _dedup.merge_partition(task, batches, dp)

    report = _metrics.accumulator(df)

    def shard_fn(batches: Any) -> Any:
        return _shard.run_shard(spec, batches, process, report)

    numbered = df.mapInArrow(number_fn, seq_struct)
    return _route(numbered, keys, spec).mapInArrow(shard_fn, df.schema)
