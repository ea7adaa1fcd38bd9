"""Data blocks and the checksummed framing every SST block shares.

Data block payload (before compression), all integers little-endian::

    count u32 | flags u8 | key_end u32 * count | value_end u32 * count | kind u8 * count
    | [expire_at_ms u64 * count if flags & 1] | keys... | values...

``key_end[i]``/``value_end[i]`` are end offsets into the keys and values regions. A framed block is
``payload' | compression u8 | crc32(payload' + compression byte) u32`` where ``payload'`` is the
payload, lz4-compressed (with its 4-byte size prefix) when compression is 1.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left
from itertools import accumulate, islice
from operator import ge
from typing import NoReturn

import lz4.block

from .._ext import accelerate
from ..checksum import crc32
from ..errors import CorruptionError
from ..record import MISSING
from .format import (
    BLOCK_ENTRY_SIZE,
    BLOCK_EXPIRY_SIZE,
    BLOCK_FLAG_EXPIRY,
    BLOCK_HEADER,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    KIND_DELETE,
    KIND_PUT,
    KIND_PUT_EXPIRING,
    LZ4_MAX_RATIO,
    TRAILER,
    TRAILER_SIZE,
)

_SWAP = sys.byteorder != "little"
_BYTES_ONLY = {bytes}


def _u32_bytes(values: list[int]) -> bytes:
    arr = array("I", values)
    if _SWAP:  # pragma: no cover - big-endian hosts
        arr.byteswap()
    return arr.tobytes()


def _u64_bytes(values: list[int]) -> bytes:
    arr = array("Q", values)
    if _SWAP:  # pragma: no cover
        arr.byteswap()
    return arr.tobytes()


def _read_array(code: str, buf: bytes, start: int, count: int, width: int) -> array:
    arr = array(code)
    arr.frombytes(buf[start:start + count * width])
    if _SWAP:  # pragma: no cover
        arr.byteswap()
    return arr


def encode_block(keys: list[bytes], records: list[object]) -> bytes:
    """Encode sorted ``keys`` and their records (see :mod:`silt.record`) as a block payload."""
    n = len(keys)
    if len(records) == n and set(map(type, records)) <= _BYTES_ONLY:
        # Only plain puts (what a flush mostly writes): no Python step per record.
        return b"".join([
            BLOCK_HEADER.pack(n, 0),
            _u32_bytes(list(accumulate(map(len, keys)))),
            _u32_bytes(list(accumulate(map(len, records)))),  # type: ignore[arg-type]
            bytes(n),  # every kind is KIND_PUT (0)
            b"".join(keys),
            b"".join(records),  # type: ignore[arg-type]
        ])
    kinds = bytearray(len(keys))
    values: list[bytes] = []
    expiries: list[int] = []
    has_expiry = False
    append_value = values.append
    append_expiry = expiries.append
    for i, r in enumerate(records):
        if r.__class__ is bytes:
            append_value(r)  # type: ignore[arg-type]
            append_expiry(0)
        elif r is None:
            kinds[i] = KIND_DELETE
            append_value(b"")
            append_expiry(0)
        else:
            kinds[i] = KIND_PUT_EXPIRING
            append_value(r[0])  # type: ignore[index]
            append_expiry(r[1])  # type: ignore[index]
            has_expiry = True
    parts = [
        BLOCK_HEADER.pack(len(keys), BLOCK_FLAG_EXPIRY if has_expiry else 0),
        _u32_bytes(list(accumulate(map(len, keys)))),
        _u32_bytes(list(accumulate(map(len, values)))),
        bytes(kinds),
    ]
    if has_expiry:
        parts.append(_u64_bytes(expiries))
    parts.append(b"".join(keys))
    parts.append(b"".join(values))
    return b"".join(parts)


class Block:
    """A decoded data block: keys as a list (for C-speed bisect), values sliced on demand.

    Point reads (``get``) go through a dict from key to entry index, built on the first one
    (a bisect over scattered bytes objects costs a cache miss per step; a scan never builds it).
    It costs about 36 bytes per entry more than ``charge`` counts. ``charge`` is what each twin
    holds for the block, so the twins differ there alone: this one ``len(payload) + 48 * n +
    200``, the compiled one (the payload and an 8-byte key prefix per entry, no per-key
    objects) ``len(payload) + 8 * n + 640``. Keys of a block are sorted
    and unique (the decoder refuses a block whose keys are not), so it finds what a bisect
    finds.

    Immutable and safe to share between threads (it lives in the block cache).
    """

    __slots__ = ("keys", "kinds", "values", "value_ends", "expiries", "charge", "where", "_index")

    def __init__(self, payload: bytes, object_name: str = "?", offset: int = 0) -> None:
        # The checks match the compiled twin's, which needs them for memory safety.
        if payload.__class__ is not bytes:
            payload = bytes(payload)
        self.where = (object_name, offset)
        try:
            count, flags = BLOCK_HEADER.unpack_from(payload, 0)
        except struct.error:
            self._bad("payload shorter than its header")
        pos = BLOCK_HEADER.size
        head = pos + count * (
            BLOCK_ENTRY_SIZE + BLOCK_EXPIRY_SIZE if flags & BLOCK_FLAG_EXPIRY else BLOCK_ENTRY_SIZE
        )
        if head > len(payload):
            self._bad("block regions do not add up")
        key_ends = _read_array("I", payload, pos, count, 4)
        pos += 4 * count
        self.value_ends = value_ends = _read_array("I", payload, pos, count, 4)
        pos += 4 * count
        self.kinds = payload[pos:pos + count]
        pos += count
        if flags & BLOCK_FLAG_EXPIRY:
            self.expiries: array | None = _read_array("Q", payload, pos, count, 8)
            pos += 8 * count
        else:
            self.expiries = None
        if count > 1:
            ends = key_ends.tolist()
            if ends != sorted(ends):
                self._bad("key offsets decrease")
            ends = value_ends.tolist()
            if ends != sorted(ends):
                self._bad("value offsets decrease")
        keys_len = key_ends[-1] if count else 0
        if head + keys_len > len(payload) or (
            count and head + keys_len + value_ends[-1] != len(payload)
        ):
            self._bad("block regions do not add up")
        kbuf = payload[pos:pos + keys_len]
        self.values = payload[pos + keys_len:]
        self.keys = keys = [kbuf[s:e] for s, e in zip([0, *key_ends], key_ends)]
        if count > 1 and any(map(ge, keys, islice(keys, 1, None))):
            self._bad("keys are not in increasing order")  # lookups bisect them
        self.charge = len(payload) + 48 * count + 200
        self._index: dict[bytes, int] | None = None

    def _bad(self, why: str) -> NoReturn:
        raise CorruptionError(*self.where, f"malformed data block ({why})")

    def __len__(self) -> int:
        return len(self.keys)

    def record_at(self, i: int) -> object:
        """The record of entry ``i`` (bytes, ``None`` or ``(bytes, expire_at_ms)``)."""
        kind = self.kinds[i]
        if kind == KIND_DELETE:
            return None
        start = self.value_ends[i - 1] if i else 0
        value = self.values[start:self.value_ends[i]]
        if kind == KIND_PUT:
            return value
        if kind == KIND_PUT_EXPIRING and self.expiries is not None:
            return (value, self.expiries[i])
        raise CorruptionError(*self.where, f"unknown entry kind {kind} in entry {i}")

    def get(self, key: bytes) -> object:
        """The record for ``key``, or :data:`MISSING`."""
        index = self._index
        if index is None:  # first occurrence wins, as with bisect_left (see the class docstring)
            keys = self.keys
            index = self._index = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1)))
        i = index.get(key)
        if i is None:
            return MISSING
        if self.kinds[i] == KIND_PUT:  # record_at's common case, inlined
            ends = self.value_ends
            return self.values[ends[i - 1] if i else 0:ends[i]]
        return self.record_at(i)

    def items_from(self, start: bytes | None, end: bytes | None):
        """Yield ``(key, record)`` for keys in ``[start, end)`` in order."""
        keys = self.keys
        i = bisect_left(keys, start) if start is not None else 0
        stop = bisect_left(keys, end) if end is not None else len(keys)
        if self.kinds.count(KIND_PUT, i, stop) == stop - i:
            # Only plain puts (the common case): slice the values and let zip build the pairs.
            ends = self.value_ends
            vals = self.values
            starts = ends[i - 1:stop - 1] if i else [0, *ends[:stop - 1]]
            yield from zip(keys[i:stop], [vals[a:b] for a, b in zip(starts, ends[i:stop])])
            return
        record_at = self.record_at
        for j in range(i, stop):
            yield keys[j], record_at(j)


def frame(payload: bytes, compression: int) -> bytes:
    """Compress (if asked) and append the trailer: the bytes written for one block."""
    if compression == COMPRESSION_LZ4:
        body = lz4.block.compress(payload, store_size=True)
        if len(body) > len(payload) - (len(payload) >> 3):
            # Saves less than 1/8 (LevelDB's rule): store raw, the reader sees code 0 and skips
            # decompressing into a second copy of the block on every cold read.
            body, compression = payload, COMPRESSION_NONE
    else:
        body = payload
    crc = crc32(bytes((compression,)), crc32(body))
    return body + TRAILER.pack(compression, crc)


def unframe(framed: bytes, object_name: str, offset: int) -> bytes:
    """Check a framed block's checksum and return its uncompressed payload.

    Raises :class:`CorruptionError` naming ``object_name`` and ``offset`` when the checksum,
    compression code or compressed stream is bad; damaged bytes are never returned.
    """
    if len(framed) < TRAILER_SIZE:
        raise CorruptionError(object_name, offset, f"block of {len(framed)} bytes is truncated")
    body_len = len(framed) - TRAILER_SIZE
    compression, crc = TRAILER.unpack_from(framed, body_len)
    body = memoryview(framed)[:body_len]
    if crc32(framed[body_len:body_len + 1], crc32(body)) != crc:
        raise CorruptionError(
            object_name, offset, f"checksum mismatch in block of {len(framed)} bytes"
        )
    if compression == COMPRESSION_NONE:
        return bytes(body)
    if compression == COMPRESSION_LZ4:
        # The stream starts with its decompressed size (u32); lz4 cannot expand a byte of
        # input to more than LZ4_MAX_RATIO bytes, so a larger size is damage, refused before
        # it is allocated.
        if body_len < 4 or int.from_bytes(body[:4], "little") > LZ4_MAX_RATIO * body_len:
            raise CorruptionError(object_name, offset, "lz4 stream has an impossible size")
        try:
            return lz4.block.decompress(body)
        except Exception as exc:  # lz4 raises LZ4BlockError (a ValueError subclass)
            raise CorruptionError(object_name, offset, f"lz4 stream is invalid ({exc})") from None
    raise CorruptionError(object_name, offset, f"unknown compression code {compression}")


def decode_block(framed: bytes, object_name: str, offset: int) -> Block:
    """The data block whose framed bytes ``framed`` were read at ``offset`` of ``object_name``:
    :func:`unframe` (checksum, decompression) then :class:`Block`, raising
    :class:`CorruptionError` as they do. What every block read from the store goes through."""
    return Block(unframe(framed, object_name, offset), object_name, offset)


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), ("Block", "encode_block", "decode_block"))
