# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Point reads: one key through an SST's filter and index (find_block, get_from), a read view's
# levels (KeyBounds, get_levels) and sorted keys per block (plan_probe, lookup_many); twins in
# silt.sst.reader (plan_probe, lookup_many and lookup_groups: silt.sst.probe).

cdef inline Py_ssize_t _find_in(object t, BloomFilter bloom, bytes key, long long h) except -2:
    """``_find_block`` over the decoded tail ``t``, through its :class:`KeyIndex` when it has
    one (a tail decoded by the pure-Python twins has none)."""
    cdef object index = getattr(t, "key_index", None)
    cdef Py_ssize_t i
    cdef const unsigned char* k
    cdef Py_ssize_t nk
    if type(index) is not KeyIndex:
        return _find_block(bloom, t.last_keys, key, h)
    if bloom is not None:
        if h < 0:
            h = _hash(key)
        if not bloom._test(<uint32_t>h):
            return -1
    k = <const unsigned char*>PyBytes_AS_STRING(key)
    nk = PyBytes_GET_SIZE(key)
    i = (<KeyIndex>index)._lower(k, nk, _prefix(k, nk), 0, (<KeyIndex>index)._n)
    return i if i < (<KeyIndex>index)._n else -1


cdef Py_ssize_t _find_block(BloomFilter bloom, list last_keys, bytes key,
                            long long h) except -2:
    if bloom is not None:
        if h < 0:
            h = _hash(key)
        if not bloom._test(<uint32_t>h):
            return -1
    cdef Py_ssize_t n = PyList_GET_SIZE(last_keys)
    cdef Py_ssize_t i = _bisect_bytes(last_keys, <const unsigned char*>PyBytes_AS_STRING(key),
                                      PyBytes_GET_SIZE(key), 0, n)
    return i if i < n else -1


def find_block(BloomFilter bloom, list last_keys, bytes key, long long h=-1):
    """The only block of an SST that can hold ``key``, or -1 when the bloom filter rules the key
    out or it is past the last key. ``h`` is ``bloom_hash(key)`` when the caller has it."""
    return _find_block(bloom, last_keys, key, h)


cdef object _get_one(object reader, bytes key, const unsigned char* k, Py_ssize_t nk,
                     long long* h):
    """``SstReader.get`` of ``key`` in ``reader`` when its key range holds ``key``, else
    MISSING; ``h[0]`` is the bloom hash, computed here on first need."""
    cdef object info, t, cache, blk, r, lo, hi, bloom
    cdef Py_ssize_t i
    info = reader.info
    lo = info.smallest
    hi = info.largest
    if not (PyBytes_CheckExact(lo) and PyBytes_CheckExact(hi)):
        raise TypeError("SST key bounds must be bytes")
    if (_cmp(<const unsigned char*>PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo), k, nk) > 0
            or _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(hi),
                    PyBytes_GET_SIZE(hi)) > 0):
        return _MISSING
    t = reader.loaded_tail
    if t is None:
        t = reader.tail
    if h[0] < 0:
        h[0] = _hash(key)
    bloom = t.bloom
    if bloom is not None and type(bloom) is not BloomFilter:
        return reader.get(key, h[0])  # a tail decoded by the pure-Python twins
    i = _find_in(t, bloom, key, h[0])
    if i < 0:
        return _MISSING
    cache = reader.cache
    blk = None
    if type(cache) is BlockCache:
        blk = (<BlockCache>cache)._get(_block_key(reader, t, i))
    elif cache is not None:
        blk = cache.get(_block_key(reader, t, i))
    if blk is None:
        blk = _read_missed(reader, i, cache)
    if type(blk) is Block:
        return (<Block>blk).get(key)
    return blk.get(key)


cdef inline object _block_key(object reader, object t, Py_ssize_t i):
    """Block ``i``'s key in the block cache: the tail's own int (``SstTail.block_keys``: the
    cache's dict then finds the entry by identity), or ``cache_id + i`` (silt.cache.block_key)."""
    cdef object keys = getattr(t, "block_keys", None)
    if type(keys) is list and i < PyList_GET_SIZE(<list>keys):
        return <object>PyList_GET_ITEM(keys, i)
    return reader.cache_id + i


cdef object _read_missed(object reader, Py_ssize_t i, object cache):
    """``reader.read_block(i)`` for a get that missed the cache, without its two Python frames:
    the store's direct reader (``reader.direct_read()``) is called here, a failure of it goes
    to ``reader.direct_failed`` (as in ``SstReader._get_range``), and the block is checked,
    decoded and put into ``cache`` here. A store without a direct reader goes through
    ``read_block``. Only public reader names are used (tests/test_twins.py holds it to that)."""
    cdef object read = reader.direct_read()
    cdef object t
    if read is None:
        return reader.read_block(i)
    t = reader.loaded_tail
    if t is None:
        t = reader.tail
    return _read_direct(reader, read, t, i, cache, _block_key(reader, t, i))


