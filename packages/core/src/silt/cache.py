"""The in-memory block cache: least recently used, bounded by bytes.

Keys are ``(sst_id, block_index)``; values are decoded, immutable blocks, so a cached block can be
shared by every reader and never goes stale (objects are never overwritten). Thread-safe.

One cache may serve every DB of a process: :class:`silt.budget.MemoryBudget` owns such a shared
cache and shrinks it (:meth:`BlockCache.resize`) as memtables take their part of the budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Hashable
from typing import Any

from ._ext import accelerate


class BlockCache:
    """LRU cache bounded by the sum of the entries' ``charge`` (bytes)."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.used = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The cached value or ``None``; a hit makes the entry most recently used."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return entry[0]

    def get_many(self, keys: list[Hashable]) -> list[Any]:
        """``[get(key) for key in keys]`` under one lock acquisition (multi_get's blocks)."""
        with self._lock:
            data = self._data
            found = list(map(data.get, keys))
            misses = found.count(None)
            if misses:
                hits = [key for key, entry in zip(keys, found) if entry is not None]
            else:
                hits = keys
            deque(map(data.move_to_end, hits), 0)  # a C loop: most recently used, in order
            self.hits += len(keys) - misses
            self.misses += misses
        return [None if entry is None else entry[0] for entry in found]

    def holds(self, keys: list[Hashable]) -> list[bool]:
        """Whether each of ``keys`` is cached, without making it recently used or counting a
        hit or a miss (a look at what the cache holds, not a read)."""
        with self._lock:
            data = self._data
            return [key in data for key in keys]

    def put(self, key: Hashable, value: Any, charge: int) -> None:
        """Insert ``value``; evicts least recently used entries to stay within capacity.

        An entry larger than the whole capacity is not cached.
        """
        if charge > self.capacity:
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._data[key] = (value, charge)
            self.used += charge
            while self.used > self.capacity:
                _, (_, evicted) = self._data.popitem(last=False)
                self.used -= evicted
                self.evictions += 1

    def resize(self, capacity_bytes: int) -> None:
        """Set the capacity; evicts least recently used entries until the rest fit in it."""
        with self._lock:
            self.capacity = capacity_bytes
            while self.used > capacity_bytes and self._data:
                _, (_, evicted) = self._data.popitem(last=False)
                self.used -= evicted
                self.evictions += 1

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.used = 0


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), ("BlockCache",))
