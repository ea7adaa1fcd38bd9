# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Compiled twins of silt's hot path (docs/architecture.md, "The two implementations").

Every public name here has a pure-Python twin with the same behaviour, and the module that owns
the twin selects this one at import (see :mod:`silt._ext`):

================================  =============================================
compiled (here)                   pure-Python twin
================================  =============================================
crc32, bloom_hash                 silt.checksum.crc32, silt.sst.bloom.bloom_hash
build_bloom, BloomFilter          silt.sst.bloom
build_blocked_bloom               silt.sst.bloom
encode_block, Block               silt.sst.block
decode_block                      silt.sst.block
split_blocks                      silt.sst.builder.split_blocks
find_block, get_from, RangeIter   silt.sst.reader
get_levels, key_bounds            silt.sst.reader (key_bounds: a KeyBounds, the pair and
                                  the L0 SSTs' ranges and filters; pure: the pair)
plan_probe, lookup_many/_groups   silt.sst.reader
key_index                         silt.sst.tail (a KeyIndex; pure: None, the list is bisected)
sorted_unique, probe_sst          silt.sst.probe
read_runs                         silt.sst.probe
merge_newest_first, live          silt.merge
visible_many                      silt.merge
sorted_items, split_found         silt.memtable
check_pairs, insert_pairs         silt.memtable
check_ops, apply_ops              silt.memtable
BlockCache                        silt.cache
CachedReads                       silt.tiers.blockread (the file:// tier's block reads)
================================  =============================================

The on-disk bytes are defined in docs/format.md; tests/test_twins.py checks both implementations
byte for byte on random inputs. Why a .pyx and not a ``*_cy.py`` pure-mode source: the fast
algorithms (table CRC-32, binary search over raw key offsets with memcmp, a heap over C arrays)
are per-byte loops that run 100x slower interpreted, so a single pure-mode source would have to
carry both algorithms behind ``cython.compiled`` branches anyway.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.buffer cimport PyBUF_READ
from cpython.buffer cimport Py_buffer, PyBuffer_IsContiguous
from cpython.memoryview cimport (PyMemoryView_Check, PyMemoryView_FromMemory,
                                 PyMemoryView_GET_BUFFER)
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset

from collections import OrderedDict as _OrderedDict

import lz4.block as _lz4_block
from threading import Lock as _Lock

from silt.checksum import crc32 as _fast_crc32
from silt.errors import CorruptionError
from silt.record import ENTRY_OVERHEAD as _ENTRY_OVERHEAD
from silt.record import MISSING
from silt.sst import format as _fmt

cdef extern from "Python.h":
    bint PyBytes_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    bint PyList_CheckExact(object o)

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define SILT_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 1)
    #else
    #define SILT_PREFETCH(p) ((void)(p))
    #endif
    """
    # A hint to load a cache line; it changes no result.
    void SILT_PREFETCH(const void* p) noexcept nogil

cdef extern from *:
    """
    static PyObject* silt_buffer_owner(Py_buffer* b) { return b->obj; }
    """
    # The object exporting a buffer (borrowed; NULL for a view of raw memory).
    PyObject* silt_buffer_owner(Py_buffer* b) noexcept

cdef object _MISSING = MISSING

# What a memtable counts per entry beyond its key and value (silt.record.ENTRY_OVERHEAD).
cdef Py_ssize_t ENTRY_OVERHEAD = _ENTRY_OVERHEAD

# On-disk constants: defined once, in silt.sst.format, and read into C variables at import.
cdef uint8_t KIND_PUT = _fmt.KIND_PUT
cdef uint8_t KIND_DELETE = _fmt.KIND_DELETE
cdef uint8_t KIND_PUT_EXPIRING = _fmt.KIND_PUT_EXPIRING
cdef Py_ssize_t BLOCK_HEADER_SIZE = _fmt.BLOCK_HEADER_SIZE
cdef uint8_t BLOCK_FLAG_EXPIRY = _fmt.BLOCK_FLAG_EXPIRY
cdef Py_ssize_t BLOCK_ENTRY_SIZE = _fmt.BLOCK_ENTRY_SIZE
cdef Py_ssize_t BLOCK_EXPIRY_ENTRY_SIZE = _fmt.BLOCK_ENTRY_SIZE + _fmt.BLOCK_EXPIRY_SIZE
cdef Py_ssize_t BLOOM_HEADER_SIZE = _fmt.BLOOM_HEADER_SIZE
cdef long BLOOM_MAX_PROBES = _fmt.BLOOM_MAX_PROBES
cdef double BLOOM_PROBES_PER_BIT = _fmt.BLOOM_PROBES_PER_BIT
cdef long BLOOM_MIN_BITS = _fmt.BLOOM_MIN_BITS
cdef uint32_t BLOOM_HASH_C1 = _fmt.BLOOM_HASH_C1
cdef uint32_t BLOOM_HASH_C2 = _fmt.BLOOM_HASH_C2
cdef uint32_t BLOOM_ROT_R = _fmt.BLOOM_DELTA_ROTATION
cdef uint32_t BLOOM_ROT_L = 32 - _fmt.BLOOM_DELTA_ROTATION
cdef Py_ssize_t BLOOM_LINE_BYTES = _fmt.BLOOM_LINE_BYTES
cdef uint64_t BLOOM_LINE_BITS = _fmt.BLOOM_LINE_BITS
cdef uint32_t BLOOM_LINE_ROT_L = _fmt.BLOOM_LINE_ROTATION
cdef uint32_t BLOOM_LINE_ROT_R = 32 - _fmt.BLOOM_LINE_ROTATION
cdef uint32_t BLOOM_LINE_SHIFT = 32 - (_fmt.BLOOM_LINE_BITS.bit_length() - 1)
cdef uint32_t BLOOM_LINE_MUL = _fmt.BLOOM_LINE_MUL

# --- CRC-32 (zlib's polynomial, reflected), slicing by 8 -------------------------------------
cdef uint32_t _crc_tab[8][256]


cdef void _init_crc() noexcept:
    cdef uint32_t c
    cdef int i, j, t
    for i in range(256):
        c = <uint32_t>i
        for j in range(8):
            if c & 1:
                c = (c >> 1) ^ 0xEDB88320u
            else:
                c = c >> 1
        _crc_tab[0][i] = c
    for i in range(256):
        c = _crc_tab[0][i]
        for t in range(1, 8):
            c = _crc_tab[0][c & 0xFF] ^ (c >> 8)
            _crc_tab[t][i] = c


_init_crc()


cdef inline uint32_t _le32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline uint64_t _le64(const unsigned char* p) noexcept nogil:
    return <uint64_t>_le32(p) | (<uint64_t>_le32(p + 4) << 32)


cdef inline void _put32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


cdef inline void _put64(unsigned char* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v & 0xFFFFFFFFu))
    _put32(p + 4, <uint32_t>(v >> 32))


cdef inline uint32_t _crc32(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t c = 0xFFFFFFFFu
    cdef uint32_t one, two
    while n >= 8:
        one = _le32(p) ^ c
        two = _le32(p + 4)
        c = (_crc_tab[7][one & 0xFF] ^ _crc_tab[6][(one >> 8) & 0xFF]
             ^ _crc_tab[5][(one >> 16) & 0xFF] ^ _crc_tab[4][one >> 24]
             ^ _crc_tab[3][two & 0xFF] ^ _crc_tab[2][(two >> 8) & 0xFF]
             ^ _crc_tab[1][(two >> 16) & 0xFF] ^ _crc_tab[0][two >> 24])
        p += 8
        n -= 8
    while n > 0:
        c = _crc_tab[0][(c ^ p[0]) & 0xFF] ^ (c >> 8)
        p += 1
        n -= 1
    return c ^ 0xFFFFFFFFu


cdef inline uint32_t _fmix(uint32_t h) noexcept nogil:
    h ^= h >> 16
    h *= BLOOM_HASH_C1
    h ^= h >> 13
    h *= BLOOM_HASH_C2
    h ^= h >> 16
    return h


cdef inline uint32_t _hash(bytes key) noexcept:
    return _fmix(_crc32(<const unsigned char*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)))


def crc32(bytes data):
    """CRC-32 of ``data``, zlib's polynomial (the twin is :func:`silt.checksum.crc32`)."""
    return _crc32(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


def bloom_hash(bytes key):
    """32-bit hash of ``key`` used by the filter (on-disk format: never change)."""
    return _hash(key)


# --- bloom filters ---------------------------------------------------------------------------
cdef int _probes_for(long bits_per_key) noexcept:
    cdef long k = <long>(bits_per_key * BLOOM_PROBES_PER_BIT)
    return <int>max(1, min(BLOOM_MAX_PROBES, k))


def build_bloom(keys, long bits_per_key):
    """Serialize a filter for ``keys``: a probe-count byte followed by the bit array."""
    cdef list ks = keys if PyList_CheckExact(keys) else list(keys)
    cdef int k = _probes_for(bits_per_key)
    cdef Py_ssize_t n = len(ks)
    cdef uint64_t nbits = max(BLOOM_MIN_BITS, n * bits_per_key)
    cdef uint64_t nbytes = (nbits + 7) // 8
    nbits = nbytes * 8
    cdef bytes out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>nbytes + BLOOM_HEADER_SIZE)
    cdef unsigned char* buf = <unsigned char*>PyBytes_AS_STRING(out)
    memset(buf, 0, nbytes + BLOOM_HEADER_SIZE)
    buf[0] = <unsigned char>k  # the header: the probe count u8
    cdef unsigned char* bits = buf + BLOOM_HEADER_SIZE
    cdef Py_ssize_t i
    cdef int j
    cdef uint32_t h, delta
    # Local copies: to the C compiler, the bit writes below may alias the module's globals.
    cdef uint32_t rot_r = BLOOM_ROT_R, rot_l = BLOOM_ROT_L
    cdef uint64_t pos
    cdef object key
    for i in range(n):
        key = <object>PyList_GET_ITEM(ks, i)
        if not PyBytes_CheckExact(key):
            raise TypeError(f"bloom keys must be bytes, got {type(key).__name__}")
        h = _hash(<bytes>key)
        delta = (h >> rot_r) | (h << rot_l)
        for j in range(k):
            pos = h % nbits
            bits[pos >> 3] |= <unsigned char>(1 << (pos & 7))
            h += delta
    return out


def build_blocked_bloom(keys, long bits_per_key):
    """Serialize a blocked filter (SST format 2) for ``keys``: a probe-count byte followed by
    whole 64-byte lines."""
    cdef list ks = keys if PyList_CheckExact(keys) else list(keys)
    cdef int k = _probes_for(bits_per_key)
    cdef Py_ssize_t n = len(ks)
    cdef long long want = (<long long>n * bits_per_key + <long long>BLOOM_LINE_BITS - 1) // (
        <long long>BLOOM_LINE_BITS)
    cdef uint64_t nlines = <uint64_t>want if want > 1 else 1
    cdef Py_ssize_t nbytes = <Py_ssize_t>nlines * BLOOM_LINE_BYTES
    cdef bytes out = PyBytes_FromStringAndSize(NULL, nbytes + BLOOM_HEADER_SIZE)
    cdef unsigned char* buf = <unsigned char*>PyBytes_AS_STRING(out)
    memset(buf, 0, nbytes + BLOOM_HEADER_SIZE)
    buf[0] = <unsigned char>k  # the header: the probe count u8
    cdef unsigned char* line
    cdef Py_ssize_t i
    cdef int j
    cdef uint32_t h, g, pos
    # Local copies: to the C compiler, the bit writes below may alias the module's globals.
    cdef uint32_t rot_l = BLOOM_LINE_ROT_L, rot_r = BLOOM_LINE_ROT_R
    cdef uint32_t shift = BLOOM_LINE_SHIFT, mul = BLOOM_LINE_MUL
    cdef object key
    for i in range(n):
        key = <object>PyList_GET_ITEM(ks, i)
        if not PyBytes_CheckExact(key):
            raise TypeError(f"bloom keys must be bytes, got {type(key).__name__}")
        h = _hash(<bytes>key)
        line = buf + BLOOM_HEADER_SIZE + ((<uint64_t>h * nlines) >> 32) * BLOOM_LINE_BYTES
        g = (h << rot_l) | (h >> rot_r)
        for j in range(k):
            pos = g >> shift
            line[pos >> 3] |= <unsigned char>(1 << (pos & 7))
            g *= mul
    return out


