"""The join's state layout and plan: where each side's buffered rows, its per-bucket counts and
its time index live in a shard's LSM, how a row's key is built (one at a time or a whole batch
at once), and the :class:`JoinPlan` the builder makes and every task uses.

Keys (tag ``J``; every key starts with its key group, so a rescale can clip SSTs by key-group
range)::

    row:    kg:u16be 'J' side:u8 bucket:u64be(+2^63) enc(join key) time_us:u64be(+2^63) seq:u64be
            -> matched:u8 enc(row tuple)
    count:  kg:u16be 'J' (2 + side):u8 bucket:u64be(+2^63) -> rows:u64be
    index:  kg:u16be 'J' (4 + side):u8 time_us:u64be(+2^63) seq:u64be -> matched:u8 enc(join key)

See ``_probe.py``'s docstring for how a micro-batch uses them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...runtime import _keys, _rowcodec
from ...runtime._rowcodec import Rows

U64 = struct.Struct(">Q")

#: The operator kind, as recorded in the state root's descriptor.
KIND = "join"


LEFT, RIGHT = 0, 1
JOIN_TAG = _keys.JOIN_TAG


SIDES = ("left", "right")


#: Side byte of a buffered row, and of a bucket's row count.
_ROWS = (b"\x00", b"\x01")


_COUNTS = (b"\x02", b"\x03")


#: Side byte of an outer side's time index entry.
_INDEX = (b"\x04", b"\x05")


#: Time of a row without event time (no time range: never expires, bucket 0).
NO_TIME = -(1 << 62)


MIN_BUCKET_US = 1_000_000


#: A prefix scan per probed join key costs about as much as reading this many rows of a
#: whole-bucket scan (measured: a scan's setup and seek through the LSM's levels against
#: reading and keeping one more row). A batch reads a (key group, bucket) whole when it holds
#: at most this many rows per join key probed there, else one prefix scan per key: the
#: batch's cost then follows its own rows, not the buffer's.
SCAN_ROWS_PER_SEEK = 32


HOWS = {
    "inner": "inner",
    "left": "left", "leftouter": "left", "left_outer": "left",
    "right": "right", "rightouter": "right", "right_outer": "right",
    "full": "full", "outer": "full", "fullouter": "full", "full_outer": "full",
    "left_semi": "left_semi", "leftsemi": "left_semi", "semi": "left_semi",
}


META_MIN_BUCKET = ("spark.join_min_bucket_left", "spark.join_min_bucket_right")


META_BUFFERED = ("spark.join_buffered_left", "spark.join_buffered_right")


META_EVICTED = ("spark.join_evicted_left", "spark.join_evicted_right")


#: The descriptor field of roots whose outer sides keep a time index (roots created before it
#: evict an outer side's boundary bucket by scanning it, as they always did).
TIME_INDEX = "join_time_index"


SIDE_COLUMN = "__side"


_COUNT_END = (b"\x03", b"\x04")


# --- the state layout ------------------------------------------------------------------------
def rows_head(kg: int, side: int) -> bytes:
    """``kg 'J' side``: the prefix of one side's buffered rows in one key group."""
    return _keys.head(kg, JOIN_TAG) + _ROWS[side]


def bucket_prefix(kg: int, side: int, bucket: int) -> bytes:
    """The prefix of one bucket's rows."""
    return rows_head(kg, side) + _keys.time_bytes(bucket)


def row_key(kg: int, side: int, bucket: int, enc_key: bytes, time_us: int, seq: int) -> bytes:
    return (bucket_prefix(kg, side, bucket) + enc_key + _keys.time_bytes(time_us)
            + U64.pack(seq))


def split_row_key(key: bytes) -> tuple[int, int, bytes, int, int]:
    """``(side, bucket, enc(join key), time_us, seq)`` of a row key."""
    at = _keys.BODY_AT
    return (key[at], _keys.time_value(key, at + 1), key[at + 9:-16],
            _keys.time_value(key, len(key) - 16), U64.unpack_from(key, len(key) - 8)[0])


def index_head(kg: int, side: int) -> bytes:
    """``kg 'J' (4 + side)``: the prefix of one side's time index in one key group."""
    return _keys.head(kg, JOIN_TAG) + _INDEX[side]


def index_key_of(row: bytes) -> bytes:
    """The time index key of the buffered row whose key is ``row``: ``kg 'J' (4 + side)
    time_us seq`` (a row key ends with ``time_us seq``)."""
    return row[:_keys.BODY_AT] + _INDEX[row[_keys.BODY_AT]] + row[-16:]


def count_key(kg: int, side: int, bucket: int) -> bytes:
    return _keys.head(kg, JOIN_TAG) + _COUNTS[side] + _keys.time_bytes(bucket)


def counts_range(kg: int, side: int) -> tuple[bytes, bytes]:
    h = _keys.head(kg, JOIN_TAG)
    return h + _COUNTS[side], h + _COUNT_END[side]


#: The smallest key after every key starting with a prefix.
prefix_end = _keys.prefix_end


def bucket_of(time_us: int, bucket_us: int | None) -> int:
    return 0 if bucket_us is None else time_us // bucket_us


