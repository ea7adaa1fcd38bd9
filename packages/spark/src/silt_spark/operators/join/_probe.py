"""Stream-stream joins (inner, left/right/full outer, left semi) with each side's buffer in silt.

The counterpart of Spark's stream-stream join
(``left.withWatermark(lt, d1).join(right.withWatermark(rt, d2), keys and time range, how)``),
with the same results. The plan:

1. **Before the shuffle** (Spark expressions only, no Python): each input becomes rows of one
   tagged schema, ``__k0..`` (the join key), ``__side`` (0 left, 1 right) and both sides'
   columns (the other side's null), and the two are unioned and routed by key group, so both
   sides of a key reach one shard through one shuffle.
2. **Per shard**, as Spark's symmetric hash join does: the batch's left rows are joined with the
   right buffer, then added to the left buffer; the batch's right rows are joined with the left
   buffer (this batch's left rows included), then added to the right buffer; last, rows the
   watermark has expired are evicted, and for an outer side its rows never matched are emitted
   (with nulls for the other side). A buffered row carries a **matched** mark, set when a row
   of the other side matches it later, so a row matched after it was buffered is never emitted
   as unmatched. All writes go in one ``WriteBatch``: marks, then the batch's rows, then
   eviction's point deletes; range deletes are applied after it, so a mark set on a row that
   expires in the same batch never brings it back.

Event time (optional; needed for outer and semi joins, as in Spark): each side has a timestamp
column and a watermark delay; the query-wide watermark ``wm`` of batch ``b`` rises to the
minimum over the sides of (largest event time of the run's batches before ``b`` minus the side's
delay, 0 for a side without data) and never goes down, as Spark's default
``multipleWatermarkPolicy=min`` (``_watermark.py``). Rows at or before batch
``b - 1``'s ``wm`` are late and dropped. With a time range (left time in right time - ``a`` ..
+ ``b``) a left row can match no future right row once ``<= wm - a - 1`` ms, a right row once
``<= wm - b - 1`` (Spark's state watermarks): evicted then; at or below it on arrival (batches
back to back) a row is not buffered, and an outer side's unmatched one is emitted at once.

State layout, laid out for eviction (``_keys.py``, tag ``J``)::

    row:    kg:u16be 'J' side:u8 bucket:u64be(+2^63) enc(join key) time_us:u64be(+2^63) seq:u64be
            -> matched:u8 enc(row tuple)
    count:  kg:u16be 'J' (2 + side):u8 bucket:u64be(+2^63) -> rows:u64be
    index:  kg:u16be 'J' (4 + side):u8 time_us:u64be(+2^63) seq:u64be -> matched:u8 enc(join key)

``seq`` is ``batch id << 32 | the row's position among its side's rows in the shard's batch``,
so equal rows stay distinct entries (a re-run may number equal-keyed rows in another order:
identical results, since a row's entry is only ever its own). ``bucket = floor(time_us /
bucket_us)`` with ``bucket_us = max(1 s, a + b)`` (fixed per root,
recorded in its descriptor): a row's matches lie in at most three buckets of the other side,
probed with one prefix scan each (bucket, join key), or, where the bucket holds few rows per
join key the batch probes there (its count entry says), with one scan of the bucket; a whole
bucket expires at once.
Eviction reads one short run of **count** entries per key group and side (one per bucket,
stopping at the first live bucket), drops each expired bucket with range deletes
(:func:`evict_range`: ``DB.delete_range`` where the core has it, else deleting the keys it
reads). An outer side must also find the rows that expire inside its boundary bucket (deleted
one by one) and emit the expired rows never matched exactly once: its rows have **index**
entries in time order, carrying the row's mark (updated with it), so eviction reads the index
up to the state watermark, exactly the rows that expire, and then the values of the unmatched
ones (one ``multi_get``): the work follows the rows evicted, never the rows buffered
(:func:`evict_indexed`). Roots created before the index (their descriptor lacks
:data:`TIME_INDEX`) read the expired and boundary buckets whole instead (:func:`evict`). The
shard's smallest live bucket per side is kept in the manifest meta, so a batch in which nothing
can expire reads nothing. Without a time range nothing expires and every row is in bucket 0.

Vectorized: the task never loops over rows in Python. Each side's rows are arrays
(``Side``); state keys and values are built for all of them at once by ``_rowcodec`` (the same
bytes ``_codec`` gives per row); the other side's buffered rows read for a batch are parsed as
arrays (``Loaded``); matches come from sorting integer codes of (key group, join key) and
comparing times as arrays (``_pairs``); the output is built as Arrow columns. The loops left
are per key group, per probed (key group, bucket) and per sparse join key probed (a prefix
scan), and inside the core's reads and writes. Columns of types ``_rowcodec`` does not
vectorize (decimal, nested, ...) are encoded value by value.

Simplifications: a side's null event time is dropped when there is a time range (such a row
could never match or expire; Spark keeps it forever and never emits it); the watermark does not
keep Spark's "never goes down" step when a side first gets data after the other
(``_watermark.py``); both sides need event time, or neither.

The package owns the operator: ``_builder.join`` (the builder, on the driver),
:func:`merge_partition` here (the shard's task: probe and buffer), ``_load.py`` (buffer
loading), ``_evict.py`` (eviction), ``_buffers.py`` (the state layout and the plan) and
``_reader.py`` (``read_state`` rows).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...runtime import _rowcodec
from ...runtime._layout import KG_COLUMN
from ...runtime._shard import ShardTask
from ._buffers import (
    LEFT,
    META_BUFFERED,
    META_EVICTED,
    META_MIN_BUCKET,
    RIGHT,
    SIDES,
    U64,
    JoinPlan,
    count_key,
    counts_range,
    index_entries,
    index_key_of,
    row_keys,
    row_values,
)
from ._evict import evict, evict_indexed, eviction_due, read_counts
from ._load import Loaded, Side, key_codes, load_both


def _pairs(jp: JoinPlan, side: int, p_kg: np.ndarray, p_code: np.ndarray, p_time: np.ndarray,
           b_kg: np.ndarray, b_code: np.ndarray, b_time: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """Every (probe row, buffered row) pair with equal key group and join key and times in
    the range: ``side`` is the probe rows' side."""
    empty = np.zeros(0, np.int64)
    if not len(p_kg) or not len(b_kg):
        return empty, empty
    p_id = p_code * 65536 + p_kg
    b_id = b_code * 65536 + b_kg
    order = np.argsort(b_id, kind="stable")
    srt = b_id[order]
    lo = np.searchsorted(srt, p_id, "left")
    cnt = np.searchsorted(srt, p_id, "right") - lo
    total = int(cnt.sum())
    if not total:
        return empty, empty
    pi = np.repeat(np.arange(len(p_id)), cnt)
    within = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    bj = order[np.repeat(lo, cnt) + within]
    if jp.time_range is not None:
        a, b = jp.time_range
        lt, rt = (p_time[pi], b_time[bj]) if side == LEFT else (b_time[bj], p_time[pi])
        ok = (rt - a <= lt) & (lt <= rt + b)
        pi, bj = pi[ok], bj[ok]
    return pi, bj


