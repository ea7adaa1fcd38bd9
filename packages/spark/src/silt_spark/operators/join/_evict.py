"""Eviction: buffered rows whose time fell behind the watermark leave the state, whole buckets at
a time (range deletes), and an outer join emits the ones that never matched.

Reads are planned per batch, never per key group: the count entries of every key group of the
shard (both sides due at once, :func:`read_counts`) go in one ``multi_scan``, and so do the
rows an outer side without a time index reads; on an object store each is about one round
trip of concurrent ranged GETs, where a ``scan`` per key group took a round trip per SST each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...runtime import _keys, _rowcodec
from ...runtime._keys import read_ranges
from ...runtime._rowcodec import Rows
from ...runtime._shard import ShardTask
from ._buffers import (
    U64,
    JoinPlan,
    _unbiased,
    bucket_prefix,
    count_key,
    counts_range,
    full_buckets_below,
    index_head,
    prefix_end,
    row_keys,
)


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


def read_counts(db: Any, key_groups: Iterable[int], sides: Iterable[int]
                ) -> dict[tuple[bytes, bytes], list[tuple[bytes, bytes]]]:
    """The count entries of ``sides`` in every key group of ``key_groups``, by
    :func:`counts_range`, with one ``multi_scan`` (``runtime._keys.read_ranges``)."""
    return read_ranges(db, [counts_range(kg, s) for s in sides for kg in key_groups])


def eviction_due(jp: JoinPlan, side: int, evict_us: int | None, bound: int | str | None) -> bool:
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


def _expired_buckets(entries: Iterable[tuple[bytes, bytes]], full: int
                     ) -> tuple[list[int], int, int | None]:
    """The buckets below ``full`` (they expire whole) of one side and key group, from its count
    ``entries`` in order; the rows they hold, and the first live bucket (``None``: none)."""
    expired: list[int] = []
    total = 0
    for ck, cv in entries:
        b = _keys.time_value(ck, _keys.BODY_AT + 1)
        if b >= full:
            return expired, total, b
        expired.append(b)
        total += U64.unpack(cv)[0]
    return expired, total, None


def _expired_range(kg: int, side: int, expired: list[int]) -> tuple[bytes, bytes]:
    """The rows of the whole buckets ``expired`` (consecutive from the first)."""
    return bucket_prefix(kg, side, expired[0]), bucket_prefix(kg, side, expired[-1] + 1)


def _drop_buckets(db: Any, kg: int, side: int, expired: list[int],
                  items: list[tuple[bytes, bytes]] | None, marked: set[bytes], ops: list,
                  ranges: list, dead_buckets: set, emitted: list[Rows]) -> None:
    """Delete the whole buckets ``expired`` (consecutive from the first) and their count
    entries: one range each for rows and counts. ``items``: for an outer side, the rows of
    :func:`_expired_range` as read; the values of those never matched are added to
    ``emitted`` (``None``: an inner side, nothing read)."""
    lo, hi = expired[0], expired[-1] + 1
    start, end = _expired_range(kg, side, expired)
    read: list[bytes] | None = None
    if items is not None:
        read, vals = _unmatched(items, marked)
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


class _Sweep:
    """One side's eviction across the shard's key groups: the first bucket that does not expire
    whole (``full``), and what the sweep has gathered so far: the rows evicted, the smallest
    live bucket met and the values of evicted rows to emit."""

    def __init__(self, task: ShardTask, jp: JoinPlan, side: int, evict_us: int,
                 counts: dict[tuple[bytes, bytes], list[tuple[bytes, bytes]]] | None) -> None:
        assert jp.bucket_us is not None
        self.db = task.db
        self.key_groups = range(task.first_kg, task.last_kg + 1)
        self.full = full_buckets_below(evict_us, jp.bucket_us)
        self.nxt: int | None = None
        self.total = 0
        self.emitted: list[Rows] = []
        # every key group's count entries of the side: given (both sides read at once) or
        # read here, in one multi_scan either way
        self.counts = counts if counts is not None else read_counts(
            self.db, self.key_groups, (side,))

    def buckets(self, kg: int, side: int) -> tuple[list[int], int | None]:
        """``side``'s expired buckets in key group ``kg`` (their rows counted as evicted) and
        its first live bucket (``None``: none), kept if it is the smallest so far."""
        expired, n, live = _expired_buckets(self.counts[counts_range(kg, side)], self.full)
        self.total += n
        if live is not None and (self.nxt is None or live < self.nxt):
            self.nxt = live
        return expired, live

    def result(self) -> tuple[int | None, int, Rows]:
        """What :func:`evict` returns: the smallest live bucket, the rows evicted, the values
        to emit."""
        return self.nxt, self.total, _joined(self.emitted)


def evict(task: ShardTask, jp: JoinPlan, side: int, evict_us: int, outer: bool,
          marked: set[bytes], ops: list, ranges: list, dead_buckets: set, count_delta: dict,
          counts: dict[tuple[bytes, bytes], list[tuple[bytes, bytes]]] | None = None
          ) -> tuple[int | None, int, Rows]:
    """Evict ``side``'s rows with time ``<= evict_us`` in every key group of the shard: point
    deletes go to ``ops``, range deletes to ``ranges`` (see :func:`write`). Returns the smallest
    live bucket left, the rows evicted and, for an outer side, the values (``matched:u8
    enc(row)``) of the evicted rows never matched (``marked``: keys matched in this batch).
    ``counts``: the shard's count entries of this side as :func:`read_counts` gives them
    (``None``: read here).

    For a side without a time index (:func:`evict_indexed`): an outer side's whole expired
    buckets and its boundary bucket are read to find the rows to emit and delete, every key
    group's with one ``multi_scan``."""
    sweep = _Sweep(task, jp, side, evict_us, counts)
    plan = [(kg, *sweep.buckets(kg, side)) for kg in sweep.key_groups]
    wanted: list[tuple[bytes, bytes]] = []
    if outer:
        for kg, expired, live in plan:
            if expired:
                wanted.append(_expired_range(kg, side, expired))
            if live == sweep.full:
                prefix = bucket_prefix(kg, side, live)
                wanted.append((prefix, prefix_end(prefix)))
    got = read_ranges(sweep.db, wanted) if wanted else {}
    for kg, expired, live in plan:
        if live == sweep.full and outer:
            prefix = bucket_prefix(kg, side, live)
            items = got[(prefix, prefix_end(prefix))]
            if items:
                ks, vs = zip(*items)
                keys = Rows.from_list(list(ks))
                times = _unbiased(_rowcodec.u64_at_end(keys, 16))
                gone = np.flatnonzero(times <= evict_us)
                if len(gone):
                    sub = list(zip(keys.take(gone).to_list(),
                                   Rows.from_list(list(vs)).take(gone).to_list()))
                    gk, vals = _unmatched(sub, marked)
                    sweep.emitted.append(vals)
                    ops.extend(zip(gk, [None] * len(gk), [None] * len(gk)))
                    sweep.total += len(gone)
                    key = (side, kg, live)
                    count_delta[key] = count_delta.get(key, 0) - len(gone)
        if expired:
            _drop_buckets(sweep.db, kg, side, expired,
                          got[_expired_range(kg, side, expired)] if outer else None, marked,
                          ops, ranges, dead_buckets, sweep.emitted)
    return sweep.result()


