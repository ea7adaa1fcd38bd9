"""Take a real SST apart and put it back together with valid checksums, for tests.

Crafted (or damaged and re-checksummed) metadata is what a checksum cannot catch; these helpers
let a test replace one region of a real SST (the data blocks, bloom filter, properties, index or
footer fields) and get an object whose every checksum is valid, so the decoder's structural
checks are what stands between the bytes and the reader.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, replace

from silt.sst.block import frame, unframe
from silt.sst.format import (
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    FOOTER,
    FOOTER_SIZE,
    SST_FORMAT_VERSION,
    SST_MAGIC,
    TRAILER,
)


@dataclass(frozen=True)
class SstParts:
    """The regions of an SST: ``data`` holds the framed data blocks; the others are payloads
    (unframed) except where a test frames them itself (``*_framed`` given to :func:`join`)."""

    data: bytes
    bloom: bytes
    props: bytes
    index: bytes
    fmt: int = SST_FORMAT_VERSION


def split(sst: bytes) -> SstParts:
    (filter_off, filter_len, props_off, props_len, index_off, index_len, fmt, _, _) = (
        FOOTER.unpack_from(sst, len(sst) - FOOTER_SIZE)
    )

    def payload(off: int, length: int) -> bytes:
        return unframe(sst[off:off + length], "sst", off) if length else b""

    return SstParts(
        data=sst[:filter_off],
        bloom=payload(filter_off, filter_len),
        props=payload(props_off, props_len),
        index=payload(index_off, index_len),
        fmt=fmt,
    )


def frame_raw(body: bytes, compression: int = COMPRESSION_NONE) -> bytes:
    """``body`` with a valid trailer claiming ``compression`` (no compression is done)."""
    return body + TRAILER.pack(compression, zlib.crc32(bytes((compression,)), zlib.crc32(body)))


def footer(filter_off: int, filter_len: int, props_off: int, props_len: int, index_off: int,
           index_len: int, fmt: int = SST_FORMAT_VERSION) -> bytes:
    """A footer with a valid checksum and magic, whatever the offsets say."""
    head = struct.pack("<QIQIQII", filter_off, filter_len, props_off, props_len, index_off,
                       index_len, fmt)
    return head + struct.pack("<IQ", zlib.crc32(head), SST_MAGIC)


def join(parts: SstParts, *, bloom_framed: bytes | None = None,
         props_framed: bytes | None = None, index_framed: bytes | None = None) -> bytes:
    """Reassemble an SST from ``parts`` with consistent offsets and valid checksums."""
    bloom = bloom_framed if bloom_framed is not None else (
        frame(parts.bloom, COMPRESSION_NONE) if parts.bloom else b""
    )
    props = props_framed if props_framed is not None else frame(parts.props, COMPRESSION_NONE)
    index = index_framed if index_framed is not None else frame(parts.index, COMPRESSION_NONE)
    filter_off = len(parts.data)
    props_off = filter_off + len(bloom)
    index_off = props_off + len(props)
    return b"".join([
        parts.data, bloom, props, index,
        footer(filter_off, len(bloom), props_off, len(props), index_off, len(index), parts.fmt),
    ])


def parse_index(index: bytes) -> tuple[list[int], list[int], list[bytes]]:
    """``(offsets, sizes, last_keys)`` of an index payload."""
    (count,) = struct.unpack_from("<I", index, 0)
    pos = 4
    offsets = list(struct.unpack_from(f"<{count}Q", index, pos))
    pos += 8 * count
    sizes = list(struct.unpack_from(f"<{count}I", index, pos))
    pos += 4 * count
    ends = list(struct.unpack_from(f"<{count}I", index, pos))
    pos += 4 * count
    keys = [index[pos + s:pos + e] for s, e in zip([0, *ends], ends)]
    return offsets, sizes, keys


def make_index(offsets: list[int], sizes: list[int], keys: list[bytes],
               count: int | None = None) -> bytes:
    """An index payload (``count`` overrides the stored block count)."""
    ends, total = [], 0
    for k in keys:
        total += len(k)
        ends.append(total)
    n = len(offsets)
    return b"".join([
        struct.pack("<I", n if count is None else count),
        struct.pack(f"<{n}Q", *offsets), struct.pack(f"<{n}I", *sizes),
        struct.pack(f"<{n}I", *ends), b"".join(keys),
    ])


def with_props(parts: SstParts, **changes: object) -> SstParts:
    props = json.loads(parts.props)
    props.update(changes)
    return replace(parts, props=json.dumps(props, sort_keys=True).encode())


__all__ = [
    "COMPRESSION_LZ4",
    "SstParts",
    "footer",
    "frame_raw",
    "join",
    "make_index",
    "parse_index",
    "split",
    "with_props",
]
