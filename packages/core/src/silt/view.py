"""The read view: one DB's state as readers see it, swapped whole (docs/architecture.md, "The read
path").

A :class:`ReadView` holds, newest first: the active memtable, the frozen parts (memtables on
their way to SSTs, or uploaded SSTs not committed yet), the committed L0 SSTs and the levels.
Like LevelDB's ``Version`` and mini-lsm's ``LsmStorageState`` it is immutable: the DB builds a new
one when a memtable freezes, a version is installed or a finished compaction serves reads
(:mod:`silt.compaction.early`) and swaps the reference, so a reader that took a view keeps a
consistent picture however the writer moves on. The one mutable member is the active memtable,
which the single writer fills in place (a read sees each write once it is made).

``get_below``, ``multi_get`` and ``scan`` read a view (``DB.get`` reads its memtable first);
they know nothing of commits or the store.
Range tombstones (:mod:`silt.rangedel`) are part of the view: each source is read with the
sequence number it was frozen at (a part's ``seq``, an SST's ``info.seq``), and a record a
tombstone newer than its source covers reads as deleted. The active memtable is never covered
(a range delete turns its keys into point tombstones at the call); with no tombstones the read
paths are the plain ones.
A :class:`Part` is shared with :mod:`silt.flush`, which turns its memtable into an SST: the
uploader sets ``reader`` before it clears ``memtable``, so a reader always finds one of them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from itertools import chain
from typing import TYPE_CHECKING, Any

from .memtable import Memtable, split_found
from .merge import live, merge_newest_first, visible_many
from .rangedel import EMPTY, RangeTombstones
from .readplan import GetPlan, covering, load_tails, read_blocks, wanted_blocks
from .record import MISSING
from .sst.bloom import bloom_hash
from .sst.builder import SstInfo
from .sst.probe import probe_sst, sorted_unique
from .sst.reader import SstReader, get_levels, key_bounds

if TYPE_CHECKING:
    from .budget import MemoryBudget
    from .fetch import BlockFetcher


class Part:
    """A frozen memtable on its way to becoming an SST (or already uploaded, not committed).

    ``seq`` is the DB's range-delete counter when it froze (its SST's ``info.seq``).
    """

    __slots__ = ("memtable", "reader", "info", "future", "seq")

    def __init__(self, memtable: Memtable, seq: int = 0) -> None:
        self.seq = seq
        self.memtable: Memtable | None = memtable
        self.reader: SstReader | None = None
        self.info: SstInfo | None = None
        self.future: Future[None] | None = None


class Level:
    """A sorted run: SSTs with disjoint key ranges, ordered by key."""

    __slots__ = ("readers", "largest")

    def __init__(self, readers: list[SstReader]) -> None:
        self.readers = readers
        self.largest = [r.info.largest for r in readers]  # type: ignore[union-attr]

    def find(self, key: bytes) -> SstReader | None:
        i = bisect_left(self.largest, key)
        if i < len(self.readers) and self.readers[i].info.smallest <= key:  # type: ignore[union-attr]
            return self.readers[i]
        return None

    def overlapping(self, start: bytes | None, end: bytes | None) -> list[SstReader]:
        lo = bisect_left(self.largest, start) if start is not None else 0
        out = []
        for r in self.readers[lo:]:
            if end is not None and r.info.smallest >= end:  # type: ignore[union-attr]
                break
            out.append(r)
        return out


class ReadView:
    """An immutable snapshot of what a read consults, newest first (see the module docstring).

    ``parts`` are oldest first; ``l0`` newest first; ``levels`` from L1 down; ``tombs`` the
    range tombstones over all of them, committed or not. ``committed`` is ``None`` when ``l0``
    and ``levels`` are the base version's, else the base's ``(l0, levels)`` while the view
    shows finished compactions no commit published yet (:mod:`silt.compaction.early`).

    ``waits`` (set only by :meth:`waiting`, on the view a handle opened with while its search
    for leftover compactions runs: :mod:`silt.compaction.leftovers`) is a callable that waits
    for that search, boundedly, and returns the view to read instead: every read below the
    active memtable of this view goes to it first. Any other view (:meth:`but`) has none.
    """

    __slots__ = ("mem", "parts", "l0", "levels", "tombs", "committed", "bounds", "plain",
                 "waits")

    def __init__(self, mem: Memtable, parts: tuple[Part, ...] = (),
                 l0: tuple[SstReader, ...] = (), levels: tuple[Level, ...] = (),
                 tombs: RangeTombstones = EMPTY,
                 committed: tuple[tuple[SstReader, ...], tuple[Level, ...]] | None = None
                 ) -> None:
        self.mem = mem
        self.parts = parts
        self.l0 = l0
        self.levels = levels
        self.tombs = tombs
        self.committed = committed
        self.bounds = key_bounds(l0, levels)  # a get outside them reads no SST
        self.plain = not parts and not tombs  # all below the memtable is in l0 and levels
        self.waits: Callable[[], ReadView] | None = None

    def waiting(self, waits: Callable[[], ReadView]) -> ReadView:
        """A copy whose reads below the active memtable read ``waits()`` instead (see the class
        docstring); not ``plain``, so ``DB.get`` goes through :meth:`get_below`."""
        view = self.but()
        view.waits = waits
        view.plain = False
        return view

    def but(self, **changes: Any) -> ReadView:
        """A copy with some members replaced; new ``l0`` or ``levels`` without ``committed``
        are the committed ones."""
        tree = "l0" in changes or "levels" in changes
        return ReadView(changes.get("mem", self.mem), changes.get("parts", self.parts),
                        changes.get("l0", self.l0), changes.get("levels", self.levels),
                        changes.get("tombs", self.tombs),
                        changes.get("committed", None if tree else self.committed))

    def committed_only(self) -> ReadView:
        """This view with the base version's own L0 and levels (what ``committed`` holds)."""
        if self.committed is None:
            return self
        return self.but(l0=self.committed[0], levels=self.committed[1])

    # -- point reads: DB.get reads the active memtable itself, and the SSTs when the view is
    # ``plain`` (point reads are the hot path, and a frame more costs ~8%). The rest is here.
    def get_below(self, key: bytes) -> object:
        """The newest record of ``key`` below the active memtable (``MISSING``: none)."""
        if self.waits is not None:
            return self.waits().get_below(key)
        if self.tombs:
            t = self.tombs.seq_at(key)
            if t:
                return self._get_below_covered(key, t)
        h = -1  # bloom_hash(key), computed once for all SSTs when the first one needs it
        for part in reversed(self.parts):
            mem = part.memtable
            if mem is not None:
                r = mem.data.get(key, MISSING)
            else:
                if h < 0:
                    h = bloom_hash(key)
                r = part.reader.get(key, h)  # type: ignore[union-attr]
            if r is not MISSING:
                return r
        return get_levels(self.l0, self.levels, key, h, self.bounds)

    def _get_below_covered(self, key: bytes, t: int) -> object:
        """``get_below`` for a key inside a range tombstone of sequence number ``t``: the newest
        record, or ``None`` when its source is older than the tombstone."""
        h = bloom_hash(key)
        for part in reversed(self.parts):
            mem = part.memtable
            r = mem.data.get(key, MISSING) if mem is not None else part.reader.get(key, h)  # type: ignore[union-attr]
            if r is not MISSING:
                return None if part.seq < t else r
        readers = [r for r in self.l0 if r.info.smallest <= key <= r.info.largest]  # type: ignore[union-attr]
        readers.extend(r for r in (lv.find(key) for lv in self.levels) if r is not None)
        for reader in readers:
            r = reader.get(key, h)
            if r is not MISSING:
                return None if reader.info.seq < t else r  # type: ignore[union-attr]
        return MISSING

    def multi_get(self, keys: list[bytes], fetch: BlockFetcher,
                  now_ms: int) -> list[bytes | None]:
        """Values for ``keys`` (checked bytes), in their order: sorted and deduplicated, each
        SST probed for the keys still unresolved, each needed block read once (``fetch``)."""
        if self.waits is not None:
            return self.waits().multi_get(keys, fetch, now_ms)
        found: dict[bytes, object] = {}
        tombs = self.tombs
        remaining = split_found(sorted_unique(keys), self.mem.data, found)
        if not remaining:
            return visible_many(keys, found, now_ms)
        # A cold handle: the tails it may probe in one wave, not one per SST; then the blocks
        # of every SST in one more wave (silt.readplan.GetPlan), not one per SST
        readers = self._readers()
        load_tails(covering(readers, remaining), fetch)
        plan = GetPlan(fetch, readers)
        # Parts newest first, each as a memtable or (once uploaded) as an SST: uploads finish
        # out of order (parallel uploads, a failed upload retried at commit), so an older part
        # may still be a memtable while a newer one is already an SST.
        for part in reversed(self.parts):
            if not remaining:
                break
            pm = part.memtable
            before = remaining
            if pm is not None:
                remaining = split_found(remaining, pm.data, found)
            else:
                plan.entering(remaining)
                remaining = probe_sst(part.reader, remaining, found, plan)  # type: ignore[arg-type]
            if tombs:
                tombs.mask_found(before, found, part.seq)
        for reader in self.l0:
            if not remaining:
                break
            before = remaining
            plan.entering(remaining)
            remaining = probe_sst(reader, remaining, found, plan)
            if tombs and tombs.covers_any(reader.info):  # type: ignore[arg-type]
                tombs.mask_found(before, found, reader.info.seq)  # type: ignore[union-attr]
        for level in self.levels:
            if not remaining:
                break
            still: list[bytes] = []
            pos = 0
            for reader in level.readers:
                info = reader.info
                lo = bisect_left(remaining, info.smallest, pos)  # type: ignore[union-attr]
                hi = bisect_right(remaining, info.largest, lo)  # type: ignore[union-attr]
                still.extend(remaining[pos:lo])
                if lo < hi:
                    plan.entering(remaining, still, lo)
                    still.extend(probe_sst(reader, remaining[lo:hi], found, plan))
                    if tombs and tombs.covers_any(info):  # type: ignore[arg-type]
                        tombs.mask_found(remaining[lo:hi], found, info.seq)  # type: ignore[union-attr]
                pos = hi
            still.extend(remaining[pos:])
            remaining = still
        return visible_many(keys, found, now_ms)

    def _readers(self) -> list[SstReader]:
        """The SSTs of the view, newest first (uploaded parts, L0, the levels)."""
        out = [p.reader for p in reversed(self.parts) if p.reader is not None]
        out.extend(self.l0)  # type: ignore[arg-type]
        out.extend(r for level in self.levels for r in level.readers)  # type: ignore[misc]
        return out

    # -- range reads ----------------------------------------------------------------------------
    def scan(self, start: bytes | None, end: bytes | None,
             now_ms: int) -> Iterator[tuple[bytes, bytes]]:
        """Live ``(key, value)`` in ``[start, end)`` in key order, as of this view."""
        if self.waits is not None:
            return self.waits().scan(start, end, now_ms)
        sources: list[Iterator[tuple[bytes, object]]] = [self.mem.iter_range(start, end)]
        tombs = self.tombs
        for part in reversed(self.parts):
            mem = part.memtable
            if mem is not None:
                it = mem.iter_range(start, end)
            elif overlaps(part.info, start, end):  # type: ignore[arg-type]
                it = part.reader.iter_range(start, end)  # type: ignore[union-attr]
            else:
                continue
            sources.append(tombs.mask(it, part.seq, False) if tombs else it)
        sources.extend(self._committed_sources(start, end))
        return live(merge_newest_first(sources), now_ms)

    def multi_scan(self, ranges: list[tuple[bytes, bytes]], fetch: BlockFetcher,
                   now_ms: int) -> list[tuple[bytes, bytes]]:
        """Live ``(key, value)`` of every range of ``ranges`` (``[start, end)``, sorted and
        disjoint), in key order: :meth:`scan` of each, but each SST block the ranges need is
        read once per call, the missing ones as runs of adjacent blocks (``fetch``, as
        ``multi_get`` reads them), before any range is merged."""
        if self.waits is not None:
            return self.waits().multi_scan(ranges, fetch, now_ms)
        tombs = self.tombs
        # The parts newest first, each looked at once, as get_below and scan do: a memtable, or
        # (once uploaded) its SST prefetched. Uploads finish out of order and at any moment, so
        # a part must be read as it was when looked at, at its own place in the order: looking
        # again per range would skip a part whose upload finished in between, and putting every
        # memtable ahead of every SST would let an older part still uploading shadow a newer one.
        upper: list[Memtable | tuple[SstReader, int, dict[int, Any]]] = []
        # (reader, seq, its blocks by index), newest first: L0, then the levels
        ssts: list[tuple[SstReader, int, dict[int, Any]]] = []
        runs: list[list[tuple[SstReader, int, dict[int, Any]]]] = []

        ends = [e for _, e in ranges]

        def meets(reader: SstReader) -> bool:
            info = reader.info
            k = bisect_right(ends, info.smallest)  # type: ignore[union-attr]
            return k < len(ranges) and ranges[k][0] <= info.largest  # type: ignore[union-attr]

        # The plan: the SSTs a range meets (from the manifest's key ranges), their tails in
        # one wave, the blocks each needs from its index in memory, then all of them in one
        # wave of coalesced GETs (silt.readplan).
        for part in reversed(self.parts):
            mem = part.memtable  # the uploader sets reader before it clears memtable
            upper.append(mem if mem is not None else (part.reader, part.seq, {}))  # type: ignore[arg-type]
        ssts.extend((r, r.info.seq, {}) for r in self.l0)  # type: ignore[union-attr]
        runs.extend([(r, r.info.seq, {}) for r in level.readers]  # type: ignore[union-attr]
                    for level in self.levels)
        groups: list[list[Any]] = [upper, ssts, *runs]
        planned = {id(src[0]): src[0] for group in groups for src in group
                   if not isinstance(src, Memtable) and meets(src[0])}
        load_tails(list(planned.values()), fetch)
        wanted = [(r, wanted_blocks(r, ranges, ends)) for r in planned.values()]
        got = {id(r): dict(zip(idx, blocks))
               for (r, idx), blocks in zip(wanted, read_blocks(fetch, wanted))}
        for group in groups:
            for i, src in enumerate(group):
                if not isinstance(src, Memtable) and id(src[0]) in got:
                    group[i] = (src[0], src[1], got[id(src[0])])
        out: list[tuple[bytes, bytes]] = []
        for start, end in ranges:
            sources: list[Iterator[tuple[bytes, object]]] = [self.mem.iter_range(start, end)]
            # Only tombstones meeting this range can delete what it reads (the ranges are
            # narrow: a join's probes): a source without a newer one there is not masked.
            for part, src in zip(reversed(self.parts), upper):
                if isinstance(src, Memtable):
                    it = src.iter_range(start, end)
                    seq = part.seq
                else:
                    it = _prefetched_within(src, start, end)
                    if it is None:
                        continue
                    seq = src[1]
                masked = tombs and tombs.newer_within(start, end, seq)
                sources.append(tombs.mask(it, seq, False) if masked else it)
            for sst in ssts:
                it = _prefetched_within(sst, start, end)
                if it is not None:
                    masked = tombs and tombs.newer_within(start, end, sst[1])
                    sources.append(tombs.mask(it, sst[1], False) if masked else it)
            for run in runs:
                chosen = [x for x in run
                          if not (x[0].info.largest < start or x[0].info.smallest >= end)]  # type: ignore[union-attr]
                if chosen:
                    sources.append(_chain_masked(chosen, start, end, tombs))
            out.extend(live(merge_newest_first(sources), now_ms))
        return out

    def committed_records(self, start: bytes | None,
                          end: bytes | None) -> Iterator[tuple[bytes, object]]:
        """``(key, record)`` of the committed SSTs in ``[start, end)``, newest per key,
        tombstones and expired entries included."""
        sources = self._committed_sources(start, end)
        return merge_newest_first(sources) if sources else iter(())

    def _committed_sources(self, start: bytes | None,
                           end: bytes | None) -> list[Iterator[tuple[bytes, object]]]:
        sources: list[Iterator[tuple[bytes, object]]] = []
        tombs = self.tombs
        for reader in self.l0:
            if overlaps(reader.info, start, end):  # type: ignore[arg-type]
                sources.append(_masked(reader, start, end, tombs))
        for level in self.levels:
            readers = level.overlapping(start, end)
            if readers:
                sources.append(_chain_range(readers, start, end, tombs))
        return sources

    def changed_keys(self, since_ids: set[str], start: bytes | None,
                     end: bytes | None) -> set[bytes]:
        """Keys in ``[start, end)`` of the committed SSTs whose id is not in ``since_ids`` (see
        :meth:`silt.DB.changed_keys`, which adds the keys under newer range tombstones)."""
        keys: set[bytes] = set()
        readers = [*self.l0, *(r for level in self.levels for r in level.readers)]
        for reader in readers:
            if reader.info.id in since_ids or not overlaps(reader.info, start, end):  # type: ignore[union-attr]
                continue
            keys.update(k for k, _ in reader.iter_range(start, end))
        return keys

    # -- inspection -----------------------------------------------------------------------------
    @property
    def read_amplification(self) -> int:
        """SSTs a point read may probe: every L0 SST plus one per non-empty level."""
        return len(self.l0) + sum(1 for lv in self.levels if lv.readers)


