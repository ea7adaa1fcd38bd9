# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# Decoding an SST's index block: its arrays, checks, last keys and block cache keys in one C
# pass over the payload (twin: silt.sst.tail.decode_index).

from array import array as _array
from sys import byteorder as _byteorder

from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF

cdef bint _BIG_ENDIAN = _byteorder == "big"
cdef Py_ssize_t INDEX_HEADER_SIZE = _fmt.INDEX_HEADER.size
cdef Py_ssize_t TRAILER_BYTES = _fmt.TRAILER_SIZE


cdef object _bad_index(object name, object index_off, str what):
    return CorruptionError(name, index_off, f"malformed index block ({what})")


cdef object _le_array(str code, bytes index, Py_ssize_t start, Py_ssize_t nbytes):
    """An ``array(code)`` of the little-endian values in ``index[start:start + nbytes]``."""
    cdef object arr = _array(code)
    arr.frombytes(PyBytes_FromStringAndSize(PyBytes_AS_STRING(index) + start, nbytes))
    if _BIG_ENDIAN:  # pragma: no cover
        arr.byteswap()
    return arr


def decode_index(bytes index, object filter_off, object cache_id, object name,
                 object index_off):
    """Compiled twin of :func:`silt.sst.tail.decode_index`: the same four results and the
    same errors, checked in the same order, in C loops over the payload (no Python step a
    block)."""
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(index)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(index)
    cdef Py_ssize_t count, keys_at, i
    cdef const unsigned char* offs
    cdef const unsigned char* sizes
    cdef const unsigned char* ends
    cdef const unsigned char* kbuf
    cdef uint64_t acc = 0, want
    cdef uint32_t sz, s, e, ps, pe
    cdef list last_keys, block_keys
    cdef object key, idx
    cdef long long base = 0
    if cache_id is not None:
        if type(cache_id) is not int:
            raise TypeError("an SST's cache id is an int (silt.cache.block_key_base)")
        base = cache_id
    if size < INDEX_HEADER_SIZE:
        raise _bad_index(name, index_off, "index regions do not add up")
    count = <Py_ssize_t>_le32(p)
    keys_at = INDEX_HEADER_SIZE + 16 * count
    if size < keys_at:
        raise _bad_index(name, index_off, "index regions do not add up")
    offs = p + INDEX_HEADER_SIZE
    sizes = offs + 8 * count
    ends = sizes + 4 * count
    kbuf = p + keys_at
    if count and <uint64_t>(size - keys_at) != _le32(ends + 4 * (count - 1)):
        raise _bad_index(name, index_off, "index regions do not add up")
    # Data blocks fill the object from offset 0 up to the filter block, in order, each at
    # least a trailer long (acc cannot overflow: fewer than 2^32 sizes below 2^32 each).
    if not 0 <= filter_off <= 0xFFFF_FFFF_FFFF_FFFF:
        raise _bad_index(name, index_off, "data block offsets and sizes do not tile the object")
    want = filter_off
    for i in range(count):
        sz = _le32(sizes + 4 * i)
        if _le64(offs + 8 * i) != acc or sz < TRAILER_BYTES:
            raise _bad_index(name, index_off,
                             "data block offsets and sizes do not tile the object")
        acc += sz
    if acc != want:
        raise _bad_index(name, index_off, "data block offsets and sizes do not tile the object")
    pe = 0
    for i in range(count):
        e = _le32(ends + 4 * i)
        if e < pe:
            raise _bad_index(name, index_off, "key offsets decrease")
        pe = e
    last_keys = PyList_New(count)
    ps = pe = 0
    for i in range(count):
        s = pe
        e = _le32(ends + 4 * i)
        if i and _cmp(kbuf + ps, s - ps, kbuf + s, e - s) >= 0:
            raise _bad_index(name, index_off,
                             "last keys of the blocks are not in increasing order")
        key = PyBytes_FromStringAndSize(<const char*>kbuf + s, e - s)
        Py_INCREF(key)
        PyList_SET_ITEM(last_keys, i, key)
        ps = s
        pe = e
    if cache_id is None:
        block_keys = None
    else:
        block_keys = PyList_New(count)
        for i in range(count):  # ints: nothing for the garbage collector to track
            idx = base + i
            Py_INCREF(idx)
            PyList_SET_ITEM(block_keys, i, idx)
    return (_le_array("Q", index, INDEX_HEADER_SIZE, 8 * count),
            _le_array("I", index, INDEX_HEADER_SIZE + 8 * count, 4 * count),
            last_keys, block_keys)
