# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# The file:// tier's cache of open descriptors (pure twin: silt.tiers.fdcache): Fd and FdCache,
# their state in C, so that a block read borrows and releases a descriptor with no Python frame,
# no Python lock and no Python attribute access (FdCache._lend / _give_back, used by
# file_reads.pxi's CachedReads).
#
# Why no lock: each step that the pure twin makes under its threading.Lock is here one stretch
# of C that holds the GIL throughout and runs no Python code (dictionary operations on
# identities that are str or tuples of str, whose hash and equality are C; C fields; no
# object with a finalizer is freed in it), so no other thread runs between its first and last
# line, which is what the lock gave. Python code (os.fstat, os.close, the caller's predicate)
# runs only between such stretches, as it runs outside the lock in the twin. The module does
# not declare itself free-threading compatible: a free-threaded interpreter turns the GIL on
# when it is imported.

cdef extern from *:
    """
    #include <time.h>
    #include <errno.h>
    #ifndef _WIN32
    #include <unistd.h>
    #endif
    /* time.monotonic()'s clock on POSIX (CLOCK_MONOTONIC); -1.0 where it is missing. */
    static double silt_monotonic(void) {
    #if defined(CLOCK_MONOTONIC) && !defined(_WIN32)
        struct timespec ts;
        if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0)
            return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    #endif
        return -1.0;
    }
    static void silt_close_fd(int fd) {
    #ifndef _WIN32
        (void)close(fd);  /* errors ignored, as the twin's _close_all ignores them */
    #endif
    }
    """
    double silt_monotonic() noexcept nogil
    void silt_close_fd(int fd) noexcept nogil

import os as _os
from time import monotonic as _py_monotonic

from silt.tiers import fdcache as _fdcache

# The fdcache module's namespace: its bounds are read at each call (tests and operators may
# change RECHECK_SECONDS, SWEEP_EVERY and SWEEP_SECONDS at run time, as the twin reads them).
cdef dict _FDCACHE_NS = _fdcache.__dict__
cdef object _RECHECK_NAME = "RECHECK_SECONDS"
cdef object _SWEEP_EVERY_NAME = "SWEEP_EVERY"
cdef object _SWEEP_SECONDS_NAME = "SWEEP_SECONDS"


cdef inline double _now():
    """``time.monotonic()`` without a Python call (its clock, CLOCK_MONOTONIC, on POSIX)."""
    cdef double t = silt_monotonic()
    if t < 0.0:
        return _py_monotonic()
    return t


cdef inline object _bound(object name):
    """The fdcache module's current value of ``name`` (borrowed from its namespace)."""
    cdef PyObject* found = PyDict_GetItem(_FDCACHE_NS, name)
    if found == NULL:
        raise AttributeError(name)
    return <object>found


@cython.final
cdef class Fd:
    """Compiled twin of :class:`silt.tiers.fdcache.Fd` (see its contract): one cached
    descriptor, its fields in C. ``used`` is its last use in its cache's order (the compiled
    cache's least recently used is the entry with the smallest ``used``)."""

    cdef public int fd
    cdef public Py_ssize_t users
    cdef public bint dropped
    cdef public double checked
    cdef public long long epoch
    cdef public long long used

    def __init__(self, int fd, double checked=float("-inf"), long long epoch=-1):
        self.fd = fd
        self.users = 1
        self.dropped = False
        self.checked = checked
        self.epoch = epoch
        self.used = 0


cdef inline void _drop_fd(Fd entry, list doomed) except *:
    """Mark ``entry`` out of its cache; queue its close when no read uses it."""
    entry.dropped = True
    if entry.users == 0:
        doomed.append(entry.fd)


cdef inline bint _sweep_due(long long reads) except -1:
    """Whether the ``reads``-th read sweeps (every ``SWEEP_EVERY``-th; the twin's ``%``)."""
    cdef long long every = <long long>_bound(_SWEEP_EVERY_NAME)
    if every == 0:
        raise ZeroDivisionError("integer modulo by zero")
    return reads % every == 0


cdef inline void _close_fds(list fds):
    cdef object fd
    for fd in fds:
        silt_close_fd(<int>fd)


