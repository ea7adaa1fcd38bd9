# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# The block cache (twin of silt.cache.BlockCache).

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
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
    cdef long long ikey  # the key's value when the int index holds it, else -1


cdef struct _Slot:
    # One slot of the cache's int index: an entry whose key is an int in [0, 2**62), with
    # the entry's value and mark beside it (borrowed: the dictionary holds the entry, the
    # entry its value; the mark mirrors the entry's, kept equal at every change).
    long long key  # -1: an empty slot
    PyObject* entry
    PyObject* value
    int marked


cdef long long _INDEX_LIMIT = 1LL << 62


cdef inline long long _index_key(object key) except -2:
    """``key``'s value when the int index may hold it (an exact int in [0, 2**62)), else -1."""
    cdef int overflow = 0
    cdef long long v
    if not PyLong_CheckExact(key):
        return -1
    v = PyLong_AsLongLongAndOverflow(key, &overflow)
    if overflow or v < 0 or v >= _INDEX_LIMIT:
        return -1
    return v


@cython.final
cdef class BlockCache:
    """CLOCK (second-chance) cache bounded by the sum of the entries' ``charge`` (bytes): the
    twin of :class:`silt.cache.BlockCache`, with the same eviction order step for step (see
    there), whose ``get`` the compiled readers call without a Python frame. The queue is a ring
    of entries in C (the hand is its head); a hit is a dictionary lookup and a flag, or, by
    ``get_block``, one slot of the int index (the slot's mark mirrors the entry's: an entry is
    in the index exactly while the dictionary holds it, and every change of its mark or value
    is copied into its slot, so the index answers as the dictionary would). Thread-safe (one
    lock, as the pure twin)."""

    cdef public Py_ssize_t capacity, used, hits, misses, evictions
    cdef readonly dict _data
    cdef object _acquire, _release
    cdef PyObject** _ring  # the queue: _count entries from _head on, wrapping at _size
    cdef Py_ssize_t _head, _count, _size
    # The int index: every entry whose key _index_key accepts, by value (open addressing,
    # linear probing, at most half full; deletion shifts back, no tombstones). A get by
    # (base, index) reads one slot here instead of the key object, the dictionary's two
    # tables and the entry: four trips to memory fewer per hit at large state.
    cdef _Slot* _slots
    cdef Py_ssize_t _nslots, _nindexed
    cdef int _shift

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
        free(self._slots)

    cdef inline Py_ssize_t _home(self, long long v) noexcept nogil:
        return <Py_ssize_t>((<uint64_t>v * <uint64_t>0x9E3779B97F4A7C15ULL) >> self._shift)

    cdef inline _Slot* _find(self, long long v) noexcept nogil:
        """The index's slot of key value ``v``, or NULL."""
        cdef Py_ssize_t i, mask = self._nslots - 1
        if self._nslots == 0:
            return NULL
        i = self._home(v)
        while self._slots[i].key != -1:
            if self._slots[i].key == v:
                return &self._slots[i]
            i = (i + 1) & mask
        return NULL

    cdef int _reserve(self) except -1:
        """Room in the index for one more key (grown to keep it at most half full)."""
        cdef Py_ssize_t n, i, j, mask
        cdef _Slot* old = self._slots
        cdef Py_ssize_t nold = self._nslots
        if 2 * (self._nindexed + 1) <= self._nslots:
            return 0
        n = max(1024, 2 * self._nslots)
        self._slots = <_Slot*>malloc(n * sizeof(_Slot))
        if self._slots == NULL:
            self._slots = old
            raise MemoryError()
        self._nslots = n
        self._shift = 64
        while n > 1:
            n >>= 1
            self._shift -= 1
        mask = self._nslots - 1
        for i in range(self._nslots):
            self._slots[i].key = -1
        for j in range(nold):
            if old[j].key != -1:
                i = self._home(old[j].key)
                while self._slots[i].key != -1:
                    i = (i + 1) & mask
                self._slots[i] = old[j]
        free(old)
        return 0

    cdef void _index(self, _CacheEntry e) noexcept:
        """Add ``e`` (its ``ikey`` set) to the index; room was reserved."""
        cdef Py_ssize_t i = self._home(e.ikey), mask = self._nslots - 1
        while self._slots[i].key != -1:
            i = (i + 1) & mask
        self._slots[i].key = e.ikey
        self._slots[i].entry = <PyObject*>e
        self._slots[i].value = <PyObject*>e.value
        self._slots[i].marked = e.marked
        self._nindexed += 1

    cdef void _unindex(self, long long v) noexcept:
        """Take key value ``v`` out of the index, shifting back the slots after it."""
        cdef _Slot* s = self._find(v)
        cdef Py_ssize_t i, j, k, mask = self._nslots - 1
        if s == NULL:
            return
        i = s - self._slots
        j = i
        while True:
            j = (j + 1) & mask
            if self._slots[j].key == -1:
                break
            k = self._home(self._slots[j].key)
            # slot j may move to i when its home is not cyclically in (i, j]
            if (i <= j and (k <= i or k > j)) or (i > j and k <= i and k > j):
                self._slots[i] = self._slots[j]
                i = j
        self._slots[i].key = -1
        self._nindexed -= 1

    cdef inline void _mirror(self, _CacheEntry e) noexcept:
        """Copy ``e``'s mark and value into its index slot (after a change of either)."""
        cdef _Slot* s
        if e.ikey >= 0:
            s = self._find(e.ikey)
            if s != NULL:
                s.marked = e.marked
                s.value = <PyObject*>e.value

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
                self._mirror(e)
                self._push(e)
                continue
            if e.ikey >= 0:
                self._unindex(e.ikey)
            del self._data[e.key]
            self.used -= e.charge
            self.evictions += 1
        return 0

    cdef inline object _hit(self, PyObject* p):
        if not (<_CacheEntry>p).marked:  # (a marked entry's line is left clean)
            (<_CacheEntry>p).marked = True
            self._mirror(<_CacheEntry>p)
        self.hits += 1
        return (<_CacheEntry>p).value

    cdef inline object _slot_hit(self, _Slot* s):
        """A hit on index slot ``s``: marks it and its entry (the entry's line is touched only
        when the slot was unmarked), counts it, returns the value."""
        if not s.marked:
            s.marked = 1
            (<_CacheEntry>s.entry).marked = True
        self.hits += 1
        return <object>s.value

    cdef object _get_block(self, long long base, Py_ssize_t index):
        """``get(base + index)`` through the int index (``base + index`` in [0, 2**62)): one
        slot read; the entry is touched only to mark it (the mark mirrored in the slot)."""
        cdef _Slot* s
        cdef long long v = base + index
        self._acquire()
        try:
            s = self._find(v)
            if s == NULL:
                self.misses += 1
                return None
            return self._slot_hit(s)
        finally:
            self._release()

    def get_block(self, base, index):
        """``get(base + index)`` (see :meth:`silt.cache.BlockCache.get_block`)."""
        cdef long long b, v
        cdef Py_ssize_t i
        if type(base) is int and type(index) is int:
            b = _index_key(base)
            if b >= 0 and 0 <= index < (1 << 32):
                i = index
                v = b + i
                if v < _INDEX_LIMIT:
                    return self._get_block(b, i)
        return self._get(base + index)

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
        cdef _Slot* s
        cdef object key
        cdef object keys = getattr(t, "block_keys", None)  # once, not once a block
        cdef Py_ssize_t nkeys = PyList_GET_SIZE(keys) if type(keys) is list else 0
        cdef long long base = _index_key(reader.cache_id)  # -1: not by the int index
        self._acquire()
        try:
            for g in range(n):
                i = <object>PyList_GET_ITEM(ids, g)
                if i < 0:
                    raise IndexError(f"block {i} of a cache lookup")
                if base >= 0 and base + i < _INDEX_LIMIT:  # the key is base + i: by value
                    s = self._find(base + i)
                    if s == NULL:
                        self.misses += 1
                        missed += 1
                    else:
                        out[g] = self._slot_hit(s)
                    continue
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
        cdef long long ikey
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
                self._mirror(e)
                self._make_room(self.capacity)
                return
            ikey = _index_key(key)
            if ikey >= 0:
                self._reserve()
            self._make_room(self.capacity - charge)
            e = _CacheEntry.__new__(_CacheEntry)
            e.key = key
            e.value = value
            e.charge = charge
            e.ikey = -1
            self._push(e)
            try:
                self._data[key] = e
            except BaseException:
                self._ring_undo_last()
                raise
            if ikey >= 0:
                e.ikey = ikey
                self._index(e)
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
        cdef Py_ssize_t i
        self._acquire()
        try:
            for i in range(self._nslots):  # first: the slots borrow what the dict holds
                self._slots[i].key = -1
            self._nindexed = 0
            self._data.clear()
            self._drop_ring()
            self.used = 0
        finally:
            self._release()
