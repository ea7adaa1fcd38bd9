# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# The block cache (twin of silt.cache.BlockCache).

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

    cdef Py_ssize_t _get_blocks(self, object reader, object t, list ids, list out) except -1:
        """``out[g] = get(block key of ids[g])`` of ``reader``'s tail ``t`` where it is cached,
        under one lock acquisition, without building the list of keys; the misses stay as
        ``out`` had them and are counted (returned)."""
        cdef Py_ssize_t g, i, n = PyList_GET_SIZE(ids), missed = 0
        cdef PyObject* p
        cdef object key
        self._acquire()
        try:
            for g in range(n):
                i = <object>PyList_GET_ITEM(ids, g)
                if i < 0:
                    raise IndexError(f"block {i} of a cache lookup")
                key = _block_key(reader, t, i)
                p = PyDict_GetItem(self._data, key)
                if p == NULL:
                    self.misses += 1
                    missed += 1
                else:
                    self._move(key)
                    self.hits += 1
                    out[g] = <object>PyTuple_GET_ITEM(<object>p, 0)
        finally:
            self._release()
        return missed

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

