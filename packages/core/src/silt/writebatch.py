"""WriteBatch: several puts, deletes and range deletes applied by :meth:`silt.DB.write` as one unit.

A batch is applied entirely before any later commit sees it, and validated entirely before any
of it is applied (a bad key anywhere rejects the whole batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import repeat

from .errors import InvalidTypeError

#: The value slot of a range delete's op (never a real value: values are bytes).
DELETE_RANGE: object = type("DeleteRange", (), {"__repr__": lambda self: "DELETE_RANGE"})()


class WriteBatch:
    """An ordered list of operations. Later operations on the same key win."""

    __slots__ = ("ops",)

    def __init__(self) -> None:
        #: ``(key, value_or_None, ttl_seconds_or_None)``; a ``None`` value is a delete;
        #: ``(start, DELETE_RANGE, end)`` a range delete.
        self.ops: list[tuple[bytes, bytes | None, float | None]] = []

    def put(self, key: bytes, value: bytes, *, ttl: float | None = None) -> WriteBatch:
        """Add a put (checked when the batch is written). Returns the batch for chaining.

        A ``None`` value is refused at once: in ``ops`` it would mean a delete.
        """
        if value is None:
            raise InvalidTypeError(
                "values must be bytes, got NoneType: use WriteBatch.delete(key) to remove a key"
            )
        self.ops.append((key, value, ttl))
        return self

    def delete(self, key: bytes) -> WriteBatch:
        """Add a delete. Returns the batch for chaining."""
        self.ops.append((key, None, None))
        return self

    def delete_many(self, keys: Iterable[bytes]) -> WriteBatch:
        """Add a delete of each of ``keys``, in order, without a Python call per key (checked
        when the batch is written, as :meth:`delete`). Returns the batch for chaining."""
        self.ops.extend(zip(keys, repeat(None), repeat(None)))
        return self

    def delete_range(self, start: bytes, end: bytes) -> WriteBatch:
        """Add a delete of every key in ``[start, end)`` (see :meth:`silt.DB.delete_range`).
        Returns the batch for chaining."""
        self.ops.append((start, DELETE_RANGE, end))  # type: ignore[arg-type]
        return self

    def clear(self) -> None:
        self.ops.clear()

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[tuple[bytes, bytes | None, float | None]]:
        return iter(self.ops)