def merge_partition(task: ShardTask, batches: Iterator[Any], jp: JoinPlan) -> Iterator[Any]:
    """After the shuffle, in the shard's task: join the batch's rows of each side with the
    other side's buffer, buffer them, evict what the watermark expired (emitting an outer side's
    unmatched rows) and write everything with one write batch. Vectorized: rows are matched,
    encoded and emitted as arrays (``_rowcodec``), never one by one in Python."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wm = task.watermark
    batches = [b for b in batches if b.num_rows]
    t = pa.Table.from_batches(batches) if batches else None
    if t is not None and pc.min(t[KG_COLUMN]).as_py() < 0:
        t = t.filter(pc.greater_equal(t[KG_COLUMN], 0))  # heartbeat rows only make a batch
    rows = t is not None and t.num_rows > 0
    expiry = [jp.evict_us(s, wm or 0) for s in (LEFT, RIGHT)]
    meta = task.base_meta
    fresh_root = task.base_version is None and not task.changed
    bounds: list[int | str | None] = []  # smallest live bucket: int, "" none, None unknown
    for s in (LEFT, RIGHT):
        raw = meta.get(META_MIN_BUCKET[s])
        bounds.append("" if fresh_root else (None if raw is None else (int(raw) if raw else "")))
    due = [eviction_due(jp, s, expiry[s], bounds[s]) for s in (LEFT, RIGHT)]
    if not rows and not any(due):  # nothing to match or evict: the buffers stand as they are
        task.operator_metrics = {
            **{f"buffered_{SIDES[s]}": int(meta.get(META_BUFFERED[s]) or 0) for s in (0, 1)},
            "evicted_left": 0, "evicted_right": 0, "evict_ms": 0.0,
        }
        return

    outer = jp.outer
    semi = jp.how == "left_semi"
    out: list[Any] = []  # output tables
    loaded: list[Loaded | None] = [None, None]
    sides: list[Side | None] = [None, None]
    added: dict[tuple[int, int, int], int] = {}  # (side, kg, bucket) -> rows buffered
    new_min: list[int | None] = [None, None]
    if rows:
        lin = sides[LEFT] = Side(task, t, jp, LEFT, task.late_watermark)  # batch b - 1's
        rin = sides[RIGHT] = Side(task, t, jp, RIGHT, task.late_watermark)
        # both buffers as the batch found them, read at once (one multi_get, one multi_scan)
        rb, lb = loaded[RIGHT], loaded[LEFT] = load_both(task, jp, [lin, rin])
        # 1. the batch's left rows against the right buffer
        lcode, rbcode = key_codes([lin.enc_keys, rb.enc_keys])
        pi, bj = _pairs(jp, LEFT, lin.kgs, lcode, lin.times, rb.kgs, rbcode, rb.times)
        lin.matched[pi] = True
        if semi:
            out.append(_output(jp, lin.take(np.flatnonzero(lin.matched)), None))
        elif len(pi):
            out.append(_output(jp, lin.take(pi), rb.decode(jp, bj)))
            if outer[RIGHT]:
                rb.mark(bj)
        lin.keep = ~lin.matched if semi else np.ones(lin.n, bool)  # semi: emitted once
        # 2. the batch's right rows against the left buffer, this batch's left rows included
        if expiry[LEFT] is not None:  # expired on arrival: not buffered; unmatched, out now
            lin.keep &= lin.times > expiry[LEFT]
            if outer[LEFT] and len(gone := np.flatnonzero(~lin.keep & ~lin.matched)):
                out.append(_output(jp, lin.take(gone), None))
        fresh = np.flatnonzero(lin.keep)
        rcode, lbcode, fcode = key_codes([rin.enc_keys, lb.enc_keys, lin.enc_keys.take(fresh)])
        pi, bj = _pairs(jp, RIGHT, rin.kgs, rcode, rin.times, lb.kgs, lbcode, lb.times)
        fi, fj = _pairs(jp, RIGHT, rin.kgs, rcode, rin.times, lin.kgs[fresh], fcode,
                        lin.times[fresh])
        rin.matched[pi] = True
        rin.matched[fi] = True
        fj = fresh[fj]
        if semi:  # each left row once: those not emitted before
            got = lb.mark(bj)
            if len(got):
                out.append(_output(jp, lb.decode(jp, got), None))
            new = np.unique(fj[~lin.matched[fj]])
            lin.matched[new] = True
            if len(new):
                out.append(_output(jp, lin.take(new), None))
        else:
            if len(pi):
                out.append(_output(jp, lb.decode(jp, bj), rin.take(pi)))
            if len(fi):
                out.append(_output(jp, lin.take(fj), rin.take(fi)))
            if outer[LEFT]:
                lb.mark(bj)
                lin.matched[fj] = True
        rin.keep = np.ones(rin.n, bool)
        if expiry[RIGHT] is not None:
            rin.keep &= rin.times > expiry[RIGHT]
            if outer[RIGHT] and len(gone := np.flatnonzero(~rin.keep & ~rin.matched)):
                out.append(_output(jp, None, rin.take(gone)))

    # Writes: marks set on buffered rows, then the batch's rows; eviction's deletes after them
    # (a later operation on a key wins, and range deletes go last), so a mark set on a row
    # that expires in this batch never brings it back.
    ops: list[tuple[bytes, bytes | None, float | None]] = []
    for lo_ in loaded:
        if lo_ is not None and lo_.marked.any():
            idx = np.flatnonzero(lo_.marked)
            keys = lo_.marked_keys()
            vals = _rowcodec.concat(len(idx), [b"\x01", _rowcodec.slices(
                lo_.values.take(idx), 1, 0)]).to_list()
            ops.extend(zip(keys, vals, [None] * len(keys)))
            if jp.indexed[lo_.side]:  # the index entry carries the mark too
                ikeys = [index_key_of(k) for k in keys]
                ivals = _rowcodec.concat(len(idx), [b"\x01", lo_.enc_keys.take(idx)]).to_list()
                ops.extend(zip(ikeys, ivals, [None] * len(keys)))
    for s in (LEFT, RIGHT):
        inp = sides[s]
        if inp is None or not inp.keep.any():
            continue
        idx = np.flatnonzero(inp.keep)
        buckets = (np.zeros(len(idx), np.int64) if jp.bucket_us is None
                   else inp.times[idx] // jp.bucket_us)
        keys = row_keys(inp.kgs[idx], s, buckets, inp.enc_keys.take(idx), inp.times[idx],
                        inp.seqs[idx]).to_list()
        vals = row_values(inp.matched[idx], _rowcodec.encode_tuples(inp.take(idx),
                                                                    len(idx))).to_list()
        ops.extend(zip(keys, vals, [None] * len(keys)))
        if jp.indexed[s]:
            ikeys, ivals = index_entries(inp.kgs[idx], s, inp.enc_keys.take(idx),
                                         inp.times[idx], inp.seqs[idx], inp.matched[idx])
            ops.extend(zip(ikeys.to_list(), ivals.to_list(), [None] * len(keys)))
        groups, counts = np.unique(np.stack([inp.kgs[idx], buckets], axis=1), axis=0,
                                   return_counts=True)
        for (kg, b), c in zip(groups.tolist(), counts.tolist()):
            added[(s, kg, b)] = c
        new_min[s] = int(buckets.min())

    # Eviction: whole expired buckets by range delete, an outer side's rows read to emit the
    # unmatched ones (with the marks this batch set), its boundary bucket row by row.
    ranges: list[tuple[bytes, bytes]] = []
    dead_buckets: set[tuple[int, int, int]] = set()
    count_delta: dict[tuple[int, int, int], int] = dict(added)
    evicted = [0, 0]
    next_bucket: list[int | str | None] = list(bounds)
    t_evict = time.perf_counter()
    # both sides' count entries in every key group of the shard: one multi_scan
    counts = read_counts(task.db, range(task.first_kg, task.last_kg + 1),
                         [s for s in (LEFT, RIGHT) if due[s]]) if any(due) else {}
    for s in (LEFT, RIGHT):
        if not due[s]:
            continue
        lo_ = loaded[s]
        marked = set(lo_.marked_keys()) if lo_ is not None else set()
        nxt, n, unmatched = (evict_indexed if jp.indexed[s] else evict)(
            task, jp, s, expiry[s], outer[s], marked, ops, ranges, dead_buckets, count_delta,
            counts)
        if len(unmatched):
            cols = _rowcodec.decode_tuples(unmatched, jp.side_schemas[s], skip=1)
            out.append(_output(jp, cols, None) if s == LEFT else _output(jp, None, cols))
        evicted[s] = n
        next_bucket[s] = "" if nxt is None else nxt
    evict_ms = (time.perf_counter() - t_evict) * 1000

    write(task.db, ops, count_delta, dead_buckets, ranges)
    if ops or ranges or any(evicted):
        task.changed = True
    _account(task, jp, bounds, next_bucket, new_min, added, evicted)
    task.operator_metrics["evict_ms"] = round(evict_ms, 3)
    for table in out:
        if table.num_rows:
            yield from table.to_batches()


def write(db: Any, ops: list, count_delta: dict[tuple[int, int, int], int],
          dead_buckets: set[tuple[int, int, int]],
          ranges: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Write ``ops`` plus each touched bucket's new row count (``count_delta``: ``(side, kg,
    bucket)`` -> rows added minus rows evicted; buckets in ``dead_buckets`` are gone) with one
    write batch, then the range deletes ``ranges`` (after it: they win over its puts)."""
    import silt

    live = [k for k in count_delta if k not in dead_buckets and count_delta[k]]
    if live:
        ckeys = [count_key(kg, s, b) for s, kg, b in live]
        for ck, cur, k in zip(ckeys, db.multi_get(ckeys), live):
            n = (U64.unpack(cur)[0] if cur is not None else 0) + count_delta[k]
            ops.append((ck, U64.pack(n) if n > 0 else None, None))
    if ops:
        batch = silt.WriteBatch()
        batch.ops = ops
        db.write(batch)
    for start, end in ranges:
        db.delete_range(start, end)