@cython.final
cdef class BloomFilter:
    """A decoded filter. ``may_contain`` is exact for keys added and rarely true for others.

    ``blocked``: the layout of SST format 2 and later (one 64-byte line per key), else format
    1's flat bit array. A blocked filter's lines are copied to memory aligned to 64 bytes, so a
    probe touches exactly one CPU cache line.
    """

    cdef readonly int _k
    cdef readonly uint64_t _nbits
    cdef readonly uint64_t _nlines  # 0: a flat filter
    cdef bytes _bits  # a flat filter's bit array (what _p points into)
    cdef void* _mem  # a blocked filter's allocation (_p is its first 64-byte boundary)
    cdef const unsigned char* _p
    cdef Py_ssize_t _nbytes

    def __init__(self, data, blocked=False):
        if not PyBytes_CheckExact(data):
            data = bytes(data)
        if PyBytes_GET_SIZE(data) < BLOOM_HEADER_SIZE:
            raise ValueError("bloom filter block is empty")
        self._k = <unsigned char>PyBytes_AS_STRING(data)[0]
        self._nbytes = PyBytes_GET_SIZE(data) - BLOOM_HEADER_SIZE
        self._nbits = <uint64_t>self._nbytes * 8
        if self._mem != NULL:  # __init__ called again
            free(self._mem)
            self._mem = NULL
        self._bits = None
        self._nlines = 0
        if not blocked:
            self._bits = data[BLOOM_HEADER_SIZE:]
            self._p = <const unsigned char*>PyBytes_AS_STRING(self._bits)
            return
        if self._nbytes == 0 or self._nbytes % BLOOM_LINE_BYTES:
            raise ValueError(
                f"blocked bloom filter of {self._nbytes} bytes is not whole "
                f"{BLOOM_LINE_BYTES}-byte lines"
            )
        self._mem = malloc(self._nbytes + BLOOM_LINE_BYTES - 1)
        if self._mem == NULL:
            raise MemoryError()
        self._p = <const unsigned char*>(
            (<size_t>self._mem + BLOOM_LINE_BYTES - 1) & ~(<size_t>BLOOM_LINE_BYTES - 1))
        memcpy(<void*>self._p, PyBytes_AS_STRING(data) + BLOOM_HEADER_SIZE, self._nbytes)
        self._nlines = self._nbytes // BLOOM_LINE_BYTES

    def __dealloc__(self):
        free(self._mem)

    @property
    def blocked(self):
        """Whether the filter is blocked (SST format 2 and later)."""
        return self._nlines > 0

    cdef inline const unsigned char* _line(self, uint32_t h) noexcept:
        return self._p + ((<uint64_t>h * self._nlines) >> 32) * BLOOM_LINE_BYTES

    cdef bint _test(self, uint32_t h) noexcept:
        cdef uint64_t nbits = self._nbits
        cdef uint64_t pos
        cdef uint32_t g, p
        cdef int j
        cdef const unsigned char* line
        if self._nlines:
            line = self._line(h)
            g = (h << BLOOM_LINE_ROT_L) | (h >> BLOOM_LINE_ROT_R)
            for j in range(self._k):
                p = g >> BLOOM_LINE_SHIFT
                if not (line[p >> 3] & (1 << (p & 7))):
                    return False
                g *= BLOOM_LINE_MUL
            return True
        if nbits == 0:
            return True
        cdef uint32_t delta = (h >> BLOOM_ROT_R) | (h << BLOOM_ROT_L)
        for j in range(self._k):
            pos = h % nbits
            if not (self._p[pos >> 3] & (1 << (pos & 7))):
                return False
            h += delta
        return True

    cdef inline void _prefetch(self, uint32_t h) noexcept:
        """Start loading the bytes ``_test(h)`` reads first, so that a ``_test`` of ``h`` soon
        after finds them in the CPU cache: a blocked filter's one line; a flat filter's first
        two probes (an absent key's test ends at the first probe for about half of the keys,
        by the second for three quarters)."""
        cdef uint64_t nbits = self._nbits
        if self._nlines:
            SILT_PREFETCH(self._line(h))
        elif nbits:
            SILT_PREFETCH(self._p + ((h % nbits) >> 3))
            h += (h >> BLOOM_ROT_R) | (h << BLOOM_ROT_L)
            SILT_PREFETCH(self._p + ((h % nbits) >> 3))

    def may_contain(self, bytes key):
        return self._test(_hash(key))

    def may_contain_hash(self, uint32_t h):
        """``may_contain`` for a key whose :func:`bloom_hash` is ``h`` (hash once, probe many)."""
        return self._test(h)

    @property
    def nbytes(self):
        return self._nbytes + BLOOM_HEADER_SIZE


# --- data blocks -----------------------------------------------------------------------------
cdef inline uint64_t _prefix(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """The first 8 bytes of a key as a big-endian integer, zero-padded: ordering two keys by it
    agrees with their byte order whenever the prefixes differ."""
    cdef uint64_t v = 0
    cdef Py_ssize_t i
    if n >= 8:
        for i in range(8):
            v = (v << 8) | p[i]
        return v
    for i in range(8):
        v = (v << 8) | (p[i] if i < n else 0)
    return v


cdef inline int _cmp(const unsigned char* a, Py_ssize_t na,
                     const unsigned char* b, Py_ssize_t nb) noexcept nogil:
    cdef int c = memcmp(a, b, na if na < nb else nb)
    if c:
        return c
    return -1 if na < nb else (1 if na > nb else 0)


def encode_block(keys, records):
    """Encode sorted ``keys`` and their records (see :mod:`silt.record`) as a block payload."""
    cdef list ks = keys if PyList_CheckExact(keys) else list(keys)
    cdef list rs = records if PyList_CheckExact(records) else list(records)
    cdef Py_ssize_t n = len(ks)
    if len(rs) != n:
        raise ValueError("keys and records differ in length")
    cdef Py_ssize_t i, klen = 0, vlen = 0, pos
    cdef bint has_exp = False
    cdef object key, r, v
    for i in range(n):
        key = <object>PyList_GET_ITEM(ks, i)
        if not PyBytes_CheckExact(key):
            raise TypeError(f"keys must be bytes, got {type(key).__name__}")
        klen += PyBytes_GET_SIZE(key)
        r = <object>PyList_GET_ITEM(rs, i)
        if PyBytes_CheckExact(r):
            vlen += PyBytes_GET_SIZE(r)
        elif r is not None:
            v = r[0]
            if not PyBytes_CheckExact(v):
                raise TypeError(f"values must be bytes, got {type(v).__name__}")
            vlen += PyBytes_GET_SIZE(v)
            has_exp = True
    if klen > 0xFFFFFFFF or vlen > 0xFFFFFFFF or n > 0xFFFFFFFF:
        raise OverflowError("block too large")
    cdef Py_ssize_t head = BLOCK_HEADER_SIZE + n * (
        BLOCK_EXPIRY_ENTRY_SIZE if has_exp else BLOCK_ENTRY_SIZE)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, head + klen + vlen)
    cdef unsigned char* b = <unsigned char*>PyBytes_AS_STRING(out)
    _put32(b, <uint32_t>n)
    b[4] = BLOCK_FLAG_EXPIRY if has_exp else 0
    cdef unsigned char* kend = b + BLOCK_HEADER_SIZE
    cdef unsigned char* vend = kend + 4 * n
    cdef unsigned char* kinds = vend + 4 * n
    cdef unsigned char* exps = kinds + n
    cdef unsigned char* kp = exps + (8 * n if has_exp else 0)
    cdef unsigned char* vp = kp + klen
    cdef Py_ssize_t ko = 0, vo = 0, sz
    cdef uint64_t exp
    for i in range(n):
        key = <object>PyList_GET_ITEM(ks, i)
        sz = PyBytes_GET_SIZE(key)
        memcpy(kp + ko, PyBytes_AS_STRING(key), sz)
        ko += sz
        _put32(kend + 4 * i, <uint32_t>ko)
        r = <object>PyList_GET_ITEM(rs, i)
        exp = 0
        if PyBytes_CheckExact(r):
            kinds[i] = KIND_PUT
            sz = PyBytes_GET_SIZE(r)
            memcpy(vp + vo, PyBytes_AS_STRING(r), sz)
            vo += sz
        elif r is None:
            kinds[i] = KIND_DELETE
        else:
            kinds[i] = KIND_PUT_EXPIRING
            v = r[0]
            sz = PyBytes_GET_SIZE(v)
            memcpy(vp + vo, PyBytes_AS_STRING(v), sz)
            vo += sz
            exp = r[1]
        _put32(vend + 4 * i, <uint32_t>vo)
        if has_exp:
            _put64(exps + 8 * i, exp)
    return out


