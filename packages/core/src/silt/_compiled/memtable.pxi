# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Writes: checking and inserting pairs and ops into the memtable, and its sort (twins in
# silt.memtable).

def check_pairs(keys, values, Py_ssize_t max_key, Py_ssize_t max_value):
    """Index of the first pair that is not (bytes within the limits), or -1 when all are."""
    cdef Py_ssize_t i, n = len(keys)
    if len(values) != n:
        return 0
    cdef object k, v
    for i in range(n):
        k = keys[i]
        v = values[i]
        if (not PyBytes_CheckExact(k) or PyBytes_GET_SIZE(k) > max_key
                or not PyBytes_CheckExact(v) or PyBytes_GET_SIZE(v) > max_value):
            return i
    return -1


def check_keys_plain(keys, Py_ssize_t max_key):
    """Index of the first key that is not bytes within ``max_key``, or -1 when all are."""
    cdef Py_ssize_t i, n = len(keys)
    cdef object k
    for i in range(n):
        k = keys[i]
        if not PyBytes_CheckExact(k) or PyBytes_GET_SIZE(k) > max_key:
            return i
    return -1


def insert_pairs(dict data, keys, values, Py_ssize_t start, Py_ssize_t approx,
                 Py_ssize_t limit):
    """Put ``keys[i] -> values[i]`` for ``i >= start`` into ``data`` until the memtable size
    ``approx`` reaches ``limit``. Returns ``(next_index, approx)``."""
    cdef Py_ssize_t i = start, n = len(keys)
    cdef object k, v
    while i < n:
        k = keys[i]
        v = values[i]
        PyDict_SetItem(data, k, v)
        approx += PyBytes_GET_SIZE(k) + PyBytes_GET_SIZE(v) + ENTRY_OVERHEAD
        i += 1
        if approx >= limit:
            break
    return i, approx


def check_ops(list ops, Py_ssize_t max_key, Py_ssize_t max_value):
    """True when every op is ``(bytes key, bytes value or None, None)`` within the limits."""
    cdef object op, k, v
    for op in ops:
        if not PyTuple_CheckExact(op) or PyTuple_GET_SIZE(op) != 3:
            return False
        k = <object>PyTuple_GET_ITEM(op, 0)
        v = <object>PyTuple_GET_ITEM(op, 1)
        if <object>PyTuple_GET_ITEM(op, 2) is not None:
            return False
        if not PyBytes_CheckExact(k) or PyBytes_GET_SIZE(k) > max_key:
            return False
        if v is not None and (not PyBytes_CheckExact(v) or PyBytes_GET_SIZE(v) > max_value):
            return False
    return True


def split_found(list keys, dict data, dict found):
    """Move the keys that ``data`` has into ``found`` (with their records); return the others."""
    cdef list rest = []
    cdef Py_ssize_t i
    cdef PyObject* p
    cdef object key
    if not data:
        return list(keys)
    for i in range(PyList_GET_SIZE(keys)):
        key = <object>PyList_GET_ITEM(keys, i)
        p = PyDict_GetItem(data, key)
        if p == NULL:
            rest.append(key)
        else:
            found[key] = <object>p
    return rest


ctypedef struct _Item:
    uint64_t pfx
    PyObject* key
    PyObject* value


cdef inline int _item_cmp(const _Item* a, const _Item* b) noexcept:
    if a.pfx != b.pfx:
        return -1 if a.pfx < b.pfx else 1
    return _cmp(<const unsigned char*>PyBytes_AS_STRING(<object>a.key),
                PyBytes_GET_SIZE(<object>a.key),
                <const unsigned char*>PyBytes_AS_STRING(<object>b.key),
                PyBytes_GET_SIZE(<object>b.key))


