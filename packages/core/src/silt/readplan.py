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

On a local store (``ObjectStore.local``, reads measured fast) both waves run in the calling
thread, one request after the other, as a request there costs less than a thread hand-off.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

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


def _place(first: int, blocks: list[Any], where: dict[int, int], out: list[Any]) -> None:
    """Put the blocks of a run starting at block ``first`` where ``out`` wants them."""
    for i, blk in enumerate(blocks, first):
        j = where.get(i)
        if j is not None:
            out[j] = blk
