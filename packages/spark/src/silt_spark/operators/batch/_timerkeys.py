"""The batch processor's timer entries for many timers at once: built, read back from the
shard's timer index and listed per key with numpy and Arrow, with no Python call per timer.

The layout is the per-key processor's (``operators/_varkeys.py``, ``runtime/_keys.py``): a
key's timer at ``t`` ms is two entries (empty values), its own ``key_prefix 0x00 t'`` and the
shard-wide index entry ``kg:u16be 'T' t' enc(key)``, where ``t' = t + 2^63`` as u64be (so the
bytes sort like the times). Byte for byte what ``_varkeys._timer_bytes`` and ``_due_key`` build
one timer at a time, so either processor fires and deletes what the other registered.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...runtime import _rowcodec
from ...runtime._keys import (
    BODY_AT,
    TIME_BYTES,
    TIMER_MARK,
    TIMER_TAG,
    timed_due,
)
from ...runtime._rowcodec import Rows

_FLIP = np.uint64(1 << 63)
#: The byte after :data:`TIMER_MARK`: a key's own timer entries are ``[prefix 0x00, prefix
#: 0x01)``.
_MARK_END = bytes([TIMER_MARK[0] + 1])


def biased(times: np.ndarray) -> np.ndarray:
    """int64 ms as the u64 ``t + 2^63`` (the stored form, which sorts like the times)."""
    return np.ascontiguousarray(times, np.int64).view(np.uint64) ^ _FLIP


def unbiased(raw: np.ndarray) -> np.ndarray:
    """The int64 ms of stored u64 times (the inverse of :func:`biased`)."""
    return (np.ascontiguousarray(raw, np.uint64) ^ _FLIP).view(np.int64)


def own_entries(prefixes: Rows, times: np.ndarray) -> list[bytes]:
    """``key prefix 0x00 t'`` of each timer (``prefixes[i]``'s key at ``times[i]``)."""
    return _rowcodec.concat(len(prefixes), [
        prefixes, TIMER_MARK, _rowcodec.fixed(biased(times), ">u8")]).to_list()


def index_entries(kgs: np.ndarray, times: np.ndarray, encoded: Rows) -> list[bytes]:
    """``kg 'T' t' enc(key)`` of each timer (the key ``encoded[i]`` of key group ``kgs[i]``)."""
    return _rowcodec.concat(len(encoded), [
        _rowcodec.fixed(kgs, ">u2"), TIMER_TAG, _rowcodec.fixed(biased(times), ">u8"),
        encoded]).to_list()


class Due(NamedTuple):
    """Due timers in firing order (by time, key group, then ``enc(key)`` bytewise)."""

    #: Each timer's time (int64 ms).
    times: np.ndarray
    #: Each timer's key group (int64).
    kgs: np.ndarray
    #: Each timer's ``enc(key)``.
    encoded: Rows
    #: Each timer's index entry (``kg 'T' t' enc(key)``).
    index: list[bytes]


def due(db: Any, first_kg: int, last_kg: int, threshold: int) -> tuple[Due, int | None]:
    """The timers of key groups ``first_kg..last_kg`` due at ``threshold`` (time ``<=`` it),
    and the smallest time after it (``None``: no timer left): the same timers in the same order
    as ``operators._timemode.due_timers``, read as ``runtime._keys.timed_due`` reads them (one
    ``multi_scan`` of every key group's due timers); the entries are taken apart with numpy."""
    end = BODY_AT + TIME_BYTES
    due_items, nxt = timed_due(db, first_kg, last_kg, TIMER_TAG, threshold)
    rows = Rows.from_list([k for k, _ in due_items])
    times = unbiased(_rowcodec.field_at(rows, BODY_AT, ">u8"))
    # scan order is (key group, time, key): a stable sort by time gives (time, key group, key)
    order = np.argsort(times, kind="stable")
    rows = rows.take(order)
    return Due(times[order], _rowcodec.field_at(rows, 0, ">u2").astype(np.int64),
               _rowcodec.slices(rows, end, 0), rows.to_list()), nxt


def listed(db: Any, prefixes: Rows) -> tuple[np.ndarray, np.ndarray]:
    """The timers of the keys with ``prefixes`` (distinct, sorted bytewise), as read now
    (this batch's writes included): the index in ``prefixes`` of each timer's key and its time,
    by key then time. One ``multi_scan`` of each key's own timer entries."""
    import pyarrow.compute as pc

    n = len(prefixes)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = _rowcodec.concat(n, [prefixes, TIMER_MARK]).to_list()
    ends = _rowcodec.concat(n, [prefixes, _MARK_END]).to_list()
    got = db.multi_scan(list(zip(starts, ends)))
    rows = Rows.from_list([k for k, _ in got])
    times = unbiased(_rowcodec.u64_at_end(rows, TIME_BYTES))
    owner = pc.index_in(_rowcodec.slices(rows, 0, 1 + TIME_BYTES).to_arrow(),
                        value_set=prefixes.to_arrow())
    return owner.to_numpy(zero_copy_only=False).astype(np.int64), times
