"""The key layout of named state variables and timers, shared by ``transform_with_state`` and
``transform_batches`` (one state layout, operator kind ``processor``: either reads what the
other wrote).

Inside a shard's LSM (every key starts with its key group, so a rescale can clip SSTs by
key-group range)::

    kg:u16be 'S' len(enc(grouping key)):u32be enc(grouping key) len(name):u8 name [enc(map key)]

a list element appends ``0xFF seq:u64be``; a key's own timers are ``key_prefix 0x00 expiry``,
and the shard-wide timer index is ``kg 'T' expiry enc(key)``. Built from ``runtime/_keys.py``.
A variable's TTL is the LSM's own expiry of each of its entries (:func:`ttl_seconds`).
"""

from __future__ import annotations

import struct as _struct

from silt.errors import InvalidArgumentError, InvalidTypeError

from ..runtime import _keys

STATE_TAG = _keys.STATE_TAG


#: Shard-wide timer index: ``kg:u16 'T' expiry:u64 enc(grouping key)`` (value empty).
TIMER_TAG = _keys.TIMER_TAG


#: A key's own timer entries: ``key_prefix + 0x00 + expiry:u64`` (state names are never empty,
#: so their length byte is never 0).
TIMER_MARK = _keys.TIMER_MARK


#: A list element's key: ``key_prefix + name + LIST_ELEMENT + seq:u64be``.
LIST_ELEMENT = _keys.LIST_ELEMENT


_SEQ = _struct.Struct(">Q")


def list_seq(key: bytes, at: int) -> int:
    """The sequence number of a list element's key whose list key is ``at`` bytes long."""
    return _SEQ.unpack_from(key, at + 1)[0]


#: The longest TTL (ms) a state variable may have: Spark timestamps are 64-bit microseconds.
MAX_TTL_MS = (2**63 - 1) // 1000


def ttl_seconds(ttl_ms: int | float | None) -> float | None:
    """A state variable's ``ttlDurationMs`` as the LSM expiry its entries are written with
    (seconds; ``None``: no TTL), or :class:`InvalidTypeError` / :class:`InvalidArgumentError`
    for anything but a positive number of ms up to :data:`MAX_TTL_MS`. Both processors write
    every entry of a variable with it, so their TTLs are one encoding."""
    if ttl_ms is None:
        return None
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, (int, float)):
        raise InvalidTypeError(f"ttlDurationMs must be a number of ms, got {ttl_ms!r:.80}")
    if not 0 < ttl_ms <= MAX_TTL_MS:  # false for nan
        raise InvalidArgumentError(
            f"ttlDurationMs must be a positive number of ms, at most {MAX_TTL_MS}, got "
            f"{ttl_ms!r}"
        )
    return ttl_ms / 1000.0


def _name_bytes(name: str) -> bytes:
    if not isinstance(name, str) or not name:
        raise (InvalidArgumentError if isinstance(name, str) else InvalidTypeError)(
            f"a state name must be a non-empty str, got {name!r:.80}")
    b = name.encode("utf-8")
    if len(b) > 255:
        raise InvalidArgumentError(f"a state name must be at most 255 bytes, got {len(b)}")
    return bytes([len(b)]) + b


#: ``(state name, encoded map key, list element mark or b"")`` of what follows a key's prefix
#: in a state entry (the inverse of :func:`_name_bytes` + map key).
_split_name = _keys.split_state_name


def key_prefix(kg: int, encoded_key: bytes) -> bytes:
    """The LSM key prefix of all state of one grouping key."""
    return _keys.length_prefixed(kg, STATE_TAG, encoded_key)


def _timer_bytes(ms: int) -> bytes:
    """A signed ms timestamp as 8 bytes that sort like the numbers."""
    return _keys.time_bytes(ms)


def _timer_value(raw: bytes) -> int:
    return _keys.time_value(raw)


def _due_key(kg: int, expiry: int, encoded_key: bytes) -> bytes:
    """The shard-wide timer index entry: timers of a key group sorted by expiry."""
    return _keys.timed_key(kg, TIMER_TAG, expiry, encoded_key)
