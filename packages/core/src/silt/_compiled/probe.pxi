# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Many keys against one SST (multi_get) and the direct reads of its missed blocks (twins in
# silt.sst.probe).

def sorted_unique(list keys):
    """``sorted(set(keys))``: the distinct keys in byte order (a new list). A radix sort on the
    keys' first 8 bytes (whole keys compared only where those are equal, as in
    :func:`sorted_items`), then one pass that drops repeats: no Python comparison and no set."""
    cdef Py_ssize_t n = PyList_GET_SIZE(keys), i
    cdef object key
    cdef _Item* a
    cdef _Item* tmp
    cdef _Item* srt
    cdef list out
    for i in range(n):
        if not PyBytes_CheckExact(<object>PyList_GET_ITEM(keys, i)):
            return sorted(set(keys))
    a = <_Item*>malloc(max(n, 1) * sizeof(_Item))
    tmp = <_Item*>malloc(max(n, 1) * sizeof(_Item))
    if a == NULL or tmp == NULL:
        free(a)
        free(tmp)
        raise MemoryError()
    try:
        for i in range(n):
            key = <object>PyList_GET_ITEM(keys, i)
            a[i].key = <PyObject*>key
            a[i].value = NULL
            a[i].pfx = _prefix(<const unsigned char*>PyBytes_AS_STRING(key),
                               PyBytes_GET_SIZE(key))
        srt = _radix_sort(a, tmp, n)
        out = []
        for i in range(n):
            if i and _item_cmp(&srt[i], &srt[i - 1]) == 0:
                continue
            out.append(<object>srt[i].key)
        return out
    finally:
        free(a)
        free(tmp)


cdef inline Py_ssize_t _bisect_right_bytes(list a, const unsigned char* k, Py_ssize_t nk,
                                           Py_ssize_t lo, Py_ssize_t hi):
    """bisect_right over a list of bytes, with memcmp."""
    cdef Py_ssize_t mid
    cdef object x
    while lo < hi:
        mid = (lo + hi) >> 1
        x = <object>PyList_GET_ITEM(a, mid)
        if _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(x), PyBytes_GET_SIZE(x)) < 0:
            hi = mid
        else:
            lo = mid + 1
    return lo


# How far ahead of its use probe_sst starts loading memory: a filter's line (keys ahead), a
# block's object and its prefix array (blocks ahead). Each is a cache miss of its own when the
# filters and blocks are larger than the CPU cache, so several are kept in flight at once.
cdef Py_ssize_t PROBE_BLOOM_AHEAD = 8
cdef Py_ssize_t PROBE_BLOCK_AHEAD = 6


cdef inline void _prefetch_block(object blk, bint fields) noexcept:
    """Start loading a block's object (``fields`` false) or, once that is in cache, the
    prefix array its search reads (up to 1 KiB of it, from the middle out)."""
    cdef Block b
    cdef Py_ssize_t n, m, step
    if type(blk) is not Block:
        return
    if not fields:
        SILT_PREFETCH(<PyObject*>blk)
        SILT_PREFETCH(<char*><PyObject*>blk + 64)
        SILT_PREFETCH(<char*><PyObject*>blk + 128)
        return
    b = <Block>blk
    n = b._n
    m = n >> 1
    SILT_PREFETCH(b._pfx + m)
    step = 8  # eight prefixes a cache line
    while step <= 64 and step <= m:
        SILT_PREFETCH(b._pfx + m - step)
        SILT_PREFETCH(b._pfx + m + step)
        step += 8


