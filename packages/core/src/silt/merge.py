"""Merging sorted sources where the newest source wins.

Every read path that combines memtables and SSTs (scans, flush, compaction) goes through
:func:`merge_newest_first`. Sources are iterators of ``(key, record)`` with strictly increasing
keys; ``sources[0]`` is the newest. For each key the record of the newest source that has it is
yielded, once, in key order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from heapq import heapify, heappop, heapreplace

from ._ext import accelerate
from .record import MISSING, visible


def merge_newest_first(
    sources: list[Iterator[tuple[bytes, object]]],
) -> Iterator[tuple[bytes, object]]:
    """Yield ``(key, record)`` over all sources in key order; on ties the lowest index wins."""
    if len(sources) == 1:
        yield from sources[0]
        return
    heap: list[tuple[bytes, int, object, Iterator[tuple[bytes, object]]]] = []
    for rank, it in enumerate(sources):
        first = next(it, None)
        if first is not None:
            heap.append((first[0], rank, first[1], it))
    heapify(heap)
    last: object = MISSING
    while heap:
        key, rank, record, it = heap[0]
        nxt = next(it, None)
        if nxt is None:
            heappop(heap)
        else:
            heapreplace(heap, (nxt[0], rank, nxt[1], it))
        if key != last:
            last = key
            yield key, record


def live(items: Iterable[tuple[bytes, object]], now_ms: int) -> Iterator[tuple[bytes, bytes]]:
    """Drop tombstones and expired entries; yield ``(key, value)``."""
    for key, r in items:
        if r.__class__ is bytes:
            yield key, r  # type: ignore[misc]
        elif r is not None and now_ms < r[1]:  # type: ignore[index]
            yield key, r[0]  # type: ignore[index]


def visible_many(keys: list[bytes], found: dict[bytes, object], now_ms: int) -> list[bytes | None]:
    """``[visible(found.get(k, MISSING), now_ms) for k in keys]`` (multi_get's answer)."""
    get = found.get
    return [visible(get(k, MISSING), now_ms) for k in keys]


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), ("merge_newest_first", "live", "visible_many"))