cdef object _read_direct(object reader, object read, object t, Py_ssize_t i, object cache,
                         object bk):
    """Block ``i`` of ``reader`` (tail ``t``) read with its direct reader ``read``, checked,
    decoded and put into ``cache`` under the block key ``bk`` (``_read_missed``'s read)."""
    cdef object off = t.block_offsets[i]
    cdef object size = t.block_sizes[i]
    cdef object data, blk
    try:
        data = _direct_read(read, off, size)
    except Exception as exc:
        data = reader.direct_failed(exc, off, size)
    if len(data) != size:
        raise CorruptionError(reader.name, off, f"block truncated: {len(data)} of {size} bytes")
    blk = decode_block(data, reader.name, off)
    if type(cache) is BlockCache:
        (<BlockCache>cache).put(bk, blk, (<Block>blk).charge)
    elif cache is not None:
        cache.put(bk, blk, blk.charge)
    return blk


@cython.final
cdef class _SstHot:
    """What a get reads of one SST, gathered once its tail is loaded: its key range, filter,
    index and block cache keys as C fields, so that :func:`get_levels` reads no Python
    attribute per SST (``_get_one`` reads eight). Kept by a :class:`KeyBounds` per SST of its
    view; only public reader names are read. Sound because none of it changes: a reader's
    ``info``, ``cache`` and ``cache_id`` are set once, and its tail is decoded from an
    immutable object (``SstReader.verify`` decodes it anew: the same index, filter and keys;
    the KeyBounds' filters of L0 SSTs were kept the same way)."""

    cdef object reader, smallest, largest, last_keys, block_keys, cache, cache_id, tail
    cdef object direct  # reader.direct_read() once asked (a reader asks its store once)
    cdef bint asked
    cdef long long base  # cache_id when the cache's int index may hold its keys, else -1
    cdef BloomFilter bloom
    cdef KeyIndex index


cdef object _make_hot(object reader):
    """``reader``'s :class:`_SstHot`, ``None`` while its tail is not loaded, or ``False`` when
    its gets stay with ``_get_one`` (a tail decoded by the pure-Python twins, bounds that are
    not bytes: ``_get_one`` sorts those out as before)."""
    cdef object t = reader.loaded_tail
    cdef object info, bloom, index, keys
    cdef _SstHot s
    if t is None:
        return None
    info = reader.info
    bloom = t.bloom
    index = getattr(t, "key_index", None)
    if ((bloom is not None and type(bloom) is not BloomFilter)
            or not (PyBytes_CheckExact(info.smallest) and PyBytes_CheckExact(info.largest))
            or (index is not None and type(index) is not KeyIndex)):
        return False
    s = _SstHot.__new__(_SstHot)
    s.reader = reader
    s.smallest = info.smallest
    s.largest = info.largest
    s.bloom = bloom
    s.index = index
    s.last_keys = t.last_keys
    if index is None and type(s.last_keys) is not list:
        return False
    keys = getattr(t, "block_keys", None)
    s.block_keys = keys if type(keys) is list else None
    s.cache = reader.cache
    s.cache_id = reader.cache_id
    s.base = _index_key(s.cache_id)
    s.tail = t
    return s


