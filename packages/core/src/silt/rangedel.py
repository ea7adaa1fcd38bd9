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
#: A chunk of fragments: their starts, ends and seqs, in key order.
_Chunk = tuple[tuple[bytes, ...], tuple[bytes, ...], tuple[int, ...]]


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
    """A DB's range tombstones as fragments (see the module docstring).

    The fragments are kept in chunks of at most :attr:`CHUNK` (each a triple of tuples: starts,
    ends, seqs), with the first start, last end and greatest seq of every chunk beside them, so
    that :meth:`add` of a tombstone newer than every fragment (as the DB's counter always is)
    shares every chunk it does not touch: it takes O(log N) comparisons and copies the references
    of the one or two chunks it touches and of the chunk table (at most ``CHUNK + 2N/CHUNK``),
    never re-fragmenting the N fragments. Reads bisect the chunk table, then a chunk.
    """

    __slots__ = ("_chunks", "_firsts", "_lasts", "_cmax", "_len", "_max", "_flat")

    #: Most fragments in one chunk; a chunk holds at least half as many unless it is the only one.
    CHUNK = 256

    def __init__(self, fragments: Sequence[Fragment] = ()) -> None:
        """``fragments`` must already be canonical (:func:`fragment`, :func:`check_fragments`)."""
        frags = tuple(fragments)
        chunks = self._split(tuple(f[0] for f in frags), tuple(f[1] for f in frags),
                             tuple(f[2] for f in frags))
        self._chunks = tuple(chunks)
        self._firsts = [ch[0][0] for ch in chunks]
        self._lasts = [ch[1][-1] for ch in chunks]
        self._cmax = [max(ch[2]) for ch in chunks]
        self._len = len(frags)
        self._max = max(self._cmax, default=0)
        self._flat: tuple[Fragment, ...] | None = frags

    def _split(self, st: tuple[bytes, ...], en: tuple[bytes, ...],
               sq: tuple[int, ...]) -> list[_Chunk]:
        """Fragments in key order cut into chunks of equal size, at most :attr:`CHUNK`."""
        if len(st) <= self.CHUNK:
            return [(st, en, sq)] if st else []
        k = -(-len(st) // self.CHUNK)
        size = -(-len(st) // k)
        return [(st[x:x + size], en[x:x + size], sq[x:x + size]) for x in range(0, len(st), size)]

    @property
    def fragments(self) -> tuple[Fragment, ...]:
        """Every fragment, in key order (built once per object, on first use)."""
        flat = self._flat
        if flat is None:
            flat = self._flat = tuple(f for st, en, sq in self._chunks for f in zip(st, en, sq))
        return flat

    def __bool__(self) -> bool:
        return self._len > 0

    def __len__(self) -> int:
        return self._len

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeTombstones) and self.fragments == other.fragments

    def __hash__(self) -> int:
        return hash(self.fragments)

    def __repr__(self) -> str:
        return f"RangeTombstones({list(self.fragments)!r})"

    # -- building -----------------------------------------------------------------------------
    def add(self, start: bytes, end: bytes, seq: int) -> RangeTombstones:
        """These tombstones plus ``[start, end)`` at ``seq``.

        O(log N) comparisons when ``seq`` is greater than every fragment's (the DB's case: its
        counter only grows): the new fragment replaces what it covers, trimming the fragments
        across its bounds, in the chunks it meets. Otherwise the whole set is re-fragmented.
        """
        if not start < end:
            return self
        if seq <= self._max:
            return type(self)(fragment([*self.fragments, (start, end, seq)]))
        chunks, n = self._chunks, len(self._chunks)
        if not n:
            return type(self)(((start, end, seq),))
        # Chunks before ``a`` end at or before ``start``; chunks from ``b`` start at or after
        # ``end``; the chunks strictly between the first and the last of [a, b) lie inside
        # [start, end) and are dropped whole.
        a = bisect_right(self._lasts, start)
        b = bisect_left(self._firsts, end)
        if a == b:  # meets no chunk: goes at the end of chunk a - 1 or at the front of chunk a
            a = max(a - 1, 0)
            b = a + 1
        st_a, en_a, sq_a = chunks[a]
        st_b, en_b, sq_b = chunks[b - 1]
        i = bisect_right(en_a, start)  # chunk a's fragments [0, i) end at or before start
        j = bisect_left(st_b, end)  # chunk b-1's fragments [j, ...) start at or after end
        # The new fragment, with the left part of the fragment across start and the right part
        # of the fragment across end.
        left = i < len(st_a) and st_a[i] < start
        mst: tuple[bytes, ...] = (st_a[i], start) if left else (start,)
        men: tuple[bytes, ...] = (start, end) if left else (end,)
        msq: tuple[int, ...] = (sq_a[i], seq) if left else (seq,)
        if j and en_b[j - 1] > end:
            mst, men, msq = (*mst, end), (*men, en_b[j - 1]), (*msq, sq_b[j - 1])
        st = st_a[:i] + mst + st_b[j:]
        en = en_a[:i] + men + en_b[j:]
        sq = sq_a[:i] + msq + sq_b[j:]
        at = i + left  # where the new fragment is in st
        count = self._len - sum(len(ch[0]) for ch in chunks[a:b]) + len(st)
        if len(st) < self.CHUNK // 2 and n - (b - a) > 0:  # too small: join a neighbour chunk
            if b < n:
                nst, nen, nsq = chunks[b]
                st, en, sq = st + nst, en + nen, sq + nsq
                b += 1
            else:
                a -= 1
                nst, nen, nsq = chunks[a]
                st, en, sq = nst + st, nen + en, nsq + sq
                at += len(nst)
        middle = self._split(st, en, sq)
        cmax = []
        for ch in middle:  # the piece with the new fragment has its seq, the greatest
            cmax.append(seq if 0 <= at < len(ch[0]) else max(ch[2]))
            at -= len(ch[0])
        out = object.__new__(type(self))
        out._chunks = chunks[:a] + tuple(middle) + chunks[b:]
        out._firsts = self._firsts[:a] + [ch[0][0] for ch in middle] + self._firsts[b:]
        out._lasts = self._lasts[:a] + [ch[1][-1] for ch in middle] + self._lasts[b:]
        out._cmax = self._cmax[:a] + cmax + self._cmax[b:]
        out._len = count
        out._max = seq
        out._flat = None
        return out

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
        frags = self.fragments
        starts = [f[0] for f in frags]
        ends = [f[1] for f in frags]
        keep = [False] * len(frags)
        left = len(keep)
        for s in ssts:
            if s.seq >= self._max:
                continue
            i = bisect_right(ends, s.smallest)  # first fragment ending after smallest
            while i < len(keep) and starts[i] <= s.largest:
                if not keep[i] and s.seq < frags[i][2]:
                    keep[i] = True
                    left -= 1
                i += 1
            if not left:
                return self
        return RangeTombstones([f for f, k in zip(frags, keep) if k])

    # -- reading ------------------------------------------------------------------------------
    def seq_at(self, key: bytes) -> int:
        """The greatest sequence number of the tombstones containing ``key`` (0: none)."""
        c = bisect_right(self._firsts, key) - 1
        if c < 0:
            return 0
        st, en, sq = self._chunks[c]
        i = bisect_right(st, key) - 1
        return sq[i] if key < en[i] else 0

    def _newest(self, lo: bytes, hi: bytes, inclusive: bool) -> int:
        """The greatest seq of the fragments ending after ``lo`` and starting at or before
        ``hi`` (``inclusive``) or before it; 0 when none does."""
        c1 = bisect_right(self._lasts, lo)  # first chunk with a fragment ending after lo
        cut = bisect_right if inclusive else bisect_left
        c2 = cut(self._firsts, hi) - 1  # last chunk with a fragment starting before hi
        if c1 > c2:
            return 0
        chunks = self._chunks
        i = bisect_right(chunks[c1][1], lo)
        j = cut(chunks[c2][0], hi)
        if c1 == c2:
            return max(chunks[c1][2][i:j], default=0)
        return max(max(chunks[c1][2][i:], default=0), max(self._cmax[c1 + 1:c2], default=0),
                   max(chunks[c2][2][:j], default=0))

    def newest_over(self, smallest: bytes, largest: bytes) -> int:
        """The greatest sequence number of the fragments meeting ``[smallest, largest]``
        (inclusive: an SST's key range); 0 when none does."""
        return self._newest(smallest, largest, True) if self._len else 0

    def newer_within(self, start: bytes, end: bytes, seq: int) -> bool:
        """Whether some fragment newer than ``seq`` meets ``[start, end)`` (a scanned range,
        end excluded): a source of sequence number ``seq`` read only there needs no masking
        when this is false."""
        if self._max <= seq or start >= end:
            return False
        return self._newest(start, end, False) > seq

    def covers_any(self, info: SstInfo) -> bool:
        """Whether some fragment newer than SST ``info`` meets its key range."""
        return self._max > info.seq and self.newest_over(info.smallest, info.largest) > info.seq

    def mask(self, items: Iterable[tuple[bytes, object]], seq: int,
             drop: bool) -> Iterator[tuple[bytes, object]]:
        """``items`` (``(key, record)`` in key order, of a source whose ``seq`` is ``seq``) with
        the records the tombstones delete left out (``drop``: compaction) or replaced by a
        point tombstone ``None`` (reads, so that they also hide older sources' records)."""
        chunks, lasts = self._chunks, self._lasts
        n = len(chunks)
        c = -1
        i = 0
        starts: tuple[bytes, ...] = ()
        ends: tuple[bytes, ...] = ()
        seqs: tuple[int, ...] = ()
        for key, r in items:
            if c < 0 or (c < n and ends[-1] <= key):  # (re)locate the chunk of the key
                c = bisect_right(lasts, key)
                if c < n:
                    starts, ends, seqs = chunks[c]
                    i = bisect_right(ends, key)
            if c < n:
                while ends[i] <= key:
                    i += 1
                if starts[i] <= key and seqs[i] > seq:
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

