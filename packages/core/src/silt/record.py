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


def record_size(key: bytes, record: object) -> int:
    """Approximate memory charge of one memtable entry (key, value and 16 bytes overhead)."""
    if record.__class__ is bytes:
        return len(key) + len(record) + 16  # type: ignore[arg-type]
    if record is None:
        return len(key) + 16
    return len(key) + len(record[0]) + 24  # type: ignore[index]