cdef object _get_hot(_SstHot s, bytes key, const unsigned char* k, Py_ssize_t nk,
                     long long* h):
    """``_get_one`` of ``s.reader`` over the fields of ``s``: the same steps in the same order
    (range, filter, index, cache, block, and a miss read as ``_read_missed`` reads it, without
    the frame of ``direct_read`` once it was asked), the same answer."""
    cdef object cache, blk, bk = None
    cdef Py_ssize_t i, n
    cdef bint indexed
    cdef object lo = s.smallest, hi = s.largest
    if (_cmp(<const unsigned char*>PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo), k, nk) > 0
            or _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(hi),
                    PyBytes_GET_SIZE(hi)) > 0):
        return _MISSING
    if h[0] < 0:
        h[0] = _hash(key)
    if s.bloom is not None and not s.bloom._test(<uint32_t>h[0]):
        return _MISSING
    if s.index is not None:
        n = s.index._n
        i = s.index._lower(k, nk, _prefix(k, nk), 0, n)
    else:
        n = PyList_GET_SIZE(<list>s.last_keys)
        i = _bisect_bytes(<list>s.last_keys, k, nk, 0, n)
    if i >= n:
        return _MISSING
    cache = s.cache
    blk = None
    # The key is base + i: the cache's int index finds it by value, no key object read.
    indexed = type(cache) is BlockCache and s.base >= 0 and s.base + i < _INDEX_LIMIT
    if indexed:
        blk = (<BlockCache>cache)._get_block(s.base, i)
    if blk is None:
        if s.block_keys is not None and i < PyList_GET_SIZE(<list>s.block_keys):
            bk = <object>PyList_GET_ITEM(<list>s.block_keys, i)
        else:
            bk = s.cache_id + i
        if indexed:
            pass  # missed above
        elif type(cache) is BlockCache:
            blk = (<BlockCache>cache)._get(bk)
        elif cache is not None:
            blk = cache.get(bk)
    if blk is None:
        if not s.asked:
            s.direct = s.reader.direct_read()
            s.asked = True
        if s.direct is None:
            blk = s.reader.read_block(i)
        else:
            blk = _read_direct(s.reader, s.direct, s.tail, i, cache, bk)
    if type(blk) is Block:
        return (<Block>blk).get(key)
    return blk.get(key)


def get_from(readers, bytes key, long long h=-1):
    """The record of ``key`` in the first of ``readers`` (SstReaders, newest first) whose key
    range holds it and that has it, or MISSING: ``SstReader.get`` over each, without a Python
    frame per SST and with one bloom hash for all."""
    cdef object reader, r
    cdef const unsigned char* k = <const unsigned char*>PyBytes_AS_STRING(key)
    cdef Py_ssize_t nk = PyBytes_GET_SIZE(key)
    for reader in readers:
        r = _get_one(reader, key, k, nk, &h)
        if r is not _MISSING:
            return r
    return _MISSING


@cython.final
cdef class KeyBounds:
    """Compiled twin of :func:`silt.sst.reader.key_bounds`' pair: the smallest and largest key
    of a read view's SSTs (``bounds[0]``, ``bounds[1]``), and its L0 SSTs' own key ranges and
    filters kept beside them, so that :func:`get_levels` checks each L0 SST's range and filter
    without reading its attributes (several Python attribute reads per SST and get, with a
    dozen overlapping L0 SSTs after a load). A filter is taken once its SST's tail is loaded
    (tails load on first read and never change). Immutable but for that; thread-safe (a race
    takes the same filter twice)."""

    cdef readonly object lo, hi
    cdef object _l0  # the L0 readers this was built for (get_levels uses it only for them)
    cdef list _readers, _smallest, _largest
    cdef list _blooms  # per L0 SST: its BloomFilter, False when it has none, None: not yet
    cdef list _hot0  # per L0 SST: its _SstHot, False: none to make, None: not yet
    cdef object _levels  # the levels this was built for (None: get_levels reads them itself)
    cdef list _lv_largest, _lv_readers, _lv_hot  # per level: its lists, and _SstHots as _hot0

    def __init__(self, lo, hi, l0, levels=None):
        if not (PyBytes_CheckExact(lo) and PyBytes_CheckExact(hi)):
            raise TypeError("key bounds must be bytes")
        self.lo, self.hi, self._l0 = lo, hi, l0
        cdef object sst, first, last, level
        self._levels = None
        if levels is not None:
            self._lv_largest = []
            self._lv_readers = []
            self._lv_hot = []
            for level in levels:
                first = level.largest
                last = level.readers
                if type(first) is not list or type(last) is not list or len(first) != len(last):
                    break  # not a Level as silt.view makes them: get_levels reads each itself
                self._lv_largest.append(first)
                self._lv_readers.append(last)
                self._lv_hot.append([None] * len(last))
            else:
                self._levels = levels
        self._readers = list(l0)
        self._smallest = []
        self._largest = []
        for sst in self._readers:
            first = sst.info.smallest
            last = sst.info.largest
            if not (PyBytes_CheckExact(first) and PyBytes_CheckExact(last)):
                raise TypeError("SST key bounds must be bytes")
            self._smallest.append(first)
            self._largest.append(last)
        self._blooms = [None] * len(self._readers)
        self._hot0 = [None] * len(self._readers)

    def __len__(self):
        return 2

    def __getitem__(self, Py_ssize_t i):
        if i == 0 or i == -2:
            return self.lo
        if i == 1 or i == -1:
            return self.hi
        raise IndexError("key bounds have two items")

    def __eq__(self, other):
        return isinstance(other, (tuple, KeyBounds)) and tuple(self) == tuple(other)

    def __repr__(self):
        return f"KeyBounds({self.lo!r}, {self.hi!r})"

    cdef inline object _bloom(self, Py_ssize_t i):
        """L0 SST ``i``'s compiled filter, ``False`` when it has none to test here, or
        ``None`` while its tail is not loaded."""
        cdef object b = <object>PyList_GET_ITEM(self._blooms, i)
        cdef object t
        if b is None:
            t = (<object>PyList_GET_ITEM(self._readers, i)).loaded_tail
            if t is None:
                return None
            b = t.bloom
            if type(b) is not BloomFilter:
                b = False
            self._blooms[i] = b
        return b


