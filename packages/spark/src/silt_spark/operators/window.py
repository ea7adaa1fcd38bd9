"""Event-time window aggregation (tumbling and sliding), with no Python call per row.

The plan mirrors keyed aggregation (``aggregate.py``, on the records of ``_aggregation.py``), with
the window start as part of the key:

1. **Before the shuffle** (``mapInArrow`` per input partition): each row is assigned to its
   windows with numpy (``ceil(window / slide)`` candidate starts per row, as Spark's ``window()``
   does), and ``pyarrow`` ``group_by`` reduces the rows to one partial per (key, window start):
   row count, per-column count/sum/min/max, the largest event time, and ``__own``, the number of
   rows for which this is the latest window (so late rows can be counted, not just windows).
2. **Per shard** (after routing by key group): merge the partials, drop those of windows the
   query-wide watermark has already closed (late data), read the state of every touched window
   with one sorted ``multi_get``, combine with numpy, find the windows the watermark closed, and
   apply everything with one ``WriteBatch``. Closed windows are evicted with one range delete
   per key group (``DB.delete_range`` of the prefix of windows that start ``<=`` the cutoff),
   not a tombstone per window.

State entry per (grouping key, window), with the window start **before** the key so that, within
a key group, windows sort by start and the closed ones are a prefix::

    key:   kg:u16be 'W' window_start:u64be (ms + 2^63, sorts as signed ms) enc(grouping key)
    value: the keyed aggregation's record (format:u8=1 rows:i64le then n, sum, min, max per column)

A window ``[start, start + window)`` is **closed** once the watermark reaches its end. Finding
closed windows is one range scan per key group of the shard, from the key group's first window to
the first one still open; the manifest meta keeps a lower bound of the shard's open window starts
(``spark.window_min_start_ms``; absent means unknown, e.g. after a rescale), so a batch in which
no window can close scans nothing.

Watermark: query-wide, as in Spark (``_watermark.py``): batch ``b`` runs with the largest event
time of the batches before it minus the delay (at least 0). A (row, window) pair is late, and
dropped, when the window's end is ``<=`` the watermark batch ``b - 1`` ran with (Spark's
watermark for late events); windows whose end is ``<=`` batch ``b``'s watermark are emitted
(append) and evicted in batch ``b``, this batch's rows included, by every shard, whether or not
it has rows. Spark runs a no-data batch after a batch that moved the watermark; silt's tick
source (``_tick.py``) gives the query the same batch, so the windows come out in it.

Simplification: rows with a null event time are dropped without being counted.

The module owns the operator: its builder (:func:`window_aggregate`, which plans the query on the
driver), its executors (``partial_aggregate`` before the shuffle, ``merge_partition`` in the shard's
task) and :func:`decode` (its entries as ``read_state`` rows). Keys are built and split through
``_keys.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from silt.errors import InvalidArgumentError

from ..runtime import _api, _codec, _keys, _layout, _readers, _root, _shard, _watermark
from ..runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ..runtime._names import META_LATE_ROWS, META_WATERMARK
from ..runtime._ndarrays import from_numpy, to_numpy
from ..runtime._shard import ShardTask
from . import _aggregation
from ._groupby import group_by

#: The operator kind, as recorded in the state root's descriptor.
KIND = "window"
WINDOW_TAG = _keys.WINDOW_TAG
OUTPUTS = ("append", "update")

#: Lower bound of the shard's open window starts ("" when it has none; absent: unknown).
META_MIN_START = "spark.window_min_start_ms"
#: The partials' window-start column (ms).
WS_COLUMN = "__ws"


@dataclass(frozen=True)
class WindowPlan:
    """Derived on the driver from the input schema; shipped to the tasks (plain data)."""

    agg: _aggregation.AggPlan
    time_column: str
    window_ms: int
    slide_ms: int
    delay_ms: int
    output: str
    partial_schema: Any  # pyarrow.Schema
    output_schema: Any  # pyarrow.Schema


def plan(
    df_schema: Any, key_columns: list[str], aggs: list[_aggregation.Agg], time_column: str,
    window_ms: int, slide_ms: int, delay_ms: int, output: str,
    previous: list[list[str]] | None = None, root: str = "",
) -> tuple[WindowPlan, Any, Any]:
    """The plan plus the Spark schemas of the partials and of the output (``previous``: the
    root's state columns, as for :func:`silt_spark.operators.aggregate.plan`)."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    fields = {f.name: f for f in df_schema.fields}
    if time_column not in fields:
        raise ValueError(f"time_column {time_column!r} is not in the DataFrame ({sorted(fields)})")
    time_type = fields[time_column].dataType
    if not isinstance(time_type, (T.TimestampType, T.TimestampNTZType)):
        raise TypeError(
            f"time_column {time_column!r} has type {time_type.simpleString()}; window "
            "aggregation needs a timestamp column (cast epoch values with "
            "timestamp_millis(...) or to_timestamp(...))"
        )
    clash = {"window_start", "window_end"} & set(key_columns)
    if clash:
        raise ValueError(f"key columns {sorted(clash)} clash with the output's window columns")
    p, partial, output_struct = _aggregation.plan(df_schema, key_columns, aggs, previous, root)
    clash = {"window_start", "window_end"} & {a.name for a in aggs}
    if clash:
        raise ValueError(f"aggregate names {sorted(clash)} clash with the window columns")
    nk = len(key_columns)
    partial_fields = list(partial.fields)
    partial_fields[nk:nk] = [T.StructField(WS_COLUMN, T.LongType(), False)]
    partial_fields += [
        T.StructField("__own", T.LongType(), False),
        T.StructField("__maxt", T.LongType(), False),
    ]
    out_fields = list(output_struct.fields)
    out_fields[nk:nk] = [
        T.StructField("window_start", time_type, False),
        T.StructField("window_end", time_type, False),
    ]
    partial_struct = T.StructType(partial_fields)
    out_struct = T.StructType(out_fields)
    wp = WindowPlan(
        p, time_column, window_ms, slide_ms, delay_ms, output,
        to_arrow_schema(partial_struct, timezone="UTC"),
        to_arrow_schema(out_struct, timezone="UTC"),
    )
    return wp, partial_struct, out_struct


def partial_aggregate(batches: Iterator[Any], wp: WindowPlan) -> Iterator[Any]:
    """Before the shuffle: one row per (key, window start) of this input partition."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    batches = list(batches)
    if not any(b.num_rows for b in batches):
        return
    p = wp.agg
    t = pa.Table.from_batches(batches)
    tcol = t[wp.time_column]
    if tcol.null_count:
        t = t.filter(pc.is_valid(tcol))
        tcol = t[wp.time_column]
    if t.num_rows == 0:
        return
    us = to_numpy(_watermark.event_us(tcol))
    slide_us, window_us = wp.slide_ms * 1000, wp.window_ms * 1000
    last = (us // slide_us) * slide_us  # the latest window containing each row
    rows_idx, starts, own = [], [], []
    for i in range(-(-wp.window_ms // wp.slide_ms)):
        s = last - i * slide_us
        hit = np.flatnonzero(us < s + window_us) if i else np.arange(len(us))
        rows_idx.append(hit)
        starts.append(s[hit] // 1000)
        own.append(np.full(len(hit), 1 if i == 0 else 0, np.int64))
    rows = np.concatenate(rows_idx)
    idx = from_numpy(rows)
    cols = {c: t[c].take(idx) for c in p.key_columns}
    cols[WS_COLUMN] = from_numpy(np.concatenate(starts), pa.int64())
    cols["__own"] = from_numpy(np.concatenate(own), pa.int64())
    cols["__t"] = from_numpy((us // 1000)[rows], pa.int64())
    specs: list[tuple[Any, str]] = [([], "count_all"), ("__own", "sum"), ("__t", "max")]
    for j, c in enumerate(p.value_columns):
        cols[f"__v{j}"] = t[c].take(idx).cast(pa.float64() if p.floating[j] else pa.int64())
        specs += [(f"__v{j}", "count"), (f"__v{j}", "sum"), (f"__v{j}", "min"),
                  (f"__v{j}", "max")]
    g = group_by(pa.table(cols), [*p.key_columns, WS_COLUMN], specs)
    out = [g[c] for c in p.key_columns] + [g[WS_COLUMN], g["count_all"]]
    for j in range(len(p.value_columns)):
        out += [g[f"__v{j}_count"], g[f"__v{j}_sum"], g[f"__v{j}_min"], g[f"__v{j}_max"]]
    out += [g["__own_sum"], g["__t_max"]]
    yield from pa.Table.from_arrays(out, schema=wp.partial_schema).to_batches()


def window_keys(kgs: list[int], starts: list[int], key_values: list[list[Any]]) -> list[bytes]:
    """State keys of (key group, window start, grouping key) triples."""
    timed, enc = _keys.timed_key, _codec.encode
    return [
        timed(kg, WINDOW_TAG, s, enc(key)) for kg, s, key in zip(kgs, starts, zip(*key_values))
    ]


def decode_key(key: bytes) -> tuple[int, tuple]:
    """``(window start ms, grouping key)`` of a window state key."""
    return _keys.key_time(key), _codec.decode(_keys.after_time(key))


def _meta_int(meta: dict[str, str], name: str) -> int | None:
    v = meta.get(name)
    return int(v) if v else None


def _closed_windows(
    task: ShardTask, cutoff: int
) -> tuple[list[tuple[bytes, bytes]], list[int], int | None]:
    """State entries of windows with start ``<= cutoff``, the key groups that have any, and the
    smallest start after it (``None``: no window left), read as ``_keys.timed_due`` reads a
    time index (one ``multi_scan`` of every key group of the shard, never a scan per key
    group on the store)."""
    closed, nxt = _keys.timed_due(task.db, task.first_kg, task.last_kg, WINDOW_TAG, cutoff)
    groups = sorted({int.from_bytes(k[:_keys.KG_BYTES], "big") for k, _ in closed})
    return closed, groups, nxt


def merge_partition(task: ShardTask, batches: Iterator[Any], wp: WindowPlan) -> Iterator[Any]:
    """After the shuffle, in the shard's task: drop late partials, merge the rest into state,
    emit (``append``: windows the query-wide watermark closed; ``update``: touched windows) and
    evict closed windows, with one write batch."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import silt

    p = wp.agg
    meta = task.base_meta
    wm = task.watermark
    assert wm is not None, "window operators are event-time operators"
    bound = meta.get(META_MIN_START)  # None: unknown (e.g. after a rescale); "": no windows
    if bound is None and task.base_version is None and not task.changed:
        bound = ""  # a shard with no state yet (and nothing migrated) has no windows
    batches = list(batches)
    t = pa.Table.from_batches(batches) if batches else None
    if t is not None and t.num_rows and pc.min(t[KG_COLUMN]).as_py() < 0:
        t = t.filter(pc.greater_equal(t[KG_COLUMN], 0))  # heartbeat rows only make a batch
    rows = t is not None and t.num_rows > 0
    if rows:
        task.observe_event_time(pc.max(t["__maxt"]).as_py())
    cutoff = wm - wp.window_ms  # windows starting <= cutoff are closed (end <= watermark)
    # Rows are late against the watermark of batch b - 1 (Spark's watermark for late events);
    # a window between the two watermarks takes its rows and closes in this batch.
    late_cutoff = (task.late_watermark or 0) - wp.window_ms
    scan_due = bound is None or (bound != "" and int(bound) <= cutoff)
    if not rows and not scan_due:
        return

    batch = silt.WriteBatch()
    ops = batch.ops
    touched_open_min: int | None = None
    closed_now: set[bytes] = set()
    emit_tables: list[Any] = []
    if rows:
        g = group_by(t.drop_columns([PARTITION_COLUMN]), [*p.key_columns, KG_COLUMN, WS_COLUMN],
                     [*_aggregation.merge_specs(p), ("__own", "sum")])
        ws = to_numpy(g[WS_COLUMN])
        late = ws <= late_cutoff  # Spark drops a (row, window) pair once the window's end <= wm
        if late.any():
            late_rows = int(to_numpy(g["__own_sum"])[late].sum())
            if late_rows:
                total = (_meta_int(meta, META_LATE_ROWS) or 0) + late_rows
                task.meta_updates[META_LATE_ROWS] = str(total)
                task.changed = True
            g = g.filter(from_numpy(~late))
            ws = ws[~late]
        if g.num_rows:
            # Every window left was open before this batch; those ending <= wm close in it:
            # they are emitted (append) with this batch's rows and never written.
            keys = window_keys(
                g[KG_COLUMN].to_pylist(), ws.tolist(), [g[c].to_pylist() for c in p.key_columns]
            )
            new = _aggregation.combine(
                _aggregation.read_records(task.db.multi_get(keys), p, task.url), g, p
            )
            closing = ws <= cutoff
            buf = new.tobytes()
            width = new.dtype.itemsize
            ops.extend(
                (keys[i], buf[i * width:(i + 1) * width], None)
                for i in np.flatnonzero(~closing).tolist()
            )
            if not closing.all():
                touched_open_min = int(ws[~closing].min())
            key_cols = [g[c] for c in p.key_columns]
            if wp.output == "update":
                emit_tables.append(_output(key_cols, ws, new, wp))
            elif closing.any():
                done = from_numpy(closing)
                emit_tables.append(_output([c.filter(done) for c in key_cols], ws[closing],
                                           new[closing], wp))
                closed_now = {keys[i] for i in np.flatnonzero(closing).tolist()}

    old_open_min = None if bound in (None, "") else int(bound)
    if scan_due:
        closed_entries, closed_groups, old_open_min = _closed_windows(task, cutoff)
        # One range delete per key group with closed windows (every window key of the group
        # starting <= cutoff), not a tombstone per window: a later, wider range replaces the
        # earlier one, so the manifest keeps one range tombstone per key group.
        for kg in closed_groups:
            batch.delete_range(_keys.head(kg, WINDOW_TAG),
                               _keys.timed_key(kg, WINDOW_TAG, cutoff + 1, b""))
        if closed_now:  # emitted above, with this batch's rows
            closed_entries = [(k, v) for k, v in closed_entries if k not in closed_now]
        if closed_entries and wp.output == "append":
            decoded = [decode_key(k) for k, _ in closed_entries]
            recs = _aggregation.read_records([v for _, v in closed_entries], p, task.url)
            nk = len(p.key_columns)
            key_arrays = [
                pa.array([key[j] for _, key in decoded],
                         type=wp.output_schema.field(p.key_columns[j]).type)
                for j in range(nk)
            ]
            starts = np.array([s for s, _ in decoded], np.int64)
            emit_tables.append(_output(key_arrays, starts, recs, wp))
    if ops:
        task.db.write(batch)
        task.changed = True
        task.meta_updates[META_WATERMARK] = str(wm)
    mins = [m for m in (old_open_min, touched_open_min) if m is not None]
    new_bound = str(min(mins)) if mins else ""
    if new_bound != bound and (bound is not None or scan_due):  # unknown stays unknown
        task.meta_updates[META_MIN_START] = new_bound
        task.changed = True
    for table in emit_tables:
        yield from table.to_batches()


def _output(key_arrays: list[Any], starts_ms: Any, records: Any, wp: WindowPlan) -> Any:
    import pyarrow as pa

    schema = wp.output_schema
    tt = schema.field("window_start").type
    start = from_numpy(starts_ms * 1000, pa.int64()).cast(tt)
    end = from_numpy((starts_ms + wp.window_ms) * 1000, pa.int64()).cast(tt)
    arrays = [*key_arrays, start, end, *_aggregation.output_arrays(records, wp.agg)]
    return pa.Table.from_arrays(arrays, schema=schema)


# --- driver: the query plan ------------------------------------------------------------------

@_api.root_parameters
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
    storage_options: dict[str, str] | None = None,
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
    dropped, for each of its windows that the previous batch's watermark had closed (window end
    ``<=`` watermark: Spark's watermark for late events); the count of rows dropped because all
    their windows were closed is kept per shard in the manifest meta (``spark.late_rows``). A
    window closes when the watermark reaches its end; its state is then evicted.

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
        (Spark emits it in the no-data batch it runs right after the watermark moved; silt's
        tick source gives the query that batch, see docs/spark.md). ``"update"``: every
        micro-batch emits each window that received rows in it, with its running aggregates
        (closed windows are evicted without output).
    {root_parameters}
    heartbeat : bool, default False
        Union a 1 row/s ``rate`` source into the operator so micro-batches keep running while
        the input is idle (needed only with ``spark.silt.tick=false``: the tick source runs the
        batch that closes them). Keep the setting across restarts (it is a source of the query).

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
    keys = _api.key_list(key_columns, df)
    window_ms = _api._duration_ms(window_duration, "window_duration")
    slide_ms = window_ms if slide_duration is None else _api._duration_ms(
        slide_duration, "slide_duration"
    )
    if slide_ms > window_ms:
        raise InvalidArgumentError(
            f"slide_duration ({slide_ms} ms) must not be longer than window_duration "
            f"({window_ms} ms)"
        )
    delay_ms = _api.parse_delay_ms(watermark_delay)
    if output not in OUTPUTS:
        raise InvalidArgumentError(f"output must be one of {OUTPUTS}, got {output!r}")
    parsed = _aggregation.parse_aggs(aggs)
    plan(df.schema, keys, parsed, time_column, window_ms, slide_ms, delay_ms, output)
    spec = _api.operator_spec(
        KIND, state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
        storage_options=storage_options,
        event_time_delays=(delay_ms,),
    )
    # Aggregated columns may be appended at a restart, as for aggregate() (_aggregation.py).
    previous = _aggregation.previous_columns(spec, KIND)
    wp, partial_struct, output_struct = plan(
        df.schema, keys, parsed, time_column, window_ms, slide_ms, delay_ms, output,
        previous, state_url,
    )
    p = wp.agg
    recorded = {
        _aggregation.OUTPUTS: _aggregation.outputs(p, output_struct),
        TIME_TYPE: output_struct[len(keys)].dataType.simpleString(),
    }
    spec = _root.ensure_descriptor(spec, {
        "key_columns": _api.key_types(df, keys),
        "state_columns": _aggregation.state_columns(p),
        "window": {"window_ms": window_ms, "slide_ms": slide_ms},
        **recorded,
    }, (*_api.PINNED, "window"))
    _aggregation.record_columns(spec, previous, p)
    _root.refresh_descriptor(spec, recorded)

    def partial_fn(batches: Any) -> Any:
        return partial_aggregate(batches, wp)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return merge_partition(task, batches, wp)

    needed = list(dict.fromkeys([*keys, time_column, *p.value_columns]))
    partials = df.select(*needed).mapInArrow(partial_fn, partial_struct)
    routed = _api.route(partials, keys, spec, heartbeat)
    return _api.shard_stage(routed, df, spec, process, output_struct)


# --- read-back: read_state ----------------------------------------------------------------


#: The descriptor's field holding the type of the window bounds (the time column's type).
TIME_TYPE = "window_time_type"


def typed_columns(desc: dict[str, Any]) -> list[tuple[str, str]]:
    """``read_state(state_name="window")``'s columns after the key columns and before
    ``shard_version``: ``window_start``, ``window_end`` and the aggregates, as emitted."""
    tt = str(desc.get(TIME_TYPE, "timestamp"))
    return [("window_start", tt), ("window_end", tt), *_aggregation.typed_columns(desc)]


def typed_rows(items: Any, desc: dict[str, Any], url: str, schema: Any) -> Any:
    """``read_state(state_name="window")`` of one shard: a pyarrow table of ``schema`` (key
    columns, the window's bounds, its aggregates so far exactly as the operator emits them when
    it closes, ``shard_version``) per open window; ``None`` when the shard holds none."""
    import numpy as np
    import pyarrow as pa

    gkeys, starts, values, versions = [], [], [], []
    for key, value, _, ver in items:
        if _keys.tag_of(key) == WINDOW_TAG:
            start, gkey = decode_key(key)
            gkeys.append(gkey)
            starts.append(start)
            values.append(value)
            versions.append(ver)
    if not values:
        return None
    nk = len(desc.get("key_columns") or [["key", "string"]])
    out_schema = pa.schema(list(schema)[:-1])
    p = _aggregation.stored_plan(desc, pa.schema([*list(schema)[:nk], *list(schema)[nk + 2:-1]]))
    w = desc["window"]
    wp = WindowPlan(p, "", int(w["window_ms"]), int(w["slide_ms"]), 0, "append", None,
                    out_schema)
    key_arrays = [pa.array([k[j] for k in gkeys], type=schema.field(j).type) for j in range(nk)]
    table = _output(key_arrays, np.asarray(starts, np.int64),
                    _aggregation.read_records(values, p, url), wp)
    return table.append_column("shard_version", pa.array(versions, pa.int64()))


def decode(items: Any, state_columns: list[list[str]] | None) -> Any:
    """``read_state``'s rows of this operator: ``(key tuple, state, map_key, value,
    expires_at_ms, version)`` per live entry of ``items`` (``(key, value, expires_at_ms,
    version)`` of one shard)."""
    parts = _aggregation.running_parts(state_columns)
    for key, value, expiry, ver in items:
        if _keys.tag_of(key) != WINDOW_TAG:
            continue
        start, gkey = decode_key(key)  # map_key: the window's start (ms since the epoch)
        yield gkey, "window", str(start), _codec.to_json(parts(value)), expiry, ver


_readers.register(_readers.StateReader(
    KIND, decode, states=("window",),
    typed_columns=lambda desc, state_name: typed_columns(desc),
    typed_rows=lambda items, desc, root, schema, state_name: typed_rows(items, desc, root, schema),
))
