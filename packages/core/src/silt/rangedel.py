"""Range tombstones: ``DB.delete_range(start, end)`` without a record per deleted key.

WARNING: the fragments are part of the manifest's on-disk format (docs/format.md, format 4).

A range delete is a **tombstone** ``[start, end)`` with a **sequence number** ``t`` drawn from
a counter the manifest carries (``Manifest.seq``). Every SST entry carries the counter's value
when its records were frozen (``SstInfo.seq``); a tombstone deletes the records in its range of
every SST whose ``seq`` is smaller than ``t``. The writer deletes the keys of its active memtable
at the call (they get point tombstones), so the memtable is never covered; a frozen memtable
(a :class:`~silt.view.Part`) takes the counter's value at the freeze.

Reads only ever need, for a key, the greatest sequence number of the tombstones that contain
it, so tombstones are kept **fragmented**: sorted, disjoint ``[start, end)`` fragments, each with
the greatest sequence number of the tombstones over it (RocksDB's fragmented range tombstone
list). A later tombstone that contains an earlier one replaces it, so repeated eviction of a
growing prefix (windows, join buffers) keeps one fragment per range, not one per call. A read
finds the fragment of a key by bisection; a record found in a source whose ``seq`` is smaller
than that fragment's is deleted (and so is every older record of the key: they were written
before it). A source whose key range meets no fragment newer than it is read unmasked.

Compaction applies the tombstones to its inputs (covered records are dropped) and tags its
outputs with the manifest's counter. A fragment is dropped from the manifest at commit once no
SST older than it overlaps it (:meth:`RangeTombstones.prune`), so tombstones vanish as
compaction rewrites what they covered.

References between DBs (:mod:`silt.siblings`) keep the sources' sequence numbers: a DB that
references sources starts its counter at the greatest of theirs, so its own later tombstones
cover every referenced SST and the sources' tombstones (clipped to the referenced ranges) never
cover its own SSTs; referenced ranges are disjoint, so the sources' counters never meet.

Immutable and thread-safe.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise
from typing import Any

from .sst.builder import MAX_SEQ, SstInfo

#: A fragment: ``(start, end, seq)`` with ``start < end`` and ``seq >= 1``.
Fragment = tuple[bytes, bytes, int]
#: At most this many fragments in one manifest (a bound for crafted manifests).
MAX_FRAGMENTS = 1 << 16


def fragment(tombstones: Iterable[Fragment]) -> tuple[Fragment, ...]:
    """Sorted, disjoint fragments with the greatest ``seq`` over each key; adjacent fragments
    with the same ``seq`` are joined, so the answer is canonical (equal sets of deletes give
    equal fragments)."""
    ts = sorted(t for t in tombstones if t[0] < t[1])
    if not ts:
        return ()
    bounds = sorted({b for t in ts for b in t[:2]})
    out: list[Fragment] = []
    heap: list[tuple[int, bytes]] = []  # (-seq, end) of the tombstones open at a bound
    i = 0
    for lo, hi in pairwise(bounds):
        while i < len(ts) and ts[i][0] <= lo:
            heapq.heappush(heap, (-ts[i][2], ts[i][1]))
            i += 1
        while heap and heap[0][1] <= lo:
            heapq.heappop(heap)
        if not heap:
            continue
        seq = -heap[0][0]
        if out and out[-1][1] == lo and out[-1][2] == seq:
            out[-1] = (out[-1][0], hi, seq)
        else:
            out.append((lo, hi, seq))
    return tuple(out)


class RangeTombstones:
    """A DB's range tombstones as fragments (see the module docstring)."""

    __slots__ = ("fragments", "_starts", "_ends", "_seqs", "_max")

    def __init__(self, fragments: Sequence[Fragment] = ()) -> None:
        """``fragments`` must already be canonical (:func:`fragment`, :func:`check_fragments`)."""
        self.fragments: tuple[Fragment, ...] = tuple(fragments)
        self._starts = [f[0] for f in self.fragments]
        self._ends = [f[1] for f in self.fragments]
        self._seqs = [f[2] for f in self.fragments]
        self._max = max(self._seqs, default=0)

    def __bool__(self) -> bool:
        return bool(self.fragments)

    def __len__(self) -> int:
        return len(self.fragments)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeTombstones) and self.fragments == other.fragments

    def __hash__(self) -> int:
        return hash(self.fragments)

    def __repr__(self) -> str:
        return f"RangeTombstones({list(self.fragments)!r})"

    # -- building -----------------------------------------------------------------------------
    def add(self, start: bytes, end: bytes, seq: int) -> RangeTombstones:
        """These tombstones plus ``[start, end)`` at ``seq``."""
        return RangeTombstones(fragment([*self.fragments, (start, end, seq)]))

    def union(self, other: RangeTombstones) -> RangeTombstones:
        if not other:
            return self
        if not self:
            return other
        return RangeTombstones(fragment([*self.fragments, *other.fragments]))

    def clip(self, start: bytes | None, end: bytes | None) -> RangeTombstones:
        """Only the parts inside ``[start, end)`` (``None``: unbounded)."""
        out = []
        for lo, hi, seq in self.fragments:
            if start is not None and lo < start:
                lo = start
            if end is not None and hi > end:
                hi = end
            if lo < hi:
                out.append((lo, hi, seq))
        return RangeTombstones(out)

    def prune(self, ssts: Iterable[SstInfo]) -> RangeTombstones:
        """The fragments that still delete something: those overlapping an SST of ``ssts``
        whose ``seq`` is smaller than theirs. ``ssts`` must be every SST of the version."""
        if not self:
            return self
        keep = [False] * len(self.fragments)
        left = len(keep)
        for s in ssts:
            if s.seq >= self._max:
                continue
            i = bisect_right(self._ends, s.smallest)  # first fragment ending after smallest
            while i < len(keep) and self._starts[i] <= s.largest:
                if not keep[i] and s.seq < self._seqs[i]:
                    keep[i] = True
                    left -= 1
                i += 1
            if not left:
                return self
        return RangeTombstones([f for f, k in zip(self.fragments, keep) if k])

    # -- reading ------------------------------------------------------------------------------
    def seq_at(self, key: bytes) -> int:
        """The greatest sequence number of the tombstones containing ``key`` (0: none)."""
        i = bisect_right(self._starts, key) - 1
        if i >= 0 and key < self._ends[i]:
            return self._seqs[i]
        return 0

    def newest_over(self, smallest: bytes, largest: bytes) -> int:
        """The greatest sequence number of the fragments meeting ``[smallest, largest]``
        (inclusive: an SST's key range); 0 when none does."""
        if not self.fragments:
            return 0
        i = bisect_right(self._ends, smallest)
        j = bisect_right(self._starts, largest)
        return max(self._seqs[i:j], default=0)

    def newer_within(self, start: bytes, end: bytes, seq: int) -> bool:
        """Whether some fragment newer than ``seq`` meets ``[start, end)`` (a scanned range,
        end excluded): a source of sequence number ``seq`` read only there needs no masking
        when this is false."""
        if self._max <= seq or not self.fragments or start >= end:
            return False
        i = bisect_right(self._ends, start)
        j = bisect_left(self._starts, end)
        return max(self._seqs[i:j], default=0) > seq

    def covers_any(self, info: SstInfo) -> bool:
        """Whether some fragment newer than SST ``info`` meets its key range."""
        return self._max > info.seq and self.newest_over(info.smallest, info.largest) > info.seq

    def mask(self, items: Iterable[tuple[bytes, object]], seq: int,
             drop: bool) -> Iterator[tuple[bytes, object]]:
        """``items`` (``(key, record)`` in key order, of a source whose ``seq`` is ``seq``) with
        the records the tombstones delete left out (``drop``: compaction) or replaced by a
        point tombstone ``None`` (reads, so that they also hide older sources' records)."""
        starts, ends, seqs = self._starts, self._ends, self._seqs
        n = len(starts)
        i = -1
        for key, r in items:
            if i < 0:
                i = bisect_right(ends, key)
            while i < n and ends[i] <= key:
                i += 1
            if i < n and starts[i] <= key and seqs[i] > seq:
                if drop:
                    continue
                r = None
            yield key, r

    def mask_found(self, keys: Iterable[bytes], found: dict[bytes, object], seq: int) -> None:
        """Replace by ``None`` the records in ``found`` of ``keys`` (those one source of
        sequence number ``seq`` resolved) that the tombstones delete."""
        for key in keys:
            if key in found and self.seq_at(key) > seq:
                found[key] = None

    # -- the manifest's form --------------------------------------------------------------------
    def to_json(self) -> list[list[Any]]:
        return [[lo.hex(), hi.hex(), seq] for lo, hi, seq in self.fragments]

    @classmethod
    def from_json(cls, value: Any, max_seq: int) -> RangeTombstones:
        """Parse what :meth:`to_json` wrote; raises ``ValueError`` unless it is a list of
        at most :data:`MAX_FRAGMENTS` ``[start_hex, end_hex, seq]`` with ``start < end``,
        ``1 <= seq <= max_seq`` (the manifest's counter), sorted, disjoint and canonical."""
        if not isinstance(value, list):
            raise ValueError(f"'range_tombstones' must be a list, got {type(value).__name__}")
        if len(value) > MAX_FRAGMENTS:
            raise ValueError(f"{len(value)} range tombstones, more than {MAX_FRAGMENTS}")
        out: list[Fragment] = []
        for item in value:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                    and isinstance(item[1], str) and isinstance(item[2], int)
                    and not isinstance(item[2], bool)):
                raise ValueError(f"a range tombstone must be [start_hex, end_hex, seq], got "
                                 f"{item!r:.80}")
            lo, hi, seq = bytes.fromhex(item[0]), bytes.fromhex(item[1]), item[2]
            if not lo < hi:
                raise ValueError(f"range tombstone [{item[0]:.40}, {item[1]:.40}) is empty or "
                                 "reversed")
            if not 1 <= seq <= max_seq:
                raise ValueError(f"range tombstone seq {seq} is outside 1..{max_seq} (the "
                                 "manifest's 'seq')")
            if out and (out[-1][1] > lo or (out[-1][1] == lo and out[-1][2] == seq)):
                raise ValueError("range tombstones must be sorted, disjoint fragments")
            out.append((lo, hi, seq))
        return cls(out)


EMPTY = RangeTombstones()


def check_seq(value: Any) -> int:
    """A manifest's or SST entry's sequence number (``ValueError`` unless 0..MAX_SEQ)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEQ:
        raise ValueError(f"'seq' must be an integer in 0..{MAX_SEQ}, got {value!r:.80}")
    return value

