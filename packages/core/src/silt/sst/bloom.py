"""Bloom filters over SST keys.

The hash is CRC-32 of the key passed through MurmurHash3's 32-bit finalizer. Two layouts exist:

* **blocked** (SST format 2, what :func:`build_blocked_bloom` writes): the bit array is a row of
  64-byte lines and every probe of a key falls into the one line its hash picks, so a lookup
  touches one CPU cache line (RocksDB's cache-local filter; about 0.95% false positives at 10
  bits per key);
* **flat** (SST format 1, :func:`build_bloom`): one bit array probed with LevelDB-style double
  hashing (``delta`` is the hash rotated by 17 bits), each probe anywhere in the filter. Still
  read for SSTs written by older versions, and written only where a test needs such an SST.

Every step is defined on bytes and integers only, so a compiled twin produces byte-identical
filters. WARNING: the hash and both probe sequences are part of the on-disk format (see
docs/format.md).
"""

from __future__ import annotations

from .._ext import accelerate
from ..checksum import crc32
from .format import (
    BLOOM_DELTA_ROTATION,
    BLOOM_HASH_C1,
    BLOOM_HASH_C2,
    BLOOM_HEADER,
    BLOOM_LINE_BITS,
    BLOOM_LINE_BYTES,
    BLOOM_LINE_MUL,
    BLOOM_LINE_ROTATION,
    BLOOM_MAX_PROBES,
    BLOOM_MIN_BITS,
    BLOOM_PROBES_PER_BIT,
)

_M32 = 0xFFFFFFFF
_BIT = bytes(1 << i for i in range(8))  # _BIT[i] == 1 << i, one index instead of a shift
_ROT_R = BLOOM_DELTA_ROTATION
_ROT_L = 32 - BLOOM_DELTA_ROTATION
_LINE_ROT_L = BLOOM_LINE_ROTATION
_LINE_ROT_R = 32 - BLOOM_LINE_ROTATION
_LINE_SHIFT = 32 - (BLOOM_LINE_BITS.bit_length() - 1)  # g >> _LINE_SHIFT: a bit of the line


def bloom_hash(key: bytes) -> int:
    """32-bit hash of ``key`` used by the filter (on-disk format: never change).

    The one pure-Python definition: every caller that needs the hash calls this (or the compiled
    twin that replaces it, tested byte for byte by tests/test_twins.py).
    """
    h = crc32(key)
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


def blocked_lines(nkeys: int, bits_per_key: int) -> int:
    """Lines of a blocked filter for ``nkeys`` keys: ``nkeys * bits_per_key`` bits rounded up
    to whole lines, at least one."""
    return max(1, -(-nkeys * bits_per_key // BLOOM_LINE_BITS))


def build_blocked_bloom(keys: list[bytes], bits_per_key: int) -> bytes:
    """Serialize a blocked filter (SST format 2) for ``keys``: a probe-count byte followed by
    :func:`blocked_lines` lines of 64 bytes."""
    k = probes_for(bits_per_key)
    nlines = blocked_lines(len(keys), bits_per_key)
    bits = bytearray(nlines * BLOOM_LINE_BYTES)
    m32 = _M32
    bit = _BIT
    rot_l, rot_r, shift, mul = _LINE_ROT_L, _LINE_ROT_R, _LINE_SHIFT, BLOOM_LINE_MUL
    probes = range(k)
    for h in map(bloom_hash, keys):
        base = ((h * nlines) >> 32) * BLOOM_LINE_BITS
        g = ((h << rot_l) | (h >> rot_r)) & m32
        for _ in probes:
            pos = base + (g >> shift)
            bits[pos >> 3] |= bit[pos & 7]
            g = (g * mul) & m32
    return BLOOM_HEADER.pack(k) + bytes(bits)


def build_bloom(keys: list[bytes], bits_per_key: int) -> bytes:
    """Serialize a flat filter (SST format 1) for ``keys``: a probe-count byte followed by the
    bit array. SSTs are written with :func:`build_blocked_bloom`; this stays to write the SSTs
    that check format 1 is still read."""
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
    """A decoded filter. ``may_contain`` is exact for keys added and rarely true for others.

    ``data`` is a filter block's payload; ``blocked`` says its layout: true for SST format 2 and
    later (:func:`build_blocked_bloom`), false for format 1 (:func:`build_bloom`). A blocked
    filter whose bit array is not whole 64-byte lines raises ``ValueError``.
    """

    __slots__ = ("_bits", "_k", "_nbits", "_nlines")

    def __init__(self, data: bytes, blocked: bool = False) -> None:
        if len(data) < BLOOM_HEADER.size:
            raise ValueError("bloom filter block is empty")
        (self._k,) = BLOOM_HEADER.unpack_from(data, 0)
        self._bits = bytes(data[BLOOM_HEADER.size:])
        self._nbits = len(self._bits) * 8
        #: 0 for a flat filter, else the number of lines
        self._nlines = 0
        if blocked:
            self._nlines = len(self._bits) // BLOOM_LINE_BYTES
            if not self._nlines or len(self._bits) % BLOOM_LINE_BYTES:
                raise ValueError(
                    f"blocked bloom filter of {len(self._bits)} bytes is not whole "
                    f"{BLOOM_LINE_BYTES}-byte lines"
                )

    @property
    def blocked(self) -> bool:
        """Whether the filter is blocked (SST format 2 and later)."""
        return self._nlines > 0

    def may_contain(self, key: bytes) -> bool:
        return self.may_contain_hash(bloom_hash(key))

    def may_contain_hash(self, h: int) -> bool:
        """``may_contain`` for a key whose :func:`bloom_hash` is ``h`` (hash once, probe many)."""
        nlines = self._nlines
        bits = self._bits
        bit = _BIT
        if nlines:
            base = ((h * nlines) >> 32) * BLOOM_LINE_BITS
            g = ((h << _LINE_ROT_L) | (h >> _LINE_ROT_R)) & _M32
            for _ in range(self._k):
                pos = base + (g >> _LINE_SHIFT)
                if not bits[pos >> 3] & bit[pos & 7]:
                    return False
                g = (g * BLOOM_LINE_MUL) & _M32
            return True
        nbits = self._nbits
        if nbits == 0:
            return True
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
COMPILED = accelerate(
    globals(), ("bloom_hash", "build_bloom", "build_blocked_bloom", "BloomFilter")
)
