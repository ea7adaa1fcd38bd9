# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Data blocks: encoding, the Block view, BlockIter, and where an SST closes its blocks (twins in
# silt.sst.block and silt.sst.builder.split_blocks); a framed block's checksum and lz4 before
# the Block are in block_frames.pxi.

cdef inline uint64_t _prefix(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    """The first 8 bytes of a key as a big-endian integer, zero-padded: ordering two keys by it
    agrees with their byte order whenever the prefixes differ."""
    cdef uint64_t v = 0
    cdef Py_ssize_t i
    if n >= 8:
        for i in range(8):
            v = (v << 8) | p[i]
        return v
    for i in range(8):
        v = (v << 8) | (p[i] if i < n else 0)
    return v


cdef inline int _cmp(const unsigned char* a, Py_ssize_t na,
                     const unsigned char* b, Py_ssize_t nb) noexcept nogil:
    cdef int c = memcmp(a, b, na if na < nb else nb)
    if c:
        return c
    return -1 if na < nb else (1 if na > nb else 0)


def encode_block(keys, records):
    """Encode sorted ``keys`` and their records (see :mod:`silt.record`) as a block payload."""
    cdef list ks = keys if PyList_CheckExact(keys) else list(keys)
    cdef list rs = records if PyList_CheckExact(records) else list(records)
    cdef Py_ssize_t n = len(ks)
    if len(rs) != n:
        raise ValueError("keys and records differ in length")
    cdef Py_ssize_t i, klen = 0, vlen = 0, pos
    cdef bint has_exp = False
    cdef object key, r, v
    for i in range(n):
        key = <object>PyList_GET_ITEM(ks, i)
        if not PyBytes_CheckExact(key):
            raise TypeError(f"keys must be bytes, got {type(key).__name__}")
        klen += PyBytes_GET_SIZE(key)
        r = <object>PyList_GET_ITEM(rs, i)
        if PyBytes_CheckExact(r):
            vlen += PyBytes_GET_SIZE(r)
        elif r is not None:
            v = r[0]
            if not PyBytes_CheckExact(v):
                raise TypeError(f"values must be bytes, got {type(v).__name__}")
            vlen += PyBytes_GET_SIZE(v)
            has_exp = True
    if klen > 0xFFFFFFFF or vlen > 0xFFFFFFFF or n > 0xFFFFFFFF:
        raise OverflowError("block too large")
    cdef Py_ssize_t head = BLOCK_HEADER_SIZE + n * (
        BLOCK_EXPIRY_ENTRY_SIZE if has_exp else BLOCK_ENTRY_SIZE)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, head + klen + vlen)
    cdef unsigned char* b = <unsigned char*>PyBytes_AS_STRING(out)
    _put32(b, <uint32_t>n)
    b[4] = BLOCK_FLAG_EXPIRY if has_exp else 0
    cdef unsigned char* kend = b + BLOCK_HEADER_SIZE
    cdef unsigned char* vend = kend + 4 * n
    cdef unsigned char* kinds = vend + 4 * n
    cdef unsigned char* exps = kinds + n
    cdef unsigned char* kp = exps + (8 * n if has_exp else 0)
    cdef unsigned char* vp = kp + klen
    cdef Py_ssize_t ko = 0, vo = 0, sz
    cdef uint64_t exp
    for i in range(n):
        key = <object>PyList_GET_ITEM(ks, i)
        sz = PyBytes_GET_SIZE(key)
        memcpy(kp + ko, PyBytes_AS_STRING(key), sz)
        ko += sz
        _put32(kend + 4 * i, <uint32_t>ko)
        r = <object>PyList_GET_ITEM(rs, i)
        exp = 0
        if PyBytes_CheckExact(r):
            kinds[i] = KIND_PUT
            sz = PyBytes_GET_SIZE(r)
            memcpy(vp + vo, PyBytes_AS_STRING(r), sz)
            vo += sz
        elif r is None:
            kinds[i] = KIND_DELETE
        else:
            kinds[i] = KIND_PUT_EXPIRING
            v = r[0]
            sz = PyBytes_GET_SIZE(v)
            memcpy(vp + vo, PyBytes_AS_STRING(v), sz)
            vo += sz
            exp = r[1]
        _put32(vend + 4 * i, <uint32_t>vo)
        if has_exp:
            _put64(exps + 8 * i, exp)
    return out