@cython.final
@cython.no_gc
cdef class Block:
    """A decoded data block over its payload bytes: keys are found by binary search with memcmp
    over the key offsets and sliced out only when returned.

    Immutable and safe to share between threads (it lives in the block cache). Its bytes are
    a ``bytes`` object's or, read by :func:`decode_block` from a store's direct reader, a
    read-only memoryview's (a slice of a file's memory map: no copy), which it keeps alive.
    Not tracked by the cyclic garbage collector: it refers only to that buffer, a list of
    bytes and a tuple of a name and an offset, so it can never be part of a cycle, and a cache
    of tens of thousands of blocks would otherwise be walked by every full collection (and
    every new block would count toward the next one).
    """

    cdef object _owner  # bytes or a read-only memoryview: what _b points into
    cdef Py_ssize_t _size  # the payload is the first _size bytes at _b
    cdef const unsigned char* _b
    cdef Py_ssize_t _n
    cdef const unsigned char* _kend
    cdef const unsigned char* _vend
    cdef const unsigned char* _kinds
    cdef const unsigned char* _exps
    cdef const unsigned char* _keys
    cdef const unsigned char* _vals
    cdef list _keylist
    cdef uint64_t* _pfx  # big-endian first 8 bytes of every key (zero-padded): the search runs
                         # over this small array and touches key bytes only on prefix ties
    cdef uint32_t* _ends  # the key ends, then the value ends, checked and copied at decoding
                          # (in _pfx's allocation): every later read of key or value bytes
                          # stays inside the payload, whatever its buffer holds by then
    cdef readonly Py_ssize_t charge
    cdef object _object_name, _offset  # where the block was read (no tuple per block: a
                                       # tuple is tracked by the garbage collector)

    def __init__(self, payload, object_name="?", offset=0):
        if not PyBytes_CheckExact(payload):
            payload = bytes(payload)
        self._init(payload, <const unsigned char*>PyBytes_AS_STRING(payload),
                   PyBytes_GET_SIZE(payload), object_name, offset)

    cdef int _init(self, object owner, const unsigned char* b, Py_ssize_t size,
                   object object_name, object offset) except -1:
        """Decode the block whose payload is the ``size`` bytes at ``b``, inside ``owner``
        (bytes or a memoryview, kept: all of it, or a framed block's body when
        :func:`decode_block` keeps the bytes it read)."""
        cdef uint64_t n, need, prev, e, klen = 0, vlen = 0
        cdef Py_ssize_t i
        cdef int flags
        self._object_name = object_name
        self._offset = offset
        if size < BLOCK_HEADER_SIZE:
            self._bad("payload shorter than its header")
        n = _le32(b)
        flags = b[4]
        need = BLOCK_HEADER_SIZE + n * (
            BLOCK_EXPIRY_ENTRY_SIZE if flags & BLOCK_FLAG_EXPIRY else BLOCK_ENTRY_SIZE)
        if need > <uint64_t>size:
            self._bad("block regions do not add up")
        self._owner = owner
        self._size = size
        self._b = b
        self._n = <Py_ssize_t>n
        self._kend = b + BLOCK_HEADER_SIZE
        self._vend = self._kend + 4 * n
        self._kinds = self._vend + 4 * n
        self._exps = self._kinds + n if flags & BLOCK_FLAG_EXPIRY else NULL
        self._keys = b + need
        # The offsets are copied first and checked on the copies: a buffer that changes after
        # this (a memory-mapped file someone rewrote in place) can then change what a read
        # returns, never where it reads.
        free(self._pfx)
        self._pfx = <uint64_t*>malloc(max(self._n, 1) * (sizeof(uint64_t) + 2 * sizeof(uint32_t)))
        if self._pfx == NULL:
            raise MemoryError()
        self._ends = <uint32_t*>(self._pfx + max(self._n, 1))
        for i in range(self._n):
            self._ends[i] = _le32(self._kend + 4 * i)
            self._ends[self._n + i] = _le32(self._vend + 4 * i)
        prev = 0
        for i in range(self._n):
            e = self._ends[i]
            if e < prev:
                self._bad("key offsets decrease")
            prev = e
        klen = prev
        prev = 0
        for i in range(self._n):
            e = self._ends[self._n + i]
            if e < prev:
                self._bad("value offsets decrease")
            prev = e
        vlen = prev
        if need + klen > <uint64_t>size or (n and need + klen + vlen != <uint64_t>size):
            self._bad("block regions do not add up")
        self._vals = self._keys + klen
        # Keys must be strictly increasing (lookups bisect them); the prefixes decide unless
        # they tie.
        cdef uint64_t start = 0, pstart = 0
        for i in range(self._n):
            e = self._ends[i]
            self._pfx[i] = _prefix(self._keys + start, e - start)
            if i and (self._pfx[i] < self._pfx[i - 1] or (
                    self._pfx[i] == self._pfx[i - 1] and _cmp(
                        self._keys + pstart, <Py_ssize_t>(start - pstart),
                        self._keys + start, <Py_ssize_t>(e - start)) >= 0)):
                self._bad("keys are not in increasing order")
            pstart = start
            start = e
        # What this block holds, measured (RSS over 7,000 cached 8 KiB blocks): the payload, an
        # 8-byte prefix and two 4-byte offsets per entry, ~500 bytes of object, malloc and
        # cache-entry overhead. The pure twin holds a bytes object per key and its index dict,
        # and charges for those.
        self.charge = size + 16 * self._n + 512
        return 0

    def __dealloc__(self):
        free(self._pfx)

    @property
    def where(self):
        """``(object_name, offset)``: where the block was read."""
        return (self._object_name, self._offset)

    cdef int _bad(self, str why) except -1:
        raise CorruptionError(self._object_name, self._offset, f"malformed data block ({why})")

    def __len__(self):
        return self._n

    cdef Py_ssize_t _kstart(self, Py_ssize_t i) noexcept nogil:
        return self._ends[i - 1] if i else 0

    cdef Py_ssize_t _vstart(self, Py_ssize_t i) noexcept nogil:
        return self._ends[self._n + i - 1] if i else 0

    cdef bytes _key(self, Py_ssize_t i):
        cdef Py_ssize_t s = self._kstart(i)
        return PyBytes_FromStringAndSize(<const char*>self._keys + s, self._ends[i] - s)

    cdef Py_ssize_t _lower_bound(self, const unsigned char* k, Py_ssize_t nk,
                                 Py_ssize_t lo) noexcept nogil:
        """First index >= lo whose key is >= k."""
        cdef Py_ssize_t hi = self._n, mid, s
        cdef uint64_t pk = _prefix(k, nk), p
        while lo < hi:
            mid = (lo + hi) >> 1
            p = self._pfx[mid]
            if p < pk:
                lo = mid + 1
            elif p > pk:
                hi = mid
            else:  # same 8-byte prefix: compare the whole keys
                s = self._kstart(mid)
                if _cmp(self._keys + s, self._ends[mid] - s, k, nk) < 0:
                    lo = mid + 1
                else:
                    hi = mid
        return lo

    cdef bint _key_eq(self, Py_ssize_t i, const unsigned char* k,
                             Py_ssize_t nk) noexcept nogil:
        cdef Py_ssize_t s = self._kstart(i)
        return (self._ends[i] - s == <uint32_t>nk
                and memcmp(self._keys + s, k, nk) == 0)

    cdef object _record(self, Py_ssize_t i):
        cdef uint8_t kind = self._kinds[i]
        if kind == KIND_DELETE:
            return None
        cdef Py_ssize_t s = self._vstart(i)
        cdef bytes value = PyBytes_FromStringAndSize(<const char*>self._vals + s,
                                                     self._ends[self._n + i] - s)
        if kind == KIND_PUT:
            return value
        if kind == KIND_PUT_EXPIRING and self._exps != NULL:
            return (value, _le64(self._exps + 8 * i))
        raise CorruptionError(self._object_name, self._offset,
                              f"unknown entry kind {kind} in entry {i}")

    def record_at(self, Py_ssize_t i):
        """The record of entry ``i`` (bytes, ``None`` or ``(bytes, expire_at_ms)``)."""
        if i < 0 or i >= self._n:
            raise IndexError("block entry out of range")
        return self._record(i)

    cpdef object get(self, bytes key):
        """The record for ``key``, or :data:`MISSING`."""
        cdef const unsigned char* k = <const unsigned char*>PyBytes_AS_STRING(key)
        cdef Py_ssize_t nk = PyBytes_GET_SIZE(key)
        cdef Py_ssize_t i = self._lower_bound(k, nk, 0)
        if i < self._n and self._key_eq(i, k, nk):
            return self._record(i)
        return _MISSING

    def items_from(self, start, end):
        """Iterate ``(key, record)`` for keys in ``[start, end)`` in order."""
        cdef Py_ssize_t i = 0, stop = self._n
        _check_bound(start)
        _check_bound(end)
        if start is not None:
            i = self._lower_bound(<const unsigned char*>PyBytes_AS_STRING(start),
                                  PyBytes_GET_SIZE(start), 0)
        if end is not None:
            stop = self._lower_bound(<const unsigned char*>PyBytes_AS_STRING(end),
                                     PyBytes_GET_SIZE(end), 0)
        return BlockIter._make(self, i, stop)

    # Compatibility with the pure-Python Block's attributes (verify, compaction, tests).
    @property
    def keys(self):
        if self._keylist is None:
            self._keylist = [self._key(i) for i in range(self._n)]
        return self._keylist

    @property
    def kinds(self):
        return PyBytes_FromStringAndSize(<const char*>self._kinds, self._n)

    @property
    def values(self):
        return PyBytes_FromStringAndSize(<const char*>self._vals,
                                         self._size - (self._vals - self._b))

    @property
    def value_ends(self):
        from array import array
        return array("I", [self._ends[self._n + i] for i in range(self._n)])

    @property
    def expiries(self):
        if self._exps == NULL:
            return None
        from array import array
        return array("Q", [_le64(self._exps + 8 * i) for i in range(self._n)])


cdef uint8_t COMPRESSION_NONE = _fmt.COMPRESSION_NONE
cdef uint8_t COMPRESSION_LZ4 = _fmt.COMPRESSION_LZ4
cdef Py_ssize_t TRAILER_SIZE = _fmt.TRAILER_SIZE
cdef uint64_t LZ4_MAX_RATIO = _fmt.LZ4_MAX_RATIO
# zlib's CRC-32 polynomial from silt.checksum (zlib-ng's folding implementation: about 20x the
# table loop above on 8 KiB) and lz4's decoder, called on the block's bytes in place.
cdef object _zlib_crc32 = _fast_crc32
cdef object _lz4_decompress = _lz4_block.decompress


def decode_block(framed, object_name, offset):
    """Compiled twin of :func:`silt.sst.block.decode_block`: the framed block's checksum checked
    (zlib's CRC-32 over the bytes in place), decompressed, decoded; an uncompressed block is
    decoded over the bytes read, without a copy: ``framed`` as bytes, or as a contiguous
    memoryview of bytes (a direct reader's slice of a memory map), which the block keeps."""
    cdef Py_buffer* buf
    cdef Py_ssize_t size
    cdef char* p
    cdef object base
    cdef PyObject* owner
    if PyBytes_CheckExact(framed):
        size = PyBytes_GET_SIZE(framed)
        p = PyBytes_AS_STRING(framed)
    else:
        if PyMemoryView_Check(framed):
            buf = PyMemoryView_GET_BUFFER(framed)
            if buf.itemsize != 1 or not PyBuffer_IsContiguous(buf, b'C'):
                framed = bytes(framed)
        else:
            framed = bytes(framed)
        if PyBytes_CheckExact(framed):
            size = PyBytes_GET_SIZE(framed)
            p = PyBytes_AS_STRING(framed)
        else:
            buf = PyMemoryView_GET_BUFFER(framed)
            size = buf.len
            p = <char*>buf.buf
            owner = silt_buffer_owner(buf)
            base = <object>owner if owner != NULL else None
            if PyBytes_CheckExact(base) or getattr(type(base), "stable_buffer", False):
                # Keep what the view shows instead of the view: its bytes stay where they are
                # while it lives (bytes; a file's map, silt.tiers.mapping), and a memoryview
                # per cached block would be one more object for the garbage collector to walk.
                framed = base
    if size < TRAILER_SIZE:
        raise CorruptionError(object_name, offset, f"block of {size} bytes is truncated")
    cdef Py_ssize_t body_len = size - TRAILER_SIZE
    cdef uint8_t compression = <uint8_t>p[body_len]
    cdef uint32_t crc = _le32(<const unsigned char*>p + body_len + 1)
    if _zlib_crc32(PyMemoryView_FromMemory(p, body_len + 1, PyBUF_READ)) != crc:
        raise CorruptionError(object_name, offset, f"checksum mismatch in block of {size} bytes")
    cdef Block blk
    if compression == COMPRESSION_NONE:
        blk = Block.__new__(Block)
        blk._init(framed, <const unsigned char*>p, body_len, object_name, offset)
        return blk
    if compression == COMPRESSION_LZ4:
        if body_len < 4 or (<uint64_t>_le32(<const unsigned char*>p)
                            > LZ4_MAX_RATIO * <uint64_t>body_len):
            raise CorruptionError(object_name, offset, "lz4 stream has an impossible size")
        try:
            payload = _lz4_decompress(PyMemoryView_FromMemory(p, body_len, PyBUF_READ))
        except Exception as exc:
            raise CorruptionError(object_name, offset, f"lz4 stream is invalid ({exc})") from None
        return Block(payload, object_name, offset)
    raise CorruptionError(object_name, offset, f"unknown compression code {compression}")


