"""The state-key layout inside a shard's LSM: every tag byte and offset, defined once.

Every key of every operator starts with the same two fields::

    kg:u16be tag:u8 body...

The key group first, so a rescale can clip SSTs by key-group range (``_layout.py``); then one
tag byte naming what the entry is, so one shard's entries of different kinds never mix and a
range scan of one kind per key group is a prefix scan. Operators own their bodies (their
modules' docstrings show them) but build and take them apart only through the helpers here:

==========  =============  ===================================================================
tag         operator       body
==========  =============  ===================================================================
``A``       aggregate      ``enc(grouping key)``
``W``       window         ``start:u64be(+2^63) enc(grouping key)``
``D``       dedup          ``enc(grouping key)``
``E``       dedup          ``expires_at:u64be(+2^63) enc(grouping key)`` (event-time index)
``S``       processor      ``len:u32be enc(grouping key) ...`` (its state and own timers)
``T``       processor      ``expiry:u64be(+2^63) enc(grouping key)`` (timer index)
``J``       join           ``side:u8 bucket:u64be(+2^63) ...`` (each side's buffer, by time
                           bucket; ``operators/join`` draws it)
==========  =============  ===================================================================

A new operator takes a tag byte no other operator uses, and adds it here. These bytes are the
on-disk format (docs/format.md): never change one.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable
from typing import Any

from silt.arguments import prefix_end  # noqa: F401  (the operators' name for it)

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

#: Bytes of the key-group prefix (u16be).
KG_BYTES = 2
#: Offset of the tag byte.
TAG_AT = KG_BYTES
#: Offset of the body (after the tag).
BODY_AT = TAG_AT + 1
#: Bytes of a biased time (``ms`` or ``us + 2^63`` as u64be, so it sorts like the number).
TIME_BYTES = 8
#: Bytes of a grouping key's length prefix (u32be) in a processor key.
LEN_BYTES = 4
#: Added to a signed time so its u64be bytes sort like the numbers.
BIAS = 1 << 63

AGG_TAG = b"A"
WINDOW_TAG = b"W"
DEDUP_TAG = b"D"
EXPIRY_TAG = b"E"
STATE_TAG = b"S"
TIMER_TAG = b"T"
JOIN_TAG = b"J"
#: A processor key's own timer entries: ``key_prefix + 0x00 + expiry:u64`` (state names are
#: never empty, so their length byte is never 0).
TIMER_MARK = b"\x00"
#: A processor list element's key: ``key_prefix + name + LIST_ELEMENT + seq:u64be`` (a map key
#: is a silt_spark.runtime._codec encoding, whose tags are below 0x80, so it never starts with
#: this byte).
LIST_ELEMENT = b"\xff"

TAGS = (AGG_TAG, WINDOW_TAG, DEDUP_TAG, EXPIRY_TAG, STATE_TAG, TIMER_TAG, JOIN_TAG)


def read_ranges(db: Any, ranges: Iterable[tuple[bytes, bytes]]
                ) -> dict[tuple[bytes, bytes], list[tuple[bytes, bytes]]]:
    """Each of ``ranges`` (disjoint ``[start, end)`` pairs, in any order) -> its live ``(key,
    value)`` items in key order, all read with **one** ``DB.multi_scan`` (the blocks of every
    SST found first, then read at once: one wave of ranged GETs on an object store, kept in the
    block cache), never a scan per range."""
    order = sorted(set(ranges))
    out: dict[tuple[bytes, bytes], list[tuple[bytes, bytes]]] = {r: [] for r in order}
    if not order:
        return out
    starts = [a for a, _ in order]
    for kv in db.multi_scan(order):
        out[order[bisect_right(starts, kv[0]) - 1]].append(kv)
    return out


def head(kg: int, tag: bytes) -> bytes:
    """``kg:u16be tag``: the prefix of every key of one tag in one key group."""
    return _U16.pack(kg) + tag


def tag_range(kg: int, tag: bytes) -> tuple[bytes, bytes]:
    """``[start, end)`` scan bounds of the keys of one tag in one key group."""
    return head(kg, tag), head(kg, bytes([tag[0] + 1]))


def split_state_name(rest: bytes) -> tuple[str, bytes]:
    """``(state name, what follows it)`` of what follows a processor key's prefix in a state
    entry: the name is ``len:u8 utf-8`` (never empty), then a map key, a list element's
    ``LIST_ELEMENT seq`` or nothing."""
    n = rest[0]
    return rest[1:1 + n].decode("utf-8"), rest[1 + n:]


def tag_of(key: bytes) -> bytes:
    """The tag byte of a state key (as a 1-byte ``bytes``)."""
    return key[TAG_AT:BODY_AT]


def body(key: bytes) -> bytes:
    """Everything after the tag."""
    return key[BODY_AT:]


def time_bytes(value: int) -> bytes:
    """A signed time as 8 bytes that sort like the numbers."""
    return _U64.pack(value + BIAS)


def time_value(raw: bytes, at: int = 0) -> int:
    """The signed time of :func:`time_bytes` at offset ``at`` of ``raw``."""
    return _U64.unpack_from(raw, at)[0] - BIAS


def timed_key(kg: int, tag: bytes, time: int, tail: bytes) -> bytes:
    """``kg tag time:u64be(+2^63) tail``: a window's state key, a timer or expiry index entry."""
    return _U16.pack(kg) + tag + _U64.pack(time + BIAS) + tail


