# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Merging sorted sources newest first, and what of them is live (twins in silt.merge).

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