cdef int _check_bound(object b) except -1:
    if b is not None and not PyBytes_CheckExact(b):
        raise TypeError(f"range bounds must be bytes or None, got {type(b).__name__}")
    return 0


cdef class BlockIter:
    """Iterator over ``(key, record)`` of entries ``[i, stop)`` of a compiled :class:`Block`."""

    cdef Block _blk
    cdef Py_ssize_t _i, _stop

    @staticmethod
    cdef BlockIter _make(Block blk, Py_ssize_t i, Py_ssize_t stop):
        cdef BlockIter it = BlockIter.__new__(BlockIter)
        it._blk = blk
        it._i = i
        it._stop = stop
        return it

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t i = self._i
        if i >= self._stop:
            raise StopIteration
        self._i = i + 1
        return (self._blk._key(i), self._blk._record(i))


# --- SST building ----------------------------------------------------------------------------
def split_blocks(keys, records, Py_ssize_t target):
    """Where ``build_sst`` closes data blocks, and the SST's tombstone/expiry counters.

    Returns ``(ends, tombstones, expiring, min_expiry_ms, max_expiry_ms)``; ``ends[j]`` is the
    exclusive end index of block ``j``.
    """
    cdef list ks = keys if PyList_CheckExact(keys) else list(keys)
    cdef list rs = records if PyList_CheckExact(records) else list(records)
    cdef Py_ssize_t n = len(ks), i, size = 0
    cdef Py_ssize_t tombstones = 0, expiring = 0
    cdef object min_exp = 0, max_exp = 0, exp, r, key
    cdef list ends = []
    if len(rs) < n:
        raise IndexError("fewer records than keys")
    for i in range(n):
        key = <object>PyList_GET_ITEM(ks, i)
        r = <object>PyList_GET_ITEM(rs, i)
        if PyBytes_CheckExact(r):
            size += len(key) + PyBytes_GET_SIZE(r) + BLOCK_ENTRY_SIZE
        elif r is None:
            size += len(key) + BLOCK_ENTRY_SIZE
            tombstones += 1
        else:
            size += len(key) + len(r[0]) + BLOCK_EXPIRY_ENTRY_SIZE
            expiring += 1
            exp = r[1]
            if not min_exp or exp < min_exp:
                min_exp = exp
            if exp > max_exp:
                max_exp = exp
        if size >= target or i == n - 1:
            ends.append(i + 1)
            size = 0
    return ends, tombstones, expiring, min_exp, max_exp


# --- the block cache -------------------------------------------------------------------------
@cython.final
cdef class BlockCache:
    """LRU cache bounded by the sum of the entries' ``charge`` (bytes): the twin of
    :class:`silt.cache.BlockCache`, over the same OrderedDict and lock, whose ``get`` the
    compiled readers call without a Python frame. Thread-safe."""

    cdef public Py_ssize_t capacity, used, hits, misses, evictions
    cdef readonly object _data
    cdef object _move, _acquire, _release

    def __init__(self, Py_ssize_t capacity_bytes):
        self.capacity = capacity_bytes
        self.used = self.hits = self.misses = self.evictions = 0
        self._data = _OrderedDict()
        self._move = self._data.move_to_end
        lock = _Lock()
        self._acquire = lock.acquire
        self._release = lock.release

    cdef object _get(self, object key):
        cdef PyObject* p
        self._acquire()
        try:
            p = PyDict_GetItem(self._data, key)  # a read: the OrderedDict is a dict
            if p == NULL:
                self.misses += 1
                return None
            self._move(key)
            self.hits += 1
            return <object>PyTuple_GET_ITEM(<object>p, 0)
        finally:
            self._release()

    def get(self, key):
        """The cached value or ``None``; a hit makes the entry most recently used."""
        return self._get(key)

    def get_many(self, list keys):
        """``[get(key) for key in keys]`` under one lock acquisition (multi_get's blocks)."""
        cdef Py_ssize_t i, n = PyList_GET_SIZE(keys)
        cdef list out = [None] * n
        cdef PyObject* p
        cdef object key
        self._acquire()
        try:
            for i in range(n):
                key = <object>PyList_GET_ITEM(keys, i)
                p = PyDict_GetItem(self._data, key)
                if p == NULL:
                    self.misses += 1
                else:
                    self._move(key)
                    self.hits += 1
                    out[i] = <object>PyTuple_GET_ITEM(<object>p, 0)
        finally:
            self._release()
        return out

    def holds(self, list keys):
        """Whether each of ``keys`` is cached, without making it recently used or counting a
        hit or a miss (a look at what the cache holds, not a read)."""
        self._acquire()
        try:
            return [key in self._data for key in keys]
        finally:
            self._release()

    def put(self, key, value, Py_ssize_t charge):
        """Insert ``value``; evicts least recently used entries to stay within capacity.

        An entry larger than the whole capacity is not cached.
        """
        if charge > self.capacity:
            return
        self._acquire()
        try:
            old = self._data.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._data[key] = (value, charge)
            self.used += charge
            while self.used > self.capacity:
                evicted = self._data.popitem(last=False)[1]
                self.used -= evicted[1]
                self.evictions += 1
        finally:
            self._release()

    def resize(self, Py_ssize_t capacity_bytes):
        """Set the capacity; evicts least recently used entries until the rest fit in it."""
        self._acquire()
        try:
            self.capacity = capacity_bytes
            while self.used > capacity_bytes and self._data:
                evicted = self._data.popitem(last=False)[1]
                self.used -= evicted[1]
                self.evictions += 1
        finally:
            self._release()

    def __len__(self):
        return len(self._data)

    def clear(self):
        self._acquire()
        try:
            self._data.clear()
            self.used = 0
        finally:
            self._release()


# --- SST reads -------------------------------------------------------------------------------
cdef inline Py_ssize_t _bisect_bytes(list a, const unsigned char* k, Py_ssize_t nk,
                                     Py_ssize_t lo, Py_ssize_t hi):
    """bisect_left over a list of bytes, with memcmp."""
    cdef Py_ssize_t mid
    cdef object x
    while lo < hi:
        mid = (lo + hi) >> 1
        x = <object>PyList_GET_ITEM(a, mid)
        if _cmp(<const unsigned char*>PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x), k, nk) < 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t _next_block(list last_keys, const unsigned char* k, Py_ssize_t nk,
                                   Py_ssize_t b, Py_ssize_t nb):
    """The first block from ``b`` on whose last key is >= the key (``nb`` when none): for keys
    in sorted order the block never moves back, so each step starts where the last ended; it
    gallops (bisects) when many blocks lie between two keys."""
    cdef object last
    while b < nb:
        last = <object>PyList_GET_ITEM(last_keys, b)
        if _cmp(<const unsigned char*>PyBytes_AS_STRING(last), PyBytes_GET_SIZE(last),
                k, nk) >= 0:
            break
        b += 1
        if b < nb:
            last = <object>PyList_GET_ITEM(last_keys, b)
            if _cmp(<const unsigned char*>PyBytes_AS_STRING(last),
                    PyBytes_GET_SIZE(last), k, nk) < 0:
                b = _bisect_bytes(last_keys, k, nk, b, nb)
    return b


@cython.final
@cython.no_gc
cdef class KeyIndex:
    """An SST's block index as the compiled reads search it: the big-endian first 8 bytes of
    each block's last key in one array of 8 bytes a block (zero-padded), beside the list of
    last keys itself. A search runs over the array, which stays in the CPU cache, and reads a
    last key (one object each, scattered over the heap: a cache miss per step) only where two
    prefixes tie. Built once per decoded tail (:func:`silt.sst.tail.key_index`); immutable.
    Not tracked by the garbage collector: it refers only to a list of bytes."""

    cdef list _keys
    cdef uint64_t* _pfx
    cdef Py_ssize_t _n

    def __cinit__(self, list last_keys):
        cdef Py_ssize_t i, n = PyList_GET_SIZE(last_keys)
        cdef object key
        for i in range(n):
            if not PyBytes_CheckExact(<object>PyList_GET_ITEM(last_keys, i)):
                raise TypeError("last keys must be bytes")
        self._pfx = <uint64_t*>malloc(max(n, 1) * sizeof(uint64_t))
        if self._pfx == NULL:
            raise MemoryError()
        for i in range(n):
            key = <object>PyList_GET_ITEM(last_keys, i)
            self._pfx[i] = _prefix(<const unsigned char*>PyBytes_AS_STRING(key),
                                   PyBytes_GET_SIZE(key))
        self._keys = last_keys
        self._n = n

    def __dealloc__(self):
        free(self._pfx)

    def __len__(self):
        return self._n

    def lower_bound(self, bytes key, Py_ssize_t lo=0):
        """The first block from ``lo`` on whose last key is >= ``key`` (``len`` when none)."""
        if lo < 0:
            lo = 0
        return self._lower(<const unsigned char*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key),
                           _prefix(<const unsigned char*>PyBytes_AS_STRING(key),
                                   PyBytes_GET_SIZE(key)), lo, self._n)

    cdef inline bint _below(self, Py_ssize_t i, const unsigned char* k, Py_ssize_t nk,
                            uint64_t pk) noexcept:
        """Whether block ``i``'s last key is < the key (``pk``: its prefix)."""
        cdef uint64_t p = self._pfx[i]
        cdef object x
        if p != pk:
            return p < pk
        x = <object>PyList_GET_ITEM(self._keys, i)
        return _cmp(<const unsigned char*>PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x), k, nk) < 0

    cdef inline Py_ssize_t _lower(self, const unsigned char* k, Py_ssize_t nk, uint64_t pk,
                                  Py_ssize_t lo, Py_ssize_t hi) noexcept:
        cdef Py_ssize_t mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._below(mid, k, nk, pk):
                lo = mid + 1
            else:
                hi = mid
        return lo

    cdef inline Py_ssize_t _next(self, const unsigned char* k, Py_ssize_t nk, uint64_t pk,
                                 Py_ssize_t b) noexcept:
        """``_next_block`` over the prefixes: the first block from ``b`` on whose last key is
        >= the key; one step when it is the next block, a bisect of the rest otherwise."""
        if b < self._n and self._below(b, k, nk, pk):
            b += 1
            if b < self._n and self._below(b, k, nk, pk):
                b = self._lower(k, nk, pk, b + 1, self._n)
        return b


def key_index(last_keys):
    """The :class:`KeyIndex` of an SST tail's last keys (a list of bytes)."""
    return KeyIndex(last_keys)