def key_time(key: bytes) -> int:
    """The time of a :func:`timed_key`."""
    return _U64.unpack_from(key, BODY_AT)[0] - BIAS


def after_time(key: bytes) -> bytes:
    """What follows the time of a :func:`timed_key` (the encoded grouping key)."""
    return key[BODY_AT + TIME_BYTES:]


def timed_due(db: Any, first_kg: int, last_kg: int, tag: bytes,
              limit: int) -> tuple[list[tuple[bytes, bytes]], int | None]:
    """The :func:`timed_key` entries under ``tag`` of key groups ``first_kg..last_kg`` with time
    ``<= limit`` (a time index, or windows by start), as ``(key, value)`` in key order (by key
    group, then time), and the smallest time after ``limit`` (``None``: no entry left).

    Read per batch, never per key group: the due entries of every key group with **one**
    ``DB.multi_scan`` (one planned wave of block reads on an object store, kept in the block
    cache), then, per key group, a scan from just past ``limit`` that stops at its first entry:
    its blocks are almost always the ones just read (a block holding the last due entry holds
    the next one, or the one after it), so on an object store it waits on the store only for an
    SST that held no due entry of the key group. A scan per key group took a round trip per SST
    each, every batch (scans keep nothing in the cache): 80 round trips for 16 key groups of 5
    SSTs."""
    if limit >= (1 << 63) - 1:  # everything is due, nothing is after
        whole = [tag_range(kg, tag) for kg in range(first_kg, last_kg + 1)]
        return db.multi_scan(whole), None
    past = time_bytes(limit + 1)
    due = db.multi_scan([(head(kg, tag), head(kg, tag) + past)
                         for kg in range(first_kg, last_kg + 1)])
    nxt: int | None = None
    scan = db.scan
    for kg in range(first_kg, last_kg + 1):
        for k, _ in scan(head(kg, tag) + past, tag_range(kg, tag)[1]):
            time = key_time(k)
            if nxt is None or time < nxt:
                nxt = time
            break
    return due, nxt


def due_entries(db: Any, first_kg: int, last_kg: int, tag: bytes,
                limit: int) -> tuple[list[tuple[int, int, bytes]], int | None]:
    """Read a time index (:func:`timed_key` entries under ``tag``) of key groups
    ``first_kg..last_kg``: ``(time, kg, index key)`` of every entry with ``time <= limit``, in
    scan order (by key group, then time), and the smallest time after ``limit`` (``None``: no
    entry left), read as :func:`timed_due` reads them."""
    due, nxt = timed_due(db, first_kg, last_kg, tag, limit)
    return [(key_time(k), _U16.unpack_from(k)[0], k) for k, _ in due], nxt


def length_prefixed(kg: int, tag: bytes, encoded_key: bytes) -> bytes:
    """``kg tag len(encoded_key):u32be encoded_key``: the prefix of a processor key's state."""
    return _U16.pack(kg) + tag + _U32.pack(len(encoded_key)) + encoded_key


def split_length_prefixed(key: bytes) -> tuple[bytes, bytes]:
    """``(encoded_key, rest)`` of a key starting with a :func:`length_prefixed` prefix."""
    n = _U32.unpack_from(key, BODY_AT)[0]
    start = BODY_AT + LEN_BYTES
    return key[start:start + n], key[start + n:]
