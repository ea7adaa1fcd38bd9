"""Many keys against one SST at once: the per-SST step of ``multi_get``.

A ``multi_get`` sorts its keys once (:func:`sorted_unique`), then walks the SSTs newest first,
and each SST resolves what it can of the keys still unresolved (:func:`probe_sst`): the keys in
its range are merged against its bloom filter and index (:func:`plan_probe`: sorted keys never
move back through the index), the blocks they need are fetched with one call (cached ones from
the block cache, missing ones as runs of adjacent blocks, see ``silt.fetch.BlockFetcher``), and
each key is looked up in its block (:func:`lookup_groups`). The unresolved keys come back still
sorted, so no SST sorts again.

Compiled, each function is one C pass with no per-key Python (``silt._speedups``); the
pure-Python twins here define the behaviour and stay reachable as ``<name>_py``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._ext import accelerate
from ..errors import CorruptionError
from ..record import MISSING
from .bloom import BloomFilter, bloom_hash

if TYPE_CHECKING:
    from .block import Block
    from .reader import SstReader

#: ``fetch(reader, block_ids)``: the decoded blocks ``block_ids`` (ascending) of ``reader``,
#: in that order (``silt.fetch.BlockFetcher``).
Fetch = Callable[["SstReader", list[int]], list[Any]]


def sorted_unique(keys: list[bytes]) -> list[bytes]:
    """``sorted(set(keys))``: the distinct keys in byte order (a new list)."""
    return sorted(set(keys))


def plan_probe(
    keys: list[bytes], lo: int, hi: int, bloom: BloomFilter | None, last_keys: list[bytes]
) -> tuple[list[bytes], list[int], list[list[bytes]]]:
    """Group sorted ``keys[lo:hi]`` by the block that may hold them (a merge against the index).

    Returns ``(unresolved, blocks, groups)``: ``unresolved`` starts with ``keys[:lo]`` plus the
    keys the bloom filter rules out or that are past the last block; ``groups[j]`` holds the keys
    to look up in block ``blocks[j]``.
    """
    unresolved = keys[:lo]
    blocks: list[int] = []
    groups: list[list[bytes]] = []
    group: list[bytes] = []
    cur = -1
    n = len(last_keys)
    b = 0
    may_contain = bloom.may_contain_hash if bloom is not None else None
    for key in keys[lo:hi]:
        if may_contain is not None:
            if not may_contain(bloom_hash(key)):
                unresolved.append(key)
                continue
        b = bisect_left(last_keys, key, b)
        if b >= n:
            unresolved.append(key)
            continue
        if b != cur:
            cur = b
            group = []
            blocks.append(b)
            groups.append(group)
        group.append(key)
    return unresolved, blocks, groups


def lookup_many(
    blk: Block, keys: list[bytes], found: dict[bytes, object], unresolved: list[bytes]
) -> None:
    """Look sorted ``keys`` up in ``blk``: records go to ``found``, misses to ``unresolved``."""
    _look_up(blk, keys, found, unresolved)


def lookup_groups(
    blocks: list[Block], groups: list[list[bytes]], found: dict[bytes, object],
    unresolved: list[bytes],
) -> None:
    """:func:`lookup_many` of ``groups[j]`` in ``blocks[j]`` for every ``j``."""
    for blk, keys in zip(blocks, groups):
        _look_up(blk, keys, found, unresolved)


def _look_up(blk: Block, keys: list[bytes], found: dict[bytes, object],
             unresolved: list[bytes]) -> None:
    """The pure-Python body of :func:`lookup_many` (named apart: the compiled twin takes that
    name, and the pure :func:`lookup_groups` must keep calling the pure body)."""
    get = blk.get
    for key in keys:
        r = get(key)
        if r is MISSING:
            unresolved.append(key)
        else:
            found[key] = r


def probe_sst(reader: SstReader, keys: list[bytes], found: dict[bytes, object],
              fetch: Fetch) -> list[bytes]:
    """Look sorted, distinct ``keys`` up in the SST of ``reader``: the records it holds go to
    ``found``; returns the other keys, still sorted (``keys`` itself when none is in the SST's
    key range).

    ``fetch`` is called once, with the ascending ids of the blocks that may hold some key (those
    the bloom filter and index do not rule out), and not at all when there are none.
    """
    info = reader.info
    assert info is not None
    lo = bisect_left(keys, info.smallest)
    hi = bisect_right(keys, info.largest, lo)
    if lo >= hi:
        return keys
    tail = reader.tail
    unresolved, block_ids, groups = plan_probe(keys, lo, hi, tail.bloom, tail.last_keys)
    if block_ids:
        blocks = list(fetch(reader, block_ids))
        if len(blocks) != len(block_ids):
            raise ValueError("fetch returned a different number of blocks than asked for")
        lookup_groups(blocks, groups, found, unresolved)
        unresolved.sort()
    unresolved.extend(keys[hi:])
    return unresolved


def coalesce(reader: SstReader, indexes: list[int], gap: int,
             max_bytes: int) -> list[tuple[int, int]]:
    """Runs ``(first, stop)`` of blocks of ``reader`` that cover the ascending block
    ``indexes``: consecutive indexes share a run when the bytes between them are at most
    ``gap`` and the run stays within ``max_bytes`` (a lone block may be larger)."""
    t = reader.tail
    offsets, sizes = t.block_offsets, t.block_sizes
    runs: list[tuple[int, int]] = []
    first = prev = indexes[0]
    for i in indexes[1:]:
        if (offsets[i] - offsets[prev] - sizes[prev] <= gap
                and offsets[i] + sizes[i] - offsets[first] <= max_bytes):
            prev = i
            continue
        runs.append((first, prev + 1))
        first = prev = i
    runs.append((first, prev + 1))
    return runs


def missing_runs(reader: SstReader, indexes: list[int], out: list[Any], gap: int,
                 max_bytes: int) -> tuple[dict[int, int], list[tuple[int, int]]]:
    """For the ascending block ``indexes`` of ``reader`` whose blocks ``out`` lacks
    (``out[j] is None``, at least one): ``where`` (block ``indexes[j]`` -> ``j``) and the runs
    that read them (:func:`coalesce` with ``gap`` and ``max_bytes``), for
    :func:`read_runs` and ``silt.fetch.BlockFetcher.fill``. Compiled: one C loop."""
    where = {i: j for j, (i, blk) in enumerate(zip(indexes, out)) if blk is None}
    return where, coalesce(reader, list(where), gap, max_bytes)


def read_runs(reader: SstReader, read: Callable[[int, int], Any], runs: list[tuple[int, int]],
              where: dict[int, int], out: list[Any]) -> None:
    """Read the runs ``(first, stop)`` of adjacent blocks of ``reader`` through the store's
    direct reader ``read`` (:meth:`SstReader.direct_read`, one read per run, a failure passed to
    :meth:`SstReader.direct_failed`), check, decode and cache every block, and put block ``i``
    at ``out[where[i]]`` where ``where`` has ``i``: a local ``multi_get``'s missed blocks.

    The same reads, blocks, cache inserts and errors as :meth:`SstReader.read_run` of each run
    (the bytes read are metered by the direct reader, as every block read is). Compiled, one C
    loop: no Python frame per run or block besides the direct reader's own.
    """
    for first, stop in runs:
        t = reader.tail
        base = t.block_offsets[first]
        length = t.block_offsets[stop - 1] + t.block_sizes[stop - 1] - base
        try:
            data = read(base, length)
        except Exception as exc:  # sorted out by direct_failed, as SstReader's own reads do
            data = reader.direct_failed(exc, base, length)
        if len(data) != length:
            what = "block" if stop - first == 1 else "block run"
            raise CorruptionError(reader.name, base,
                                  f"{what} truncated: {len(data)} of {length} bytes")
        for i, blk in enumerate(reader.decode_run(first, stop, data), first):
            j = where.get(i)
            if j is not None:
                out[j] = blk


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), ("sorted_unique", "plan_probe", "lookup_many",
                                  "lookup_groups", "probe_sst", "coalesce", "missing_runs",
                                  "read_runs"))
