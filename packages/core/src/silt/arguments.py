"""The checks of what callers pass to :class:`silt.DB`'s methods.

Each check returns the argument in the form the engine uses, or raises before anything is
written: :class:`~silt.errors.InvalidTypeError` (also a ``TypeError``) for a value of the wrong
type, :class:`~silt.errors.InvalidArgumentError` for a value of the right type that breaks a
rule. Every message names the argument (``what``) and says what it takes. The checks of the hot
paths' plain cases (all bytes, within the limits) stay where those paths are
(:func:`silt.memtable.check_pairs`, :func:`silt.memtable.check_ops`); these run when one fails.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Set
from typing import Any

from .errors import InvalidArgumentError, InvalidTypeError

#: Accepted where bytes are, and copied to bytes.
BYTES_LIKE = (bytearray, memoryview)


def _got(value: object) -> str:
    return type(value).__name__


def check_key(key: Any, max_key: int, what: str = "keys") -> bytes:
    """``key`` as bytes (a bytearray or memoryview is copied), at most ``max_key`` bytes long."""
    if isinstance(key, BYTES_LIKE):
        key = bytes(key)
    elif not isinstance(key, bytes):
        hint = ": encode it first, e.g. key.encode()" if isinstance(key, str) else ""
        raise InvalidTypeError(f"{what} must be bytes, got {_got(key)}{hint}")
    if len(key) > max_key:
        raise InvalidArgumentError(
            f"key of {len(key)} bytes exceeds Settings.max_key_bytes={max_key}; "
            "use shorter keys (for example a hash of the long key) or raise the limit"
        )
    return key


def check_value(value: Any, max_value: int, what: str = "values") -> bytes:
    """``value`` as bytes (a bytearray or memoryview is copied), at most ``max_value`` bytes."""
    if isinstance(value, BYTES_LIKE):
        value = bytes(value)
    elif not isinstance(value, bytes):
        hint = ": encode it first, e.g. value.encode()" if isinstance(value, str) else ""
        if value is None:
            hint = ": use DB.delete(key) to remove a key"
        raise InvalidTypeError(f"{what} must be bytes, got {_got(value)}{hint}")
    if len(value) > max_value:
        raise InvalidArgumentError(
            f"value of {len(value)} bytes exceeds Settings.max_value_bytes="
            f"{max_value}; split it over several keys or raise the limit"
        )
    return value


def check_bounds(start: Any, end: Any, max_key: int) -> tuple[bytes | None, bytes | None]:
    """The bounds ``start`` and ``end`` of a range: each ``None`` (unbounded) or a key."""
    return (None if start is None else check_key(start, max_key, "start"),
            None if end is None else check_key(end, max_key, "end"))


def check_many(value: Any, what: str, of: str, *,
               by_position: bool = False) -> list[Any] | tuple[Any, ...]:
    """An argument of many items (``of`` says what they are, plural): any iterable but a single
    ``str`` or bytes-like and a mapping, as a list or tuple (other iterables are read into a
    list once). ``by_position`` (items matched by their place, as ``put_many``'s keys and
    values) also refuses a set, whose order means nothing."""
    if value.__class__ is list or value.__class__ is tuple:
        return value  # type: ignore[no-any-return]
    if isinstance(value, (str, bytes, *BYTES_LIKE)):
        raise InvalidTypeError(
            f"{what} must be a sequence of {of}, not a single {of[:-1]} (a {_got(value)}): wrap "
            "it in a list"
        )
    if isinstance(value, Mapping) or (by_position and isinstance(value, Set)):
        raise InvalidTypeError(
            f"{what} must be a sequence of {of} (a list or tuple), got {_got(value)}"
        )
    if not isinstance(value, Iterable):
        raise InvalidTypeError(f"{what} must be a sequence of {of}, got {_got(value)}")
    return list(value)


def check_ranges(ranges: Any, max_key: int, what: str = "ranges") -> list[tuple[bytes, bytes]]:
    """``(start, end)`` pairs of keys, each non-empty, sorted by start and not overlapping."""
    checked: list[tuple[bytes, bytes]] = []
    for pair in check_many(ranges, what, "(start, end) pairs"):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidTypeError(
                f"{what} must be (start, end) pairs of bytes, got a {_got(pair)}"
                + (f" of {len(pair)}" if isinstance(pair, tuple) else "")
            )
        start = check_key(pair[0], max_key, f"each start in {what}")
        end = check_key(pair[1], max_key, f"each end in {what}")
        if start >= end:
            raise InvalidArgumentError(
                f"range {start!r:.40}..{end!r:.40} in {what} is empty (start >= end)"
            )
        if checked and start < checked[-1][1]:
            raise InvalidArgumentError(
                f"{what} must be sorted by start and must not overlap: {start!r:.40} starts "
                f"before the previous range's end {checked[-1][1]!r:.40}"
            )
        checked.append((start, end))
    return checked


def check_instances(value: Any, cls: type, what: str) -> list[Any]:
    """One ``cls`` or a sequence of them (``since``: the DBs to compare with), as a list."""
    if isinstance(value, cls):
        return [value]
    items = check_many(value, what, f"{cls.__name__}s")
    for item in items:
        if not isinstance(item, cls):
            raise InvalidTypeError(
                f"{what} must be a silt.{cls.__name__} or a sequence of them, got a "
                f"{_got(item)}" + ("" if item is value else f" in a {_got(value)}")
            )
    return list(items)


def check_flag(value: Any, what: str) -> bool:
    """``True`` or ``False`` (not any truthy value: ``dry_run="no"`` would mean yes)."""
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{what} must be True or False, got {_got(value)}")
    return value


def check_timeout(timeout: Any, what: str = "timeout") -> float | None:
    """``None`` (wait as long as it takes) or a number of seconds ``>= 0``."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidTypeError(f"{what} must be a number of seconds or None, got {_got(timeout)}")
    if math.isnan(timeout) or timeout < 0:
        raise InvalidArgumentError(f"{what} must be a number of seconds >= 0, got {timeout!r}")
    return float(timeout)