def overlaps(info: SstInfo, start: bytes | None, end: bytes | None) -> bool:
    """Whether the SST ``info`` may hold keys in ``[start, end)``."""
    return (start is None or info.largest >= start) and (end is None or info.smallest < end)


def _masked(reader: SstReader, start: bytes | None, end: bytes | None,
            tombs: RangeTombstones) -> Iterator[tuple[bytes, object]]:
    """The SST's ``(key, record)`` in ``[start, end)``, records its tombstones delete as
    ``None``."""
    it = reader.iter_range(start, end)
    if tombs and tombs.covers_any(reader.info):  # type: ignore[arg-type]
        return tombs.mask(it, reader.info.seq, False)  # type: ignore[union-attr]
    return it


def _prefetched(reader: SstReader, blocks: dict[int, Any], start: bytes,
                end: bytes) -> Iterator[tuple[bytes, object]]:
    """The SST's ``(key, record)`` in ``[start, end)`` from its ``blocks`` read beforehand
    (a block not among them, which :meth:`ReadView.multi_scan` never asks for, is read).
    Lazy: its tail is read, and its first block found, on the first item asked for."""
    if reader.clipped:
        info = reader.info
        start = max(start, info.smallest)  # type: ignore[union-attr]
        end = min(end, info.largest + b"\x00")  # type: ignore[union-attr]
        if start >= end:
            return iter(())
    # the blocks' own iterators, chained in C: no Python frame resumed per item
    return chain.from_iterable(_prefetched_blocks(reader, blocks, start, end))


