# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Bloom filters: building them and the BloomFilter probe (twins in silt.sst.bloom).

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

