# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Compiled twins of silt's hot path (docs/architecture.md, "The two implementations").

Every public name here has a pure-Python twin with the same behaviour, and the module that owns
the twin selects this one at import (see :mod:`silt._ext`):

================================  =============================================
compiled (here)                   pure-Python twin
================================  =============================================
crc32, bloom_hash                 silt.checksum.crc32, silt.sst.bloom.bloom_hash
build_bloom, BloomFilter          silt.sst.bloom
build_blocked_bloom               silt.sst.bloom
encode_block, Block               silt.sst.block
decode_block                      silt.sst.block
split_blocks                      silt.sst.builder.split_blocks
find_block, get_from, RangeIter   silt.sst.reader
get_levels, key_bounds            silt.sst.reader (key_bounds: a KeyBounds, the pair and
                                  what a get reads of each SST, kept; pure: the pair)
plan_probe, lookup_many/_groups   silt.sst.probe
key_index                         silt.sst.tail (a KeyIndex; pure: None, the list is bisected)
decode_index                      silt.sst.tail (an SST tail's index block, decoded and checked)
sorted_unique, probe_sst          silt.sst.probe
read_runs                         silt.sst.probe
merge_newest_first, live          silt.merge
visible_many                      silt.merge
sorted_items, split_found         silt.memtable
check_pairs, insert_pairs         silt.memtable
check_keys_plain                  silt.memtable
check_ops, apply_ops              silt.memtable
BlockCache                        silt.cache
CachedReads                       silt.tiers.blockread (the file:// tier's block reads)
Fd, FdCache                       silt.tiers.fdcache (cached descriptors, their state in C)
CountedReads                      silt.metrics (a direct reader's reads, metered)
================================  =============================================

The code is in the parts included at the end of this file, one per concept, from
``silt/_compiled/`` (crc, bloom, blocks, block_frames, block_cache, key_index, tail, sst_get,
range_iter, merge, memtable, probe, fd_cache, file_reads): one extension module, so the parts call each other's C
functions directly. The cimports and the constants every part uses are here.

The on-disk bytes are defined in docs/format.md; tests/test_twins.py checks both implementations
byte for byte on random inputs. Why a .pyx and not a ``*_cy.py`` pure-mode source: the fast
algorithms (table CRC-32, binary search over raw key offsets with memcmp, a tree of losers over
C arrays) are per-byte loops that run 100x slower interpreted, so a single pure-mode source
would have to carry both algorithms behind ``cython.compiled`` branches anyway.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_SetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.buffer cimport PyBUF_READ
from cpython.buffer cimport Py_buffer, PyBuffer_IsContiguous
from cpython.memoryview cimport (PyMemoryView_Check, PyMemoryView_FromMemory,
                                 PyMemoryView_GET_BUFFER)
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset


import os
import lz4.block as _lz4_block
from threading import Lock as _Lock

from silt.checksum import crc32 as _fast_crc32
from silt.errors import CorruptionError
from silt.record import ENTRY_OVERHEAD as _ENTRY_OVERHEAD
from silt.record import MISSING
from silt.sst import format as _fmt

cdef extern from "Python.h":
    bint PyBytes_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    bint PyList_CheckExact(object o)

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define SILT_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 1)
    #else
    #define SILT_PREFETCH(p) ((void)(p))
    #endif
    """
    # A hint to load a cache line; it changes no result.
    void SILT_PREFETCH(const void* p) noexcept nogil

cdef extern from *:
    """
    static PyObject* silt_buffer_owner(Py_buffer* b) { return b->obj; }
    """
    # The object exporting a buffer (borrowed; NULL for a view of raw memory).
    PyObject* silt_buffer_owner(Py_buffer* b) noexcept

cdef object _MISSING = MISSING

# What a memtable counts per entry beyond its key and value (silt.record.ENTRY_OVERHEAD).
cdef Py_ssize_t ENTRY_OVERHEAD = _ENTRY_OVERHEAD

# On-disk constants: defined once, in silt.sst.format, and read into C variables at import.
cdef uint8_t KIND_PUT = _fmt.KIND_PUT
cdef uint8_t KIND_DELETE = _fmt.KIND_DELETE
cdef uint8_t KIND_PUT_EXPIRING = _fmt.KIND_PUT_EXPIRING
cdef Py_ssize_t BLOCK_HEADER_SIZE = _fmt.BLOCK_HEADER_SIZE
cdef uint8_t BLOCK_FLAG_EXPIRY = _fmt.BLOCK_FLAG_EXPIRY
cdef Py_ssize_t BLOCK_ENTRY_SIZE = _fmt.BLOCK_ENTRY_SIZE
cdef Py_ssize_t BLOCK_EXPIRY_ENTRY_SIZE = _fmt.BLOCK_ENTRY_SIZE + _fmt.BLOCK_EXPIRY_SIZE
cdef Py_ssize_t BLOOM_HEADER_SIZE = _fmt.BLOOM_HEADER_SIZE
cdef long BLOOM_MAX_PROBES = _fmt.BLOOM_MAX_PROBES
cdef double BLOOM_PROBES_PER_BIT = _fmt.BLOOM_PROBES_PER_BIT
cdef long BLOOM_MIN_BITS = _fmt.BLOOM_MIN_BITS
cdef uint32_t BLOOM_HASH_C1 = _fmt.BLOOM_HASH_C1
cdef uint32_t BLOOM_HASH_C2 = _fmt.BLOOM_HASH_C2
cdef uint32_t BLOOM_ROT_R = _fmt.BLOOM_DELTA_ROTATION
cdef uint32_t BLOOM_ROT_L = 32 - _fmt.BLOOM_DELTA_ROTATION
cdef Py_ssize_t BLOOM_LINE_BYTES = _fmt.BLOOM_LINE_BYTES
cdef uint64_t BLOOM_LINE_BITS = _fmt.BLOOM_LINE_BITS
cdef uint32_t BLOOM_LINE_ROT_L = _fmt.BLOOM_LINE_ROTATION
cdef uint32_t BLOOM_LINE_ROT_R = 32 - _fmt.BLOOM_LINE_ROTATION
cdef uint32_t BLOOM_LINE_SHIFT = 32 - (_fmt.BLOOM_LINE_BITS.bit_length() - 1)
cdef uint32_t BLOOM_LINE_MUL = _fmt.BLOOM_LINE_MUL

# The parts, in this order (each uses what those before it define):
include "_compiled/crc.pxi"
include "_compiled/bloom.pxi"
include "_compiled/blocks.pxi"
include "_compiled/block_frames.pxi"
include "_compiled/block_cache.pxi"
include "_compiled/key_index.pxi"
include "_compiled/tail.pxi"
include "_compiled/sst_get.pxi"
include "_compiled/range_iter.pxi"
include "_compiled/merge.pxi"
include "_compiled/memtable.pxi"
include "_compiled/probe.pxi"
include "_compiled/fd_cache.pxi"
include "_compiled/file_reads.pxi"
