"""The in-memory block cache: CLOCK (second chance), bounded by bytes.

A block's key is one int, ``block_key_base(sst_id) + block_index`` (:func:`block_key_base`);
values are decoded, immutable blocks, so a cached block can be shared by every reader and never
goes stale (objects are never overwritten). Thread-safe.

One cache may serve every DB of a process: :class:`silt.budget.MemoryBudget` owns such a shared
cache and shrinks it (:meth:`BlockCache.resize`) as memtables take their part of the budget.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Any

from ._ext import accelerate

#: Bits of a block index in a block key: an SST's block count is a 32-bit field of its index
#: (docs/format.md), so its indexes are below ``1 << BLOCK_INDEX_BITS``.
BLOCK_INDEX_BITS = 32
#: How many SST names :func:`block_key_base` remembers before it forgets them all.
BASES_KEPT = 1 << 16

_bases: dict[str, int] = {}
_next_serial = 1
_bases_lock = threading.Lock()


def block_key_base(name: str) -> int:
    """The base of the block keys of the SST ``name`` (its id, or its object name) in this
    process: block ``i``'s key is ``base + i``, for ``0 <= i < 1 << BLOCK_INDEX_BITS``.

    Every reader of one SST gets the same base, so readers of it in several DBs or handles share
    its cached blocks; no two names ever get the same base (a serial, never reused, shifted past
    the index bits), so no two blocks of different SSTs ever share a key, whatever caches
    they meet in. An int hashes and compares in a step, where an ``(id, index)`` tuple took
    three objects' memory. The process remembers up to :data:`BASES_KEPT` names, then forgets
    them all: a later reader of a forgotten name gets a new base (correct; its blocks cached
    under the old one are never hit again and are evicted first, being never marked).
    """
    global _next_serial
    with _bases_lock:
        base = _bases.get(name)
        if base is None:
            if len(_bases) >= BASES_KEPT:
                _bases.clear()
            base = _next_serial << BLOCK_INDEX_BITS
            _next_serial += 1
            _bases[name] = base
        return base


def block_key(base: int, index: int) -> int:
    """Block ``index``'s key under ``base`` (:func:`block_key_base`); the index is checked."""
    if not 0 <= index < 1 << BLOCK_INDEX_BITS:
        raise IndexError(f"block index {index} outside 0..2**{BLOCK_INDEX_BITS}")
    return base + index


# An entry is the list [key, value, charge, marked]: mutable in place, so that a hit only
# marks it.
_KEY, _VALUE, _CHARGE, _MARKED = 0, 1, 2, 3


class BlockCache:
    """CLOCK (second-chance) cache bounded by the sum of the entries' ``charge`` (bytes).

    The eviction order (the compiled twin keeps the same, step for step):

    * Entries queue in the order their keys were first put.
    * A hit (:meth:`get`, :meth:`get_many`) marks its entry and moves nothing; :meth:`holds`
      neither marks nor counts.
    * To make room, the cache takes the oldest entry of the queue: a marked one is unmarked and
      goes to the back of the queue (its second chance), an unmarked one is evicted (counted in
      :attr:`evictions`). So an entry hit since the hand last passed survives one more round,
      and one never hit since it was put is evicted first, oldest first.
    * A new entry makes room for its charge before it is queued (its own put never evicts it);
      it is queued unmarked. A put of a key already cached replaces its value and charge in
      place (its place in the queue kept), marks it, then evicts down to the capacity.
    * :meth:`resize` makes room the same way down to the new capacity.

    A hit costs a dictionary lookup and a flag, not a reordering of a list; the queue is walked
    only to make room, and each hit costs at most one step of that walk. The compiled twin also
    keeps its exact-int keys in ``[0, 2**62)`` in an index by value, which :meth:`get_block`
    reads (the same answers, marks and counts as :meth:`get`).
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.used = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._data: dict[Hashable, list[Any]] = {}
        self._queue: deque[list[Any]] = deque()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The cached value or ``None``; a hit marks the entry (a second chance)."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                self.misses += 1
                return None
            entry[_MARKED] = True
            self.hits += 1
            return entry[_VALUE]

    def get_block(self, base: int, index: int) -> Any:
        """``get(base + index)``: block ``index`` of the SST whose keys start at ``base``
        (:func:`block_key_base`; ``0 <= index < 1 << BLOCK_INDEX_BITS``, unchecked here). The
        compiled twin finds the entry through an index of its int keys by value, without an
        int object or a trip through the dictionary and the entry (what the compiled gets
        call)."""
        return self.get(base + index)

    def get_many(self, keys: list[Hashable]) -> list[Any]:
        """``[get(key) for key in keys]`` under one lock acquisition (multi_get's blocks)."""
        out: list[Any] = []
        with self._lock:
            for entry in map(self._data.get, keys):
                if entry is None:
                    out.append(None)
                else:
                    entry[_MARKED] = True
                    out.append(entry[_VALUE])
            misses = out.count(None)
            self.hits += len(keys) - misses
            self.misses += misses
        return out

    def holds(self, keys: list[Hashable]) -> list[bool]:
        """Whether each of ``keys`` is cached, without marking it or counting a hit or a miss
        (a look at what the cache holds, not a read)."""
        with self._lock:
            data = self._data
            return [key in data for key in keys]

    def put(self, key: Hashable, value: Any, charge: int) -> None:
        """Insert ``value``, evicting in CLOCK order (see the class) to stay within capacity.

        An entry larger than the whole capacity is not cached.
        """
        if charge > self.capacity:
            return
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                self.used += charge - entry[_CHARGE]
                entry[_VALUE] = value
                entry[_CHARGE] = charge
                entry[_MARKED] = True
                self._make_room(self.capacity)
                return
            self._make_room(self.capacity - charge)
            entry = [key, value, charge, False]
            self._data[key] = entry
            self._queue.append(entry)
            self.used += charge

    def _make_room(self, limit: int) -> None:
        """Evict in CLOCK order until :attr:`used` is at most ``limit`` (under the lock)."""
        queue = self._queue
        while self.used > limit and queue:
            entry = queue.popleft()
            if entry[_MARKED]:
                entry[_MARKED] = False
                queue.append(entry)
                continue
            del self._data[entry[_KEY]]
            self.used -= entry[_CHARGE]
            self.evictions += 1

    def resize(self, capacity_bytes: int) -> None:
        """Set the capacity; evicts in CLOCK order until the rest fit in it."""
        with self._lock:
            self.capacity = capacity_bytes
            self._make_room(capacity_bytes)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._queue.clear()
            self.used = 0


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), ("BlockCache",))