cdef inline Py_ssize_t _find_in(object t, BloomFilter bloom, bytes key, long long h) except -2:
    """``_find_block`` over the decoded tail ``t``, through its :class:`KeyIndex` when it has
    one (a tail decoded by the pure-Python twins has none)."""
    cdef object index = getattr(t, "key_index", None)
    cdef Py_ssize_t i
    cdef const unsigned char* k
    cdef Py_ssize_t nk
    if type(index) is not KeyIndex:
        return _find_block(bloom, t.last_keys, key, h)
    if bloom is not None:
        if h < 0:
            h = _hash(key)
        if not bloom._test(<uint32_t>h):
            return -1
    k = <const unsigned char*>PyBytes_AS_STRING(key)
    nk = PyBytes_GET_SIZE(key)
    i = (<KeyIndex>index)._lower(k, nk, _prefix(k, nk), 0, (<KeyIndex>index)._n)
    return i if i < (<KeyIndex>index)._n else -1


cdef Py_ssize_t _find_block(BloomFilter bloom, list last_keys, bytes key,
                            long long h) except -2:
    if bloom is not None:
        if h < 0:
            h = _hash(key)
        if not bloom._test(<uint32_t>h):
            return -1
    cdef Py_ssize_t n = PyList_GET_SIZE(last_keys)
    cdef Py_ssize_t i = _bisect_bytes(last_keys, <const unsigned char*>PyBytes_AS_STRING(key),
                                      PyBytes_GET_SIZE(key), 0, n)
    return i if i < n else -1


def find_block(BloomFilter bloom, list last_keys, bytes key, long long h=-1):
    """The only block of an SST that can hold ``key``, or -1 when the bloom filter rules the key
    out or it is past the last key. ``h`` is ``bloom_hash(key)`` when the caller has it."""
    return _find_block(bloom, last_keys, key, h)


cdef object _get_one(object reader, bytes key, const unsigned char* k, Py_ssize_t nk,
                     long long* h):
    """``SstReader.get`` of ``key`` in ``reader`` when its key range holds ``key``, else
    MISSING; ``h[0]`` is the bloom hash, computed here on first need."""
    cdef object info, t, cache, blk, r, lo, hi, bloom
    cdef Py_ssize_t i
    info = reader.info
    lo = info.smallest
    hi = info.largest
    if not (PyBytes_CheckExact(lo) and PyBytes_CheckExact(hi)):
        raise TypeError("SST key bounds must be bytes")
    if (_cmp(<const unsigned char*>PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo), k, nk) > 0
            or _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(hi),
                    PyBytes_GET_SIZE(hi)) > 0):
        return _MISSING
    t = reader.loaded_tail
    if t is None:
        t = reader.tail
    if h[0] < 0:
        h[0] = _hash(key)
    bloom = t.bloom
    if bloom is not None and type(bloom) is not BloomFilter:
        return reader.get(key, h[0])  # a tail decoded by the pure-Python twins
    i = _find_in(t, bloom, key, h[0])
    if i < 0:
        return _MISSING
    cache = reader.cache
    blk = None
    if type(cache) is BlockCache:
        blk = (<BlockCache>cache)._get(_block_key(reader, t, i))
    elif cache is not None:
        blk = cache.get(_block_key(reader, t, i))
    if blk is None:
        blk = _read_missed(reader, i, cache)
    if type(blk) is Block:
        return (<Block>blk).get(key)
    return blk.get(key)


cdef inline object _block_key(object reader, object t, Py_ssize_t i):
    """Block ``i``'s key in the block cache: the tail's own tuple (``SstTail.block_keys``: the
    cache's dict then finds the entry by identity), or a new ``(cache_id, i)``."""
    cdef object keys = getattr(t, "block_keys", None)
    if type(keys) is list and i < PyList_GET_SIZE(<list>keys):
        return <object>PyList_GET_ITEM(keys, i)
    return (reader.cache_id, i)


cdef object _read_missed(object reader, Py_ssize_t i, object cache):
    """``reader.read_block(i)`` for a get that missed the cache, without its two Python frames:
    the store's direct reader (``reader.direct_read()``) is called here, a failure of it goes
    to ``reader.direct_failed`` (as in ``SstReader._get_range``), and the block is checked,
    decoded and put into ``cache`` here. A store without a direct reader goes through
    ``read_block``. Only public reader names are used (tests/test_twins.py holds it to that)."""
    cdef object read = reader.direct_read()
    cdef object t, off, size, data, blk
    if read is None:
        return reader.read_block(i)
    t = reader.loaded_tail
    if t is None:
        t = reader.tail
    off = t.block_offsets[i]
    size = t.block_sizes[i]
    try:
        data = read(off, size)
    except Exception as exc:
        data = reader.direct_failed(exc, off, size)
    if len(data) != size:
        raise CorruptionError(reader.name, off, f"block truncated: {len(data)} of {size} bytes")
    blk = decode_block(data, reader.name, off)
    if type(cache) is BlockCache:
        (<BlockCache>cache).put(_block_key(reader, t, i), blk, (<Block>blk).charge)
    elif cache is not None:
        cache.put(_block_key(reader, t, i), blk, blk.charge)
    return blk


def get_from(readers, bytes key, long long h=-1):
    """The record of ``key`` in the first of ``readers`` (SstReaders, newest first) whose key
    range holds it and that has it, or MISSING: ``SstReader.get`` over each, without a Python
    frame per SST and with one bloom hash for all."""
    cdef object reader, r
    cdef const unsigned char* k = <const unsigned char*>PyBytes_AS_STRING(key)
    cdef Py_ssize_t nk = PyBytes_GET_SIZE(key)
    for reader in readers:
        r = _get_one(reader, key, k, nk, &h)
        if r is not _MISSING:
            return r
    return _MISSING


@cython.final
cdef class KeyBounds:
    """Compiled twin of :func:`silt.sst.reader.key_bounds`' pair: the smallest and largest key
    of a read view's SSTs (``bounds[0]``, ``bounds[1]``), and its L0 SSTs' own key ranges and
    filters kept beside them, so that :func:`get_levels` checks each L0 SST's range and filter
    without reading its attributes (several Python attribute reads per SST and get, with a
    dozen overlapping L0 SSTs after a load). A filter is taken once its SST's tail is loaded
    (tails load on first read and never change). Immutable but for that; thread-safe (a race
    takes the same filter twice)."""

    cdef readonly object lo, hi
    cdef object _l0  # the L0 readers this was built for (get_levels uses it only for them)
    cdef list _readers, _smallest, _largest
    cdef list _blooms  # per L0 SST: its BloomFilter, False when it has none, None: not yet

    def __init__(self, lo, hi, l0):
        if not (PyBytes_CheckExact(lo) and PyBytes_CheckExact(hi)):
            raise TypeError("key bounds must be bytes")
        self.lo, self.hi, self._l0 = lo, hi, l0
        cdef object sst, first, last
        self._readers = list(l0)
        self._smallest = []
        self._largest = []
        for sst in self._readers:
            first = sst.info.smallest
            last = sst.info.largest
            if not (PyBytes_CheckExact(first) and PyBytes_CheckExact(last)):
                raise TypeError("SST key bounds must be bytes")
            self._smallest.append(first)
            self._largest.append(last)
        self._blooms = [None] * len(self._readers)

    def __len__(self):
        return 2

    def __getitem__(self, Py_ssize_t i):
        if i == 0 or i == -2:
            return self.lo
        if i == 1 or i == -1:
            return self.hi
        raise IndexError("key bounds have two items")

    def __eq__(self, other):
        return isinstance(other, (tuple, KeyBounds)) and tuple(self) == tuple(other)

    def __repr__(self):
        return f"KeyBounds({self.lo!r}, {self.hi!r})"

    cdef inline object _bloom(self, Py_ssize_t i):
        """L0 SST ``i``'s compiled filter, ``False`` when it has none to test here, or
        ``None`` while its tail is not loaded."""
        cdef object b = <object>PyList_GET_ITEM(self._blooms, i)
        cdef object t
        if b is None:
            t = (<object>PyList_GET_ITEM(self._readers, i)).loaded_tail
            if t is None:
                return None
            b = t.bloom
            if type(b) is not BloomFilter:
                b = False
            self._blooms[i] = b
        return b


def key_bounds(l0, levels):
    """Compiled twin of :func:`silt.sst.reader.key_bounds`: the pair as a :class:`KeyBounds`
    (with the L0 SSTs' ranges and filters), or ``None`` when there is no SST."""
    cdef list firsts = [], lasts = []
    cdef object sst, level, run
    for sst in l0:
        firsts.append(sst.info.smallest)
        lasts.append(sst.info.largest)
    for level in levels:
        run = level.readers
        if run:
            firsts.append(run[0].info.smallest)
            lasts.append(run[len(run) - 1].info.largest)  # (no wraparound here)
    return KeyBounds(min(firsts), max(lasts), l0) if firsts else None


# From this many L0 SSTs on, a get starts loading their bloom probes before testing them.
cdef Py_ssize_t L0_PREFETCH = 4


def get_levels(l0, levels, bytes key, long long h=-1, bounds=None):
    """The record of ``key`` in the L0 SSTs ``l0`` (newest first), else in the first of
    ``levels`` (sorted runs, each with ``readers`` and their ``largest`` keys) that has it, or
    MISSING: ``get_from`` over L0 and one bisect per level, with one bloom hash for all. A key
    outside ``bounds`` (``key_bounds`` of them) is MISSING at once; a :class:`KeyBounds` built
    for ``l0`` also checks each L0 SST's range and filter without a Python attribute read."""
    cdef object reader, r, level
    cdef list largest
    cdef Py_ssize_t i, n0
    cdef const unsigned char* k = <const unsigned char*>PyBytes_AS_STRING(key)
    cdef Py_ssize_t nk = PyBytes_GET_SIZE(key)
    cdef object t, bloom, lo, hi
    cdef KeyBounds kb = None
    if bounds is not None:
        if type(bounds) is KeyBounds:
            kb = <KeyBounds>bounds
            lo = kb.lo
            hi = kb.hi
            if kb._l0 is not l0:
                kb = None
        else:
            lo = bounds[0]
            hi = bounds[1]
        if not (PyBytes_CheckExact(lo) and PyBytes_CheckExact(hi)):
            raise TypeError("key bounds must be bytes")
        if (_cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo)) < 0
                or _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(hi),
                        PyBytes_GET_SIZE(hi)) > 0):
            return _MISSING
    if kb is not None:
        n0 = PyList_GET_SIZE(kb._readers)
        if n0:
            if h < 0:
                h = _hash(key)
            if n0 >= L0_PREFETCH:
                for i in range(n0):
                    bloom = kb._bloom(i)
                    if bloom is not None and bloom is not False:
                        (<BloomFilter>bloom)._prefetch(<uint32_t>h)
            for i in range(n0):
                lo = <object>PyList_GET_ITEM(kb._smallest, i)
                hi = <object>PyList_GET_ITEM(kb._largest, i)
                if (_cmp(<const unsigned char*>PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo),
                         k, nk) > 0
                        or _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(hi),
                                PyBytes_GET_SIZE(hi)) > 0):
                    continue
                bloom = kb._bloom(i)
                if (bloom is not None and bloom is not False
                        and not (<BloomFilter>bloom)._test(<uint32_t>h)):
                    continue
                r = _get_one(<object>PyList_GET_ITEM(kb._readers, i), key, k, nk, &h)
                if r is not _MISSING:
                    return r
    else:
        if len(l0) >= L0_PREFETCH:
            # Several overlapping L0 SSTs: their filters' probes are cache misses (the filters
            # are far larger than the CPU cache), so start them all before testing one by one.
            if h < 0:
                h = _hash(key)
            for reader in l0:
                t = reader.loaded_tail
                if t is not None:
                    bloom = t.bloom
                    if type(bloom) is BloomFilter:
                        (<BloomFilter>bloom)._prefetch(<uint32_t>h)
        for reader in l0:
            r = _get_one(reader, key, k, nk, &h)
            if r is not _MISSING:
                return r
    for level in levels:
        largest = level.largest
        i = _bisect_bytes(largest, k, nk, 0, PyList_GET_SIZE(largest))
        if i < PyList_GET_SIZE(largest):
            r = _get_one(level.readers[i], key, k, nk, &h)
            if r is not _MISSING:
                return r
    return _MISSING


