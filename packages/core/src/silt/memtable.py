"""The memtable: recent writes in a dict, ordered on demand.

A dict gives O(1) puts and gets from Python; order is only needed at flush and for scans, so the
sorted key list is computed lazily and cached until the next write (a deliberate simplification
over a skiplist: scans that interleave with writes re-sort).

Not thread-safe for concurrent writers; one writer plus concurrent readers is fine (dict
operations are atomic under the GIL and a frozen memtable never changes).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from .record import MISSING, record_size


class Memtable:
    """Recent writes: ``key -> record`` (see :mod:`silt.record`) plus an approximate byte size."""

    __slots__ = ("data", "approx_bytes", "_sorted")

    def __init__(self) -> None:
        self.data: dict[bytes, object] = {}
        self.approx_bytes = 0
        self._sorted: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self.data)

    def put(self, key: bytes, record: object) -> None:
        self.data[key] = record
        self.approx_bytes += record_size(key, record)
        self._sorted = None

    def get(self, key: bytes) -> object:
        return self.data.get(key, MISSING)

    def sorted_keys(self) -> list[bytes]:
        """All keys in order (cached until the next write)."""
        keys = self._sorted
        if keys is None or len(keys) != len(self.data):
            keys = sorted(self.data)
            self._sorted = keys
        return keys

    def sorted_items(self) -> tuple[list[bytes], list[object]]:
        keys = self.sorted_keys()
        data = self.data
        return keys, [data[k] for k in keys]

    def iter_range(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, object]]:
        """A snapshot of ``(key, record)`` in ``[start, end)``, taken when first advanced."""
        keys = self.sorted_keys()
        i = bisect_left(keys, start) if start is not None else 0
        j = bisect_left(keys, end) if end is not None else len(keys)
        data = self.data
        snapshot = [(k, data[k]) for k in keys[i:j]]
        return iter(snapshot)