@cython.final
cdef class FdCache:
    """Compiled twin of :class:`silt.tiers.fdcache.FdCache` (see its contract): the same
    methods, results, counts and evictions. ``entries`` is a plain dictionary (identity ->
    :class:`Fd`, in no particular order): the order of use is each entry's ``used`` stamp, and
    an eviction drops the entry with the smallest (a scan of at most ``capacity`` entries, made
    only after a file was opened). Identities must be ``str`` or tuples of ``str`` (see the
    comment at the top of this part)."""

    cdef public Py_ssize_t capacity
    cdef public long long hits, misses, reads, epoch
    cdef readonly dict entries
    cdef double _swept
    cdef long long _stamp

    def __init__(self, Py_ssize_t capacity):
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self.reads = 0
        self.epoch = 0
        self.entries = {}
        self._swept = _now()
        self._stamp = 0

    def __len__(self):
        return len(self.entries)

    cdef inline void _use(self, Fd entry) noexcept:
        self._stamp += 1
        entry.used = self._stamp

    cdef inline Fd _find(self, object ident):
        cdef PyObject* found = PyDict_GetItem(self.entries, ident)
        if found == NULL:
            return None
        return <Fd>found

    cdef Fd _lend(self, object ident):
        """The lenient hit of a block read (the twin: CachedReads' inline borrow): ``ident``'s
        entry, its use counted, when it is cached, of the current epoch and checked less than
        ``RECHECK_SECONDS`` ago; else ``None``, nothing counted. Sweeps every
        ``SWEEP_EVERY``-th read, as the twin does before its ``pread``."""
        cdef double now = _now()
        cdef double recheck = <double>_bound(_RECHECK_NAME)
        cdef Fd entry = self._find(ident)
        if entry is None or entry.epoch != self.epoch or not now - entry.checked < recheck:
            return None
        self._use(entry)
        entry.users += 1
        self.hits += 1
        self.reads += 1
        if _sweep_due(self.reads):
            self.sweep()
        return entry

    cdef void _give_back(self, Fd entry):
        """The end of a read through ``entry`` (:meth:`release` without a Python call)."""
        entry.users -= 1
        if entry.dropped and entry.users == 0:
            silt_close_fd(entry.fd)

    def lend(self, ident):
        """What a block read borrows (see :meth:`silt.tiers.fdcache.FdCache.lend`)."""
        return self._lend(ident)

    def borrow(self, ident, bint exact=True):
        """See :meth:`silt.tiers.fdcache.FdCache.borrow`."""
        cdef Fd entry = self._find(ident)
        cdef double now
        cdef long long epoch
        cdef bint alive
        if entry is None:
            self.misses += 1
            return None
        self._use(entry)
        entry.users += 1
        self.reads += 1
        if _sweep_due(self.reads):
            self.sweep()
        now = _now()
        if (not exact and entry.epoch == self.epoch
                and now - entry.checked < <double>_bound(_RECHECK_NAME)):
            self.hits += 1
            return entry
        epoch = self.epoch  # read before the check: an invalidate() during it forces another
        try:
            alive = _os.fstat(entry.fd).st_nlink > 0
        except OSError:
            alive = False
        if alive:
            entry.checked = now
            entry.epoch = epoch
            self.hits += 1
            return entry
        self.discard(ident, entry)
        self.release(entry)
        self.misses += 1
        return None

    def adopt(self, ident, int fd):
        """See :meth:`silt.tiers.fdcache.FdCache.adopt`."""
        cdef Fd entry = Fd(fd)
        cdef Fd old
        cdef list doomed = []
        if self.capacity <= 0:
            entry.dropped = True
            return entry
        self.sweep()
        old = self._find(ident)
        if old is not None:
            _drop_fd(old, doomed)
        self.entries[ident] = entry  # (the old entry lives on in ``old``: freed below)
        self._use(entry)
        while len(self.entries) > self.capacity:
            self._evict_oldest(doomed)
        _close_fds(doomed)
        return entry

    cdef void _evict_oldest(self, list doomed) except *:
        cdef Py_ssize_t pos = 0
        cdef PyObject* key
        cdef PyObject* value
        cdef PyObject* oldest_key = NULL
        cdef long long oldest = 0
        while PyDict_Next(self.entries, &pos, &key, &value):
            if oldest_key == NULL or (<Fd>value).used < oldest:
                oldest_key = key
                oldest = (<Fd>value).used
        ident = <object>oldest_key
        evicted = <Fd>self.entries.pop(ident)
        _drop_fd(evicted, doomed)

    def release(self, Fd entry):
        """See :meth:`silt.tiers.fdcache.FdCache.release`."""
        self._give_back(entry)

    def discard(self, ident, entry=None):
        """See :meth:`silt.tiers.fdcache.FdCache.discard`."""
        cdef list doomed = []
        cdef Fd current = self._find(ident)
        if current is not None and (entry is None or current is entry):
            del self.entries[ident]
            _drop_fd(current, doomed)
        _close_fds(doomed)

    def invalidate(self, ident):
        """See :meth:`silt.tiers.fdcache.FdCache.invalidate`."""
        self.epoch += 1
        self.discard(ident)

    def sweep(self, *, bint force=False):
        """See :meth:`silt.tiers.fdcache.FdCache.sweep`."""
        cdef double now = _now()
        cdef list dead = []
        cdef Fd entry
        if not force and now - self._swept < <double>_bound(_SWEEP_SECONDS_NAME):
            return 0
        self._swept = now
        kept = list(self.entries.items())
        # Python code from here: a descriptor closed meanwhile belongs to an entry already out
        # of the cache, which discard() leaves alone.
        for ident, entry in kept:
            try:
                if _os.fstat(entry.fd).st_nlink == 0:
                    dead.append((ident, entry))
            except OSError:
                dead.append((ident, entry))
        for ident, entry in dead:
            self.discard(ident, entry)
        return len(dead)

    def discard_where(self, belongs):
        """See :meth:`silt.tiers.fdcache.FdCache.discard_where` (``belongs`` is called between
        the stretches that change the cache, each entry dropped only if it is still the one
        ``belongs`` was asked about)."""
        cdef list doomed = []
        cdef Fd entry
        chosen = [(ident, entry) for ident, entry in list(self.entries.items())
                  if belongs(ident)]
        for ident, entry in chosen:
            if self._find(ident) is entry:
                del self.entries[ident]
                _drop_fd(entry, doomed)
        _close_fds(doomed)

    def clear(self):
        """Drop every descriptor."""
        cdef list doomed = []
        cdef Fd entry
        old = self.entries
        self.entries = {}
        for entry in old.values():
            _drop_fd(entry, doomed)
        _close_fds(doomed)

    def _after_fork_in_child(self):
        """See :meth:`silt.tiers.fdcache.FdCache._after_fork_in_child`."""
        cdef Fd entry
        self._swept = _now()
        self.epoch += 1
        fds = [entry.fd for entry in self.entries.values()]
        self.entries = {}
        _close_fds(fds)
