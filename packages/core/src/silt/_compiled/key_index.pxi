# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Finding the block that may hold a key: the bisects over an SST's last keys and the KeyIndex of
# their 8-byte prefixes (twins in silt.sst.reader and silt.sst.tail).

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