def evict_indexed(task: ShardTask, jp: JoinPlan, side: int, evict_us: int, outer: bool,
                  marked: set[bytes], ops: list, ranges: list, dead_buckets: set,
                  count_delta: dict,
                  counts: dict[tuple[bytes, bytes], list[tuple[bytes, bytes]]] | None = None
                  ) -> tuple[int | None, int, Rows]:
    """:func:`evict` for a side with a time index (an outer side, :attr:`JoinPlan.indexed`).

    The rows that expire, and only those, are listed in time order by the index, with their
    marks (one ``multi_scan`` over the shard's key groups): so the work follows the rows
    evicted, never the rows buffered. Whole expired buckets go by range delete, the boundary
    bucket's expired rows by point deletes, the index entries by one range per key group;
    the values of the rows never matched are read with one ``multi_get`` to be emitted.
    ``counts`` as for :func:`evict`."""
    sweep = _Sweep(task, jp, side, evict_us, counts)
    db, full = sweep.db, sweep.full
    index_ranges: list[tuple[bytes, bytes]] = []
    until = _keys.time_bytes(evict_us + 1)
    for kg in sweep.key_groups:
        expired, live = sweep.buckets(kg, side)
        if expired:
            _drop_buckets(db, kg, side, expired, None, marked, ops, ranges, dead_buckets,
                          sweep.emitted)
        if expired or live == full:
            index_ranges.append((index_head(kg, side), index_head(kg, side) + until))
    got = db.multi_scan(index_ranges) if index_ranges else []
    if not got:
        return sweep.result()
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
        sweep.total += len(edge)
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
            sweep.emitted.append(Rows.from_list(values))
    return sweep.result()
