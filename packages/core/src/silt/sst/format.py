"""SST on-disk constants. WARNING: these are on-disk formats.

Changing any layout here makes existing objects unreadable. An incompatible change must bump
``SST_FORMAT_VERSION`` (which only grows) and keep a reader for every older version. The layout is
drawn in ``docs/format.md``.
"""

from __future__ import annotations

import struct

#: Format version written into every SST footer. Only grows.
#: 1: the bloom filter is one flat bit array (LevelDB's layout).
#: 2: the bloom filter is blocked: every key's probes fall into one 64-byte line.
SST_FORMAT_VERSION = 2
#: Versions this code can read.
READABLE_SST_FORMATS = frozenset({1, 2})
#: The first format version whose bloom filter is blocked (``BLOOM_LINE_BYTES`` lines).
BLOCKED_BLOOM_FORMAT = 2

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
BLOCK_HEADER_SIZE = BLOCK_HEADER.size  # 5
BLOCK_FLAG_EXPIRY = 1
#: Fixed bytes per data block entry: key_end u32, value_end u32, kind u8 ...
BLOCK_ENTRY_SIZE = 9
#: ... plus expire_at_ms u64 when the block has ``BLOCK_FLAG_EXPIRY``.
BLOCK_EXPIRY_SIZE = 8

#: Bloom filter block header: probes u8 (the rest of the block is the bit array).
BLOOM_HEADER = struct.Struct("<B")
BLOOM_HEADER_SIZE = BLOOM_HEADER.size  # 1
#: The most probes a filter uses (a reader refuses a larger count).
BLOOM_MAX_PROBES = 30
#: A writer uses ``int(bits_per_key * BLOOM_PROBES_PER_BIT)`` probes (bits_per_key * ln 2),
#: clamped to 1..BLOOM_MAX_PROBES, over at least ``BLOOM_MIN_BITS`` bits.
BLOOM_PROBES_PER_BIT = 0.69
BLOOM_MIN_BITS = 64
#: The bloom hash is CRC-32 of the key through MurmurHash3's 32-bit finalizer: these are its two
#: multipliers. Probing is double hashing with ``delta`` = the hash rotated right by
#: ``BLOOM_DELTA_ROTATION`` bits. (silt.sst.bloom.bloom_hash and its compiled twin.)
BLOOM_HASH_C1 = 0x85EBCA6B
BLOOM_HASH_C2 = 0xC2B2AE35
BLOOM_DELTA_ROTATION = 17
#: Blocked filters (format 2): the bit array is ``lines`` lines of ``BLOOM_LINE_BYTES`` bytes
#: (a CPU cache line), ``lines = max(1, ceil(keys * bits_per_key / 512))``. A key of hash ``h``
#: sets and tests bits of line ``(h * lines) >> 32`` only; its probes are the top 9 bits of
#: ``g``, starting at ``g = rotl32(h, BLOOM_LINE_ROTATION)`` and multiplying ``g`` by
#: ``BLOOM_LINE_MUL`` (mod 2^32) after each probe (RocksDB's FastLocalBloom probe sequence).
BLOOM_LINE_BYTES = 64
BLOOM_LINE_BITS = 8 * BLOOM_LINE_BYTES
BLOOM_LINE_ROTATION = 16
BLOOM_LINE_MUL = 0x9E3779B9

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