def plan_probe(list keys, Py_ssize_t lo, Py_ssize_t hi, BloomFilter bloom, list last_keys):
    """Group sorted ``keys[lo:hi]`` by the block that may hold them (a merge against the index).

    Returns ``(unresolved, blocks, groups)``: ``unresolved`` starts with ``keys[:lo]`` plus the
    keys the bloom filter rules out or that are past the last block; ``groups[j]`` holds the keys
    to look up in block ``blocks[j]``.
    """
    cdef list unresolved = keys[:lo]
    cdef list blocks = []
    cdef list groups = []
    cdef list group = None
    cdef Py_ssize_t nb = PyList_GET_SIZE(last_keys), b = 0, j, cur = -1
    cdef object key, last
    cdef const unsigned char* k
    cdef Py_ssize_t nk
    for j in range(lo, hi):
        key = <object>PyList_GET_ITEM(keys, j)
        if not PyBytes_CheckExact(key):
            raise TypeError("keys must be bytes")
        k = <const unsigned char*>PyBytes_AS_STRING(key)
        nk = PyBytes_GET_SIZE(key)
        if bloom is not None and not bloom._test(_hash(<bytes>key)):
            unresolved.append(key)
            continue
        b = _next_block(last_keys, k, nk, b, nb)  # keys are sorted: never moves back
        if b >= nb:
            unresolved.append(key)
            continue
        if b != cur:
            cur = b
            group = []
            blocks.append(b)
            groups.append(group)
        group.append(key)
    return unresolved, blocks, groups


cpdef lookup_many(Block blk, list keys, dict found, list unresolved):
    """Look sorted ``keys`` up in ``blk``: records go to ``found``, misses to ``unresolved``."""
    cdef Py_ssize_t j, i = 0, n = PyList_GET_SIZE(keys), nk
    cdef object key
    cdef const unsigned char* k
    for j in range(n):
        key = <object>PyList_GET_ITEM(keys, j)
        if not PyBytes_CheckExact(key):
            raise TypeError("keys must be bytes")
        k = <const unsigned char*>PyBytes_AS_STRING(key)
        nk = PyBytes_GET_SIZE(key)
        i = blk._lower_bound(k, nk, i)
        if i < blk._n and blk._key_eq(i, k, nk):
            found[key] = blk._record(i)
        else:
            unresolved.append(key)


def lookup_groups(list blocks, list groups, dict found, list unresolved):
    """:func:`lookup_many` of ``groups[j]`` in ``blocks[j]`` for every ``j``."""
    cdef Py_ssize_t j
    for j in range(PyList_GET_SIZE(groups)):
        lookup_many(<Block?>PyList_GET_ITEM(blocks, j), <list>PyList_GET_ITEM(groups, j),
                    found, unresolved)


cdef object _Readahead = None


cdef class RangeIter:
    """``(key, record)`` for keys in ``[start, end)`` of one SST, block by block, in key order."""

    cdef object _reader
    cdef list _last_keys
    cdef object _start, _end
    cdef bint _fill
    cdef Py_ssize_t _bi, _nb
    cdef Block _blk
    cdef Py_ssize_t _i, _stop
    cdef object _it  # a non-compiled block's iterator
    cdef Py_ssize_t _first
    cdef object _blocks  # silt.sst.readahead.Readahead: one ranged GET for a run of missed blocks

    def __init__(self, reader, start, end, bint fill_cache=False):
        _check_bound(start)
        _check_bound(end)
        self._reader = reader
        self._start = start
        self._end = end
        self._fill = fill_cache
        self._bi = -1
        self._nb = 0

    def __iter__(self):
        return self

    cdef int _open(self, Py_ssize_t bi) except -1:
        blk = self._blocks.block(bi)
        start = self._start if bi == self._first else None
        if type(blk) is Block:
            self._blk = <Block>blk
            self._it = None
            self._i = 0
            self._stop = self._blk._n
            if start is not None:
                self._i = self._blk._lower_bound(
                    <const unsigned char*>PyBytes_AS_STRING(start), PyBytes_GET_SIZE(start), 0)
            if self._end is not None:
                self._stop = self._blk._lower_bound(
                    <const unsigned char*>PyBytes_AS_STRING(self._end),
                    PyBytes_GET_SIZE(self._end), 0)
        else:
            self._blk = None
            self._it = iter(blk.items_from(start, self._end))
        return 0

    def __next__(self):
        cdef Py_ssize_t i
        cdef object last
        if self._bi < 0:  # first call: load the tail lazily, like the generator it replaces
            self._last_keys = self._reader.tail.last_keys
            self._nb = len(self._last_keys)
            if self._start is not None:
                self._bi = _bisect_bytes(
                    self._last_keys, <const unsigned char*>PyBytes_AS_STRING(self._start),
                    PyBytes_GET_SIZE(self._start), 0, self._nb)
            else:
                self._bi = 0
            self._first = self._bi
            if self._bi >= self._nb:
                raise StopIteration
            global _Readahead
            if _Readahead is None:  # silt.sst imports this module: bind it late
                from silt.sst.readahead import Readahead as _Readahead
            self._blocks = _Readahead(self._reader, self._end, self._fill)
            self._open(self._bi)
        while True:
            if self._blk is not None:
                i = self._i
                if i < self._stop:
                    self._i = i + 1
                    return (self._blk._key(i), self._blk._record(i))
            elif self._it is not None:
                for item in self._it:
                    return item
            if self._bi >= self._nb:
                raise StopIteration
            # the current block is exhausted: stop at the end bound, else open the next one
            last = <object>PyList_GET_ITEM(self._last_keys, self._bi)
            if self._end is not None and last >= self._end:
                self._bi = self._nb
                raise StopIteration
            self._bi += 1
            if self._bi >= self._nb:
                raise StopIteration
            self._open(self._bi)


