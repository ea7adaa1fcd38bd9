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


def crafted_variants(raw: bytes) -> dict[str, tuple[bytes, bool]]:
    """Variants of the SST ``raw`` with every checksum valid: name -> (bytes, whether the tail
    itself is bad, so that every read fails, not only reads of a bad data block)."""
    parts = split(raw)
    offsets, sizes, keys = parse_index(parts.index)
    n = len(offsets)

    def index(**kw: object) -> bytes:
        args = {"offsets": offsets, "sizes": sizes, "keys": keys, **kw}
        return join(replace(parts, index=make_index(**args)))  # type: ignore[arg-type]

    def data_block(i: int, framed: bytes) -> bytes:
        blocks = [parts.data[o:o + s] for o, s in zip(offsets, sizes)]
        blocks[i] = framed
        new_sizes = [len(b) for b in blocks]
        new_offsets = [sum(new_sizes[:j]) for j in range(n)]
        new = replace(parts, data=b"".join(blocks),
                      index=make_index(new_offsets, new_sizes, keys))
        return join(new)

    def footer_only(*fields: int) -> bytes:
        return raw[:-FOOTER_SIZE] + footer(*fields)

    f = FOOTER.unpack_from(raw, len(raw) - FOOTER_SIZE)
    lz4 = COMPRESSION_LZ4
    return {
        "block offset past the end": (index(offsets=[*offsets[:-1], 2**40]), True),
        "block offset 2^63": (index(offsets=[*offsets[:-1], 2**63]), True),
        "block size 4 GiB": (index(sizes=[0xFFFF_FFFF, *sizes[1:]]), True),
        "blocks overlap": (index(offsets=[0, *(o - 1 for o in offsets[1:])]), True),
        "block smaller than a trailer": (index(sizes=[*sizes[:-1], 2]), True),
        "block count 2^32-1": (index(count=0xFFFF_FFFF), True),
        "block count 0 with blocks": (index(count=0), True),
        "last keys out of order": (index(keys=[keys[1], keys[0], *keys[2:]]), True),
        "duplicate last keys": (index(keys=[keys[0], keys[0], *keys[2:]]), True),
        "empty bloom": (join(parts, bloom_framed=frame_raw(b"")), True),
        "bloom with 0 probes": (join(replace(parts, bloom=b"\x00" + parts.bloom[1:])),
                                True),
        "bloom with 255 probes": (join(replace(parts, bloom=b"\xff" + parts.bloom[1:])),
                                  True),
        "properties a list": (join(replace(parts, props=b"[1, 2]")), True),
        "properties nested": (join(replace(parts, props=b"[" * 50_000 + b"]" * 50_000)),
                              True),
        "properties not UTF-8": (join(replace(parts, props=b'{"a": "\xff"}')), True),
        "properties lz4 bomb": (join(parts, props_framed=frame_raw(
            b"\xff\xff\xff\x7f" + bytes(20), lz4)), True),
        "footer offsets past the end": (footer_only(2**62, f[1], f[2], f[3], f[4], f[5]), True),
        "footer lengths do not add up": (footer_only(f[0], f[1] + 1, f[2], f[3], f[4], f[5]),
                                         True),
        "footer format 99": (footer_only(*f[:6], 99), True),
        "data block lz4 size 2 GiB": (data_block(0, frame_raw(
            b"\xff\xff\xff\x7f" + bytes(40), lz4)), False),
        "data block count 2^32-1": (data_block(1, frame_raw(
            struct.pack("<IB", 0xFFFF_FFFF, 0) + bytes(64))), False),
        "data block regions overrun": (data_block(2, frame_raw(
            struct.pack("<IBIIB", 1, 0, 0xFFFF_FFF0, 5, 0) + b"abc")), False),
    }


__all__ = [
    "COMPRESSION_LZ4",
    "SstParts",
    "crafted_variants",
    "footer",
    "frame_raw",
    "join",
    "make_index",
    "parse_index",
    "split",
    "with_props",
]
