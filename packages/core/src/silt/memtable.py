"""The memtable: recent writes in a dict, ordered on demand.

A dict gives O(1) puts and gets from Python; order is only needed at flush and for scans, so the
sorted key list is computed lazily and cached until the next write (a deliberate simplification
over a skiplist: scans that interleave with writes re-sort).

Not thread-safe for concurrent writers; one writer plus concurrent readers is fine (dict
operations are atomic under the GIL and a frozen memtable never changes).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from ._ext import accelerate
from .record import ENTRY_OVERHEAD, MISSING, record_size


class Memtable:
    """Recent writes: ``key -> record`` (see :mod:`silt.record`) plus an approximate byte size.

    Keys are never removed (a delete is a tombstone record), so the cached sorted key list is
    valid exactly while it has as many keys as ``data``: a writer may add to ``data`` directly
    (the DB's ``put`` fast path does) as long as it adds the entry's size to ``approx_bytes``.
    """

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

    def put_value(self, key: bytes, value: bytes) -> None:
        """Put a plain value (no TTL): the write path's most frequent case."""
        self.data[key] = value
        self.approx_bytes += len(key) + len(value) + ENTRY_OVERHEAD
        self._sorted = None

    def put_pairs(self, keys: Sequence[bytes], values: Sequence[bytes], start: int,
                  limit: int) -> int:
        """Put ``keys[i] -> values[i]`` from ``i = start`` until this memtable reaches ``limit``
        bytes (compiled: no Python call per pair). Returns the next index."""
        i, self.approx_bytes = insert_pairs(self.data, keys, values, start, self.approx_bytes,
                                            limit)
        self._sorted = None
        return i

    def apply(self, ops: list[tuple[bytes, bytes | None, None]]) -> None:
        """Apply a write batch's ops that passed :func:`check_ops` (plain puts and deletes)."""
        self.approx_bytes += apply_ops(self.data, ops)
        self._sorted = None

    def get(self, key: bytes) -> object:
        return self.data.get(key, MISSING)

    def delete_range(self, start: bytes, end: bytes) -> int:
        """Turn every record of a key in ``[start, end)`` into a point tombstone (the part of a
        range delete that falls on this memtable, :mod:`silt.rangedel`); returns how many.

        Keys stay (readers may be iterating the sorted key list), so the cached order stays valid.
        """
        keys = self.sorted_keys()
        data = self.data
        n = 0
        for key in keys[bisect_left(keys, start):bisect_left(keys, end)]:
            old = data[key]
            if old is not None:
                data[key] = None
                self.approx_bytes -= record_size(key, old) - record_size(key, None)
                n += 1
        return n

    def sorted_keys(self) -> list[bytes]:
        """All keys in order (cached until the next write)."""
        keys = self._sorted
        if keys is None or len(keys) != len(self.data):
            keys = sorted(self.data)
            self._sorted = keys
        return keys

    def sorted_items(self) -> tuple[list[bytes], list[object]]:
        """All keys in order and their records (what a flush writes)."""
        if self._sorted is not None and len(self._sorted) == len(self.data):
            keys = self._sorted
            return keys, list(map(self.data.__getitem__, keys))
        keys, records = sorted_items(self.data)
        self._sorted = keys
        return keys, records

    def iter_range(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, object]]:
        """A snapshot of ``(key, record)`` in ``[start, end)``, taken when first advanced."""
        keys = self.sorted_keys()
        i = bisect_left(keys, start) if start is not None else 0
        j = bisect_left(keys, end) if end is not None else len(keys)
        data = self.data
        snapshot = [(k, data[k]) for k in keys[i:j]]
        return iter(snapshot)


def sorted_items(data: dict[bytes, object]) -> tuple[list[bytes], list[object]]:
    """``(keys, records)`` of ``data`` in key order."""
    keys = sorted(data)
    return keys, list(map(data.__getitem__, keys))


# --- batch writes (DB.put_many, DB.write): no Python call per item when compiled ---------------
def check_pairs(keys, values, max_key: int, max_value: int) -> int:  # type: ignore[no-untyped-def]
    """Index of the first pair that is not (bytes within the limits), or -1 when all are.

    0 when ``keys`` and ``values`` differ in length.
    """
    if len(keys) != len(values):
        return 0
    for i, (k, v) in enumerate(zip(keys, values)):
        if (k.__class__ is not bytes or len(k) > max_key
                or v.__class__ is not bytes or len(v) > max_value):
            return i
    return -1


def check_keys_plain(keys, max_key: int) -> int:  # type: ignore[no-untyped-def]
    """Index of the first key that is not bytes within ``max_key``, or -1 when all are
    (``DB.multi_get``'s plain case; C loops over it here too, the index found only when one
    fails)."""
    if not keys or (set(map(type, keys)) == _BYTES_ONLY and max(map(len, keys)) <= max_key):
        return -1
    for i, k in enumerate(keys):
        if k.__class__ is not bytes or len(k) > max_key:
            return i
    return -1  # pragma: no cover - the C loops above found one


_BYTES_ONLY = {bytes}


def insert_pairs(  # type: ignore[no-untyped-def]
    data: dict[bytes, object], keys, values, start: int, approx: int, limit: int
) -> tuple[int, int]:
    """Put ``keys[i] -> values[i]`` for ``i >= start`` into ``data`` until the memtable size
    ``approx`` reaches ``limit``. Returns ``(next_index, approx)``."""
    n = len(keys)
    i = start
    while i < n:
        k = keys[i]
        v = values[i]
        data[k] = v
        approx += len(k) + len(v) + ENTRY_OVERHEAD
        i += 1
        if approx >= limit:
            break
    return i, approx


def check_ops(ops: list[tuple[bytes, bytes | None, float | None]], max_key: int,
              max_value: int) -> bool:
    """True when every op is ``(bytes key, bytes value or None, None)`` within the limits."""
    for op in ops:
        if op.__class__ is not tuple or len(op) != 3:
            return False
        k, v, ttl = op
        if ttl is not None or k.__class__ is not bytes or len(k) > max_key:
            return False
        if v is not None and (v.__class__ is not bytes or len(v) > max_value):
            return False
    return True


def split_found(keys: list[bytes], data: dict[bytes, object],
                found: dict[bytes, object]) -> list[bytes]:
    """Move the keys that ``data`` has into ``found`` (with their records); return the others."""
    if not data:
        return list(keys)
    rest = []
    for key in keys:
        r = data.get(key, MISSING)
        if r is MISSING:
            rest.append(key)
        else:
            found[key] = r
    return rest


def apply_ops(data: dict[bytes, object], ops: list[tuple[bytes, bytes | None, None]]) -> int:
    """Apply ops that passed :func:`check_ops`; return the memtable bytes they add."""
    added = 0
    for k, v, _ in ops:
        data[k] = v
        added += len(k) + ENTRY_OVERHEAD if v is None else len(k) + len(v) + ENTRY_OVERHEAD
    return added


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), (
    "check_pairs",
    "check_keys_plain",
    "insert_pairs",
    "check_ops",
    "apply_ops",
    "split_found",
    "sorted_items",
))
