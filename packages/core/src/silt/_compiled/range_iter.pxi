# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Range reads of one SST, block by block (twin of silt.sst.reader's RangeIter).

cdef object _Readahead = None


cdef class RangeIter:
    """``(key, record)`` for keys in ``[start, end)`` of one SST, block by block, in key order."""

    cdef object _reader
    cdef list _last_keys
    cdef object _start, _end
    cdef bint _fill
    cdef Py_ssize_t _bi, _nb
    cdef Block _blk
    cdef Py_ssize_t _i, _stop
    cdef object _it  # a non-compiled block's iterator
    cdef Py_ssize_t _first
    cdef object _blocks  # silt.sst.readahead.Readahead: one ranged GET for a run of missed blocks

    def __init__(self, reader, start, end, bint fill_cache=False):
        _check_bound(start)
        _check_bound(end)
        self._reader = reader
        self._start = start
        self._end = end
        self._fill = fill_cache
        self._bi = -1
        self._nb = 0

    def __iter__(self):
        return self

    cdef int _open(self, Py_ssize_t bi) except -1:
        blk = self._blocks.block(bi)
        start = self._start if bi == self._first else None
        if type(blk) is Block:
            self._blk = <Block>blk
            self._it = None
            self._i = 0
            self._stop = self._blk._n
            if start is not None:
                self._i = self._blk._lower_bound(
                    <const unsigned char*>PyBytes_AS_STRING(start), PyBytes_GET_SIZE(start), 0)
            if self._end is not None:
                self._stop = self._blk._lower_bound(
                    <const unsigned char*>PyBytes_AS_STRING(self._end),
                    PyBytes_GET_SIZE(self._end), 0)
        else:
            self._blk = None
            self._it = iter(blk.items_from(start, self._end))
        return 0

    def __next__(self):
        cdef Py_ssize_t i
        cdef object last
        if self._bi < 0:  # first call: load the tail lazily, like the generator it replaces
            self._last_keys = self._reader.tail.last_keys
            self._nb = len(self._last_keys)
            if self._start is not None:
                self._bi = _bisect_bytes(
                    self._last_keys, <const unsigned char*>PyBytes_AS_STRING(self._start),
                    PyBytes_GET_SIZE(self._start), 0, self._nb)
            else:
                self._bi = 0
            self._first = self._bi
            if self._bi >= self._nb:
                raise StopIteration
            global _Readahead
            if _Readahead is None:  # silt.sst imports this module: bind it late
                from silt.sst.readahead import Readahead as _Readahead
            self._blocks = _Readahead(self._reader, self._end, self._fill)
            self._open(self._bi)
        while True:
            if self._blk is not None:
                i = self._i
                if i < self._stop:
                    self._i = i + 1
                    return (self._blk._key(i), self._blk._record(i))
            elif self._it is not None:
                for item in self._it:
                    return item
            if self._bi >= self._nb:
                raise StopIteration
            # the current block is exhausted: stop at the end bound, else open the next one
            last = <object>PyList_GET_ITEM(self._last_keys, self._bi)
            if self._end is not None and last >= self._end:
                self._bi = self._nb
                raise StopIteration
            self._bi += 1
            if self._bi >= self._nb:
                raise StopIteration
            self._open(self._bi)

