"""Buffer loading: the rows of one side of a micro-batch (:class:`Side`) and the other side's
buffered rows they may match, read from the shard's LSM bucket by bucket (:func:`load_buffers`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...runtime import _keys, _rowcodec, _watermark
from ...runtime._layout import KG_COLUMN
from ...runtime._rowcodec import Rows
from ...runtime._shard import ShardTask
from ._buffers import (
    LEFT,
    NO_TIME,
    SCAN_ROWS_PER_SEEK,
    SIDE_COLUMN,
    U64,
    JoinPlan,
    _unbiased,
    bucket_prefix,
    count_key,
    prefix_end,
)


class Side:
    """One side's rows of the batch, late ones dropped, in input order, as arrays."""

    def __init__(self, task: ShardTask, t: Any, jp: JoinPlan, side: int, wm: int | None):
        import pyarrow.compute as pc

        cols = jp.columns[side]
        prefix = "__l" if side == LEFT else "__r"
        t = t.filter(pc.equal(t[SIDE_COLUMN], side))
        base = task.batch_id << 32
        ti = jp.time_index[side]
        wi = jp.watermark_inputs[side]
        if ti is not None and t.num_rows:
            us = _watermark.event_us(t[f"{prefix}{ti}"])
            if wi is None:  # no watermark on this side: no row of it is late (as in Spark)
                keep = pc.is_valid(us) if jp.time_range is not None else None
            else:
                top = pc.max(us).as_py()
                if top is not None:
                    task.observe_event_time(top // 1000, wi)  # late rows count, as in Spark
                keep = pc.invert(pc.fill_null(pc.less_equal(us, (wm or 0) * 1000), False))
                if jp.time_range is not None:
                    keep = pc.and_(keep, pc.is_valid(us))
            if keep is not None and not pc.all(keep).as_py():
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


class Loaded:
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


def load_buffers(task: ShardTask, jp: JoinPlan, inp: Side) -> Loaded:
    """The other side's buffered rows ``inp``'s rows may match (:func:`load_both` of one
    side)."""
    return load_both(task, jp, [inp])[0]


def load_both(task: ShardTask, jp: JoinPlan, inps: list[Side]) -> list[Loaded]:
    """For each side's rows of ``inps``, the other side's buffered rows they may match, read
    for all of them at once: per key group and bucket probed its row count (one ``multi_get``
    for every side), nothing when it is empty, one scan of the whole bucket when it holds at
    most :data:`SCAN_ROWS_PER_SEEK` rows per join key the batch probes there, else one prefix
    scan per join key; then every range of every side with **one** ``multi_scan``, so each
    block of the shard is read at most once per batch (and the blocks of both sides' rows of
    a key group, adjacent in an SST, with one request on an object store). The buffers are
    read as the batch found them (nothing is written before the batch's one write)."""
    plans = [_probes(jp, inp) for inp in inps]
    count_keys = [count_key(kg, 1 - inp.side, b)
                  for inp, plan in zip(inps, plans) for kg, b, _ in plan]
    sizes = iter(task.db.multi_get(count_keys) if count_keys else [])
    reads = getattr(task, "join_reads", None)
    if reads is None:
        reads = task.join_reads = {"probe_bucket_scans": 0, "probe_key_scans": 0}
    ranges: list[tuple[bytes, bytes]] = []
    for inp, plan in zip(inps, plans):
        side = 1 - inp.side
        for kg, bucket, rows in plan:
            size = next(sizes)
            if size is None:
                continue  # no row buffered in this key group and bucket
            prefix = bucket_prefix(kg, side, bucket)
            if U64.unpack(size)[0] <= len(rows) * SCAN_ROWS_PER_SEEK:
                reads["probe_bucket_scans"] += 1
                ranges.append((prefix, prefix_end(prefix)))
            else:
                reads["probe_key_scans"] += len(rows)
                # enc(join key) is prefix-free (a tuple of self-delimiting values), so a key's
                # prefix range holds that key's rows only, and the ranges do not overlap
                for enc in inp.enc_keys.take(rows).to_list():
                    p = prefix + enc
                    ranges.append((p, prefix_end(p)))
    got: list[tuple[bytes, bytes]] = []
    if ranges:
        ranges.sort()
        # one call for the whole batch: each block of the buffers is read at most once
        got = task.db.multi_scan(ranges)
    out = []
    at = _keys.BODY_AT
    for inp in inps:
        side = 1 - inp.side
        mine = [kv for kv in got if kv[0][at] == side] if len(inps) > 1 else got
        out.append(Loaded(side, [k for k, _ in mine], [v for _, v in mine]))
    return out


def _probes(jp: JoinPlan, inp: Side) -> list[tuple[int, int, np.ndarray]]:
    """``(key group, bucket, rows)`` of each (key group, bucket) of the other side that
    ``inp``'s rows may match, in key order: ``rows``, one row of ``inp`` per distinct join key
    probed there, sorted by key code."""
    if not inp.n:
        return []
    lo, hi = _candidate_buckets(jp, inp.side, inp.times)
    codes = key_codes([inp.enc_keys])[0]
    parts = []
    for d in range(int((hi - lo).max()) + 1):
        m = lo + d <= hi
        parts.append(np.stack([inp.kgs[m], lo[m] + d, codes[m], np.flatnonzero(m)], axis=1))
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
    return [(int(probes[s, 0]), int(probes[s, 1]), probes[s:e, 3])
            for s, e in zip(starts.tolist(), ends.tolist())]


def key_codes(parts: list[Rows]) -> list[np.ndarray]:
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