def full_buckets_below(evict_us: int, bucket_us: int) -> int:
    """Buckets ``< this`` hold only times ``<= evict_us`` (they expire whole)."""
    return (evict_us + 1) // bucket_us


# --- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class JoinPlan:
    """Derived on the driver from the inputs' schemas; shipped to the tasks (plain data)."""

    how: str
    nkeys: int
    #: Each side's columns (as ``__l<i>`` / ``__r<i>`` in the tagged rows).
    columns: tuple[tuple[str, ...], tuple[str, ...]]
    #: Each side's event-time column index in its columns (``None``: no event time).
    time_index: tuple[int | None, int | None]
    #: ``(a, b)`` in us: left time between right time - a and right time + b; ``None``: none.
    time_range: tuple[int, int] | None
    bucket_us: int | None
    #: Output columns: ``("L", i)``, ``("R", i)`` or ``("C", i, j)`` (coalesce of both).
    output: tuple[tuple, ...]
    side_schemas: tuple[Any, Any]  # pyarrow.Schema of each side's columns
    output_schema: Any  # pyarrow.Schema
    #: Whether the root keeps a time index of its outer sides' rows (descriptor field
    #: :data:`TIME_INDEX`; roots created before it have none).
    time_indexed: bool = False
    #: Each side's input number in the watermark (``event_time_delays``), ``None`` for a side
    #: without one (Spark's input without ``withWatermark``): its rows are never late.
    watermark_inputs: tuple[int | None, int | None] = (0, 1)

    @property
    def outer(self) -> tuple[bool, bool]:
        return self.how in ("left", "full"), self.how in ("right", "full")

    @property
    def indexed(self) -> tuple[bool, bool]:
        """Sides whose rows have time index entries: outer sides with a time range, on a root
        that keeps the index."""
        on = self.time_indexed and self.time_range is not None
        return on and self.outer[0], on and self.outer[1]

    def evict_us(self, side: int, watermark_ms: int) -> int | None:
        """Rows of ``side`` with time ``<=`` this expire (Spark's state watermark); ``None``:
        never. As in Spark, a side's rows expire only when both sides have a watermark (its own,
        so it has a state watermark at all; the other's, which bounds the rows still to come)."""
        if self.time_range is None or None in self.watermark_inputs:
            return None
        other = self.time_range[side] // 1000  # left: a, right: b
        return (watermark_ms - other - 1) * 1000

    def matches(self, left_us: int, right_us: int) -> bool:
        r = self.time_range
        return r is None or right_us - r[0] <= left_us <= right_us + r[1]

    def candidate_buckets(self, side: int, time_us: int) -> range:
        """Buckets of the **other** side's rows that may match a ``side`` row at ``time_us``."""
        if self.bucket_us is None:
            return range(0, 1)
        a, b = self.time_range  # type: ignore[misc]
        lo, hi = (time_us - b, time_us + a) if side == LEFT else (time_us - a, time_us + b)
        return range(lo // self.bucket_us, hi // self.bucket_us + 1)


def _biased(values: Any) -> np.ndarray:
    """Signed times or buckets as ``(n, 8)`` u64be bytes of ``value + 2^63`` (``time_bytes``)."""
    v = np.asarray(values, np.int64).view(np.uint64) ^ np.uint64(_keys.BIAS)
    return _rowcodec.fixed(v, ">u8")


def _unbiased(raw: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_biased` on u64 values."""
    return (np.asarray(raw, np.uint64) ^ np.uint64(_keys.BIAS)).view(np.int64)


def row_keys(kgs: Any, side: int, buckets: Any, enc_keys: Rows, times: Any, seqs: Any) -> Rows:
    """:func:`row_key` of many rows at once (byte for byte the same keys)."""
    n = len(enc_keys)
    return _rowcodec.concat(n, [
        _rowcodec.fixed(kgs, ">u2"), JOIN_TAG + _ROWS[side], _biased(buckets), enc_keys,
        _biased(times), _rowcodec.fixed(seqs, ">u8"),
    ])


def index_entries(kgs: Any, side: int, enc_keys: Rows, times: Any, seqs: Any,
                  matched: np.ndarray) -> tuple[Rows, Rows]:
    """Time index keys and values of many rows: ``kg 'J' (4 + side) time_us seq -> matched:u8
    enc(join key)``; the row's key follows from them (its bucket is its time's)."""
    n = len(enc_keys)
    keys = _rowcodec.concat(n, [_rowcodec.fixed(kgs, ">u2"), JOIN_TAG + _INDEX[side],
                                _biased(times), _rowcodec.fixed(seqs, ">u8")])
    return keys, row_values(matched, enc_keys)


def row_values(matched: np.ndarray, values: Rows) -> Rows:
    """``matched:u8 enc(row tuple)`` of many rows."""
    return _rowcodec.concat(len(values), [matched.astype(np.uint8).reshape(-1, 1), values])


#: The descriptor's field holding each side's columns and Spark types (for typed reads).
SIDE_TYPES = "join_side_types"


#: Descriptor field: the join key's column names on each side (``{"left": [...], "right":
#: [...]}``), refreshed when a query starts; roots from before it name both sides' keys as the
#: left side does.
JOIN_KEYS = "join_keys"
