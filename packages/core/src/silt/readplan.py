"""Reads planned per call, not per SST: what a ``multi_scan`` or ``multi_get`` of many keys
costs on an object store is its round trips, so it fetches in waves of independent requests.

1. **Tails** (index, bloom filter, properties) of the SSTs the call may read and that are not
   loaded yet (a cold handle): all at once, one concurrent wave (:func:`load_tails`), instead
   of one round trip per SST as each is reached.
2. **Data blocks**: the blocks every SST needs are computed from the tails in memory, the cached
   ones taken from the block cache, the others coalesced per SST into ranged GETs by the
   fetcher's tier-aware gap rule (:meth:`BlockFetcher.runs <silt.fetch.BlockFetcher.runs>`), and
   every run of every SST is read in one concurrent wave on the DB's bounded read pool
   (:func:`read_blocks`): each block once per call.

A ``multi_get`` resolves each key in the newest SST that holds it, so which blocks an older SST
must give depends on what the newer ones held. :class:`GetPlan` plans that from the tails in
memory instead of learning it SST by SST: at the first SST whose blocks are not all cached, it
assumes every key that an SST's bloom filter and index send to a block is found there (a bloom
false positive is the exception, about 1% of such keys), and reads the blocks of that SST and
of every older one the call will reach in one wave. A key the assumption missed is read in a
later, small wave; an answer never depends on the plan, only the requests do.

On a local store (``ObjectStore.local``, reads measured fast) both waves run in the calling
thread, one request after the other, as a request there costs less than a thread hand-off.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from .sst.probe import plan_probe

if TYPE_CHECKING:
    from .fetch import BlockFetcher
    from .sst.reader import SstReader


def _load_tail(reader: SstReader) -> None:
    reader.tail  # noqa: B018 - loads it


def load_tails(readers: Sequence[SstReader], fetch: BlockFetcher) -> None:
    """Load the tails of ``readers`` that are not loaded yet: those of remote stores in one
    concurrent wave on ``fetch``'s pool, those of local ones in this thread."""
    missing = [r for r in readers if r.loaded_tail is None]
    if not missing:
        return
    remote = [r for r in missing if fetch.remote(r)]
    for reader in missing:
        if not fetch.remote(reader):
            _load_tail(reader)
    fetch.gather([partial(_load_tail, r) for r in remote])


def covering(readers: Sequence[SstReader], keys: list[bytes]) -> list[SstReader]:
    """The readers of ``readers`` whose key range holds a key of the sorted ``keys``."""
    out = []
    for reader in readers:
        info = reader.info
        i = bisect_left(keys, info.smallest)  # type: ignore[union-attr]
        if i < len(keys) and keys[i] <= info.largest:  # type: ignore[union-attr]
            out.append(reader)
    return out


def read_blocks(fetch: BlockFetcher,
                wanted: Sequence[tuple[SstReader, list[int]]]) -> list[list[Any]]:
    """The blocks of each ``(reader, ascending block indexes)`` of ``wanted``, in order:
    cached ones from the cache, the others as coalesced runs, the runs of every reader read at
    once (remote stores; one after the other in this thread for local ones)."""
    out: list[list[Any]] = []
    pooled: list[tuple[SstReader, tuple[int, int], dict[int, int], list[Any]]] = []
    for reader, indexes in wanted:
        blocks = reader.cached_blocks(indexes) if indexes else []
        out.append(blocks)
        where = {i: j for j, (i, blk) in enumerate(zip(indexes, blocks)) if blk is None}
        if not where:
            continue
        runs = fetch.runs(reader, sorted(where))
        if fetch.remote(reader):
            pooled.extend((reader, run, where, blocks) for run in runs)
            continue
        for run in runs:
            first, got = fetch.read_run(reader, run)
            _place(first, got, where, blocks)
    if pooled:
        results = fetch.gather([partial(fetch.read_run, r, run) for r, run, _, _ in pooled])
        for (_, _, where, blocks), (first, got) in zip(pooled, results):
            _place(first, got, where, blocks)
    return out


def wanted_blocks(reader: SstReader, ranges: list[tuple[bytes, bytes]],
                   ends: list[bytes]) -> list[int]:
    """The ascending indexes of the blocks of ``reader`` (its tail loaded) that hold keys of
    the sorted, disjoint ``ranges`` (``ends``: their ends)."""
    info = reader.info
    lo, hi = info.smallest, info.largest  # type: ignore[union-attr]
    k = bisect_right(ends, lo)  # the first range ending after the SST's first key
    last_keys = reader.tail.last_keys
    n = len(last_keys)
    wanted: set[int] = set()
    for start, end in ranges[k:]:
        if start > hi:
            break
        a = bisect_left(last_keys, start)
        if a < n:
            wanted.update(range(a, min(n - 1, bisect_left(last_keys, end)) + 1))
    return sorted(wanted)


#: The most bytes of blocks (as stored) one planned wave of a ``multi_get`` reads, so that a call
#: that needs more holds about this much at once (decoded, until each SST is probed): the SSTs
#: past the limit are planned when the call reaches them (another wave).
PLAN_MAX_BYTES = 32 * 1024 * 1024


