# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# CRC-32 (twin of silt.checksum.crc32), the bloom filters' key hash (silt.sst.bloom.bloom_hash)
# and the little-endian byte helpers the other parts use.

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