cdef inline object _hot_at(list hots, list readers, Py_ssize_t i):
    """``hots[i]``, made from ``readers[i]`` on first need (a race makes it twice, alike)."""
    cdef object s = <object>PyList_GET_ITEM(hots, i)
    if s is None:
        s = _make_hot(<object>PyList_GET_ITEM(readers, i))
        if s is not None:
            hots[i] = s
    return s


def key_bounds(l0, levels):
    """Compiled twin of :func:`silt.sst.reader.key_bounds`: the pair as a :class:`KeyBounds`
    (with the L0 SSTs' ranges and filters), or ``None`` when there is no SST."""
    cdef list firsts = [], lasts = []
    cdef object sst, level, run
    for sst in l0:
        firsts.append(sst.info.smallest)
        lasts.append(sst.info.largest)
    for level in levels:
        run = level.readers
        if run:
            firsts.append(run[0].info.smallest)
            lasts.append(run[len(run) - 1].info.largest)  # (no wraparound here)
    return KeyBounds(min(firsts), max(lasts), l0, levels) if firsts else None


# From this many L0 SSTs on, a get starts loading their bloom probes before testing them.
cdef Py_ssize_t L0_PREFETCH = 4


def get_levels(l0, levels, bytes key, long long h=-1, bounds=None):
    """The record of ``key`` in the L0 SSTs ``l0`` (newest first), else in the first of
    ``levels`` (sorted runs, each with ``readers`` and their ``largest`` keys) that has it, or
    MISSING: ``get_from`` over L0 and one bisect per level, with one bloom hash for all. A key
    outside ``bounds`` (``key_bounds`` of them) is MISSING at once; a :class:`KeyBounds` built
    for ``l0`` also checks each L0 SST's range and filter without a Python attribute read."""
    cdef object reader, r, level, hot
    cdef list largest, readers
    cdef Py_ssize_t i, n0, li
    cdef const unsigned char* k = <const unsigned char*>PyBytes_AS_STRING(key)
    cdef Py_ssize_t nk = PyBytes_GET_SIZE(key)
    cdef object t, bloom, lo, hi
    cdef KeyBounds kb = None
    if bounds is not None:
        if type(bounds) is KeyBounds:
            kb = <KeyBounds>bounds
            lo = kb.lo
            hi = kb.hi
            if kb._l0 is not l0:
                kb = None
        else:
            lo = bounds[0]
            hi = bounds[1]
        if not (PyBytes_CheckExact(lo) and PyBytes_CheckExact(hi)):
            raise TypeError("key bounds must be bytes")
        if (_cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo)) < 0
                or _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(hi),
                        PyBytes_GET_SIZE(hi)) > 0):
            return _MISSING
    if kb is not None:
        n0 = PyList_GET_SIZE(kb._readers)
        if n0:
            if h < 0:
                h = _hash(key)
            if n0 >= L0_PREFETCH:
                for i in range(n0):
                    bloom = kb._bloom(i)
                    if bloom is not None and bloom is not False:
                        (<BloomFilter>bloom)._prefetch(<uint32_t>h)
            for i in range(n0):
                lo = <object>PyList_GET_ITEM(kb._smallest, i)
                hi = <object>PyList_GET_ITEM(kb._largest, i)
                if (_cmp(<const unsigned char*>PyBytes_AS_STRING(lo), PyBytes_GET_SIZE(lo),
                         k, nk) > 0
                        or _cmp(k, nk, <const unsigned char*>PyBytes_AS_STRING(hi),
                                PyBytes_GET_SIZE(hi)) > 0):
                    continue
                bloom = kb._bloom(i)
                if (bloom is not None and bloom is not False
                        and not (<BloomFilter>bloom)._test(<uint32_t>h)):
                    continue
                hot = _hot_at(kb._hot0, kb._readers, i)
                if type(hot) is _SstHot:
                    r = _get_hot(<_SstHot>hot, key, k, nk, &h)
                else:
                    r = _get_one(<object>PyList_GET_ITEM(kb._readers, i), key, k, nk, &h)
                if r is not _MISSING:
                    return r
        if kb._levels is levels:
            for li in range(PyList_GET_SIZE(kb._lv_largest)):
                largest = <list>PyList_GET_ITEM(kb._lv_largest, li)
                i = _bisect_bytes(largest, k, nk, 0, PyList_GET_SIZE(largest))
                if i < PyList_GET_SIZE(largest):
                    readers = <list>PyList_GET_ITEM(kb._lv_readers, li)
                    hot = _hot_at(<list>PyList_GET_ITEM(kb._lv_hot, li), readers, i)
                    if type(hot) is _SstHot:
                        r = _get_hot(<_SstHot>hot, key, k, nk, &h)
                    else:
                        r = _get_one(<object>PyList_GET_ITEM(readers, i), key, k, nk, &h)
                    if r is not _MISSING:
                        return r
            return _MISSING
    else:
        if len(l0) >= L0_PREFETCH:
            # Several overlapping L0 SSTs: their filters' probes are cache misses (the filters
            # are far larger than the CPU cache), so start them all before testing one by one.
            if h < 0:
                h = _hash(key)
            for reader in l0:
                t = reader.loaded_tail
                if t is not None:
                    bloom = t.bloom
                    if type(bloom) is BloomFilter:
                        (<BloomFilter>bloom)._prefetch(<uint32_t>h)
        for reader in l0:
            r = _get_one(reader, key, k, nk, &h)
            if r is not _MISSING:
                return r
    for level in levels:
        largest = level.largest
        i = _bisect_bytes(largest, k, nk, 0, PyList_GET_SIZE(largest))
        if i < PyList_GET_SIZE(largest):
            r = _get_one(level.readers[i], key, k, nk, &h)
            if r is not _MISSING:
                return r
    return _MISSING


