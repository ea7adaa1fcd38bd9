"""The argument checks every tier applies to what the engine (or a user) passes to its methods.

Each check raises :class:`~silt.errors.InvalidTypeError` for a value of the wrong type and
:class:`~silt.errors.InvalidArgumentError` for a value of the right type that breaks a rule,
before any request is sent. Keys are checked by :func:`silt.tierkit.validate_key`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from ..errors import InvalidArgumentError, InvalidTypeError

T = TypeVar("T")


def check_data(data: object) -> bytes:
    """Return ``data`` as ``bytes`` (copying a ``bytearray`` or ``memoryview``), else raise
    :class:`~silt.errors.InvalidTypeError` (``put``, ``put_if_absent``)."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise InvalidTypeError(
        f"object data must be bytes, got {type(data).__name__}; encode text first"
    )


def check_range(start: object, length: object) -> tuple[int, int]:
    """Validate the ``start``/``length`` of a ranged read: non-negative ``int`` values."""
    for name, value in (("start", start), ("length", length)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidTypeError(f"get_range {name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise InvalidArgumentError(f"get_range {name} must be >= 0, got {value}")
    return start, length  # type: ignore[return-value]


def check_list_args(prefix: object, start_after: object) -> tuple[str, str | None]:
    """Validate the arguments of ``list``: a ``str`` prefix and a ``str`` or ``None``
    ``start_after``. Any ``str`` is allowed (a prefix no key has lists nothing)."""
    if not isinstance(prefix, str):
        raise InvalidTypeError(f"list prefix must be a str, got {type(prefix).__name__}")
    if start_after is not None and not isinstance(start_after, str):
        raise InvalidTypeError(
            f"list start_after must be a str or None, got {type(start_after).__name__}"
        )
    return prefix, start_after


def check_keys(keys: object, locate: Callable[[str], T]) -> list[T]:
    """Validate the keys of ``delete_many`` and return ``locate(key)`` of each, duplicates
    dropped, in order: every key is checked before anything is deleted.

    ``keys`` must be an iterable of keys, not one key (a ``str`` would otherwise be taken for
    its characters). ``locate`` validates one key (:func:`silt.tierkit.validate_key`) and maps
    it to where it lives: a tier's full object name, a file's path.
    """
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise InvalidTypeError("delete_many takes an iterable of keys, not a single key")
    return list(dict.fromkeys(locate(key) for key in keys))


__all__ = ["check_data", "check_keys", "check_list_args", "check_range"]