def _prefetched_blocks(reader: SstReader, blocks: dict[int, Any], start: bytes,
                       end: bytes) -> Iterator[Iterator[tuple[bytes, object]]]:
    """The iterator of each of the SST's blocks :func:`_prefetched` reads, in order."""
    last_keys = reader.tail.last_keys
    i = first = bisect_left(last_keys, start)
    while i < len(last_keys):
        blk = blocks.get(i)
        if blk is None:
            blk = reader.read_block(i)
        yield blk.items_from(start if i == first else None, end)
        if last_keys[i] >= end:
            return
        i += 1


def _prefetched_within(sst: tuple[SstReader, int, dict[int, Any]], start: bytes,
                       end: bytes) -> Iterator[tuple[bytes, object]] | None:
    """:func:`_prefetched` of a prefetched SST ``(reader, seq, blocks)``, or ``None`` when its
    key range misses ``[start, end)``."""
    reader, _seq, blocks = sst
    info = reader.info
    if info.largest < start or info.smallest >= end:  # type: ignore[union-attr]
        return None
    return _prefetched(reader, blocks, start, end)


def _chain_masked(run: list[tuple[SstReader, int, dict[int, Any]]], start: bytes, end: bytes,
                  tombs: RangeTombstones) -> Iterator[tuple[bytes, object]]:
    """One level's prefetched SSTs in ``[start, end)`` in key order, each masked by the range
    tombstones newer than it that meet the range (each SST's items made when the one before
    it ends, the items chained in C)."""
    return chain.from_iterable(_prefetched_masked(reader, seq, blocks, start, end, tombs)
                               for reader, seq, blocks in run)


