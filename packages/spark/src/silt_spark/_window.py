"""Event-time window aggregation (tumbling and sliding), with no Python call per row.

The plan mirrors keyed aggregation (``_aggregate.py``), with the window start as part of the key:

1. **Before the shuffle** (``mapInArrow`` per input partition): each row is assigned to its
   windows with numpy (``ceil(window / slide)`` candidate starts per row, as Spark's ``window()``
   does), and ``pyarrow`` ``group_by`` reduces the rows to one partial per (key, window start):
   row count, per-column count/sum/min/max, the largest event time, and ``__own``, the number of
   rows for which this is the latest window (so late rows can be counted, not just windows).
2. **Per shard** (after routing by key group): merge the partials, drop those of windows the
   query-wide watermark has already closed (late data), read the state of every touched window
   with one sorted ``multi_get``, combine with numpy, find the windows the watermark closed, and
   apply everything with one ``WriteBatch``.

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
dropped, when the window's end is ``<=`` the watermark (Spark's rule); windows whose end is
``<=`` it are emitted (append) and evicted in batch ``b``, by every shard, whether or not it has
rows. Spark emits them in the no-data batch it runs after the batch that moved the watermark; a
silt operator's plan has no Spark state, so Spark runs no such batch for it and the windows come
out in the next batch (``heartbeat`` or any later input).

Simplification: rows with a null event time are dropped without being counted.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import _aggregate, _codec
from ._layout import KG_COLUMN, PARTITION_COLUMN
from ._shard import ShardTask, check_key_groups

WINDOW_TAG = b"W"
OUTPUTS = ("append", "update")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_BIAS = 1 << 63

META_WATERMARK = "spark.watermark_ms"
META_MAX_EVENT_TIME = "spark.max_event_time_ms"
#: Lower bound of the shard's open window starts ("" when it has none; absent: unknown).
META_MIN_START = "spark.window_min_start_ms"
#: Rows of this shard dropped as late so far (all their windows were closed).
META_LATE_ROWS = "spark.late_rows"
#: The partials' window-start column (ms).
WS_COLUMN = "__ws"


@dataclass(frozen=True)
class WindowPlan:
    """Derived on the driver from the input schema; shipped to the tasks (plain data)."""

    agg: _aggregate.AggPlan
    time_column: str
    window_ms: int
    slide_ms: int
    delay_ms: int
    output: str
    partial_schema: Any  # pyarrow.Schema
    output_schema: Any  # pyarrow.Schema


def plan(
    df_schema: Any, key_columns: list[str], aggs: list[_aggregate.Agg], time_column: str,
    window_ms: int, slide_ms: int, delay_ms: int, output: str,
) -> tuple[WindowPlan, Any, Any]:
    """The plan plus the Spark schemas of the partials and of the output."""
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
    p, partial, output_struct = _aggregate.plan(df_schema, key_columns, aggs)
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


def _event_us(column: Any) -> Any:
    """A timestamp column as int64 microseconds (Spark's unit)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    per_us = {"s": -1_000_000, "ms": -1000, "us": 1, "ns": 1000}[t.unit]
    raw = column.cast(pa.int64())
    if per_us < 0:
        return pc.multiply(raw, -per_us)
    return raw if per_us == 1 else pc.floor(pc.divide(raw, per_us)).cast(pa.int64())


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
    us = _event_us(tcol).to_numpy()
    slide_us, window_us = wp.slide_ms * 1000, wp.window_ms * 1000
    last = (us // slide_us) * slide_us  # the latest window containing each row
    rows_idx, starts, own = [], [], []
    for i in range(-(-wp.window_ms // wp.slide_ms)):
        s = last - i * slide_us
        hit = np.flatnonzero(us < s + window_us) if i else np.arange(len(us))
        rows_idx.append(hit)
        starts.append(s[hit] // 1000)
        own.append(np.full(len(hit), 1 if i == 0 else 0, np.int64))
    idx = pa.array(np.concatenate(rows_idx))
    cols = {c: t[c].take(idx) for c in p.key_columns}
    cols[WS_COLUMN] = pa.array(np.concatenate(starts), pa.int64())
    cols["__own"] = pa.array(np.concatenate(own), pa.int64())
    cols["__t"] = pa.array((us // 1000)[np.asarray(idx)], pa.int64())
    specs: list[tuple[Any, str]] = [([], "count_all"), ("__own", "sum"), ("__t", "max")]
    for j, c in enumerate(p.value_columns):
        cols[f"__v{j}"] = t[c].take(idx).cast(pa.float64() if p.floating[j] else pa.int64())
        specs += [(f"__v{j}", "count"), (f"__v{j}", "sum"), (f"__v{j}", "min"),
                  (f"__v{j}", "max")]
    g = pa.table(cols).group_by(
        [*p.key_columns, WS_COLUMN], use_threads=False
    ).aggregate(specs)
    out = [g[c] for c in p.key_columns] + [g[WS_COLUMN], g["count_all"]]
    for j in range(len(p.value_columns)):
        out += [g[f"__v{j}_count"], g[f"__v{j}_sum"], g[f"__v{j}_min"], g[f"__v{j}_max"]]
    out += [g["__own_sum"], g["__t_max"]]
    yield from pa.Table.from_arrays(out, schema=wp.partial_schema).to_batches()


def _start_bytes(ms: int) -> bytes:
    return _U64.pack(ms + _BIAS)


def state_keys(kgs: list[int], starts: list[int], key_values: list[list[Any]]) -> list[bytes]:
    """State keys of (key group, window start, grouping key) triples."""
    pack16, pack64, enc = _U16.pack, _U64.pack, _codec.encode
    return [
        pack16(kg) + WINDOW_TAG + pack64(s + _BIAS) + enc(key)
        for kg, s, key in zip(kgs, starts, zip(*key_values))
    ]


def decode_key(key: bytes) -> tuple[int, tuple]:
    """``(window start ms, grouping key)`` of a window state key."""
    return _U64.unpack(key[3:11])[0] - _BIAS, _codec.decode(key[11:])


def _meta_int(meta: dict[str, str], name: str) -> int | None:
    v = meta.get(name)
    return int(v) if v else None


def _closed_windows(
    task: ShardTask, cutoff: int
) -> tuple[list[tuple[bytes, bytes]], int | None]:
    """State entries of windows with start ``<= cutoff`` and the smallest start after it
    (``None``: no window left). One range scan per key group of the shard."""
    closed: list[tuple[bytes, bytes]] = []
    nxt: int | None = None
    scan = task.db.scan
    for kg in range(task.first_kg, task.last_kg + 1):
        head = _U16.pack(kg) + WINDOW_TAG
        for k, v in scan(head, _U16.pack(kg) + b"X"):
            start = _U64.unpack(k[3:11])[0] - _BIAS
            if start > cutoff:
                if nxt is None or start < nxt:
                    nxt = start
                break
            closed.append((k, v))
    return closed, nxt


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
    if bound is None and task.db.version is None and not task.changed:
        bound = ""  # a shard with no state yet (and nothing migrated) has no windows
    batches = list(batches)
    t = pa.Table.from_batches(batches) if batches else None
    if t is not None and t.num_rows and pc.min(t[KG_COLUMN]).as_py() < 0:
        t = t.filter(pc.greater_equal(t[KG_COLUMN], 0))  # heartbeat rows only make a batch
    rows = t is not None and t.num_rows > 0
    if rows:
        check_key_groups(task, t[KG_COLUMN])
        task.observe_event_time(pc.max(t["__maxt"]).as_py())
    cutoff = wm - wp.window_ms  # windows starting <= cutoff are closed (end <= watermark)
    scan_due = bound is None or (bound != "" and int(bound) <= cutoff)
    if not rows and not scan_due:
        return

    batch = silt.WriteBatch()
    ops = batch.ops
    touched_open_min: int | None = None
    emit_tables: list[Any] = []
    if rows:
        g = t.drop_columns([PARTITION_COLUMN]).group_by(
            [*p.key_columns, KG_COLUMN, WS_COLUMN], use_threads=False
        ).aggregate([*_aggregate.merge_specs(p), ("__own", "sum")])
        ws = g[WS_COLUMN].to_numpy()
        late = ws <= cutoff  # Spark drops a (row, window) pair once the window's end <= wm
        if late.any():
            late_rows = int(g["__own_sum"].to_numpy()[late].sum())
            if late_rows:
                total = (_meta_int(meta, META_LATE_ROWS) or 0) + late_rows
                task.meta_updates[META_LATE_ROWS] = str(total)
                task.changed = True
            g = g.filter(pa.array(~late))
            ws = ws[~late]
        if g.num_rows:
            # Every window left is still open: its end is after the watermark.
            keys = state_keys(
                g[KG_COLUMN].to_pylist(), ws.tolist(), [g[c].to_pylist() for c in p.key_columns]
            )
            new = _aggregate.combine(
                _aggregate.read_records(task.db.multi_get(keys), p, task.url), g, p
            )
            buf = new.tobytes()
            width = new.dtype.itemsize
            ops.extend(
                (keys[i], buf[i * width:(i + 1) * width], None) for i in range(len(keys))
            )
            touched_open_min = int(ws.min())
            if wp.output == "update":
                emit_tables.append(_output([g[c] for c in p.key_columns], ws, new, wp))

    old_open_min = None if bound in (None, "") else int(bound)
    if scan_due:
        closed_entries, old_open_min = _closed_windows(task, cutoff)
        for k, _ in closed_entries:
            ops.append((k, None, None))
        if closed_entries and wp.output == "append":
            decoded = [decode_key(k) for k, _ in closed_entries]
            recs = _aggregate.read_records([v for _, v in closed_entries], p, task.url)
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
    start = pa.array(starts_ms * 1000, pa.int64()).cast(tt)
    end = pa.array((starts_ms + wp.window_ms) * 1000, pa.int64()).cast(tt)
    arrays = [*key_arrays, start, end, *_aggregate.output_arrays(records, wp.agg)]
    return pa.Table.from_arrays(arrays, schema=schema)
