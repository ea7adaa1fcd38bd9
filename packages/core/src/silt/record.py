"""How one entry's state is represented in memory, everywhere in the engine.

A *record* is one of:

* ``bytes``: a live value (a put);
* ``None``: a tombstone (a delete) that shadows older values;
* ``(value, expire_at_ms)``: a value that is live while ``now_ms < expire_at_ms`` and acts as a
  tombstone afterwards.

Plain tuples and ``None`` keep memtables and decoded blocks small and fast in pure Python.
:data:`MISSING` marks "this source has no record for the key" (distinct from a tombstone).
"""

from __future__ import annotations

from typing import Final

Record = bytes | None | tuple[bytes, int]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def visible(record: object, now_ms: int) -> bytes | None:
    """The value a reader sees for ``record`` at ``now_ms``: bytes, or ``None`` when absent."""
    if record.__class__ is bytes:
        return record  # type: ignore[return-value]
    if record is None or record is MISSING:
        return None
    value, expire_at = record  # type: ignore[misc]
    return value if now_ms < expire_at else None


#: The bytes ``Memtable.approx_bytes`` counts for one entry beyond its key and value: an
#: estimate of the entry's share of the memtable (not a format constant; the memory budget adds
#: the interpreter's real overhead, ``silt.budget.MEMTABLE_ENTRY_OVERHEAD``). Every count of
#: an entry's size uses it, the compiled twins too.
ENTRY_OVERHEAD = 16
#: What an entry with a TTL counts more: its expiry time (a u64).
EXPIRY_BYTES = 8


def record_size(key: bytes, record: object) -> int:
    """Approximate memory charge of one memtable entry: key, value and
    :data:`ENTRY_OVERHEAD` (and :data:`EXPIRY_BYTES` with a TTL)."""
    if record.__class__ is bytes:
        return len(key) + len(record) + ENTRY_OVERHEAD  # type: ignore[arg-type]
    if record is None:
        return len(key) + ENTRY_OVERHEAD
    return len(key) + len(record[0]) + ENTRY_OVERHEAD + EXPIRY_BYTES  # type: ignore[index]