def _prefetched_masked(reader: SstReader, seq: int, blocks: dict[int, Any], start: bytes,
                       end: bytes, tombs: RangeTombstones) -> Iterator[tuple[bytes, object]]:
    """:func:`_prefetched`, its records deleted by the range tombstones newer than the SST
    (``seq``) that meet the range as ``None``."""
    it = _prefetched(reader, blocks, start, end)
    if tombs and tombs.newer_within(start, end, seq):
        return tombs.mask(it, seq, False)
    return it


def _chain_range(
    readers: Iterable[SstReader], start: bytes | None, end: bytes | None,
    tombs: RangeTombstones = EMPTY,
) -> Iterator[tuple[bytes, object]]:
    """One level's SSTs (``readers``, in key order) in ``[start, end)``, one after the other:
    each SST's iterator made when the one before it ends, the items chained in C (a Python
    generator here would resume a frame per item of every scan of a level)."""
    return chain.from_iterable(_masked(reader, start, end, tombs) for reader in readers)


class Readers:
    """The open :class:`SstReader` of each SST a DB reads (their tails stay loaded), by id.

    ``open`` makes the reader of an SST entry the first time (``make``: the owner's store,
    a sibling's for a reference) and again when a reference's clip range changed. With a
    ``budget``, every reader's tail is pinned in it once loaded (``SstReader.charge_tail_to``).
    """

    __slots__ = ("by_id", "budget")

    def __init__(self, budget: MemoryBudget | None = None) -> None:
        self.by_id: dict[str, SstReader] = {}
        self.budget = budget

    def add(self, reader: SstReader) -> None:
        if self.budget is not None:
            reader.charge_tail_to(self.budget)
        self.by_id[reader.info.id] = reader  # type: ignore[union-attr]

    def open(self, info: SstInfo, make: Any) -> SstReader:
        reader = self.by_id.get(info.id)
        if reader is None or (reader.info is not info and reader.info != info):
            reader = make(info)
            if self.budget is not None:
                reader.charge_tail_to(self.budget)
            self.by_id[info.id] = reader
        return reader

    def unpin_all(self) -> None:
        """Give every reader's pinned tail bytes back to the budget (the DB closes)."""
        for reader in self.by_id.values():
            reader.unpin_tail()

    def retain(self, ids: set[str]) -> None:
        """Forget every reader whose id is not in ``ids``."""
        for sst_id in [i for i in self.by_id if i not in ids]:
            del self.by_id[sst_id]
