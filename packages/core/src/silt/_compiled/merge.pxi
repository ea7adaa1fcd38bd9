# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Merging sorted sources newest first, and what of them is live (twins in silt.merge).

cdef class merge_newest_first:
    """Iterate ``(key, record)`` over sorted sources in key order; on ties the lowest index
    (newest source) wins and older records of the same key are skipped.

    A tree of losers over the sources' current keys: each item out replays one path from its
    source's leaf to the root, one comparison a level (a binary heap's sift makes two), and a
    comparison reads the two keys' bytes through pointers kept in C arrays, never the items.
    A source that ends stands as a key above every other."""

    cdef list _its
    cdef list _heads                # current (key, record) item of each source, or None
    cdef const unsigned char** _kp  # the bytes of each source's current key
    cdef Py_ssize_t* _kl            # and their length; -1 once the source has ended
    cdef int* _tree                 # [0]: the winner; [1:n]: the loser of each match
    cdef int _n
    cdef object _last               # the key returned last (kept alive: compared by bytes)
    cdef bint _started

    def __cinit__(self, sources):
        self._its = [iter(s) for s in sources]
        cdef int n = len(self._its)
        self._n = n
        self._heads = [None] * n
        self._kp = <const unsigned char**>malloc(max(n, 1) * sizeof(unsigned char*))
        self._kl = <Py_ssize_t*>malloc(max(n, 1) * sizeof(Py_ssize_t))
        self._tree = <int*>malloc(max(n, 1) * sizeof(int))
        if self._kp == NULL or self._kl == NULL or self._tree == NULL:
            raise MemoryError()
        cdef int i
        for i in range(n):
            self._kl[i] = -1
        self._tree[0] = 0
        self._last = None
        self._started = False

    def __dealloc__(self):
        free(self._kp)
        free(self._kl)
        free(self._tree)

    cdef inline bint _beats(self, int a, int b) noexcept:
        """Whether source ``a``'s current key comes out before source ``b``'s: the smaller
        key, the newer source on a tie, an ended source never."""
        cdef Py_ssize_t la = self._kl[a], lb = self._kl[b]
        if la < 0:
            return False
        if lb < 0:
            return True
        cdef int c = _cmp(self._kp[a], la, self._kp[b], lb)
        return c < 0 or (c == 0 and a < b)

    cdef int _start(self) except -1:
        """Pull every source's first item (on the first ``next``: nothing is read before),
        then play every match once."""
        self._started = True
        cdef int n = self._n, i, left, right, wl, wr
        for i in range(n):
            self._pull(i)
        if n <= 1:
            return 0
        cdef int* win = <int*>malloc(n * sizeof(int))
        if win == NULL:
            raise MemoryError()
        for i in range(n - 1, 0, -1):
            left = 2 * i
            right = left + 1
            wl = left - n if left >= n else win[left]
            wr = right - n if right >= n else win[right]
            if self._beats(wr, wl):
                win[i] = wr
                self._tree[i] = wl
            else:
                win[i] = wl
                self._tree[i] = wr
        self._tree[0] = win[1]
        free(win)
        return 0

    cdef int _pull(self, int i) except -1:
        """Source ``i``'s next item as its head (its key's bytes kept), or its end."""
        item = next(<object>PyList_GET_ITEM(self._its, i), None)
        if item is None:
            self._heads[i] = None
            self._kl[i] = -1
            return 0
        if not PyTuple_CheckExact(item) or PyTuple_GET_SIZE(item) != 2:
            item = tuple(item)
            if len(item) != 2:
                raise ValueError("merge sources must yield (key, record) pairs")
        key = <object>PyTuple_GET_ITEM(item, 0)
        if not PyBytes_CheckExact(key):
            raise TypeError("merge keys must be bytes")
        self._heads[i] = item
        self._kp[i] = <const unsigned char*>PyBytes_AS_STRING(key)
        self._kl[i] = PyBytes_GET_SIZE(key)
        return 0

    cdef inline void _replay(self, int i) noexcept:
        """Source ``i``'s new key plays the matches on its path up; the winner at the top."""
        cdef int node = (i + self._n) >> 1, cand = i, other
        while node > 0:
            other = self._tree[node]
            if self._beats(other, cand):
                self._tree[node] = cand
                cand = other
            node >>= 1
        self._tree[0] = cand

    def __iter__(self):
        return self

    def __next__(self):
        cdef int top
        cdef object item, key
        cdef Py_ssize_t kl
        if not self._started:
            self._start()
        while True:
            top = self._tree[0]
            if self._n == 0 or self._kl[top] < 0:
                raise StopIteration
            item = <object>PyList_GET_ITEM(self._heads, top)
            self._pull(top)
            if self._n > 1:
                self._replay(top)
            key = <object>PyTuple_GET_ITEM(item, 0)
            if self._last is not None:
                kl = PyBytes_GET_SIZE(key)
                if kl == PyBytes_GET_SIZE(self._last) and memcmp(
                        PyBytes_AS_STRING(key), PyBytes_AS_STRING(self._last), kl) == 0:
                    continue
            self._last = key
            return item


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