class GetPlan:
    """The block fetch of one ``multi_get`` (``ReadView.multi_get``), planned across SSTs.

    ``readers`` are the SSTs the call may probe, in the order it probes them (newest first; a
    level's SSTs in key order). The call sets :meth:`entering` before it probes each SST and
    calls the plan as its fetch (``fetch(reader, block_ids) -> blocks``, the ids ascending).
    When an SST of a remote store asks for a block that is neither planned nor cached, the plan
    assumes that every key an SST's bloom filter and index send to a block is found there,
    works out the blocks that SST and every later one need for the keys left, and reads all of
    them in one wave (:func:`read_blocks`; up to :data:`PLAN_MAX_BYTES`, the SSTs past it are
    planned when the call reaches them). A bloom filter's false positive leaves a key for the
    older SSTs that the plan did not foresee: the first SST that misses a block for it plans
    again from there, so such keys cost one more wave for all of them, not one per SST.
    On a warm handle (every block cached) or a local store the plan passes the call on.
    """

    __slots__ = ("fetch", "readers", "order", "blocks", "_keys")

    def __init__(self, fetch: BlockFetcher, readers: Sequence[SstReader]) -> None:
        self.fetch = fetch
        self.order = list(readers)
        self.readers = {id(r): i for i, r in enumerate(self.order)}
        self.blocks: dict[int, dict[int, Any]] = {}  # id(reader) -> its planned blocks
        self._keys: tuple[list[bytes], list[bytes], int] = ([], [], 0)

    def entering(self, remaining: list[bytes], still: list[bytes] | None = None,
                 lo: int = 0) -> None:
        """The keys unresolved when the call reaches its next SST: ``still + remaining[lo:]``
        (``still``: keys an earlier SST of the same level left; read only if the plan runs)."""
        self._keys = (still or [], remaining, lo)

    def __call__(self, reader: SstReader, ids: list[int]) -> list[Any]:
        if id(reader) not in self.readers or not self.fetch.remote(reader):
            return self.fetch(reader, ids)
        return self._serve(reader, ids, [None] * len(ids), lookup=True)

    def fill(self, reader: SstReader, ids: list[int], out: list[Any]) -> list[Any]:
        """:meth:`__call__` after the caller's own block cache lookups (``out[j]`` the cached
        block ``ids[j]``, ``None`` where the cache missed), as ``BlockFetcher.fill``: the
        compiled probe reads the cache itself and calls this only when a block missed."""
        if id(reader) not in self.readers or not self.fetch.remote(reader):
            return self.fetch.fill(reader, ids, out)
        return self._serve(reader, ids, out, lookup=False)

    def _serve(self, reader: SstReader, ids: list[int], out: list[Any],
               lookup: bool) -> list[Any]:
        """The blocks ``ids`` of ``reader`` into ``out``: planned ones, then (``lookup``)
        cached ones, planning this SST and the later ones at the first block that is neither."""
        got = self.blocks.get(id(reader)) or {}
        for j, blk in enumerate(out):
            if blk is None:
                out[j] = got.get(ids[j])
        if None in out:
            where = [j for j, blk in enumerate(out) if blk is None]
            cached = (reader.cached_blocks([ids[j] for j in where]) if lookup
                      else [None] * len(where))
            if None in cached:  # not planned, not cached: plan this SST and the later ones
                self._plan(reader)
                got = self.blocks.get(id(reader)) or {}
            for j, blk in zip(where, cached):
                out[j] = blk if blk is not None else got.get(ids[j])
            if None in out:  # (the plan always covers them; a last resort, never a wrong read)
                where = [j for j, blk in enumerate(out) if blk is None]
                for j, blk in zip(where, self.fetch(reader, [ids[j] for j in where])):
                    out[j] = blk
        self.blocks.pop(id(reader), None)  # each SST is probed once per call
        return out

    def _plan(self, start: SstReader) -> None:
        """Read, in one wave, the blocks of ``start`` and of the SSTs after it that the keys
        entering ``start`` need if each is found where the filters send it (those not planned
        or cached yet)."""
        still, remaining, lo = self._keys
        keys = still + remaining[lo:] if still else remaining[lo:]
        wanted: list[tuple[SstReader, list[int]]] = []
        total = 0
        for reader in self.order[self.readers[id(start)]:]:
            if not keys or (total > PLAN_MAX_BYTES and reader is not start):
                break
            t = reader.loaded_tail
            if t is None:  # out of every key's range at the tails' wave: not in the way
                continue
            info = reader.info
            a = bisect_left(keys, info.smallest)  # type: ignore[union-attr]
            b = bisect_right(keys, info.largest, a)  # type: ignore[union-attr]
            if a >= b:
                continue
            unresolved, ids, _ = plan_probe(keys, a, b, t.bloom, t.last_keys)
            have = self.blocks.get(id(reader))
            if have:
                ids = [i for i in ids if i not in have]
            if ids:
                wanted.append((reader, ids))
                sizes = t.block_sizes
                total += sum(sizes[i] for i in ids)
            unresolved.extend(keys[b:])
            keys = unresolved
        for (reader, ids), blocks in zip(wanted, read_blocks(self.fetch, wanted)):
            self.blocks.setdefault(id(reader), {}).update(zip(ids, blocks))


def _place(first: int, blocks: list[Any], where: dict[int, int], out: list[Any]) -> None:
    """Put the blocks of a run starting at block ``first`` where ``out`` wants them."""
    for i, blk in enumerate(blocks, first):
        j = where.get(i)
        if j is not None:
            out[j] = blk