@cython.final
@cython.no_gc
cdef class Block:
    """A decoded data block over its payload bytes: keys are found by binary search with memcmp
    over the key offsets and sliced out only when returned.

    Immutable and safe to share between threads (it lives in the block cache). Its bytes are
    a ``bytes`` object's or, read by :func:`decode_block` from a store's direct reader, a
    read-only memoryview's (a slice of a file's memory map: no copy), which it keeps alive.
    Not tracked by the cyclic garbage collector: it refers only to that buffer, a list of
    bytes and a tuple of a name and an offset, so it can never be part of a cycle, and a cache
    of tens of thousands of blocks would otherwise be walked by every full collection (and
    every new block would count toward the next one).
    """

    cdef object _owner  # bytes or a read-only memoryview: what _b points into
    cdef Py_ssize_t _size  # the payload is the first _size bytes at _b
    cdef const unsigned char* _b
    cdef Py_ssize_t _n
    cdef const unsigned char* _kend
    cdef const unsigned char* _vend
    cdef const unsigned char* _kinds
    cdef const unsigned char* _exps
    cdef const unsigned char* _keys
    cdef const unsigned char* _vals
    cdef list _keylist
    cdef uint64_t* _pfx  # big-endian 8 bytes of every key after the block's common prefix
                         # (zero-padded): the search runs over this small array and touches
                         # key bytes only on ties
    cdef Py_ssize_t _skip  # the length of the prefix every key of the block shares (checked
                           # at decoding): searches compare it once, then only what follows
    cdef const unsigned char* _ends  # the key ends, then the value ends (2n little-endian
                                     # uint32), checked at decoding: the payload's own when
                                     # its owner is ``bytes`` (immutable), else a copy in
                                     # _pfx's allocation, so every later read of key or value
                                     # bytes stays inside the payload, whatever a mapped
                                     # file's buffer holds by then
    cdef readonly Py_ssize_t charge
    cdef object _object_name, _offset  # where the block was read (no tuple per block: a
                                       # tuple is tracked by the garbage collector)

    def __init__(self, payload, object_name="?", offset=0):
        if not PyBytes_CheckExact(payload):
            payload = bytes(payload)
        self._init(payload, <const unsigned char*>PyBytes_AS_STRING(payload),
                   PyBytes_GET_SIZE(payload), object_name, offset)

    cdef int _init(self, object owner, const unsigned char* b, Py_ssize_t size,
                   object object_name, object offset) except -1:
        """Decode the block whose payload is the ``size`` bytes at ``b``, inside ``owner``
        (bytes or a memoryview, kept: all of it, or a framed block's body when
        :func:`decode_block` keeps the bytes it read)."""
        cdef uint64_t n, need, prev, e, klen = 0, vlen = 0
        cdef Py_ssize_t i
        cdef int flags
        self._object_name = object_name
        self._offset = offset
        if size < BLOCK_HEADER_SIZE:
            self._bad("payload shorter than its header")
        n = _le32(b)
        flags = b[4]
        need = BLOCK_HEADER_SIZE + n * (
            BLOCK_EXPIRY_ENTRY_SIZE if flags & BLOCK_FLAG_EXPIRY else BLOCK_ENTRY_SIZE)
        if need > <uint64_t>size:
            self._bad("block regions do not add up")
        self._owner = owner
        self._size = size
        self._b = b
        self._n = <Py_ssize_t>n
        self._kend = b + BLOCK_HEADER_SIZE
        self._vend = self._kend + 4 * n
        self._kinds = self._vend + 4 * n
        self._exps = self._kinds + n if flags & BLOCK_FLAG_EXPIRY else NULL
        self._keys = b + need
        # The offsets are checked where they stay: in an immutable ``bytes`` payload, in place;
        # in any other buffer (a memory-mapped file someone may rewrite in place), on a copy,
        # so that the buffer can then change what a read returns, never where it reads.
        cdef bint copied = not PyBytes_CheckExact(owner)
        free(self._pfx)
        self._pfx = <uint64_t*>malloc(max(self._n, 1) * (
            sizeof(uint64_t) + (2 * sizeof(uint32_t) if copied else 0)))
        if self._pfx == NULL:
            raise MemoryError()
        if copied:
            memcpy(<void*>(self._pfx + max(self._n, 1)), self._kend, 8 * self._n)
            self._ends = <const unsigned char*>(self._pfx + max(self._n, 1))
        else:
            self._ends = self._kend
        prev = 0
        for i in range(self._n):
            e = self._kend_at(i)
            if e < prev:
                self._bad("key offsets decrease")
            prev = e
        klen = prev
        prev = 0
        for i in range(self._n):
            e = self._vend_at(i)
            if e < prev:
                self._bad("value offsets decrease")
            prev = e
        vlen = prev
        if need + klen > <uint64_t>size or (n and need + klen + vlen != <uint64_t>size):
            self._bad("block regions do not add up")
        self._vals = self._keys + klen
        # The prefix every key shares: the first key's common prefix with the last one (in a
        # sorted block every key between shares it too; checked below for each key, as the
        # order is). The prefix array then holds what follows it, which tells neighbours apart
        # where their first 8 bytes would tie (a key group's and a type's tag, say).
        cdef uint64_t skip = 0, last_start = 0
        if self._n > 1:
            last_start = self._kend_at(self._n - 2)
            skip = min(self._kend_at(0), self._kend_at(self._n - 1) - last_start)
            i = 0
            while <uint64_t>i < skip and self._keys[i] == self._keys[last_start + i]:
                i += 1
            skip = i
        self._skip = <Py_ssize_t>skip
        # Keys must be strictly increasing (lookups bisect them); the prefixes decide unless
        # they tie.
        cdef uint64_t start = 0, pstart = 0
        for i in range(self._n):
            e = self._kend_at(i)
            if skip and (e - start < skip or memcmp(self._keys + start, self._keys, skip)):
                self._bad("keys are not in increasing order")
            self._pfx[i] = _prefix(self._keys + start + skip, e - start - skip)
            if i and (self._pfx[i] < self._pfx[i - 1] or (
                    self._pfx[i] == self._pfx[i - 1] and _cmp(
                        self._keys + pstart, <Py_ssize_t>(start - pstart),
                        self._keys + start, <Py_ssize_t>(e - start)) >= 0)):
                self._bad("keys are not in increasing order")
            pstart = start
            start = e
        # What this block holds, measured (RSS over 7,000 cached 8 KiB blocks): the payload, an
        # 8-byte prefix per entry (and its two 4-byte offsets when copied), ~500 bytes of
        # object, malloc and cache-entry overhead, and the cache's index of block keys (32-byte
        # slots, two to four a block: RSS over 3,000-17,000 cached blocks grew ~120 bytes a
        # block past a charge of 512). The pure twin holds a bytes object per key and its
        # index dict, and charges for those.
        self.charge = size + (16 if copied else 8) * self._n + 640
        return 0

    def __dealloc__(self):
        free(self._pfx)

    @property
    def where(self):
        """``(object_name, offset)``: where the block was read."""
        return (self._object_name, self._offset)

    cdef int _bad(self, str why) except -1:
        raise CorruptionError(self._object_name, self._offset, f"malformed data block ({why})")

    def __len__(self):
        return self._n

    cdef inline uint32_t _kend_at(self, Py_ssize_t i) noexcept nogil:
        return _le32(self._ends + 4 * i)

    cdef inline uint32_t _vend_at(self, Py_ssize_t i) noexcept nogil:
        return _le32(self._ends + 4 * (self._n + i))

    cdef Py_ssize_t _kstart(self, Py_ssize_t i) noexcept nogil:
        return self._kend_at(i - 1) if i else 0

    cdef Py_ssize_t _vstart(self, Py_ssize_t i) noexcept nogil:
        return self._vend_at(i - 1) if i else 0

    cdef bytes _key(self, Py_ssize_t i):
        cdef Py_ssize_t s = self._kstart(i)
        return PyBytes_FromStringAndSize(<const char*>self._keys + s, self._kend_at(i) - s)

    cdef Py_ssize_t _lower_bound(self, const unsigned char* k, Py_ssize_t nk,
                                 Py_ssize_t lo) noexcept nogil:
        """First index >= lo whose key is >= k."""
        cdef Py_ssize_t hi = self._n, mid, s, skip = self._skip
        cdef int c
        cdef uint64_t pk, p
        if skip:  # every key starts with the block's common prefix: compare it once
            c = memcmp(k, self._keys, nk if nk < skip else skip)
            if c < 0 or (c == 0 and nk < skip):
                return lo  # k is below every key
            if c > 0:
                return hi if hi > lo else lo  # k is above every key
        pk = _prefix(k + skip, nk - skip)
        while lo < hi:
            mid = (lo + hi) >> 1
            p = self._pfx[mid]
            if p < pk:
                lo = mid + 1
            elif p > pk:
                hi = mid
            else:  # the same 8 bytes after the common prefix: compare the rest
                s = self._kstart(mid) + skip
                if _cmp(self._keys + s, self._kend_at(mid) - s, k + skip, nk - skip) < 0:
                    lo = mid + 1
                else:
                    hi = mid
        return lo

    cdef bint _key_eq(self, Py_ssize_t i, const unsigned char* k,
                             Py_ssize_t nk) noexcept nogil:
        cdef Py_ssize_t s = self._kstart(i)
        return (self._kend_at(i) - s == <uint32_t>nk
                and memcmp(self._keys + s, k, nk) == 0)

    cdef object _record(self, Py_ssize_t i):
        cdef uint8_t kind = self._kinds[i]
        if kind == KIND_DELETE:
            return None
        cdef Py_ssize_t s = self._vstart(i)
        cdef bytes value = PyBytes_FromStringAndSize(<const char*>self._vals + s,
                                                     self._vend_at(i) - s)
        if kind == KIND_PUT:
            return value
        if kind == KIND_PUT_EXPIRING and self._exps != NULL:
            return (value, _le64(self._exps + 8 * i))
        raise CorruptionError(self._object_name, self._offset,
                              f"unknown entry kind {kind} in entry {i}")

    def record_at(self, Py_ssize_t i):
        """The record of entry ``i`` (bytes, ``None`` or ``(bytes, expire_at_ms)``)."""
        if i < 0 or i >= self._n:
            raise IndexError("block entry out of range")
        return self._record(i)

    cdef inline void _prefetch_prefixes(self) noexcept nogil:
        """Start loading every line of the prefix array (up to 2 KiB of it) at once: a search
        of a block that is not in the CPU cache then waits for one trip to memory, not for one
        per halving (a hint only: it changes no result)."""
        cdef const char* p = <const char*>self._pfx
        cdef const char* end = p + min(self._n, 256) * <Py_ssize_t>sizeof(uint64_t)
        while p < end:
            SILT_PREFETCH(p)
            p += 64

    cpdef object get(self, bytes key):
        """The record for ``key``, or :data:`MISSING`."""
        cdef const unsigned char* k = <const unsigned char*>PyBytes_AS_STRING(key)
        cdef Py_ssize_t nk = PyBytes_GET_SIZE(key)
        cdef Py_ssize_t i
        self._prefetch_prefixes()
        i = self._lower_bound(k, nk, 0)
        if i < self._n:
            # the entry's value end and kind, loaded beside its key end and bytes
            SILT_PREFETCH(self._ends + 4 * (self._n + i))
            SILT_PREFETCH(self._kinds + i)
            if self._key_eq(i, k, nk):
                return self._record(i)
        return _MISSING

    def items_from(self, start, end):
        """Iterate ``(key, record)`` for keys in ``[start, end)`` in order."""
        cdef Py_ssize_t i = 0, stop = self._n
        _check_bound(start)
        _check_bound(end)
        if start is not None:
            i = self._lower_bound(<const unsigned char*>PyBytes_AS_STRING(start),
                                  PyBytes_GET_SIZE(start), 0)
        if end is not None:
            stop = self._lower_bound(<const unsigned char*>PyBytes_AS_STRING(end),
                                     PyBytes_GET_SIZE(end), 0)
        return BlockIter._make(self, i, stop)

    # Compatibility with the pure-Python Block's attributes (verify, compaction, tests).
    @property
    def keys(self):
        if self._keylist is None:
            self._keylist = [self._key(i) for i in range(self._n)]
        return self._keylist

    @property
    def kinds(self):
        return PyBytes_FromStringAndSize(<const char*>self._kinds, self._n)

    @property
    def values(self):
        return PyBytes_FromStringAndSize(<const char*>self._vals,
                                         self._size - (self._vals - self._b))

    @property
    def value_ends(self):
        from array import array
        return array("I", [self._vend_at(i) for i in range(self._n)])

    @property
    def expiries(self):
        if self._exps == NULL:
            return None
        from array import array
        return array("Q", [_le64(self._exps + 8 * i) for i in range(self._n)])


