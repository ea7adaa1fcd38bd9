# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# The block cache (twin of silt.cache.BlockCache).

from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF

@cython.final
@cython.no_gc
@cython.freelist(64)
cdef class _CacheEntry:
    """One cached value: its key (to leave the dictionary when evicted), its charge and the
    CLOCK mark a hit sets. Not tracked by the cyclic garbage collector (keys are ints,
    ``silt.cache.block_key``, values immutable blocks: no cycle can run through an entry), so
    that a cache of tens of thousands of blocks adds nothing to a collection's walk."""

    cdef object key, value
    cdef Py_ssize_t charge
    cdef bint marked


@cython.final
cdef class BlockCache:
    """CLOCK (second-chance) cache bounded by the sum of the entries' ``charge`` (bytes): the
    twin of :class:`silt.cache.BlockCache`, with the same eviction order step for step (see
    there), whose ``get`` the compiled readers call without a Python frame. The queue is a ring
    of entries in C (the hand is its head); a hit is a dictionary lookup and a flag. Thread-safe
    (one lock, as the pure twin)."""

    cdef public Py_ssize_t capacity, used, hits, misses, evictions
    cdef readonly dict _data
    cdef object _acquire, _release
    cdef PyObject** _ring  # the queue: _count entries from _head on, wrapping at _size
    cdef Py_ssize_t _head, _count, _size

    def __init__(self, Py_ssize_t capacity_bytes):
        self.capacity = capacity_bytes
        self.used = self.hits = self.misses = self.evictions = 0
        self._data = {}
        lock = _Lock()
        self._acquire = lock.acquire
        self._release = lock.release

    def __dealloc__(self):
        self._drop_ring()
        free(self._ring)

    cdef void _drop_ring(self) noexcept:
        """Empty the ring, dropping its references (its buffer kept)."""
        cdef PyObject** ring = self._ring
        cdef Py_ssize_t i, head = self._head, count = self._count, size = self._size
        self._head = self._count = 0
        for i in range(count):
            Py_XDECREF(ring[(head + i) % size])
            ring[(head + i) % size] = NULL

    cdef int _push(self, _CacheEntry e) except -1:
        """Queue ``e`` at the back of the ring (a reference of its own)."""
        cdef PyObject** ring
        cdef Py_ssize_t i, size
        if self._count == self._size:
            size = max(64, 2 * self._size)
            ring = <PyObject**>malloc(size * sizeof(PyObject*))
            if ring == NULL:
                raise MemoryError()
            for i in range(self._count):
                ring[i] = self._ring[(self._head + i) % self._size]
            free(self._ring)
            self._ring, self._head, self._size = ring, 0, size
        i = self._head + self._count
        if i >= self._size:
            i -= self._size
        Py_INCREF(e)
        self._ring[i] = <PyObject*>e
        self._count += 1
        return 0

    cdef _CacheEntry _pop(self):
        """The entry at the front of the ring (the hand), taken off it."""
        cdef _CacheEntry e = <_CacheEntry>self._ring[self._head]
        Py_DECREF(e)  # the ring's reference: ``e`` holds its own
        self._ring[self._head] = NULL
        self._head += 1
        if self._head == self._size:
            self._head = 0
        self._count -= 1
        return e

    cdef int _make_room(self, Py_ssize_t limit) except -1:
        """Evict in CLOCK order until ``used`` is at most ``limit`` (under the lock)."""
        cdef _CacheEntry e
        while self.used > limit and self._count:
            e = self._pop()
            if e.marked:
                e.marked = False
                self._push(e)
                continue
            del self._data[e.key]
            self.used -= e.charge
            self.evictions += 1
        return 0

    cdef inline object _hit(self, PyObject* p):
        if not (<_CacheEntry>p).marked:  # (a marked entry's line is left clean)
            (<_CacheEntry>p).marked = True
        self.hits += 1
        return (<_CacheEntry>p).value

    cdef object _get(self, object key):
        cdef PyObject* p
        self._acquire()
        try:
            p = PyDict_GetItem(self._data, key)
            if p == NULL:
                self.misses += 1
                return None
            return self._hit(p)
        finally:
            self._release()

    def get(self, key):
        """The cached value or ``None``; a hit marks the entry (a second chance)."""
        return self._get(key)

    def get_many(self, list keys):
        """``[get(key) for key in keys]`` under one lock acquisition (multi_get's blocks)."""
        cdef Py_ssize_t i, n = PyList_GET_SIZE(keys)
        cdef list out = [None] * n
        cdef PyObject* p
        self._acquire()
        try:
            for i in range(n):
                p = PyDict_GetItem(self._data, <object>PyList_GET_ITEM(keys, i))
                if p == NULL:
                    self.misses += 1
                else:
                    out[i] = self._hit(p)
        finally:
            self._release()
        return out

    cdef Py_ssize_t _get_blocks(self, object reader, object t, list ids, list out) except -1:
        """``out[g] = get(block key of ids[g])`` of ``reader``'s tail ``t`` where it is cached,
        under one lock acquisition, without building the list of keys; the misses stay as
        ``out`` had them and are counted (returned)."""
        cdef Py_ssize_t g, i, n = PyList_GET_SIZE(ids), missed = 0
        cdef PyObject* p
        cdef object key
        cdef object keys = getattr(t, "block_keys", None)  # once, not once a block
        cdef Py_ssize_t nkeys = PyList_GET_SIZE(keys) if type(keys) is list else 0
        self._acquire()
        try:
            for g in range(n):
                i = <object>PyList_GET_ITEM(ids, g)
                if i < 0:
                    raise IndexError(f"block {i} of a cache lookup")
                if i < nkeys:  # the tail's own key (see _block_key)
                    key = <object>PyList_GET_ITEM(keys, i)
                else:
                    key = reader.cache_id + i
                p = PyDict_GetItem(self._data, key)
                if p == NULL:
                    self.misses += 1
                    missed += 1
                else:
                    out[g] = self._hit(p)
        finally:
            self._release()
        return missed

    def holds(self, list keys):
        """Whether each of ``keys`` is cached, without marking it or counting a hit or a miss
        (a look at what the cache holds, not a read)."""
        self._acquire()
        try:
            return [key in self._data for key in keys]
        finally:
            self._release()

    def put(self, key, value, Py_ssize_t charge):
        """Insert ``value``, evicting in CLOCK order to stay within capacity.

        An entry larger than the whole capacity is not cached.
        """
        cdef PyObject* p
        cdef _CacheEntry e
        if charge > self.capacity:
            return
        self._acquire()
        try:
            p = PyDict_GetItem(self._data, key)
            if p != NULL:
                e = <_CacheEntry>p
                self.used += charge - e.charge
                e.value = value
                e.charge = charge
                e.marked = True
                self._make_room(self.capacity)
                return
            self._make_room(self.capacity - charge)
            e = _CacheEntry.__new__(_CacheEntry)
            e.key = key
            e.value = value
            e.charge = charge
            self._push(e)
            try:
                self._data[key] = e
            except BaseException:
                self._ring_undo_last()
                raise
            self.used += charge
        finally:
            self._release()

    cdef void _ring_undo_last(self) noexcept:
        """Take back the entry :meth:`_push` queued last (its key could not be stored)."""
        cdef Py_ssize_t i = self._head + self._count - 1
        if i >= self._size:
            i -= self._size
        Py_XDECREF(self._ring[i])
        self._ring[i] = NULL
        self._count -= 1

    def resize(self, Py_ssize_t capacity_bytes):
        """Set the capacity; evicts in CLOCK order until the rest fit in it."""
        self._acquire()
        try:
            self.capacity = capacity_bytes
            self._make_room(capacity_bytes)
        finally:
            self._release()

    def __len__(self):
        return len(self._data)

    def clear(self):
        self._acquire()
        try:
            self._data.clear()
            self._drop_ring()
            self.used = 0
        finally:
            self._release()
