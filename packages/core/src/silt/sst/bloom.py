"""Bloom filters over SST keys.

The hash is CRC-32 of the key passed through MurmurHash3's 32-bit finalizer, probed with
LevelDB-style double hashing (``delta`` is the hash rotated by 17 bits). Both steps are defined on
bytes and integers only, so a compiled twin can produce byte-identical filters. WARNING: the hash
and probe sequence are part of the on-disk format (see docs/format.md).
"""

from __future__ import annotations

import zlib

from .._ext import load
from .format import BLOOM_HEADER

_M32 = 0xFFFFFFFF
_BIT = bytes(1 << i for i in range(8))  # _BIT[i] == 1 << i, one index instead of a shift


def bloom_hash(key: bytes) -> int:
    """32-bit hash of ``key`` used by the filter (on-disk format: never change)."""
    h = zlib.crc32(key)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


#: The most probes a filter uses (its first byte; a reader refuses a larger count).
MAX_PROBES = 30


def probes_for(bits_per_key: int) -> int:
    """Number of probes for ``bits_per_key`` (bits_per_key * ln 2, clamped to 1..MAX_PROBES)."""
    return max(1, min(MAX_PROBES, int(bits_per_key * 0.69)))


def build_bloom(keys: list[bytes], bits_per_key: int) -> bytes:
    """Serialize a filter for ``keys``: a probe-count byte followed by the bit array."""
    k = probes_for(bits_per_key)
    nbits = max(64, len(keys) * bits_per_key)
    nbytes = (nbits + 7) // 8
    nbits = nbytes * 8
    bits = bytearray(nbytes)
    m32 = _M32
    bit = _BIT
    probes = range(k)
    for h in map(zlib.crc32, keys):  # bloom_hash inlined: this loop is most of a flush
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & m32
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & m32
        h ^= h >> 16
        delta = ((h >> 17) | (h << 15)) & m32
        for _ in probes:
            pos = h % nbits
            bits[pos >> 3] |= bit[pos & 7]
            h = (h + delta) & m32
    return BLOOM_HEADER.pack(k) + bytes(bits)


class BloomFilter:
    """A decoded filter. ``may_contain`` is exact for keys added and rarely true for others."""

    __slots__ = ("_bits", "_k", "_nbits")

    def __init__(self, data: bytes) -> None:
        (self._k,) = BLOOM_HEADER.unpack_from(data, 0)
        self._bits = data[BLOOM_HEADER.size:]
        self._nbits = len(self._bits) * 8

    def may_contain(self, key: bytes) -> bool:
        return self.may_contain_hash(bloom_hash(key))

    def may_contain_hash(self, h: int) -> bool:
        """``may_contain`` for a key whose :func:`bloom_hash` is ``h`` (hash once, probe many)."""
        nbits = self._nbits
        if nbits == 0:
            return True
        bits = self._bits
        bit = _BIT
        delta = ((h >> 17) | (h << 15)) & _M32
        for _ in range(self._k):
            pos = h % nbits
            if not bits[pos >> 3] & bit[pos & 7]:
                return False
            h = (h + delta) & 0xFFFFFFFF
        return True

    @property
    def nbytes(self) -> int:
        return len(self._bits) + BLOOM_HEADER.size


#: The pure-Python twins, whichever implementation is selected (tests compare both).
bloom_hash_py = bloom_hash
build_bloom_py = build_bloom
BloomFilter_py = BloomFilter

_c = load()
COMPILED = _c is not None
if _c is not None:
    bloom_hash = _c.bloom_hash
    build_bloom = _c.build_bloom
    BloomFilter = _c.BloomFilter  # type: ignore[misc,assignment]