def plan_probe(list keys, Py_ssize_t lo, Py_ssize_t hi, BloomFilter bloom, list last_keys):
    """Group sorted ``keys[lo:hi]`` by the block that may hold them (a merge against the index).

    Returns ``(unresolved, blocks, groups)``: ``unresolved`` starts with ``keys[:lo]`` plus the
    keys the bloom filter rules out or that are past the last block; ``groups[j]`` holds the keys
    to look up in block ``blocks[j]``.
    """
    cdef list unresolved = keys[:lo]
    cdef list blocks = []
    cdef list groups = []
    cdef list group = None
    cdef Py_ssize_t nb = PyList_GET_SIZE(last_keys), b = 0, j, cur = -1
    cdef object key, last
    cdef const unsigned char* k
    cdef Py_ssize_t nk
    for j in range(lo, hi):
        key = <object>PyList_GET_ITEM(keys, j)
        if not PyBytes_CheckExact(key):
            raise TypeError("keys must be bytes")
        k = <const unsigned char*>PyBytes_AS_STRING(key)
        nk = PyBytes_GET_SIZE(key)
        if bloom is not None and not bloom._test(_hash(<bytes>key)):
            unresolved.append(key)
            continue
        b = _next_block(last_keys, k, nk, b, nb)  # keys are sorted: never moves back
        if b >= nb:
            unresolved.append(key)
            continue
        if b != cur:
            cur = b
            group = []
            blocks.append(b)
            groups.append(group)
        group.append(key)
    return unresolved, blocks, groups


cpdef lookup_many(Block blk, list keys, dict found, list unresolved):
    """Look sorted ``keys`` up in ``blk``: records go to ``found``, misses to ``unresolved``."""
    cdef Py_ssize_t j, i = 0, n = PyList_GET_SIZE(keys), nk
    cdef object key
    cdef const unsigned char* k
    for j in range(n):
        key = <object>PyList_GET_ITEM(keys, j)
        if not PyBytes_CheckExact(key):
            raise TypeError("keys must be bytes")
        k = <const unsigned char*>PyBytes_AS_STRING(key)
        nk = PyBytes_GET_SIZE(key)
        i = blk._lower_bound(k, nk, i)
        if i < blk._n and blk._key_eq(i, k, nk):
            found[key] = blk._record(i)
        else:
            unresolved.append(key)


def lookup_groups(list blocks, list groups, dict found, list unresolved):
    """:func:`lookup_many` of ``groups[j]`` in ``blocks[j]`` for every ``j``."""
    cdef Py_ssize_t j
    for j in range(PyList_GET_SIZE(groups)):
        lookup_many(<Block?>PyList_GET_ITEM(blocks, j), <list>PyList_GET_ITEM(groups, j),
                    found, unresolved)

