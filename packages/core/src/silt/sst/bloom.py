"""Bloom filters over SST keys.

The hash is CRC-32 of the key passed through MurmurHash3's 32-bit finalizer, probed with
LevelDB-style double hashing (``delta`` is the hash rotated by 17 bits). Both steps are defined on
bytes and integers only, so a compiled twin can produce byte-identical filters. WARNING: the hash
and probe sequence are part of the on-disk format (see docs/format.md).
"""

from __future__ import annotations

import zlib

from .._ext import accelerate
from .format import (
    BLOOM_DELTA_ROTATION,
    BLOOM_HASH_C1,
    BLOOM_HASH_C2,
    BLOOM_HEADER,
    BLOOM_MAX_PROBES,
    BLOOM_MIN_BITS,
    BLOOM_PROBES_PER_BIT,
)

_M32 = 0xFFFFFFFF
_BIT = bytes(1 << i for i in range(8))  # _BIT[i] == 1 << i, one index instead of a shift
_ROT_R = BLOOM_DELTA_ROTATION
_ROT_L = 32 - BLOOM_DELTA_ROTATION


def bloom_hash(key: bytes) -> int:
    """32-bit hash of ``key`` used by the filter (on-disk format: never change).

    The one pure-Python definition: every caller that needs the hash calls this (or the compiled
    twin that replaces it, tested byte for byte by tests/test_twins.py).
    """
    h = zlib.crc32(key)
    h ^= h >> 16
    h = (h * BLOOM_HASH_C1) & _M32
    h ^= h >> 13
    h = (h * BLOOM_HASH_C2) & _M32
    h ^= h >> 16
    return h


#: The most probes a filter uses (its first byte; a reader refuses a larger count).
MAX_PROBES = BLOOM_MAX_PROBES


def probes_for(bits_per_key: int) -> int:
    """Number of probes for ``bits_per_key`` (bits_per_key * ln 2, clamped to 1..MAX_PROBES)."""
    return max(1, min(MAX_PROBES, int(bits_per_key * BLOOM_PROBES_PER_BIT)))


def build_bloom(keys: list[bytes], bits_per_key: int) -> bytes:
    """Serialize a filter for ``keys``: a probe-count byte followed by the bit array."""
    k = probes_for(bits_per_key)
    nbits = max(BLOOM_MIN_BITS, len(keys) * bits_per_key)
    nbytes = (nbits + 7) // 8
    nbits = nbytes * 8
    bits = bytearray(nbytes)
    m32 = _M32
    bit = _BIT
    rot_r, rot_l = _ROT_R, _ROT_L
    probes = range(k)
    for h in map(bloom_hash, keys):
        delta = ((h >> rot_r) | (h << rot_l)) & m32
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
        delta = ((h >> _ROT_R) | (h << _ROT_L)) & _M32
        for _ in range(self._k):
            pos = h % nbits
            if not bits[pos >> 3] & bit[pos & 7]:
                return False
            h = (h + delta) & 0xFFFFFFFF
        return True

    @property
    def nbytes(self) -> int:
        return len(self._bits) + BLOOM_HEADER.size


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), ("bloom_hash", "build_bloom", "BloomFilter"))