def _output(jp: JoinPlan, left: list[Any] | None, right: list[Any] | None) -> Any:
    """The output table of rows whose left and right columns are given (``None``: that side
    is null, an unmatched row or a semi join's)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = jp.output_schema
    n = len(left[0]) if left else len(right[0]) if right else 0
    arrays = []
    for j, spec in enumerate(jp.output):
        typ = schema.field(j).type
        if spec[0] == "L":
            arr = left[spec[1]] if left is not None else None
        elif spec[0] == "R":
            arr = right[spec[1]] if right is not None else None
        else:
            lv = left[spec[1]] if left is not None else None
            rv = right[spec[2]] if right is not None else None
            if lv is not None and rv is not None:
                arr = pc.coalesce(lv, rv.cast(lv.type))
            else:
                arr = lv if lv is not None else rv
        if arr is None:
            arr = pa.nulls(n, typ)
        elif arr.type != typ:
            arr = arr.cast(typ)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=schema)


def _account(task: ShardTask, jp: JoinPlan, bounds: list, next_bucket: list,
             new_min: list, added: dict, evicted: list[int]) -> None:
    """Meta: each side's smallest live bucket, rows buffered and evicted; task metrics."""
    meta = task.base_meta
    metrics: dict[str, int] = {}
    for s in (LEFT, RIGHT):
        nb = next_bucket[s]
        cands = [x for x in (nb, new_min[s]) if x not in (None, "")]
        new_bound = str(min(cands)) if cands else ("" if nb == "" else None)
        if new_bound is not None and new_bound != meta.get(META_MIN_BUCKET[s]):
            task.meta_updates[META_MIN_BUCKET[s]] = new_bound
        n_added = sum(n for (side, _, _), n in added.items() if side == s)
        raw = meta.get(META_BUFFERED[s])
        if raw is None and (task.db.version is not None or task.changed):
            base = _count_buffered(task, s) - n_added + evicted[s]  # e.g. after a rescale
        else:
            base = int(raw or 0)
        buffered = base + n_added - evicted[s]
        ev_total = int(meta.get(META_EVICTED[s]) or 0) + evicted[s]
        if str(buffered) != meta.get(META_BUFFERED[s]):
            task.meta_updates[META_BUFFERED[s]] = str(buffered)
        if evicted[s]:
            task.meta_updates[META_EVICTED[s]] = str(ev_total)
        metrics[f"buffered_{SIDES[s]}"] = buffered
        metrics[f"evicted_{SIDES[s]}"] = evicted[s]
    if task.meta_updates:
        task.changed = True
    metrics.update(getattr(task, "join_reads", None)
                   or {"probe_bucket_scans": 0, "probe_key_scans": 0})
    task.operator_metrics = metrics


def _count_buffered(task: ShardTask, side: int) -> int:
    """Rows of ``side`` in the shard now (after this batch's writes), from the count entries."""
    n = 0
    for kg in range(task.first_kg, task.last_kg + 1):
        for _, v in task.db.scan(*counts_range(kg, side)):
            n += U64.unpack(v)[0]
    return n


# --- driver: the query plan ------------------------------------------------------------------


# --- read-back: read_state ----------------------------------------------------------------


