# Part of silt._speedups, included by silt/_speedups.pyx (one compiled module).
# A framed data block as a store returns it: its checksum (zlib's CRC-32), lz4 (called directly
# where its function is found) and then the Block of blocks.pxi (twin: silt.sst.block's unframe
# and decode_block).

cdef uint8_t COMPRESSION_NONE = _fmt.COMPRESSION_NONE
cdef uint8_t COMPRESSION_LZ4 = _fmt.COMPRESSION_LZ4
cdef Py_ssize_t TRAILER_SIZE = _fmt.TRAILER_SIZE
cdef uint64_t LZ4_MAX_RATIO = _fmt.LZ4_MAX_RATIO
# zlib's CRC-32 polynomial from silt.checksum (zlib-ng's folding implementation: about 20x the
# table loop above on 8 KiB) and lz4's decoder, called on the block's bytes in place.
cdef object _zlib_crc32 = _fast_crc32
cdef object _lz4_decompress = _lz4_block.decompress

cdef extern from *:
    """
    #ifdef _WIN32
    static void* silt_loaded_symbol(const char* path, const char* name) {
        (void)path; (void)name;
        return NULL;  /* no dlsym: every block goes through lz4.block.decompress */
    }
    #else
    #include <dlfcn.h>
    /* ``name`` in the already loaded shared object at ``path`` (never loads one), or NULL. */
    static void* silt_loaded_symbol(const char* path, const char* name) {
        void* handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        void* found;
        if (handle == NULL) return NULL;
        found = dlsym(handle, name);
        dlclose(handle);  /* the module's own reference keeps it loaded */
        return found;
    }
    #endif
    """
    void* silt_loaded_symbol(const char* path, const char* name)

ctypedef int (*_lz4_decompress_fn)(const char* src, char* dst, int src_size,
                                   int dst_capacity) noexcept nogil


cdef _lz4_decompress_fn _find_lz4_decompress():
    """lz4's own ``LZ4_decompress_safe`` in the extension module behind ``lz4.block`` (which
    is loaded: it was imported above), or NULL where it cannot be found. Called directly, it
    decompresses a block into the bytes object the block keeps: ``lz4.block.decompress``
    would decompress into a buffer of its own, copy that into a new bytes object and free the
    buffer, for every block read (a copy of 8 KiB and a round through malloc)."""
    cdef object module = getattr(_lz4_block, "_block", None)
    cdef object path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return NULL
    return <_lz4_decompress_fn>silt_loaded_symbol(os.fsencode(path), b"LZ4_decompress_safe")


cdef _lz4_decompress_fn _lz4_direct = _find_lz4_decompress()


def lz4_decompresses_in_place():
    """Whether lz4's blocks decompress straight into the bytes a block keeps (lz4's own
    function was found), rather than through ``lz4.block.decompress`` and a copy."""
    return _lz4_direct != NULL


cdef object _lz4_payload(const char* p, Py_ssize_t body_len, uint32_t size):
    """The decompressed payload of the lz4 stream ``p[:body_len]`` (its 4-byte size prefix,
    ``size``, checked by the caller), as ``lz4.block.decompress`` returns it: decompressed by
    lz4 directly into the new bytes object when its function was found; any stream it does
    not decompress to exactly ``size`` bytes goes to ``lz4.block.decompress``, which raises
    its own error for it (the twins' messages then agree)."""
    cdef bytes out
    cdef char* dst
    cdef int got
    if _lz4_direct != NULL and size > 0 and body_len - 4 <= 0x7FFFFFFF and size <= 0x7FFFFFFF:
        out = PyBytes_FromStringAndSize(NULL, size)
        dst = PyBytes_AS_STRING(out)
        with nogil:
            got = _lz4_direct(p + 4, dst, <int>(body_len - 4), <int>size)
        if got == <int>size:
            return out
    return _lz4_decompress(PyMemoryView_FromMemory(<char*>p, body_len, PyBUF_READ))


def decode_block(framed, object_name, offset):
    """Compiled twin of :func:`silt.sst.block.decode_block`: the framed block's checksum checked
    (zlib's CRC-32 over the bytes in place), decompressed, decoded; an uncompressed block is
    decoded over the bytes read, without a copy: ``framed`` as bytes, or as a contiguous
    memoryview of bytes (a direct reader's slice of a memory map), which the block keeps."""
    cdef Py_buffer* buf
    cdef Py_ssize_t size
    cdef char* p
    cdef object base
    cdef PyObject* owner
    if PyBytes_CheckExact(framed):
        size = PyBytes_GET_SIZE(framed)
        p = PyBytes_AS_STRING(framed)
    else:
        if PyMemoryView_Check(framed):
            buf = PyMemoryView_GET_BUFFER(framed)
            if buf.itemsize != 1 or not PyBuffer_IsContiguous(buf, b'C'):
                framed = bytes(framed)
        else:
            framed = bytes(framed)
        if PyBytes_CheckExact(framed):
            size = PyBytes_GET_SIZE(framed)
            p = PyBytes_AS_STRING(framed)
        else:
            buf = PyMemoryView_GET_BUFFER(framed)
            size = buf.len
            p = <char*>buf.buf
            owner = silt_buffer_owner(buf)
            base = <object>owner if owner != NULL else None
            if PyBytes_CheckExact(base) or getattr(type(base), "stable_buffer", False):
                # Keep what the view shows instead of the view: its bytes stay where they are
                # while it lives (bytes, or an exporter marked ``stable_buffer``), and a memoryview
                # per cached block would be one more object for the garbage collector to walk.
                framed = base
    if size < TRAILER_SIZE:
        raise CorruptionError(object_name, offset, f"block of {size} bytes is truncated")
    cdef Py_ssize_t body_len = size - TRAILER_SIZE
    cdef uint8_t compression = <uint8_t>p[body_len]
    cdef uint32_t crc = _le32(<const unsigned char*>p + body_len + 1)
    if _zlib_crc32(PyMemoryView_FromMemory(p, body_len + 1, PyBUF_READ)) != crc:
        raise CorruptionError(object_name, offset, f"checksum mismatch in block of {size} bytes")
    cdef Block blk
    if compression == COMPRESSION_NONE:
        blk = Block.__new__(Block)
        blk._init(framed, <const unsigned char*>p, body_len, object_name, offset)
        return blk
    if compression == COMPRESSION_LZ4:
        if body_len < 4 or (<uint64_t>_le32(<const unsigned char*>p)
                            > LZ4_MAX_RATIO * <uint64_t>body_len):
            raise CorruptionError(object_name, offset, "lz4 stream has an impossible size")
        try:
            payload = _lz4_payload(p, body_len, _le32(<const unsigned char*>p))
        except Exception as exc:
            raise CorruptionError(object_name, offset, f"lz4 stream is invalid ({exc})") from None
        return Block(payload, object_name, offset)
    raise CorruptionError(object_name, offset, f"unknown compression code {compression}")