# --- merging ---------------------------------------------------------------------------------
cdef class merge_newest_first:
    """Iterate ``(key, record)`` over sorted sources in key order; on ties the lowest index
    (newest source) wins and older records of the same key are skipped."""

    cdef list _its
    cdef list _heads      # current (key, record) item of each source, or None
    cdef int* _heap       # source indexes, a binary min-heap on (key, index)
    cdef int _size
    cdef object _last
    cdef bint _started

    def __cinit__(self, sources):
        self._its = [iter(s) for s in sources]
        cdef int n = len(self._its)
        self._heads = [None] * n
        self._heap = <int*>malloc(max(n, 1) * sizeof(int))
        if self._heap == NULL:
            raise MemoryError()
        self._size = 0
        self._last = None
        self._started = False

    cdef int _start(self) except -1:
        """Pull every source's first item (on the first ``next``: nothing is read before)."""
        self._started = True
        cdef int i, n = len(self._its)
        cdef object item
        for i in range(n):
            item = self._pull(i)
            if item is not None:
                self._heads[i] = item
                self._heap[self._size] = i
                self._size += 1
        for i in range(self._size // 2 - 1, -1, -1):
            self._sift(i)
        return 0

    def __dealloc__(self):
        free(self._heap)

    cdef object _pull(self, int i):
        item = next(<object>PyList_GET_ITEM(self._its, i), None)
        if item is None:
            return None
        if not PyTuple_CheckExact(item) or PyTuple_GET_SIZE(item) != 2:
            item = tuple(item)
            if len(item) != 2:
                raise ValueError("merge sources must yield (key, record) pairs")
        if not PyBytes_CheckExact(<object>PyTuple_GET_ITEM(item, 0)):
            raise TypeError("merge keys must be bytes")
        return item

    cdef bint _less(self, int a, int b):
        ka = <object>PyTuple_GET_ITEM(<tuple>PyList_GET_ITEM(self._heads, a), 0)
        kb = <object>PyTuple_GET_ITEM(<tuple>PyList_GET_ITEM(self._heads, b), 0)
        cdef int c = _cmp(<const unsigned char*>PyBytes_AS_STRING(ka), PyBytes_GET_SIZE(ka),
                          <const unsigned char*>PyBytes_AS_STRING(kb), PyBytes_GET_SIZE(kb))
        return c < 0 or (c == 0 and a < b)

    cdef void _sift(self, int pos):
        cdef int size = self._size, child, top = self._heap[pos]
        while True:
            child = 2 * pos + 1
            if child >= size:
                break
            if child + 1 < size and self._less(self._heap[child + 1], self._heap[child]):
                child += 1
            if not self._less(self._heap[child], top):
                break
            self._heap[pos] = self._heap[child]
            pos = child
        self._heap[pos] = top

    def __iter__(self):
        return self

    def __next__(self):
        cdef int top
        cdef object item, nxt, key
        if not self._started:
            self._start()
        while self._size > 0:
            top = self._heap[0]
            item = <object>PyList_GET_ITEM(self._heads, top)
            nxt = self._pull(top)
            self._heads[top] = nxt
            if nxt is None:
                self._size -= 1
                self._heap[0] = self._heap[self._size]
            if self._size > 0:
                self._sift(0)
            key = <object>PyTuple_GET_ITEM(item, 0)
            if self._last is not None and key == self._last:
                continue
            self._last = key
            return item
        raise StopIteration


cdef class live:
    """Drop tombstones and expired entries of ``(key, record)`` items; yield ``(key, value)``."""

    cdef object _it
    cdef object _now

    def __cinit__(self, items, now_ms):
        self._it = iter(items)
        self._now = now_ms

    def __iter__(self):
        return self

    def __next__(self):
        cdef object item, r
        while True:
            item = next(self._it, None)
            if item is None:
                raise StopIteration
            r = item[1]
            if PyBytes_CheckExact(r):
                if PyTuple_CheckExact(item):
                    return item
                return (item[0], r)
            if r is not None and self._now < r[1]:
                return (item[0], r[0])


def visible_many(list keys, dict found, now_ms):
    """``[visible(found.get(k, MISSING), now_ms) for k in keys]``."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(keys)
    cdef list out = [None] * n
    cdef PyObject* p
    cdef object r
    for i in range(n):
        p = PyDict_GetItem(found, <object>PyList_GET_ITEM(keys, i))
        if p == NULL:
            continue
        r = <object>p
        if PyBytes_CheckExact(r):
            out[i] = r
        elif r is not None and now_ms < r[1]:
            out[i] = r[0]
    return out


# --- writes ----------------------------------------------------------------------------------
def check_pairs(keys, values, Py_ssize_t max_key, Py_ssize_t max_value):
    """Index of the first pair that is not (bytes within the limits), or -1 when all are."""
    cdef Py_ssize_t i, n = len(keys)
    if len(values) != n:
        return 0
    cdef object k, v
    for i in range(n):
        k = keys[i]
        v = values[i]
        if (not PyBytes_CheckExact(k) or PyBytes_GET_SIZE(k) > max_key
                or not PyBytes_CheckExact(v) or PyBytes_GET_SIZE(v) > max_value):
            return i
    return -1


def insert_pairs(dict data, keys, values, Py_ssize_t start, Py_ssize_t approx,
                 Py_ssize_t limit):
    """Put ``keys[i] -> values[i]`` for ``i >= start`` into ``data`` until the memtable size
    ``approx`` reaches ``limit``. Returns ``(next_index, approx)``."""
    cdef Py_ssize_t i = start, n = len(keys)
    cdef object k, v
    while i < n:
        k = keys[i]
        v = values[i]
        PyDict_SetItem(data, k, v)
        approx += PyBytes_GET_SIZE(k) + PyBytes_GET_SIZE(v) + ENTRY_OVERHEAD
        i += 1
        if approx >= limit:
            break
    return i, approx


def check_ops(list ops, Py_ssize_t max_key, Py_ssize_t max_value):
    """True when every op is ``(bytes key, bytes value or None, None)`` within the limits."""
    cdef object op, k, v
    for op in ops:
        if not PyTuple_CheckExact(op) or PyTuple_GET_SIZE(op) != 3:
            return False
        k = <object>PyTuple_GET_ITEM(op, 0)
        v = <object>PyTuple_GET_ITEM(op, 1)
        if <object>PyTuple_GET_ITEM(op, 2) is not None:
            return False
        if not PyBytes_CheckExact(k) or PyBytes_GET_SIZE(k) > max_key:
            return False
        if v is not None and (not PyBytes_CheckExact(v) or PyBytes_GET_SIZE(v) > max_value):
            return False
    return True


def split_found(list keys, dict data, dict found):
    """Move the keys that ``data`` has into ``found`` (with their records); return the others."""
    cdef list rest = []
    cdef Py_ssize_t i
    cdef PyObject* p
    cdef object key
    if not data:
        return list(keys)
    for i in range(PyList_GET_SIZE(keys)):
        key = <object>PyList_GET_ITEM(keys, i)
        p = PyDict_GetItem(data, key)
        if p == NULL:
            rest.append(key)
        else:
            found[key] = <object>p
    return rest


ctypedef struct _Item:
    uint64_t pfx
    PyObject* key
    PyObject* value


cdef inline int _item_cmp(const _Item* a, const _Item* b) noexcept:
    if a.pfx != b.pfx:
        return -1 if a.pfx < b.pfx else 1
    return _cmp(<const unsigned char*>PyBytes_AS_STRING(<object>a.key),
                PyBytes_GET_SIZE(<object>a.key),
                <const unsigned char*>PyBytes_AS_STRING(<object>b.key),
                PyBytes_GET_SIZE(<object>b.key))


cdef void _insertion_sort(_Item* a, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i, j
    cdef _Item x
    for i in range(1, n):
        x = a[i]
        j = i
        while j > 0 and _item_cmp(&a[j - 1], &x) > 0:
            a[j] = a[j - 1]
            j -= 1
        a[j] = x


cdef void _merge_sort(_Item* a, _Item* tmp, Py_ssize_t n) noexcept:
    """Sort by full key (runs of keys sharing their first 8 bytes)."""
    if n <= 16:
        _insertion_sort(a, n)
        return
    cdef Py_ssize_t h = n // 2, i = 0, j, k = 0
    _merge_sort(a, tmp, h)
    _merge_sort(a + h, tmp, n - h)
    j = h
    while i < h and j < n:
        if _item_cmp(&a[j], &a[i]) < 0:
            tmp[k] = a[j]
            j += 1
        else:
            tmp[k] = a[i]
            i += 1
        k += 1
    while i < h:
        tmp[k] = a[i]
        i += 1
        k += 1
    while j < n:
        tmp[k] = a[j]
        j += 1
        k += 1
    memcpy(a, tmp, n * sizeof(_Item))


cdef _Item* _radix_sort(_Item* a, _Item* b, Py_ssize_t n) noexcept:
    """Sort ``a[:n]`` (``pfx`` set) by whole key, using ``b[:n]`` as scratch: an LSD radix sort
    on the first 8 bytes (bytes that never differ are skipped), then a merge sort of each run
    that shares them. Returns the one of ``a`` and ``b`` that holds the result."""
    cdef size_t counts[8][256]
    cdef size_t total, c
    cdef int pas, byte
    cdef bint trivial
    cdef Py_ssize_t j, run
    cdef _Item* t
    memset(counts, 0, sizeof(counts))
    for j in range(n):
        for pas in range(8):
            counts[pas][(a[j].pfx >> (8 * pas)) & 0xFF] += 1
    for pas in range(8):  # least significant byte first
        trivial = False
        for byte in range(256):
            if counts[pas][byte] == <size_t>n:
                trivial = True
                break
        if trivial:
            continue
        total = 0
        for byte in range(256):
            c = counts[pas][byte]
            counts[pas][byte] = total
            total += c
        for j in range(n):
            byte = (a[j].pfx >> (8 * pas)) & 0xFF
            b[counts[pas][byte]] = a[j]
            counts[pas][byte] += 1
        t = a
        a = b
        b = t
    j = 0
    while j < n:  # whole-key order inside runs of equal prefixes
        run = j + 1
        while run < n and a[run].pfx == a[j].pfx:
            run += 1
        if run - j > 1:
            _merge_sort(a + j, b, run - j)
        j = run
    return a


def sorted_items(dict data):
    """``(keys, records)`` of ``data`` in key order: an LSD radix sort on the keys' first 8 bytes
    (runs that share them are merge-sorted by whole key), read straight from the dict, so there
    is no per-key comparison call and no second, random-order pass of lookups."""
    cdef Py_ssize_t n = len(data), pos = 0, i = 0, j
    cdef PyObject* k
    cdef PyObject* v
    cdef _Item* a
    cdef _Item* b
    cdef _Item* s
    for key in data:
        if not PyBytes_CheckExact(key):
            keys = sorted(data)
            return keys, [data[x] for x in keys]
    a = <_Item*>malloc(max(n, 1) * sizeof(_Item))
    b = <_Item*>malloc(max(n, 1) * sizeof(_Item))
    if a == NULL or b == NULL:
        free(a)
        free(b)
        raise MemoryError()
    try:
        while PyDict_Next(data, &pos, &k, &v):
            a[i].key = k
            a[i].value = v
            a[i].pfx = _prefix(<const unsigned char*>PyBytes_AS_STRING(<object>k),
                               PyBytes_GET_SIZE(<object>k))
            i += 1
        s = _radix_sort(a, b, n)
        keys = [None] * n
        records = [None] * n
        for j in range(n):
            keys[j] = <object>s[j].key
            records[j] = <object>s[j].value
        return keys, records
    finally:
        free(a)
        free(b)


def apply_ops(dict data, list ops):
    """Apply ops that passed :func:`check_ops`; return the memtable bytes they add."""
    cdef Py_ssize_t added = 0
    cdef object op, k, v
    for op in ops:
        k = <object>PyTuple_GET_ITEM(op, 0)
        v = <object>PyTuple_GET_ITEM(op, 1)
        PyDict_SetItem(data, k, v)
        if v is None:
            added += PyBytes_GET_SIZE(k) + ENTRY_OVERHEAD
        else:
            added += PyBytes_GET_SIZE(k) + PyBytes_GET_SIZE(v) + ENTRY_OVERHEAD
    return added


# --- many keys against one SST (multi_get) ----------------------------------------------------
def sorted_unique(list keys):
    """``sorted(set(keys))``: the distinct keys in byte order (a new list). A radix sort on the
    keys' first 8 bytes (whole keys compared only where those are equal, as in
    :func:`sorted_items`), then one pass that drops repeats: no Python comparison and no set."""
    cdef Py_ssize_t n = PyList_GET_SIZE(keys), i
    cdef object key
    cdef _Item* a
    cdef _Item* tmp
    cdef _Item* srt
    cdef list out
    for i in range(n):
        if not PyBytes_CheckExact(<object>PyList_GET_ITEM(keys, i)):
            return sorted(set(keys))
    a = <_Item*>malloc(max(n, 1) * sizeof(_Item))
    tmp = <_Item*>malloc(max(n, 1) * sizeof(_Item))
    if a == NULL or tmp == NULL:
        free(a)
        free(tmp)
        raise MemoryError()
    try:
        for i in range(n):
            key = <object>PyList_GET_ITEM(keys, i)
            a[i].key = <PyObject*>key
            a[i].value = NULL
            a[i].pfx = _prefix(<const unsigned char*>PyBytes_AS_STRING(key),
                               PyBytes_GET_SIZE(key))
        srt = _radix_sort(a, tmp, n)
        out = []
        for i in range(n):
            if i and _item_cmp(&srt[i], &srt[i - 1]) == 0:
                continue
            out.append(<object>srt[i].key)
        return out
    finally:
        free(a)
        free(tmp)


cdef inline Py_ssize_t _bisect_right_bytes(list a, const unsigned char* k, Py_ssize_t nk,
                                           Py_ssize_t lo, Py_ssize_t hi):
    """bisect_right over a list of bytes, with memcmp."""
    cdef Py_ssize_t mid
    cdef object x
    while lo < hi:
        mid = (lo + hi) >> 1
        x = <object>PyList_GET_ITEM(a, mid)
        if _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x)) < 0:
            hi = mid
        else:
            lo = mid + 1
    return lo


# How far ahead of its use probe_sst starts loading memory: a filter's line (keys ahead), a
# block's object and its prefix array (blocks ahead). Each is a cache miss of its own when the
# filters and blocks are larger than the CPU cache, so several are kept in flight at once.
cdef Py_ssize_t PROBE_BLOOM_AHEAD = 8
cdef Py_ssize_t PROBE_BLOCK_AHEAD = 6


cdef inline void _prefetch_block(object blk, bint fields) noexcept:
    """Start loading a block's object (``fields`` false) or, once that is in cache, the
    prefix array its search reads (up to 1 KiB of it, from the middle out)."""
    cdef Block b
    cdef Py_ssize_t n, m, step
    if type(blk) is not Block:
        return
    if not fields:
        SILT_PREFETCH(<PyObject*>blk)
        SILT_PREFETCH(<char*><PyObject*>blk + 64)
        SILT_PREFETCH(<char*><PyObject*>blk + 128)
        return
    b = <Block>blk
    n = b._n
    m = n >> 1
    SILT_PREFETCH(b._pfx + m)
    step = 8  # eight prefixes a cache line
    while step <= 64 and step <= m:
        SILT_PREFETCH(b._pfx + m - step)
        SILT_PREFETCH(b._pfx + m + step)
        step += 8


def probe_sst(reader, list keys, dict found, fetch):
    """Look sorted, distinct ``keys`` up in the SST of ``reader``: the records it holds go to
    ``found``; returns the other keys, still sorted (``keys`` itself when none is in the SST's
    key range). ``fetch(reader, block_ids)`` is called once with the ascending ids of the blocks
    that may hold some key, and not at all when there are none.

    One pass merges the keys in range against the bloom filter and the index (remembering each
    key's block in a C array), one more looks each key up in its fetched block and writes the
    unresolved keys out in order: no per-key Python, no per-block list, no sort. Both passes
    keep several cache misses in flight (a filter's line a few keys ahead, a block's object and
    prefix array a few blocks ahead): with filters and blocks far larger than the CPU cache,
    each is a trip to memory, and one at a time they were most of a warm multi_get."""
    cdef object info = reader.info
    cdef object smallest = info.smallest, largest = info.largest
    cdef Py_ssize_t n = PyList_GET_SIZE(keys), lo, hi, j, b, nb, cur, g, pos, m, ng
    cdef Py_ssize_t* where
    cdef uint32_t* hashes
    cdef object t, bloom, key, last, blk, r, index
    cdef list last_keys, block_ids, blocks, out
    cdef const unsigned char* k
    cdef Py_ssize_t nk
    cdef bint compiled_bloom, indexed
    cdef KeyIndex kx = None
    if not (PyBytes_CheckExact(smallest) and PyBytes_CheckExact(largest)):
        raise TypeError("SST key bounds must be bytes")
    for j in range(n):
        if not PyBytes_CheckExact(<object>PyList_GET_ITEM(keys, j)):
            raise TypeError("keys must be bytes")
    lo = _bisect_bytes(keys, <const unsigned char*>PyBytes_AS_STRING(smallest),
                       PyBytes_GET_SIZE(smallest), 0, n)
    hi = _bisect_right_bytes(keys, <const unsigned char*>PyBytes_AS_STRING(largest),
                             PyBytes_GET_SIZE(largest), lo, n)
    if lo >= hi:
        return keys
    t = reader.loaded_tail
    if t is None:
        t = reader.tail
    bloom = t.bloom
    compiled_bloom = type(bloom) is BloomFilter
    last_keys = t.last_keys
    nb = PyList_GET_SIZE(last_keys)
    index = getattr(t, "key_index", None)
    indexed = type(index) is KeyIndex and (<KeyIndex>index)._n == nb
    if indexed:
        kx = <KeyIndex>index
    m = hi - lo
    where = <Py_ssize_t*>malloc(m * (sizeof(Py_ssize_t) + sizeof(uint32_t)))
    if where == NULL:
        raise MemoryError()
    hashes = <uint32_t*>(where + m)
    try:
        # 1. each key's block (-1: ruled out by the filter or past the last block)
        if compiled_bloom:
            for j in range(m):
                hashes[j] = _hash(<bytes>PyList_GET_ITEM(keys, lo + j))
            for j in range(min(m, PROBE_BLOOM_AHEAD)):
                (<BloomFilter>bloom)._prefetch(hashes[j])
        block_ids = []
        b = 0
        cur = -1
        for j in range(lo, hi):
            key = <object>PyList_GET_ITEM(keys, j)
            k = <const unsigned char*>PyBytes_AS_STRING(key)
            nk = PyBytes_GET_SIZE(key)
            where[j - lo] = -1
            if bloom is not None:
                if compiled_bloom:
                    if j - lo + PROBE_BLOOM_AHEAD < m:
                        (<BloomFilter>bloom)._prefetch(hashes[j - lo + PROBE_BLOOM_AHEAD])
                    if not (<BloomFilter>bloom)._test(hashes[j - lo]):
                        continue
                elif not bloom.may_contain_hash(_hash(<bytes>key)):
                    continue
            if indexed:  # keys are sorted: the block never moves back
                b = kx._next(k, nk, _prefix(k, nk), b)
            else:
                b = _next_block(last_keys, k, nk, b, nb)
            if b >= nb:
                continue
            where[j - lo] = b
            if b != cur:
                cur = b
                block_ids.append(b)
        # 2. the blocks, then each key in its block; the rest out in order
        blocks = list(fetch(reader, block_ids)) if block_ids else []
        ng = PyList_GET_SIZE(blocks)
        if ng != PyList_GET_SIZE(block_ids):
            raise ValueError("fetch returned a different number of blocks than asked for")
        for g in range(min(ng, PROBE_BLOCK_AHEAD)):
            _prefetch_block(<object>PyList_GET_ITEM(blocks, g), g < PROBE_BLOCK_AHEAD // 2)
        out = keys[:lo]
        cur = -1
        g = -1
        pos = 0
        blk = None
        for j in range(lo, hi):
            key = <object>PyList_GET_ITEM(keys, j)
            b = where[j - lo]
            if b < 0:
                out.append(key)
                continue
            if b != cur:
                cur = b
                g += 1
                blk = <object>PyList_GET_ITEM(blocks, g)
                pos = 0
                if g + PROBE_BLOCK_AHEAD < ng:
                    _prefetch_block(<object>PyList_GET_ITEM(blocks, g + PROBE_BLOCK_AHEAD), False)
                if g + PROBE_BLOCK_AHEAD // 2 < ng:
                    _prefetch_block(<object>PyList_GET_ITEM(blocks, g + PROBE_BLOCK_AHEAD // 2),
                                    True)
            if type(blk) is Block:
                k = <const unsigned char*>PyBytes_AS_STRING(key)
                nk = PyBytes_GET_SIZE(key)
                pos = (<Block>blk)._lower_bound(k, nk, pos)
                if pos < (<Block>blk)._n and (<Block>blk)._key_eq(pos, k, nk):
                    PyDict_SetItem(found, key, (<Block>blk)._record(pos))
                else:
                    out.append(key)
            else:
                r = blk.get(key)
                if r is _MISSING:
                    out.append(key)
                else:
                    PyDict_SetItem(found, key, r)
        out.extend(keys[hi:])
        return out
    finally:
        free(where)


def read_runs(reader, read, list runs, dict where, list out):
    """Compiled twin of :func:`silt.sst.probe.read_runs`: each run read through ``read`` (the
    store's direct reader), checked, decoded and cached, and its wanted blocks placed in
    ``out``, in one C loop (the direct reader is the only Python frame per run)."""
    cdef object t = reader.loaded_tail
    cdef object offsets, sizes, cache, name, data, view, blk, run, off
    cdef Py_ssize_t r, first, stop, i, base, length, o, sz
    cdef PyObject* j
    if t is None:
        t = reader.tail
    offsets = t.block_offsets
    sizes = t.block_sizes
    cache = reader.cache
    name = reader.name
    for r in range(PyList_GET_SIZE(runs)):
        run = <object>PyList_GET_ITEM(runs, r)
        first = run[0]
        stop = run[1]
        if not 0 <= first < stop <= len(offsets):
            raise IndexError(f"block run {first}..{stop} outside 0..{len(offsets)}")
        base = offsets[first]
        length = offsets[stop - 1] + sizes[stop - 1] - base
        try:
            data = read(base, length)
        except Exception as exc:
            data = reader.direct_failed(exc, base, length)
        if len(data) != length:
            raise CorruptionError(name, base, "%s truncated: %d of %d bytes" % (
                "block" if stop - first == 1 else "block run", len(data), length))
        view = data if stop - first == 1 else memoryview(data)
        for i in range(first, stop):
            o = offsets[i]
            sz = sizes[i]
            if stop - first == 1:
                blk = decode_block(view, name, o)
            else:
                blk = decode_block(view[o - base:o - base + sz], name, o)
            if type(cache) is BlockCache:
                (<BlockCache>cache).put(_block_key(reader, t, i), blk, (<Block>blk).charge)
            elif cache is not None:
                cache.put(_block_key(reader, t, i), blk, blk.charge)
            j = PyDict_GetItem(where, i)
            if j != NULL:
                out[<object>j] = blk



# --- file reads ------------------------------------------------------------------------------
# The file:// tier's block reads (pure twin: silt.tiers.blockread.CachedReads): the lenient
# borrow of a cached descriptor, one pread without the GIL, and the release, with no Python
# frame. Everything else goes to the tier's checked slow path, as in the twin.

cdef extern from *:
    """
    #ifdef _WIN32
    #include <errno.h>
    static Py_ssize_t silt_pread(int fd, char* buf, Py_ssize_t n, long long off) {
        (void)fd; (void)buf; (void)n; (void)off;
        errno = ENOSYS;  /* no pread: the tier caches no descriptors there */
        return -1;
    }
    #else
    #include <unistd.h>
    static Py_ssize_t silt_pread(int fd, char* buf, Py_ssize_t n, long long off) {
        return (Py_ssize_t)pread(fd, buf, (size_t)n, (off_t)off);
    }
    #endif
    """
    Py_ssize_t silt_pread(int fd, char* buf, Py_ssize_t n, long long off) nogil

from time import monotonic as _monotonic

from silt.tiers import fdcache as _fdcache


@cython.final
cdef class CachedReads:
    """Compiled twin of :class:`silt.tiers.blockread.CachedReads` (see its contract):
    ``read(start, length)`` borrows the cached descriptor of ``ident`` from ``cache`` when a
    lenient check may trust it, reads with one ``pread`` (short only at the end of the file),
    and releases it; every other read goes to ``slow(start, length)``."""

    cdef readonly object cache, ident, slow

    def __init__(self, cache, ident, slow):
        self.cache = cache
        self.ident = ident
        self.slow = slow

    def __call__(self, start, length):
        cdef object cache = self.cache
        cdef object ident = self.ident
        cdef object lock = cache.lock
        cdef object entries, entry = None
        cdef PyObject* found
        cdef double now = _monotonic()
        cdef bint sweep = False, dropped, failed = False
        cdef Py_ssize_t st = 0, n = 0, got = 0, r
        cdef int fd
        cdef bytes data
        cdef char* buf
        if type(start) is int and type(length) is int and start >= 0 and length >= 0:
            st = start
            n = length
            lock.acquire()
            try:
                entries = cache.entries
                found = PyDict_GetItem(entries, ident)
                if found != NULL:
                    entry = <object>found
                    if (entry.epoch != cache.epoch
                            or not now - <double>entry.checked < <double>_fdcache.RECHECK_SECONDS):
                        entry = None
                    else:
                        entries.move_to_end(ident)
                        entry.users = entry.users + 1
                        cache.hits = cache.hits + 1
                        cache.reads = cache.reads + 1
                        sweep = cache.reads % _fdcache.SWEEP_EVERY == 0
            finally:
                lock.release()
        if entry is None:
            return self.slow(start, length)
        try:
            if sweep:
                cache.sweep()
            fd = entry.fd
            data = PyBytes_FromStringAndSize(NULL, n)
            buf = PyBytes_AS_STRING(data)
            with nogil:
                while got < n:
                    r = silt_pread(fd, buf + got, n - got, st + got)
                    if r < 0:
                        failed = True  # EINTR included: the slow path's os.pread retries it
                        break
                    if r == 0:
                        break
                    got += r
        finally:
            lock.acquire()
            try:
                dropped = entry.dropped
                if not dropped:
                    entry.users = entry.users - 1
            finally:
                lock.release()
            if dropped:  # out of the cache meanwhile: the last release closes it
                cache.release(entry)
        if failed:
            return self.slow(start, length)
        if got < n:
            return PyBytes_FromStringAndSize(buf, got)
        return data
