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
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any

from .errors import InvalidArgumentError, InvalidTypeError
from .memtable import check_keys_plain, check_pairs
from .sst.format import MAX_EXPIRY_MS
from .writebatch import DELETE_RANGE

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


def check_span(start: Any, end: Any, max_key: int) -> tuple[bytes | None, bytes | None]:
    """:func:`check_bounds` of a range that must not be empty (``start < end``)."""
    start, end = check_bounds(start, end, max_key)
    if start is not None and end is not None and start >= end:
        raise InvalidArgumentError(f"empty range: start {start!r} >= end {end!r}")
    return start, end


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


def check_instance(value: Any, cls: type, what: str, kind: str) -> Any:
    """``value`` if it is a ``cls`` (``kind`` says what one is, as "a silt.WriteBatch")."""
    if not isinstance(value, cls):
        raise InvalidTypeError(f"{what} must be {kind}, got {_got(value)}")
    return value


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


def check_range(start: Any, end: Any, max_key: int,
                what: str = "delete_range") -> tuple[bytes, bytes]:
    """The keys ``start <= end`` of a range ``[start, end)`` (``start == end`` is empty)."""
    start, end = check_key(start, max_key, "start"), check_key(end, max_key, "end")
    if start > end:
        raise InvalidArgumentError(
            f"{what} start {start!r:.80} is after end {end!r:.80}: the range is "
            "[start, end), start included and end excluded; swap them"
        )
    return start, end


def check_keys(keys: Any, max_key: int, what: str) -> list[bytes]:
    """Many keys as a list of bytes; the per-key check (which also converts bytes-like) runs
    only when some key is not plain bytes within ``max_key`` (:func:`silt.memtable.
    check_keys_plain`: one compiled loop over the plain case, C loops in the pure twin)."""
    keys = list(check_many(keys, what, "keys"))
    if check_keys_plain(keys, max_key) >= 0:
        keys = [
            k if k.__class__ is bytes and len(k) <= max_key else check_key(k, max_key, "keys")
            for k in keys
        ]
    return keys


def check_scan(start: Any, end: Any, prefix: Any,
               max_key: int) -> tuple[bytes | None, bytes | None] | None:
    """The bounds of a scan of ``[start, end)`` narrowed to the keys starting with ``prefix``,
    or ``None`` when no key can be in them."""
    start, end = check_bounds(start, end, max_key)
    if prefix is not None:
        prefix = check_key(prefix, max_key, "prefix")
        if start is None or start < prefix:
            start = prefix
        upper = prefix_end(prefix)
        if upper is not None and (end is None or end > upper):
            end = upper
    if start is not None and end is not None and start >= end:
        return None
    return start, end


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def expiry(ttl: Any, now_ms: int) -> int:
    """The expiry time (ms) of an entry written at ``now_ms`` with ``ttl`` seconds to live;
    refuses a ttl that is not a positive finite number or whose expiry does not fit the u64 the
    SST format stores it in (``MAX_EXPIRY_MS``)."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidTypeError(f"ttl must be a number of seconds, got {_got(ttl)}")
    max_ttl = (MAX_EXPIRY_MS - now_ms) // 1000
    if 0 < ttl <= max_ttl:  # false for nan and inf
        expires = now_ms + max(1, int(ttl * 1000))
        if expires <= MAX_EXPIRY_MS:  # a float ttl near the limit may round up
            return expires
    raise InvalidArgumentError(
        f"ttl must be a positive, finite number of seconds, at most {max_ttl} (expiry times "
        f"are stored as u64 milliseconds), got {ttl!r}; omit ttl for entries that never expire"
    )


def check_batch(ops: Iterable[tuple[Any, Any, Any]], max_key: int, max_value: int,
                now: Callable[[], int]) -> list[tuple[Any, ...]]:
    """A :class:`~silt.writebatch.WriteBatch`'s operations, each checked: ``(key, None)`` for a
    delete, ``(key, value)`` or ``(key, (value, expiry_ms))`` for a put, ``(start, end,
    DELETE_RANGE)`` for a range delete. ``now`` gives the time ttls count from."""
    checked: list[tuple[Any, ...]] = []
    for key, value, ttl in ops:
        if value is DELETE_RANGE:
            checked.append((*check_range(key, ttl, max_key), DELETE_RANGE))
            continue
        key = check_key(key, max_key)
        if value is None:
            checked.append((key, None))
        else:
            value = check_value(value, max_value)
            checked.append((key, value if ttl is None else (value, expiry(ttl, now()))))
    return checked


def check_put_many(keys: Any, values: Any, max_key: int,
                   max_value: int) -> tuple[Sequence[bytes], Sequence[bytes]]:
    """``put_many``'s keys and values: as many of each, every one bytes within its limit (the
    per-item checks run only when the compiled check of the plain case fails)."""
    keys = check_many(keys, "put_many keys", "keys", by_position=True)
    values = check_many(values, "put_many values", "values", by_position=True)
    if len(keys) != len(values):
        raise InvalidArgumentError(
            f"put_many got {len(keys)} keys but {len(values)} values; pass one value per key"
        )
    if check_pairs(keys, values, max_key, max_value) >= 0:
        keys = [check_key(k, max_key, "put_many keys") for k in keys]
        values = [check_value(v, max_value, "put_many values") for v in values]
    return keys, values