cdef int _check_bound(object b) except -1:
    if b is not None and not PyBytes_CheckExact(b):
        raise TypeError(f"range bounds must be bytes or None, got {type(b).__name__}")
    return 0


cdef class BlockIter:
    """Iterator over ``(key, record)`` of entries ``[i, stop)`` of a compiled :class:`Block`."""

    cdef Block _blk
    cdef Py_ssize_t _i, _stop

    @staticmethod
    cdef BlockIter _make(Block blk, Py_ssize_t i, Py_ssize_t stop):
        cdef BlockIter it = BlockIter.__new__(BlockIter)
        it._blk = blk
        it._i = i
        it._stop = stop
        return it

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t i = self._i
        if i >= self._stop:
            raise StopIteration
        self._i = i + 1
        return (self._blk._key(i), self._blk._record(i))


# --- SST building ----------------------------------------------------------------------------
def split_blocks(keys, records, Py_ssize_t target):
    """Where ``build_sst`` closes data blocks, and the SST's tombstone/expiry counters.

    Returns ``(ends, tombstones, expiring, min_expiry_ms, max_expiry_ms)``; ``ends[j]`` is the
    exclusive end index of block ``j``.
    """
    cdef list ks = keys if PyList_CheckExact(keys) else list(keys)
    cdef list rs = records if PyList_CheckExact(records) else list(records)
    cdef Py_ssize_t n = len(ks), i, size = 0
    cdef Py_ssize_t tombstones = 0, expiring = 0
    cdef object min_exp = 0, max_exp = 0, exp, r, key
    cdef list ends = []
    if len(rs) < n:
        raise IndexError("fewer records than keys")
    for i in range(n):
        key = <object>PyList_GET_ITEM(ks, i)
        r = <object>PyList_GET_ITEM(rs, i)
        if PyBytes_CheckExact(r):
            size += len(key) + PyBytes_GET_SIZE(r) + BLOCK_ENTRY_SIZE
        elif r is None:
            size += len(key) + BLOCK_ENTRY_SIZE
            tombstones += 1
        else:
            size += len(key) + len(r[0]) + BLOCK_EXPIRY_ENTRY_SIZE
            expiring += 1
            exp = r[1]
            if not min_exp or exp < min_exp:
                min_exp = exp
            if exp > max_exp:
                max_exp = exp
        if size >= target or i == n - 1:
            ends.append(i + 1)
            size = 0
    return ends, tombstones, expiring, min_exp, max_exp

