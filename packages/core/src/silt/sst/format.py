"""SST on-disk constants. WARNING: these are on-disk formats.

Changing any layout here makes existing objects unreadable. An incompatible change must bump
``SST_FORMAT_VERSION`` (which only grows) and keep a reader for every older version. The layout is
drawn in ``docs/format.md``.
"""

from __future__ import annotations

import struct

#: Format version written into every SST footer. Only grows.
SST_FORMAT_VERSION = 1
#: Versions this code can read.
READABLE_SST_FORMATS = frozenset({1})

#: Last 8 bytes of every SST: ASCII "SILTSST1" read as a little-endian u64.
SST_MAGIC = int.from_bytes(b"SILTSST1", "little")

#: Footer: filter_off u64, filter_len u32, props_off u64, props_len u32, index_off u64,
#: index_len u32, format_version u32, crc32 (of the preceding 40 bytes) u32, magic u64.
FOOTER = struct.Struct("<QIQIQIIIQ")
FOOTER_SIZE = FOOTER.size  # 52

#: Every block (data, filter, properties, index) is followed by this trailer:
#: compression u8, crc32 (of the payload and the compression byte) u32.
TRAILER = struct.Struct("<BI")
TRAILER_SIZE = TRAILER.size  # 5

COMPRESSION_NONE = 0
COMPRESSION_LZ4 = 1
COMPRESSION_CODES = {"none": COMPRESSION_NONE, "lz4": COMPRESSION_LZ4}

#: Entry kinds inside data blocks.
KIND_PUT = 0
KIND_DELETE = 1
KIND_PUT_EXPIRING = 2

#: Data block header: entry count u32, flags u8.
BLOCK_HEADER = struct.Struct("<IB")
BLOCK_FLAG_EXPIRY = 1

#: Bloom filter block header: probes u8 (the rest of the block is the bit array).
BLOOM_HEADER = struct.Struct("<B")

#: Index block header: block count u32.
INDEX_HEADER = struct.Struct("<I")

#: How much of an SST's end a reader fetches when it does not know where the tail starts.
TAIL_GUESS = 64 * 1024

#: Largest expiry time an expiring entry can carry: ``expire_at_ms`` is a u64 in data blocks.
#: ``DB.put(ttl=...)`` refuses a ttl whose expiry would not fit.
MAX_EXPIRY_MS = 2**64 - 1

#: Largest SST size, offset or length a manifest or footer may claim: object stores and files
#: address bytes with signed 64-bit offsets (``off_t``, HTTP ranges).
MAX_OBJECT_BYTES = 2**63 - 1

#: The largest value lz4's block format can expand one byte of compressed input to: a
#: decompressed size above ``LZ4_MAX_RATIO * compressed`` is a damaged size prefix, refused
#: before allocating it.
LZ4_MAX_RATIO = 255
