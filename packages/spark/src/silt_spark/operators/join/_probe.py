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
column and a watermark delay; the query-wide watermark ``wm`` of batch ``b`` is the minimum over
the sides of (largest event time of the batches before ``b`` minus the side's delay), as
Spark's default ``multipleWatermarkPolicy=min`` (``_watermark.py``). Rows at or before batch
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
(``_Side``); state keys and values are built for all of them at once by ``_rowcodec`` (the same
bytes ``_codec`` gives per row); the other side's buffered rows read for a batch are parsed as
arrays (``_Loaded``); matches come from sorting integer codes of (key group, join key) and
comparing times as arrays (``_pairs``); the output is built as Arrow columns. The loops left
are per key group, per probed (key group, bucket) and per sparse join key probed (a prefix
scan), and inside the core's reads and writes. Columns of types ``_rowcodec`` does not
vectorize (decimal, nested, ...) are encoded value by value.

Simplifications: a side's null event time is dropped when there is a time range (such a row
could never match or expire; Spark keeps it forever and never emits it); the watermark does not
keep Spark's "never goes down" step when a side first gets data after the other
(``_watermark.py``); both sides need event time, or neither.

The module owns the operator: :func:`join` (builder), :func:`merge_partition` (executor),
:func:`decode` (``read_state`` rows).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from silt.errors import InvalidArgumentError, InvalidTypeError

from ...runtime import _api, _codec, _keys, _layout, _root, _rowcodec, _shard, _watermark
from ...runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ...runtime._rowcodec import Rows
from ...runtime._shard import ShardTask, check_key_groups

#: The operator kind, as recorded in the state root's descriptor.
KIND = "join"
JOIN_TAG = _keys.JOIN_TAG
LEFT, RIGHT = 0, 1
SIDES = ("left", "right")
#: Side byte of a buffered row, and of a bucket's row count.
_ROWS = (b"\x00", b"\x01")
_COUNTS = (b"\x02", b"\x03")
#: Side byte of an outer side's time index entry.
_INDEX = (b"\x04", b"\x05")
#: Time of a row without event time (no time range: never expires, bucket 0).
NO_TIME = -(1 << 62)
MIN_BUCKET_US = 1_000_000
#: A prefix scan per probed join key costs about as much as reading this many rows of a
#: whole-bucket scan (measured: a scan's setup and seek through the LSM's levels against
#: reading and keeping one more row). A batch reads a (key group, bucket) whole when it holds
#: at most this many rows per join key probed there, else one prefix scan per key: the
#: batch's cost then follows its own rows, not the buffer's.
SCAN_ROWS_PER_SEEK = 32

HOWS = {
    "inner": "inner",
    "left": "left", "leftouter": "left", "left_outer": "left",
    "right": "right", "rightouter": "right", "right_outer": "right",
    "full": "full", "outer": "full", "fullouter": "full", "full_outer": "full",
    "left_semi": "left_semi", "leftsemi": "left_semi", "semi": "left_semi",
}

META_MIN_BUCKET = ("spark.join_min_bucket_left", "spark.join_min_bucket_right")
META_BUFFERED = ("spark.join_buffered_left", "spark.join_buffered_right")
META_EVICTED = ("spark.join_evicted_left", "spark.join_evicted_right")
#: The descriptor field of roots whose outer sides keep a time index (roots created before it
#: evict an outer side's boundary bucket by scanning it, as they always did).
TIME_INDEX = "join_time_index"

SIDE_COLUMN = "__side"
_U64 = struct.Struct(">Q")
_COUNT_END = (b"\x03", b"\x04")


# --- the state layout ------------------------------------------------------------------------
def rows_head(kg: int, side: int) -> bytes:
    """``kg 'J' side``: the prefix of one side's buffered rows in one key group."""
    return _keys.head(kg, JOIN_TAG) + _ROWS[side]


def bucket_prefix(kg: int, side: int, bucket: int) -> bytes:
    """The prefix of one bucket's rows."""
    return rows_head(kg, side) + _keys.time_bytes(bucket)


def row_key(kg: int, side: int, bucket: int, enc_key: bytes, time_us: int, seq: int) -> bytes:
    return (bucket_prefix(kg, side, bucket) + enc_key + _keys.time_bytes(time_us)
            + _U64.pack(seq))


def split_row_key(key: bytes) -> tuple[int, int, bytes, int, int]:
    """``(side, bucket, enc(join key), time_us, seq)`` of a row key."""
    at = _keys.BODY_AT
    return (key[at], _keys.time_value(key, at + 1), key[at + 9:-16],
            _keys.time_value(key, len(key) - 16), _U64.unpack_from(key, len(key) - 8)[0])


def index_head(kg: int, side: int) -> bytes:
    """``kg 'J' (4 + side)``: the prefix of one side's time index in one key group."""
    return _keys.head(kg, JOIN_TAG) + _INDEX[side]


def index_key_of(row: bytes) -> bytes:
    """The time index key of the buffered row whose key is ``row``: ``kg 'J' (4 + side)
    time_us seq`` (a row key ends with ``time_us seq``)."""
    return row[:_keys.BODY_AT] + _INDEX[row[_keys.BODY_AT]] + row[-16:]


def count_key(kg: int, side: int, bucket: int) -> bytes:
    return _keys.head(kg, JOIN_TAG) + _COUNTS[side] + _keys.time_bytes(bucket)


def counts_range(kg: int, side: int) -> tuple[bytes, bytes]:
    h = _keys.head(kg, JOIN_TAG)
    return h + _COUNTS[side], h + _COUNT_END[side]


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key after every key starting with ``prefix``."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    p[-1] += 1
    return bytes(p)


def bucket_of(time_us: int, bucket_us: int | None) -> int:
    return 0 if bucket_us is None else time_us // bucket_us