cdef void _insertion_sort(_Item* a, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i, j
    cdef _Item x
    for i in range(1, n):
        x = a[i]
        j = i
        while j > 0 and _item_cmp(&a[j - 1], &x) > 0:
            a[j] = a[j - 1]
            j -= 1
        a[j] = x


cdef void _merge_sort(_Item* a, _Item* tmp, Py_ssize_t n) noexcept:
    """Sort by full key (runs of keys sharing their first 8 bytes)."""
    if n <= 16:
        _insertion_sort(a, n)
        return
    cdef Py_ssize_t h = n // 2, i = 0, j, k = 0
    _merge_sort(a, tmp, h)
    _merge_sort(a + h, tmp, n - h)
    j = h
    while i < h and j < n:
        if _item_cmp(&a[j], &a[i]) < 0:
            tmp[k] = a[j]
            j += 1
        else:
            tmp[k] = a[i]
            i += 1
        k += 1
    while i < h:
        tmp[k] = a[i]
        i += 1
        k += 1
    while j < n:
        tmp[k] = a[j]
        j += 1
        k += 1
    memcpy(a, tmp, n * sizeof(_Item))


cdef _Item* _radix_sort(_Item* a, _Item* b, Py_ssize_t n) noexcept:
    """Sort ``a[:n]`` (``pfx`` set) by whole key, using ``b[:n]`` as scratch: an LSD radix sort
    on the first 8 bytes (bytes that never differ are skipped), then a merge sort of each run
    that shares them. Returns the one of ``a`` and ``b`` that holds the result."""
    cdef size_t counts[8][256]
    cdef size_t total, c
    cdef int pas, byte
    cdef bint trivial
    cdef Py_ssize_t j, run
    cdef _Item* t
    memset(counts, 0, sizeof(counts))
    for j in range(n):
        for pas in range(8):
            counts[pas][(a[j].pfx >> (8 * pas)) & 0xFF] += 1
    for pas in range(8):  # least significant byte first
        trivial = False
        for byte in range(256):
            if counts[pas][byte] == <size_t>n:
                trivial = True
                break
        if trivial:
            continue
        total = 0
        for byte in range(256):
            c = counts[pas][byte]
            counts[pas][byte] = total
            total += c
        for j in range(n):
            byte = (a[j].pfx >> (8 * pas)) & 0xFF
            b[counts[pas][byte]] = a[j]
            counts[pas][byte] += 1
        t = a
        a = b
        b = t
    j = 0
    while j < n:  # whole-key order inside runs of equal prefixes
        run = j + 1
        while run < n and a[run].pfx == a[j].pfx:
            run += 1
        if run - j > 1:
            _merge_sort(a + j, b, run - j)
        j = run
    return a


def sorted_items(dict data):
    """``(keys, records)`` of ``data`` in key order: an LSD radix sort on the keys' first 8 bytes
    (runs that share them are merge-sorted by whole key), read straight from the dict, so there
    is no per-key comparison call and no second, random-order pass of lookups."""
    cdef Py_ssize_t n = len(data), pos = 0, i = 0, j
    cdef PyObject* k
    cdef PyObject* v
    cdef _Item* a
    cdef _Item* b
    cdef _Item* s
    for key in data:
        if not PyBytes_CheckExact(key):
            keys = sorted(data)
            return keys, [data[x] for x in keys]
    a = <_Item*>malloc(max(n, 1) * sizeof(_Item))
    b = <_Item*>malloc(max(n, 1) * sizeof(_Item))
    if a == NULL or b == NULL:
        free(a)
        free(b)
        raise MemoryError()
    try:
        while PyDict_Next(data, &pos, &k, &v):
            a[i].key = k
            a[i].value = v
            a[i].pfx = _prefix(<const unsigned char*>PyBytes_AS_STRING(<object>k),
                               PyBytes_GET_SIZE(<object>k))
            i += 1
        s = _radix_sort(a, b, n)
        keys = [None] * n
        records = [None] * n
        for j in range(n):
            keys[j] = <object>s[j].key
            records[j] = <object>s[j].value
        return keys, records
    finally:
        free(a)
        free(b)


def apply_ops(dict data, list ops):
    """Apply ops that passed :func:`check_ops`; return the memtable bytes they add."""
    cdef Py_ssize_t added = 0
    cdef object op, k, v
    for op in ops:
        k = <object>PyTuple_GET_ITEM(op, 0)
        v = <object>PyTuple_GET_ITEM(op, 1)
        PyDict_SetItem(data, k, v)
        if v is None:
            added += PyBytes_GET_SIZE(k) + ENTRY_OVERHEAD
        else:
            added += PyBytes_GET_SIZE(k) + PyBytes_GET_SIZE(v) + ENTRY_OVERHEAD
    return added

