# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
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
cdef class Fd:
    """Compiled twin of :class:`silt.tiers.fdcache.Fd` (see its contract): one cached
    descriptor, its fields in C, so that a compiled block read's borrow and release read and
    change them without a Python attribute access (nine of them a read)."""

    cdef public int fd
    cdef public Py_ssize_t users
    cdef public bint dropped
    cdef public double checked
    cdef public long long epoch

    def __init__(self, int fd, double checked=float("-inf"), long long epoch=-1):
        self.fd = fd
        self.users = 1
        self.dropped = False
        self.checked = checked
        self.epoch = epoch


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
        return self._read(start, length)

    cdef object _read(self, object start, object length):
        cdef object cache = self.cache
        cdef object ident = self.ident
        cdef object lock = cache.lock
        cdef object entries, entry = None
        cdef Fd fe = None  # entry, when it is the compiled Fd (what the cache makes, compiled)
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
                    if type(entry) is Fd:
                        fe = <Fd>entry
                        if (fe.epoch != <long long>cache.epoch
                                or not now - fe.checked < <double>_fdcache.RECHECK_SECONDS):
                            entry = fe = None
                    elif (entry.epoch != cache.epoch
                            or not now - <double>entry.checked < <double>_fdcache.RECHECK_SECONDS):
                        entry = None
                    if entry is not None:
                        entries.move_to_end(ident)
                        if fe is not None:
                            fe.users += 1
                        else:
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
            lock.acquire()
            try:
                if fe is not None:
                    dropped = fe.dropped
                    if not dropped:
                        fe.users -= 1
                else:
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