def full_buckets_below(evict_us: int, bucket_us: int) -> int:
    """Buckets ``< this`` hold only times ``<= evict_us`` (they expire whole)."""
    return (evict_us + 1) // bucket_us


def evict_range(db: Any, start: bytes, end: bytes, ops: list, ranges: list,
                read: Sequence[bytes] | None = None) -> None:
    """Delete every key in ``[start, end)``: one ``DB.delete_range`` (added to ``ranges``, which
    :func:`write` applies last) when the DB has it; else a delete per key (added to ``ops``), of
    ``read`` (the keys already read there) or of a scan of the range."""
    if hasattr(db, "delete_range"):
        ranges.append((start, end))
        return
    keys = read if read is not None else [k for k, _ in db.scan(start, end)]
    ops.extend((k, None, None) for k in keys)


# --- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class JoinPlan:
    """Derived on the driver from the inputs' schemas; shipped to the tasks (plain data)."""

    how: str
    nkeys: int
    #: Each side's columns (as ``__l<i>`` / ``__r<i>`` in the tagged rows).
    columns: tuple[tuple[str, ...], tuple[str, ...]]
    #: Each side's event-time column index in its columns (``None``: no event time).
    time_index: tuple[int | None, int | None]
    #: ``(a, b)`` in us: left time between right time - a and right time + b; ``None``: none.
    time_range: tuple[int, int] | None
    bucket_us: int | None
    #: Output columns: ``("L", i)``, ``("R", i)`` or ``("C", i, j)`` (coalesce of both).
    output: tuple[tuple, ...]
    side_schemas: tuple[Any, Any]  # pyarrow.Schema of each side's columns
    output_schema: Any  # pyarrow.Schema
    #: Whether the root keeps a time index of its outer sides' rows (descriptor field
    #: :data:`TIME_INDEX`; roots created before it have none).
    time_indexed: bool = False

    @property
    def outer(self) -> tuple[bool, bool]:
        return self.how in ("left", "full"), self.how in ("right", "full")

    @property
    def indexed(self) -> tuple[bool, bool]:
        """Sides whose rows have time index entries: outer sides with a time range, on a root
        that keeps the index."""
        on = self.time_indexed and self.time_range is not None
        return on and self.outer[0], on and self.outer[1]

    def evict_us(self, side: int, watermark_ms: int) -> int | None:
        """Rows of ``side`` with time ``<=`` this expire (Spark's state watermark)."""
        if self.time_range is None:
            return None
        other = self.time_range[side] // 1000  # left: a, right: b
        return (watermark_ms - other - 1) * 1000

    def matches(self, left_us: int, right_us: int) -> bool:
        r = self.time_range
        return r is None or right_us - r[0] <= left_us <= right_us + r[1]

    def candidate_buckets(self, side: int, time_us: int) -> range:
        """Buckets of the **other** side's rows that may match a ``side`` row at ``time_us``."""
        if self.bucket_us is None:
            return range(0, 1)
        a, b = self.time_range  # type: ignore[misc]
        lo, hi = (time_us - b, time_us + a) if side == LEFT else (time_us - a, time_us + b)
        return range(lo // self.bucket_us, hi // self.bucket_us + 1)


def _biased(values: Any) -> np.ndarray:
    """Signed times or buckets as ``(n, 8)`` u64be bytes of ``value + 2^63`` (``time_bytes``)."""
    v = np.asarray(values, np.int64).view(np.uint64) ^ np.uint64(_keys.BIAS)
    return _rowcodec.fixed(v, ">u8")


def _unbiased(raw: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_biased` on u64 values."""
    return (np.asarray(raw, np.uint64) ^ np.uint64(_keys.BIAS)).view(np.int64)


def row_keys(kgs: Any, side: int, buckets: Any, enc_keys: Rows, times: Any, seqs: Any) -> Rows:
    """:func:`row_key` of many rows at once (byte for byte the same keys)."""
    n = len(enc_keys)
    return _rowcodec.concat(n, [
        _rowcodec.fixed(kgs, ">u2"), JOIN_TAG + _ROWS[side], _biased(buckets), enc_keys,
        _biased(times), _rowcodec.fixed(seqs, ">u8"),
    ])


def index_entries(kgs: Any, side: int, enc_keys: Rows, times: Any, seqs: Any,
                  matched: np.ndarray) -> tuple[Rows, Rows]:
    """Time index keys and values of many rows: ``kg 'J' (4 + side) time_us seq -> matched:u8
    enc(join key)``; the row's key follows from them (its bucket is its time's)."""
    n = len(enc_keys)
    keys = _rowcodec.concat(n, [_rowcodec.fixed(kgs, ">u2"), JOIN_TAG + _INDEX[side],
                                _biased(times), _rowcodec.fixed(seqs, ">u8")])
    return keys, row_values(matched, enc_keys)


def row_values(matched: np.ndarray, values: Rows) -> Rows:
    """``matched:u8 enc(row tuple)`` of many rows."""
    return _rowcodec.concat(len(values), [matched.astype(np.uint8).reshape(-1, 1), values])


class _Side:
    """One side's rows of the batch, late ones dropped, in input order, as arrays."""

    def __init__(self, task: ShardTask, t: Any, jp: JoinPlan, side: int, wm: int | None):
        import pyarrow.compute as pc

        cols = jp.columns[side]
        prefix = "__l" if side == LEFT else "__r"
        t = t.filter(pc.equal(t[SIDE_COLUMN], side))
        base = task.batch_id << 32
        ti = jp.time_index[side]
        if ti is not None and t.num_rows:
            us = _watermark.event_us(t[f"{prefix}{ti}"])
            top = pc.max(us).as_py()
            if top is not None:
                task.observe_event_time(top // 1000, side)  # late rows count, as in Spark
            keep = pc.invert(pc.fill_null(pc.less_equal(us, (wm or 0) * 1000), False))
            if jp.time_range is not None:
                keep = pc.and_(keep, pc.is_valid(us))
            if not pc.all(keep).as_py():
                t, us = t.filter(keep), us.filter(keep)
            times = np.asarray(pc.fill_null(us, NO_TIME).to_numpy(zero_copy_only=False),
                               np.int64)
        else:
            times = np.full(t.num_rows, NO_TIME, np.int64)
        if t.num_rows >= 1 << 32:
            raise ValueError("a shard received more than 2^32 rows of one side in a batch")
        self.side = side
        self.n = t.num_rows
        self.times = times
        self.kgs = np.asarray(t[KG_COLUMN].to_numpy(), np.int64)
        self.seqs = np.arange(base, base + self.n, dtype=np.uint64)
        self.enc_keys = _rowcodec.encode_tuples([t[f"__k{i}"] for i in range(jp.nkeys)], self.n)
        self.columns = [t[f"{prefix}{i}"].combine_chunks() for i in range(len(cols))]
        #: The row's mark when buffered (a match this batch).
        self.matched = np.zeros(self.n, bool)
        #: Which rows are buffered (set by the pass that joins them).
        self.keep = np.zeros(self.n, bool)

    def take(self, idx: np.ndarray) -> list[Any]:
        import pyarrow as pa

        ix = pa.array(idx, pa.int64())
        return [c.take(ix) for c in self.columns]


class _Loaded:
    """Buffered rows of one side read this batch (for matches): keys, values, parsed fields,
    and the marks this batch set on them."""

    def __init__(self, side: int, keys: list[bytes], values: list[bytes]) -> None:
        self.side = side
        self.n = len(keys)
        self.key_rows = Rows.from_list(keys)
        self.values = Rows.from_list(values)
        kr = self.key_rows
        if self.n:
            self.kgs = _rowcodec._read_fixed(kr.data, kr.offsets[:-1], ">u2").astype(np.int64)
            self.times = _unbiased(_rowcodec.u64_at_end(kr, 16))
            self.matched = self.values.data[self.values.offsets[:-1]] == 1
        else:
            self.kgs = self.times = np.zeros(0, np.int64)
            self.matched = np.zeros(0, bool)
        self.enc_keys = _rowcodec.slices(kr, _keys.BODY_AT + 9, 16)
        self.marked = np.zeros(self.n, bool)

    def mark(self, idx: np.ndarray) -> np.ndarray:
        """Set the mark of rows ``idx``; returns those whose mark was not set before."""
        fresh = np.unique(idx[~self.matched[idx]])
        self.matched[fresh] = True
        self.marked[fresh] = True
        return fresh

    def marked_keys(self) -> list[bytes]:
        """Keys of the rows this batch marked."""
        if not self.marked.any():
            return []
        return self.key_rows.take(np.flatnonzero(self.marked)).to_list()

    def decode(self, jp: JoinPlan, idx: np.ndarray) -> list[Any]:
        return _rowcodec.decode_tuples(self.values.take(idx), jp.side_schemas[self.side],
                                       skip=1)


def _candidate_buckets(jp: JoinPlan, side: int, times: np.ndarray) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """Per ``side`` row, the first and last bucket of the other side's rows it may match."""
    if jp.bucket_us is None:
        z = np.zeros(len(times), np.int64)
        return z, z
    a, b = jp.time_range  # type: ignore[misc]
    lo, hi = (times - b, times + a) if side == LEFT else (times - a, times + b)
    return lo // jp.bucket_us, hi // jp.bucket_us


def _load(task: ShardTask, jp: JoinPlan, inp: _Side) -> _Loaded:
    """Read the other side's buffered rows ``inp``'s rows may match: per key group and bucket
    probed (its row count read first, with one ``multi_get`` for all), nothing when it is
    empty, one scan of the whole bucket when it holds at most :data:`SCAN_ROWS_PER_SEEK` rows
    per join key the batch probes there, else one prefix scan per join key."""
    side = 1 - inp.side
    keys: list[bytes] = []
    values: list[bytes] = []
    if inp.n:
        lo, hi = _candidate_buckets(jp, inp.side, inp.times)
        codes = _codes([inp.enc_keys])[0]
        parts = []
        for d in range(int((hi - lo).max()) + 1):
            m = lo + d <= hi
            parts.append(np.stack([inp.kgs[m], lo[m] + d, codes[m],
                                   np.flatnonzero(m)], axis=1))
        probes = np.concatenate(parts)
        # one probe per (key group, bucket, join key), sorted so scans go in key order
        probes = probes[np.lexsort((probes[:, 2], probes[:, 1], probes[:, 0]))]
        first = np.ones(len(probes), bool)
        first[1:] = (probes[1:, :3] != probes[:-1, :3]).any(axis=1)
        probes = probes[first]
        group = np.ones(len(probes), bool)
        group[1:] = (probes[1:, :2] != probes[:-1, :2]).any(axis=1)
        starts = np.flatnonzero(group)
        ends = np.append(starts[1:], len(probes))
        sizes = task.db.multi_get([count_key(int(probes[s, 0]), side, int(probes[s, 1]))
                                   for s in starts.tolist()])
        reads = getattr(task, "join_reads", None)
        if reads is None:
            reads = task.join_reads = {"probe_bucket_scans": 0, "probe_key_scans": 0}
        ranges: list[tuple[bytes, bytes]] = []
        for s, e, size in zip(starts.tolist(), ends.tolist(), sizes):
            if size is None:
                continue  # no row buffered in this key group and bucket
            kg, bucket = int(probes[s, 0]), int(probes[s, 1])
            prefix = bucket_prefix(kg, side, bucket)
            if _U64.unpack(size)[0] <= (e - s) * SCAN_ROWS_PER_SEEK:
                reads["probe_bucket_scans"] += 1
                ranges.append((prefix, prefix_end(prefix)))
            else:
                reads["probe_key_scans"] += e - s
                # enc(join key) is prefix-free (a tuple of self-delimiting values), so a key's
                # prefix range holds that key's rows only, and the ranges do not overlap
                for enc in inp.enc_keys.take(probes[s:e, 3]).to_list():
                    p = prefix + enc
                    ranges.append((p, prefix_end(p)))
        if ranges:
            ranges.sort()
            # one call for the whole batch: each block of the buffer is read at most once
            got = task.db.multi_scan(ranges)
            if got:
                ks, vs = zip(*got)
                keys.extend(ks)
                values.extend(vs)
    return _Loaded(side, keys, values)


def _codes(parts: list[Rows]) -> list[np.ndarray]:
    """Integer codes of byte strings, equal across ``parts`` exactly where the bytes are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays = [p.to_arrow() for p in parts]
    combined = pa.chunked_array(arrays, pa.large_binary())
    enc = pc.dictionary_encode(combined)
    out = []
    for chunk in enc.chunks:
        out.append(np.asarray(chunk.indices.to_numpy(zero_copy_only=False), np.int64))
    if len(out) != len(parts):  # empty parts have no chunk of their own
        it = iter(out)
        out = [next(it) if len(p) else np.zeros(0, np.int64) for p in parts]
    return out


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
    if rows:
        check_key_groups(task, t[KG_COLUMN])
    expiry = [jp.evict_us(s, wm or 0) for s in (LEFT, RIGHT)]
    meta = task.base_meta
    fresh_root = task.base_version is None and not task.changed
    bounds: list[int | str | None] = []  # smallest live bucket: int, "" none, None unknown
    for s in (LEFT, RIGHT):
        raw = meta.get(META_MIN_BUCKET[s])
        bounds.append("" if fresh_root else (None if raw is None else (int(raw) if raw else "")))
    due = [_due(jp, s, expiry[s], bounds[s]) for s in (LEFT, RIGHT)]
    if not rows and not any(due):  # nothing to match or evict: the buffers stand as they are
        task.operator_metrics = {
            **{f"buffered_{SIDES[s]}": int(meta.get(META_BUFFERED[s]) or 0) for s in (0, 1)},
            "evicted_left": 0, "evicted_right": 0, "evict_ms": 0.0,
        }
        return

    outer = jp.outer
    semi = jp.how == "left_semi"
    out: list[Any] = []  # output tables
    loaded: list[_Loaded | None] = [None, None]
    sides: list[_Side | None] = [None, None]
    added: dict[tuple[int, int, int], int] = {}  # (side, kg, bucket) -> rows buffered
    new_min: list[int | None] = [None, None]
    if rows:
        lin = sides[LEFT] = _Side(task, t, jp, LEFT, task.late_watermark)  # batch b - 1's
        rin = sides[RIGHT] = _Side(task, t, jp, RIGHT, task.late_watermark)
        # 1. the batch's left rows against the right buffer
        rb = loaded[RIGHT] = _load(task, jp, lin)
        lcode, rbcode = _codes([lin.enc_keys, rb.enc_keys])
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
        lb = loaded[LEFT] = _load(task, jp, rin)
        if expiry[LEFT] is not None:  # expired on arrival: not buffered; unmatched, out now
            lin.keep &= lin.times > expiry[LEFT]
            if outer[LEFT] and len(gone := np.flatnonzero(~lin.keep & ~lin.matched)):
                out.append(_output(jp, lin.take(gone), None))
        fresh = np.flatnonzero(lin.keep)
        rcode, lbcode, fcode = _codes([rin.enc_keys, lb.enc_keys, lin.enc_keys.take(fresh)])
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
    for s in (LEFT, RIGHT):
        if not due[s]:
            continue
        lo_ = loaded[s]
        marked = set(lo_.marked_keys()) if lo_ is not None else set()
        nxt, n, unmatched = (evict_indexed if jp.indexed[s] else evict)(
            task, jp, s, expiry[s], outer[s], marked, ops, ranges, dead_buckets, count_delta)
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
            n = (_U64.unpack(cur)[0] if cur is not None else 0) + count_delta[k]
            ops.append((ck, _U64.pack(n) if n > 0 else None, None))
    if ops:
        batch = silt.WriteBatch()
        batch.ops = ops
        db.write(batch)
    for start, end in ranges:
        db.delete_range(start, end)


def _due(jp: JoinPlan, side: int, evict_us: int | None, bound: int | str | None) -> bool:
    """Whether ``side`` may have rows to evict (``bound``: smallest live bucket)."""
    if evict_us is None or bound == "":
        return False
    if bound is None:
        return True
    assert jp.bucket_us is not None
    full = full_buckets_below(evict_us, jp.bucket_us)
    return bound < full or (jp.outer[side] and bound == full)


def _unmatched(items: list[tuple[bytes, bytes]], marked: set[bytes]
               ) -> tuple[list[bytes], Rows]:
    """Keys of ``items`` and the values of those never matched (mark byte 0, not in
    ``marked``)."""
    if not items:
        return [], Rows(np.zeros(1, np.int64), np.zeros(0, np.uint8))
    keys, vals = zip(*items)
    values = Rows.from_list(list(vals))
    free = values.data[values.offsets[:-1]] == 0
    if marked and free.any():
        free &= ~_in_set(Rows.from_list(list(keys)), marked)
    return list(keys), values.take(np.flatnonzero(free))


def _in_set(keys: Rows, marked: set[bytes]) -> np.ndarray:
    """Per key of ``keys``, whether it is in ``marked`` (vectorized)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    seen = pc.is_in(keys.to_arrow(), value_set=pa.array(list(marked), pa.large_binary()))
    return np.asarray(seen.to_numpy(zero_copy_only=False), bool)


def _expired_buckets(db: Any, kg: int, side: int, full: int) -> tuple[list[int], int,
                                                                        int | None]:
    """``side``'s buckets in key group ``kg`` below ``full`` (they expire whole; from the count
    entries, in order), the rows they hold, and the first live bucket (``None``: none)."""
    expired: list[int] = []
    total = 0
    for ck, cv in db.scan(*counts_range(kg, side)):
        b = _keys.time_value(ck, _keys.BODY_AT + 1)
        if b >= full:
            return expired, total, b
        expired.append(b)
        total += _U64.unpack(cv)[0]
    return expired, total, None


def _drop_buckets(db: Any, kg: int, side: int, expired: list[int], outer: bool,
                  marked: set[bytes], ops: list, ranges: list, dead_buckets: set,
                  emitted: list[Rows]) -> None:
    """Delete the whole buckets ``expired`` (consecutive from the first) and their count
    entries: one range each for rows and counts. With ``outer``, the rows are read and the
    values of those never matched added to ``emitted``."""
    lo, hi = expired[0], expired[-1] + 1
    start, end = bucket_prefix(kg, side, lo), bucket_prefix(kg, side, hi)
    read: list[bytes] | None = None
    if outer:
        read, vals = _unmatched(list(db.scan(start, end)), marked)
        emitted.append(vals)
    evict_range(db, start, end, ops, ranges, read)
    evict_range(db, count_key(kg, side, lo), count_key(kg, side, hi), ops, ranges,
                [count_key(kg, side, b) for b in expired])
    for b in expired:
        dead_buckets.add((side, kg, b))


def _joined(emitted: list[Rows]) -> Rows:
    """``emitted`` as one :class:`Rows`."""
    if not emitted:
        return Rows(np.zeros(1, np.int64), np.zeros(0, np.uint8))
    off = [np.zeros(1, np.int64)]
    base = 0
    for r in emitted:
        off.append(r.offsets[1:] - r.offsets[0] + base)
        base += int(r.offsets[-1] - r.offsets[0])
    data = np.concatenate([r.data[r.offsets[0]:r.offsets[-1]] for r in emitted])
    return Rows(np.concatenate(off), data)


def evict(task: ShardTask, jp: JoinPlan, side: int, evict_us: int, outer: bool,
          marked: set[bytes], ops: list, ranges: list, dead_buckets: set, count_delta: dict
          ) -> tuple[int | None, int, Rows]:
    """Evict ``side``'s rows with time ``<= evict_us`` in every key group of the shard: point
    deletes go to ``ops``, range deletes to ``ranges`` (see :func:`write`). Returns the smallest
    live bucket left, the rows evicted and, for an outer side, the values (``matched:u8
    enc(row)``) of the evicted rows never matched (``marked``: keys matched in this batch).

    For a side without a time index (:func:`evict_indexed`): an outer side's whole expired
    buckets and its boundary bucket are read to find the rows to emit and delete."""
    assert jp.bucket_us is not None
    full = full_buckets_below(evict_us, jp.bucket_us)
    db = task.db
    nxt: int | None = None
    total = 0
    emitted: list[Rows] = []

    for kg in range(task.first_kg, task.last_kg + 1):
        expired, n, live = _expired_buckets(db, kg, side, full)
        total += n
        if live is not None:
            if live == full and outer:
                prefix = bucket_prefix(kg, side, live)
                items = list(db.scan(prefix, prefix_end(prefix)))
                if items:
                    ks, vs = zip(*items)
                    keys = Rows.from_list(list(ks))
                    times = _unbiased(_rowcodec.u64_at_end(keys, 16))
                    gone = np.flatnonzero(times <= evict_us)
                    if len(gone):
                        sub = list(zip(keys.take(gone).to_list(),
                                       Rows.from_list(list(vs)).take(gone).to_list()))
                        gk, vals = _unmatched(sub, marked)
                        emitted.append(vals)
                        ops.extend(zip(gk, [None] * len(gk), [None] * len(gk)))
                        total += len(gone)
                        key = (side, kg, live)
                        count_delta[key] = count_delta.get(key, 0) - len(gone)
            if nxt is None or live < nxt:
                nxt = live
        if expired:
            _drop_buckets(db, kg, side, expired, outer, marked, ops, ranges, dead_buckets,
                          emitted)
    return nxt, total, _joined(emitted)


def evict_indexed(task: ShardTask, jp: JoinPlan, side: int, evict_us: int, outer: bool,
                  marked: set[bytes], ops: list, ranges: list, dead_buckets: set,
                  count_delta: dict) -> tuple[int | None, int, Rows]:
    """:func:`evict` for a side with a time index (an outer side, :attr:`JoinPlan.indexed`).

    The rows that expire, and only those, are listed in time order by the index, with their
    marks (one ``multi_scan`` over the shard's key groups): so the work follows the rows
    evicted, never the rows buffered. Whole expired buckets go by range delete, the boundary
    bucket's expired rows by point deletes, the index entries by one range per key group;
    the values of the rows never matched are read with one ``multi_get`` to be emitted."""
    assert jp.bucket_us is not None
    full = full_buckets_below(evict_us, jp.bucket_us)
    db = task.db
    nxt: int | None = None
    total = 0
    emitted: list[Rows] = []
    index_ranges: list[tuple[bytes, bytes]] = []
    until = _keys.time_bytes(evict_us + 1)
    for kg in range(task.first_kg, task.last_kg + 1):
        expired, n, live = _expired_buckets(db, kg, side, full)
        total += n
        if live is not None and (nxt is None or live < nxt):
            nxt = live
        if expired:
            _drop_buckets(db, kg, side, expired, False, marked, ops, ranges, dead_buckets,
                          emitted)
        if expired or live == full:
            index_ranges.append((index_head(kg, side), index_head(kg, side) + until))
    got = db.multi_scan(index_ranges) if index_ranges else []
    if not got:
        return nxt, total, _joined(emitted)
    ikeys, ivals = zip(*got)
    ik, iv = Rows.from_list(list(ikeys)), Rows.from_list(list(ivals))
    kgs = _rowcodec._read_fixed(ik.data, ik.offsets[:-1], ">u2").astype(np.int64)
    times = _unbiased(_rowcodec.u64_at_end(ik, 16))
    seqs = _rowcodec.u64_at_end(ik, 8)
    enc_keys = _rowcodec.slices(iv, 1, 0)
    buckets = times // jp.bucket_us
    rkeys = row_keys(kgs, side, buckets, enc_keys, times, seqs)
    # the boundary bucket's expired rows: point deletes and their bucket's count
    edge = np.flatnonzero(buckets >= full)
    if len(edge):
        ops.extend((k, None, None) for k in rkeys.take(edge).to_list())
        total += len(edge)
        for kg, c in zip(*np.unique(kgs[edge], return_counts=True)):
            key = (side, int(kg), full)
            count_delta[key] = count_delta.get(key, 0) - int(c)
    if hasattr(db, "delete_range"):
        ranges.extend(index_ranges)
    else:  # as evict_range does without range deletes: a delete per key read
        ops.extend((k, None, None) for k in ikeys)
    if outer:
        free = iv.data[iv.offsets[:-1]] == 0
        if marked and free.any():
            free &= ~_in_set(rkeys, marked)
        want = rkeys.take(np.flatnonzero(free)).to_list()
        if want:
            values = db.multi_get(want)
            if any(v is None for v in values):
                lost = want[[v is None for v in values].index(True)]
                raise RuntimeError(
                    f"the join state at {task.url!r} has a time index entry without its row "
                    f"({lost.hex()}): the state is damaged; run `silt verify` on it and "
                    "restore it from a backup")
            emitted.append(Rows.from_list(values))
    return nxt, total, _joined(emitted)


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
            n += _U64.unpack(v)[0]
    return n



# --- driver: the query plan ------------------------------------------------------------------

def _on(on: Any, left: Any, right: Any) -> tuple[list[str], list[str], bool]:
    """``(left key columns, right key columns, using)``: ``using`` when ``on`` names columns
    of both sides (Spark's ``join(other, "k")``), not when it pairs ``(left, right)`` names."""
    items = [on] if isinstance(on, (str, tuple)) else list(on or [])
    if not items:
        raise InvalidArgumentError(
            "on must name the join key: a column of both sides ('user', ['user', 'day']) or "
            "(left column, right column) pairs ([('order_user', 'pay_user')])"
        )
    if all(isinstance(x, str) for x in items):
        lk, rk, using = list(items), list(items), True
    elif all(isinstance(x, tuple) and len(x) == 2 and all(isinstance(c, str) for c in x)
             for x in items):
        lk, rk, using = [x[0] for x in items], [x[1] for x in items], False
    else:
        raise InvalidTypeError(
            "on must be a column name, a list of names, or a list of (left, right) name pairs, "
            f"got {on!r}"
        )
    for name, cols, df in (("left", lk, left), ("right", rk, right)):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise InvalidArgumentError(
                f"join key columns {missing} are not in the {name} DataFrame ({df.columns})"
            )
    lt = {f.name: f.dataType for f in left.schema.fields}
    rt = {f.name: f.dataType for f in right.schema.fields}
    for a, b in zip(lk, rk):
        if lt[a] != rt[b]:
            raise InvalidTypeError(
                f"join key {a!r} is {lt[a].simpleString()} on the left but {b!r} is "
                f"{rt[b].simpleString()} on the right: cast one side so both have one type "
                "(a key's type decides its key group)"
            )
    return lk, rk, using


def join(
    left: Any,
    right: Any,
    on: Any,
    how: str = "inner",
    *,
    state_url: str,
    num_shards: int,
    left_time_column: str | None = None,
    right_time_column: str | None = None,
    left_watermark_delay: Any = 0,
    right_watermark_delay: Any = 0,
    time_range: tuple[Any, Any] | None = None,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    heartbeat: bool = False,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """Join two streaming DataFrames on equal keys, with each side's buffer in silt.

    The counterpart of Spark's stream-stream join::

        left.withWatermark(left_time_column, left_watermark_delay).join(
            right.withWatermark(right_time_column, right_watermark_delay),
            keys & (lt >= rt - a) & (lt <= rt + b), how)

    with the same output rows (see ``docs/spark.md`` for the differences). Both inputs reach a
    shard through one shuffle; per shard, each batch's rows are matched against the other
    side's buffer with one prefix scan per join key and time bucket, and all writes go in one
    write batch. Rows the watermark has expired are evicted by whole time buckets.

    Parameters
    ----------
    left, right : pyspark.sql.DataFrame
        Streaming DataFrames.
    on : str, list of str, or list of (str, str)
        The equality keys: column names both sides have (the output has each once, as Spark's
        ``join(other, ["k"])``), or ``(left column, right column)`` pairs (the output keeps all
        columns of both sides, as ``join(other, left.a == right.b)``). Paired key columns must
        have the same type.
    how : str, default "inner"
        ``"inner"``, ``"left"`` (``"left_outer"``), ``"right"`` (``"right_outer"``), ``"full"``
        (``"outer"``, ``"full_outer"``) or ``"left_semi"``. Outer and semi joins need event
        time and a ``time_range`` (as in Spark): an outer side's row never matched is emitted
        once, with nulls for the other side, in the first micro-batch whose watermark expires
        it (after a batch that moved it, silt's tick source runs Spark's no-data batch).
    state_url : str
        Root URL of this operator's state (one operator per root).
    num_shards : int
        Number of shards. Restarting with another number rescales without moving state.
    left_time_column, right_time_column : str, optional
        Each side's event-time column (``timestamp`` or ``timestamp_ntz``): give both or
        neither. Micro-batch ``b`` runs with the query-wide watermark (the minimum over the
        sides of their largest event time before ``b`` minus their delay); rows at or before it
        are late and dropped.
    left_watermark_delay, right_watermark_delay : int, str or timedelta, default 0
        Each side's ``withWatermark`` delay (ms, ``"10 seconds"``, a ``timedelta``).
    time_range : (a, b), optional
        Match only rows whose left time lies between the right time minus ``a`` and the right
        time plus ``b`` (inclusive; durations as for the delays; ``a + b >= 0``). Rows expire
        once no future row of the other side can match them.
    key_groups : int, default 256
        Number of key groups, fixed per root.
    take_over : bool, default False
        Discard state that belongs to another streaming query instead of failing.
    settings : silt.Settings, optional
        LSM settings for the shards.
    storage_options : dict of str, optional
        Object-store options for the state root, credentials included (``access_key_id``,
        ``secret_access_key``... for ``s3://``; see docs/spark.md): passed with the job to the
        executors, never shown. ``spark.silt.storage.<name>`` in the Spark conf sets them too;
        this argument wins.
    heartbeat : bool, default False
        Union a 1 row/s ``rate`` source so batches keep running while both inputs are idle
        (needed only with ``spark.silt.tick=false``, see docs/spark.md).

    Returns
    -------
    pyspark.sql.DataFrame
        Streaming DataFrame with the columns of Spark's join: for ``on`` names, the key columns
        (the right side's for ``"right"``, coalesced for ``"full"``), then the left side's other
        columns, then the right side's; for pairs, all left columns then all right columns;
        for ``"left_semi"``, the left columns.

    Examples
    --------
    >>> import silt_spark
    >>> orders = spark.readStream.schema("user string, order_id long, ot timestamp") \\
    ...     .parquet("/data/orders")
    >>> payments = spark.readStream.schema("user string, amount double, pt timestamp") \\
    ...     .parquet("/data/payments")
    >>> paid = silt_spark.join(
    ...     orders, payments, "user", "left", state_url="file:///data/state/paid",
    ...     num_shards=4, left_time_column="ot", right_time_column="pt",
    ...     left_watermark_delay="1 minute", right_watermark_delay="1 minute",
    ...     time_range=("1 hour", "0 seconds"))  # payment within an hour after the order
    >>> query = (paid.writeStream.format("parquet").option("path", "/data/out/paid")
    ...          .option("checkpointLocation", "/data/chk/paid").start())
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    kind = HOWS.get(how.lower() if isinstance(how, str) else how)
    if kind is None:
        raise InvalidArgumentError(
            f"how must be one of inner, left, right, full, left_semi, got {how!r}"
        )
    lk, rk, using = _on(on, left, right)
    if (left_time_column is None) != (right_time_column is None):
        raise InvalidArgumentError(
            "give left_time_column and right_time_column (event time on both sides) or neither"
        )
    event = left_time_column is not None
    if event:
        _api._timestamp_column(left, left_time_column, "left_time_column")
        _api._timestamp_column(right, right_time_column, "right_time_column")
    delays = (_api.parse_delay_ms(left_watermark_delay, "left_watermark_delay"),
              _api.parse_delay_ms(right_watermark_delay, "right_watermark_delay"))
    if not event and any(delays):
        raise InvalidArgumentError("watermark delays need left_time_column and right_time_column")
    rng: tuple[int, int] | None = None
    if time_range is not None:
        if not event:
            raise InvalidArgumentError("time_range needs left_time_column and right_time_column")
        if not isinstance(time_range, (tuple, list)) or len(time_range) != 2:
            raise InvalidTypeError(f"time_range must be a pair (a, b), got {time_range!r}")
        a = _signed_ms(time_range[0], "time_range[0]")
        b = _signed_ms(time_range[1], "time_range[1]")
        if a + b < 0:
            raise InvalidArgumentError(
                f"time_range ({a} ms, {b} ms) is empty: left time between right time - a and "
                "right time + b needs a + b >= 0"
            )
        rng = (a * 1000, b * 1000)
    if kind != "inner" and rng is None:
        raise InvalidArgumentError(
            f"a {kind} join needs event time and a time_range (as Spark's stream-stream joins): "
            "without them its buffers would never expire and unmatched rows never come out"
        )
    internal = {SIDE_COLUMN, KG_COLUMN, PARTITION_COLUMN}
    for name, df in (("left", left), ("right", right)):
        bad = [c for c in df.columns if c in internal or c.startswith("__")]
        if bad:
            raise InvalidArgumentError(
                f"the {name} DataFrame must not have columns starting with '__' ({bad})"
            )
    lcols, rcols = tuple(left.columns), tuple(right.columns)
    lf = {f.name: f for f in left.schema.fields}
    rf = {f.name: f for f in right.schema.fields}

    # Output columns, as Spark's join gives them.
    out_fields: list[Any] = []
    output: list[tuple] = []
    if kind == "left_semi":
        for i, c in enumerate(lcols):
            out_fields.append(T.StructField(c, lf[c].dataType, True))
            output.append(("L", i))
    elif using:
        for a, b in zip(lk, rk):
            li, ri = lcols.index(a), rcols.index(b)
            spec = {"right": ("R", ri), "full": ("C", li, ri)}.get(kind, ("L", li))
            out_fields.append(T.StructField(a, lf[a].dataType, True))
            output.append(spec)
        for i, c in enumerate(lcols):
            if c not in lk:
                out_fields.append(T.StructField(c, lf[c].dataType, True))
                output.append(("L", i))
        for i, c in enumerate(rcols):
            if c not in rk:
                out_fields.append(T.StructField(c, rf[c].dataType, True))
                output.append(("R", i))
    else:
        for i, c in enumerate(lcols):
            out_fields.append(T.StructField(c, lf[c].dataType, True))
            output.append(("L", i))
        for i, c in enumerate(rcols):
            out_fields.append(T.StructField(c, rf[c].dataType, True))
            output.append(("R", i))
    names = [f.name for f in out_fields]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InvalidArgumentError(
            f"both sides have columns named {dup}: rename one side's (withColumnRenamed), as "
            "the output needs distinct column names"
        )
    out_struct = T.StructType(out_fields)
    bucket_us = None if rng is None else max(MIN_BUCKET_US, rng[0] + rng[1])

    spec = _api._spec(
        KIND, state_url, num_shards, key_groups, take_over, settings, df=left,
        storage_options=storage_options,
        event_time_delays=delays if event else (),
    )
    _api._check_streaming(right, KIND)
    side_types = {SIDES[i]: [[f.name, f.dataType.simpleString()] for f in df.schema.fields]
                  for i, df in enumerate((left, right))}
    # A new root keeps a time index of its outer sides; one created before the index existed
    # goes on without (its descriptor never gains the field: its rows have no entries).
    fresh = _root.read_descriptor(spec.root, spec.storage_options) is None
    spec = _root.ensure_descriptor(spec, {
        "key_columns": _api._key_types(left, lk),
        "join": {"how": kind, "bucket_us": bucket_us, "left": list(lcols),
                 "right": list(rcols)},
        SIDE_TYPES: side_types,
        **({TIME_INDEX: 1} if fresh else {}),
    }, (*_api.PINNED, "join"))
    _root.refresh_descriptor(spec, {SIDE_TYPES: side_types,
                                     JOIN_KEYS: {"left": list(lk), "right": list(rk)}})
    time_indexed = (_root.read_descriptor(spec.root, spec.storage_options) or {}).get(
        TIME_INDEX) == 1

    def side_struct(df: Any, prefix: str) -> list[Any]:
        return [T.StructField(f"{prefix}{i}", f.dataType, True)
                for i, f in enumerate(df.schema.fields)]

    l_struct, r_struct = side_struct(left, "__l"), side_struct(right, "__r")
    jp = JoinPlan(
        how=kind, nkeys=len(lk), columns=(lcols, rcols),
        time_index=(lcols.index(left_time_column) if event else None,
                    rcols.index(right_time_column) if event else None),
        time_range=rng, bucket_us=bucket_us, output=tuple(output),
        side_schemas=(to_arrow_schema(T.StructType(l_struct), timezone="UTC"),
                      to_arrow_schema(T.StructType(r_struct), timezone="UTC")),
        output_schema=to_arrow_schema(out_struct, timezone="UTC"),
        time_indexed=time_indexed,
    )

    def tagged(df: Any, side: int, keys: list[str]) -> Any:
        own, other = (l_struct, r_struct) if side == LEFT else (r_struct, l_struct)
        cols = [F.col(c).alias(f"__k{i}") for i, c in enumerate(keys)]
        cols.append(F.lit(side).cast("int").alias(SIDE_COLUMN))
        mine = [F.col(c).alias(f.name) for c, f in zip(df.columns, own)]
        nulls = [F.lit(None).cast(f.dataType).alias(f.name) for f in other]
        cols += (mine + nulls) if side == LEFT else (nulls + mine)
        return df.select(*cols)

    union = tagged(left, LEFT, lk).unionByName(tagged(right, RIGHT, rk))

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return merge_partition(task, batches, jp)

    key_cols = [f"__k{i}" for i in range(len(lk))]
    routed = _api._route(union, key_cols, spec, heartbeat)
    return _api.shard_stage(routed, left, spec, process, out_struct)


def _signed_ms(value: Any, name: str) -> int:
    """A duration of ``time_range`` in ms; a leading ``-`` (or a negative int/timedelta) is
    allowed (the range may lie after or before the other side's time)."""
    import datetime as dt

    if isinstance(value, str) and value.strip().startswith("-"):
        return -_api.parse_delay_ms(value.strip()[1:], name)
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return -_api.parse_delay_ms(-value, name)
    if isinstance(value, dt.timedelta) and value < dt.timedelta(0):
        return -_api.parse_delay_ms(-value, name)
    return _api.parse_delay_ms(value, name)


# --- read-back: read_state ----------------------------------------------------------------


#: The descriptor's field holding each side's columns and Spark types (for typed reads).
SIDE_TYPES = "join_side_types"


#: Descriptor field: the join key's column names on each side (``{"left": [...], "right":
#: [...]}``), refreshed when a query starts; roots from before it name both sides' keys as the
#: left side does.
JOIN_KEYS = "join_keys"


def decode(items: Any, state_columns: list[list[str]] | None) -> Any:
    """``read_state``'s rows of this operator: per buffered row, ``(join key, "left"|"right",
    map_key, value, expires_at_ms, version)`` with ``map_key`` the JSON of ``[event time us,
    seq]`` and ``value`` the JSON of ``{"matched": bool, "row": [...]}``."""
    for key, value, expiry, ver in items:
        if _keys.tag_of(key) != JOIN_TAG or key[_keys.BODY_AT] > RIGHT:
            continue
        side, _, enc_key, time_us, seq = split_row_key(key)
        row = {"matched": value[0] == 1, "row": list(_codec.decode(value[1:]))}
        yield (_codec.decode(enc_key), SIDES[side], _codec.to_json([time_us, seq]),
               _codec.to_json(row), expiry, ver)
