# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# The file:// tier's block reads (pure twin: silt.tiers.blockread.CachedReads): the lenient
# borrow of a cached descriptor (fd_cache.pxi's FdCache._lend), one pread without the GIL, and
# the release, with no Python frame. Everything else goes to the tier's checked slow path, as
# in the twin.

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

@cython.final
cdef class CachedReads:
    """Compiled twin of :class:`silt.tiers.blockread.CachedReads` (see its contract):
    ``read(start, length)`` borrows the cached descriptor of ``ident`` from ``cache`` when a
    lenient check may trust it (:meth:`FdCache.lend`: a C call on the compiled cache), reads
    with one ``pread`` without the GIL (short only at the end of the file), and releases it;
    every other read goes to ``slow(start, length)``."""

    cdef readonly object cache, ident, slow

    def __init__(self, cache, ident, slow):
        self.cache = cache
        self.ident = ident
        self.slow = slow

    def __call__(self, start, length):
        return self._read(start, length)

    cdef object _read(self, object start, object length):
        cdef object cache = self.cache
        cdef FdCache fc = None  # cache, when it is the compiled FdCache
        cdef Fd fe = None  # entry, when the compiled cache lent it
        cdef object entry = None
        cdef bint failed = False
        cdef Py_ssize_t st = 0, n = 0, got = 0, r
        cdef int fd
        cdef bytes data
        cdef char* buf
        if type(start) is int and type(length) is int and start >= 0 and length >= 0:
            st = start
            n = length
            if type(cache) is FdCache:
                fc = <FdCache>cache
                fe = fc._lend(self.ident)
                entry = fe
            else:
                entry = cache.lend(self.ident)
        if entry is None:
            return self.slow(start, length)
        try:
            fd = fe.fd if fe is not None else entry.fd
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
            if fc is not None:
                fc._give_back(fe)  # closes the descriptor if it was dropped meanwhile
            else:
                cache.release(entry)
        if failed:
            return self.slow(start, length)
        if got < n:
            return PyBytes_FromStringAndSize(buf, got)
        return data


@cython.final
cdef class CountedReads:
    """Compiled twin of :class:`silt.metrics.CountedReads` (see its contract): the count is
    made here, and ``inner`` is called without a Python frame when it is a :class:`CachedReads`.
    """

    cdef readonly object inner, requests, local

    def __init__(self, inner, requests, local):
        self.inner = inner
        self.requests = requests
        self.local = local

    def __call__(self, start, length):
        return self._read(start, length)

    cdef object _read(self, object start, object length):
        cdef object data = b""
        cdef object purpose, entry
        try:
            if type(self.inner) is CachedReads:
                data = (<CachedReads>self.inner)._read(start, length)
            else:
                data = self.inner(start, length)
            return data
        finally:
            purpose = getattr(self.local, "purpose", None) or "read"
            entry = self.requests[(purpose, "RANGE_GET")]
            entry[0] += 1
            entry[1] += len(data)


cdef inline object _direct_read(object read, object start, object length):
    """``read(start, length)`` of a store's direct reader, without a Python call when it is
    one of the compiled readers (metered or not)."""
    if type(read) is CountedReads:
        return (<CountedReads>read)._read(start, length)
    if type(read) is CachedReads:
        return (<CachedReads>read)._read(start, length)
    return read(start, length)