def probe_sst(reader, list keys, dict found, fetch):
    """Look sorted, distinct ``keys`` up in the SST of ``reader``: the records it holds go to
    ``found``; returns the other keys, still sorted (``keys`` itself when none is in the SST's
    key range). ``fetch(reader, block_ids)`` is called once with the ascending ids of the blocks
    that may hold some key, and not at all when there are none.

    One pass merges the keys in range against the bloom filter and the index (remembering each
    key's block in a C array), one more looks each key up in its fetched block and writes the
    unresolved keys out in order: no per-key Python, no per-block list, no sort. Both passes
    keep several cache misses in flight (a filter's line a few keys ahead, a block's object and
    prefix array a few blocks ahead): with filters and blocks far larger than the CPU cache,
    each is a trip to memory, and one at a time they were most of a warm multi_get."""
    cdef object info = reader.info
    cdef object smallest = info.smallest, largest = info.largest
    cdef Py_ssize_t n = PyList_GET_SIZE(keys), lo, hi, j, b, nb, cur, g, pos, m, ng
    cdef Py_ssize_t* where
    cdef uint32_t* hashes
    cdef object t, bloom, key, last, blk, r, index
    cdef list last_keys, block_ids, blocks, out
    cdef const unsigned char* k
    cdef Py_ssize_t nk
    cdef bint compiled_bloom, indexed
    cdef KeyIndex kx = None
    if not (PyBytes_CheckExact(smallest) and PyBytes_CheckExact(largest)):
        raise TypeError("SST key bounds must be bytes")
    for j in range(n):
        if not PyBytes_CheckExact(<object>PyList_GET_ITEM(keys, j)):
            raise TypeError("keys must be bytes")
    lo = _bisect_bytes(keys, <const unsigned char*>PyBytes_AS_STRING(smallest),
                       PyBytes_GET_SIZE(smallest), 0, n)
    hi = _bisect_right_bytes(keys, <const unsigned char*>PyBytes_AS_STRING(largest),
                             PyBytes_GET_SIZE(largest), lo, n)
    if lo >= hi:
        return keys
    t = reader.loaded_tail
    if t is None:
        t = reader.tail
    bloom = t.bloom
    compiled_bloom = type(bloom) is BloomFilter
    last_keys = t.last_keys
    nb = PyList_GET_SIZE(last_keys)
    index = getattr(t, "key_index", None)
    indexed = type(index) is KeyIndex and (<KeyIndex>index)._n == nb
    if indexed:
        kx = <KeyIndex>index
    m = hi - lo
    where = <Py_ssize_t*>malloc(m * (sizeof(Py_ssize_t) + sizeof(uint32_t)))
    if where == NULL:
        raise MemoryError()
    hashes = <uint32_t*>(where + m)
    try:
        # 1. each key's block (-1: ruled out by the filter or past the last block)
        if compiled_bloom:
            for j in range(m):
                hashes[j] = _hash(<bytes>PyList_GET_ITEM(keys, lo + j))
            for j in range(min(m, PROBE_BLOOM_AHEAD)):
                (<BloomFilter>bloom)._prefetch(hashes[j])
        block_ids = []
        b = 0
        cur = -1
        for j in range(lo, hi):
            key = <object>PyList_GET_ITEM(keys, j)
            k = <const unsigned char*>PyBytes_AS_STRING(key)
            nk = PyBytes_GET_SIZE(key)
            where[j - lo] = -1
            if bloom is not None:
                if compiled_bloom:
                    if j - lo + PROBE_BLOOM_AHEAD < m:
                        (<BloomFilter>bloom)._prefetch(hashes[j - lo + PROBE_BLOOM_AHEAD])
                    if not (<BloomFilter>bloom)._test(hashes[j - lo]):
                        continue
                elif not bloom.may_contain_hash(_hash(<bytes>key)):
                    continue
            if indexed:  # keys are sorted: the block never moves back
                b = kx._next(k, nk, _prefix(k, nk), b)
            else:
                b = _next_block(last_keys, k, nk, b, nb)
            if b >= nb:
                continue
            where[j - lo] = b
            if b != cur:
                cur = b
                block_ids.append(b)
        # 2. the blocks, then each key in its block; the rest out in order
        blocks = _fetch_blocks(reader, t, block_ids, fetch) if block_ids else []
        ng = PyList_GET_SIZE(blocks)
        if ng != PyList_GET_SIZE(block_ids):
            raise ValueError("fetch returned a different number of blocks than asked for")
        for g in range(min(ng, PROBE_BLOCK_AHEAD)):
            _prefetch_block(<object>PyList_GET_ITEM(blocks, g), g < PROBE_BLOCK_AHEAD // 2)
        out = keys[:lo]
        cur = -1
        g = -1
        pos = 0
        blk = None
        for j in range(lo, hi):
            key = <object>PyList_GET_ITEM(keys, j)
            b = where[j - lo]
            if b < 0:
                out.append(key)
                continue
            if b != cur:
                cur = b
                g += 1
                blk = <object>PyList_GET_ITEM(blocks, g)
                pos = 0
                if g + PROBE_BLOCK_AHEAD < ng:
                    _prefetch_block(<object>PyList_GET_ITEM(blocks, g + PROBE_BLOCK_AHEAD), False)
                if g + PROBE_BLOCK_AHEAD // 2 < ng:
                    _prefetch_block(<object>PyList_GET_ITEM(blocks, g + PROBE_BLOCK_AHEAD // 2),
                                    True)
            if type(blk) is Block:
                k = <const unsigned char*>PyBytes_AS_STRING(key)
                nk = PyBytes_GET_SIZE(key)
                pos = (<Block>blk)._lower_bound(k, nk, pos)
                if pos < (<Block>blk)._n and (<Block>blk)._key_eq(pos, k, nk):
                    PyDict_SetItem(found, key, (<Block>blk)._record(pos))
                else:
                    out.append(key)
            else:
                r = blk.get(key)
                if r is _MISSING:
                    out.append(key)
                else:
                    PyDict_SetItem(found, key, r)
        out.extend(keys[hi:])
        return out
    finally:
        free(where)


cdef list _fetch_blocks(object reader, object t, list block_ids, object fetch):
    """``fetch(reader, block_ids)`` as a list; with a compiled block cache and a fetcher that
    can ``fill`` (``silt.fetch.BlockFetcher``), the cache is read here and the fetcher called
    only for the blocks it missed: a warm pass makes no Python call per SST."""
    cdef object cache = reader.cache
    cdef object fill
    cdef list blocks
    if type(cache) is BlockCache:
        fill = getattr(fetch, "fill", None)
        if fill is not None:
            blocks = [None] * PyList_GET_SIZE(block_ids)
            if (<BlockCache>cache)._get_blocks(reader, t, block_ids, blocks):
                blocks = list(fill(reader, block_ids, blocks))
            return blocks
    return list(fetch(reader, block_ids))


def coalesce(reader, list indexes, Py_ssize_t gap, Py_ssize_t max_bytes):
    """Compiled twin of :func:`silt.sst.probe.coalesce`."""
    cdef object t = reader.loaded_tail
    if t is None:
        t = reader.tail
    return _coalesce(t.block_offsets, t.block_sizes, indexes, gap, max_bytes)


cdef list _coalesce(object offsets, object sizes, list indexes, Py_ssize_t gap,
                    Py_ssize_t max_bytes):
    cdef Py_ssize_t n = PyList_GET_SIZE(indexes), g, i, first, prev
    cdef long long o_first, o_prev_end, o_i, s_i
    cdef list runs = []
    if n == 0:
        raise IndexError("no block indexes to coalesce")
    first = prev = <object>PyList_GET_ITEM(indexes, 0)
    o_first = offsets[first]
    o_prev_end = o_first + <long long>sizes[first]
    for g in range(1, n):
        i = <object>PyList_GET_ITEM(indexes, g)
        o_i = offsets[i]
        s_i = sizes[i]
        if o_i - o_prev_end <= gap and o_i + s_i - o_first <= max_bytes:
            prev = i
            o_prev_end = o_i + s_i
            continue
        runs.append((first, prev + 1))
        first = prev = i
        o_first = o_i
        o_prev_end = o_i + s_i
    runs.append((first, prev + 1))
    return runs


def missing_runs(reader, list indexes, list out, Py_ssize_t gap, Py_ssize_t max_bytes):
    """Compiled twin of :func:`silt.sst.probe.missing_runs`."""
    cdef Py_ssize_t j, n = PyList_GET_SIZE(indexes)
    cdef dict where = {}
    cdef list missing = []
    cdef object i, t
    if PyList_GET_SIZE(out) != n:
        raise ValueError("indexes and blocks differ in length")
    for j in range(n):
        if <object>PyList_GET_ITEM(out, j) is None:
            i = <object>PyList_GET_ITEM(indexes, j)
            where[i] = j
            missing.append(i)
    t = reader.loaded_tail
    if t is None:
        t = reader.tail
    return where, _coalesce(t.block_offsets, t.block_sizes, missing, gap, max_bytes)


def read_runs(reader, read, list runs, dict where, list out):
    """Compiled twin of :func:`silt.sst.probe.read_runs`: each run read through ``read`` (the
    store's direct reader), checked, decoded and cached, and its wanted blocks placed in
    ``out``, in one C loop (the direct reader is the only Python frame per run)."""
    cdef object t = reader.loaded_tail
    cdef object offsets, sizes, cache, name, data, view, blk, run, off
    cdef Py_ssize_t r, first, stop, i, base, length, o, sz
    cdef PyObject* j
    if t is None:
        t = reader.tail
    offsets = t.block_offsets
    sizes = t.block_sizes
    cache = reader.cache
    name = reader.name
    for r in range(PyList_GET_SIZE(runs)):
        run = <object>PyList_GET_ITEM(runs, r)
        first = run[0]
        stop = run[1]
        if not 0 <= first < stop <= len(offsets):
            raise IndexError(f"block run {first}..{stop} outside 0..{len(offsets)}")
        base = offsets[first]
        length = offsets[stop - 1] + sizes[stop - 1] - base
        try:
            data = _direct_read(read, base, length)
        except Exception as exc:
            data = reader.direct_failed(exc, base, length)
        if len(data) != length:
            raise CorruptionError(name, base, "%s truncated: %d of %d bytes" % (
                "block" if stop - first == 1 else "block run", len(data), length))
        view = data if stop - first == 1 else memoryview(data)
        for i in range(first, stop):
            o = offsets[i]
            sz = sizes[i]
            if stop - first == 1:
                blk = decode_block(view, name, o)
            else:
                blk = decode_block(view[o - base:o - base + sz], name, o)
            if type(cache) is BlockCache:
                (<BlockCache>cache).put(_block_key(reader, t, i), blk, (<Block>blk).charge)
            elif cache is not None:
                cache.put(_block_key(reader, t, i), blk, blk.charge)
            j = PyDict_GetItem(where, i)
            if j != NULL:
                out[<object>j] = blk

