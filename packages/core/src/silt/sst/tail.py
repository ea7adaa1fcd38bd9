"""The tail of an SST, decoded: footer, bloom filter, properties and block index.

:class:`SstTail` checks everything it decodes (footer checksum, magic, format version, that the
regions and the data blocks tile the object, keys in order) and raises
:class:`~silt.errors.CorruptionError` naming the offset of the first damaged region, so a
reader never reads outside the object or trusts a damaged index. :func:`read_ranges` lists the
ranges a reader requests from an SST. No I/O: the bytes come from the caller
(:class:`~silt.sst.reader.SstReader` fetches them); immutable once built, so thread-safe.
"""

from __future__ import annotations

from array import array
from itertools import accumulate, islice
from operator import lt
from typing import Any

from .. import boundedjson
from .._ext import accelerate
from ..checksum import crc32
from ..errors import CorruptionError
from .block import _read_array, unframe
from .bloom import MAX_PROBES, BloomFilter
from .format import (
    BLOCKED_BLOOM_FORMAT,
    FOOTER,
    FOOTER_SIZE,
    INDEX_HEADER,
    READABLE_SST_FORMATS,
    SST_MAGIC,
    TRAILER_SIZE,
)

#: The properties block is one flat JSON object.
_PROPS_DEPTH = 4


class SstTail:
    """The decoded tail of an SST: index, bloom filter and properties.

    ``charge`` is the memory it holds, as a memory budget counts it: the tail's bytes plus
    56 per block (each last key is a bytes object in a list, and has an 8-byte prefix in the
    compiled ``key_index``), 40 more per block with ``block_keys``, plus 200.

    ``key_index`` is :func:`key_index` of ``last_keys``: what the compiled reads search.
    ``block_keys[i]`` is block ``i``'s key in the block cache, the int ``cache_id + i``
    (``cache_id`` from :func:`silt.cache.block_key_base`), made once (when ``cache_id`` is
    given, else ``None``; charged 40 bytes a block): every read that asks the cache for a
    block or puts one passes the same int object, so the cache's dict finds its entry by
    identity.
    """

    __slots__ = ("block_offsets", "block_sizes", "last_keys", "key_index", "bloom", "props",
                 "filter_offset", "charge", "block_keys")

    def __init__(self, tail: bytes, tail_start: int, size: int, name: str,
                 cache_id: int | None = None) -> None:
        if size < FOOTER_SIZE or len(tail) < FOOTER_SIZE:
            raise CorruptionError(name, 0, f"object of {size} bytes is too small to be an SST")
        foot = size - FOOTER_SIZE
        fields = FOOTER.unpack_from(tail, len(tail) - FOOTER_SIZE)
        (filter_off, filter_len, props_off, props_len, index_off, index_len,
         fmt, crc, magic) = fields
        if magic != SST_MAGIC:
            raise CorruptionError(name, size - 8, "bad magic number: not an SST or truncated")
        head = tail[len(tail) - FOOTER_SIZE:len(tail) - 12]
        if crc32(head) != crc:
            raise CorruptionError(name, foot, "footer checksum mismatch")
        if fmt not in READABLE_SST_FORMATS:
            raise CorruptionError(
                name, foot, f"SST format version {fmt} is not readable by this silt "
                f"(reads {sorted(READABLE_SST_FORMATS)}); upgrade silt-core"
            )
        if not (filter_off + filter_len == props_off and props_off + props_len == index_off
                and index_off + index_len == foot and filter_off >= tail_start
                and len(tail) == size - tail_start):
            raise CorruptionError(name, foot, "footer offsets are inconsistent")

        def region(off: int, length: int) -> bytes:
            return unframe(tail[off - tail_start:off - tail_start + length], name, off)

        self.filter_offset = filter_off
        self.bloom = None
        if filter_len:
            bloom = region(filter_off, filter_len)
            if not bloom or not 1 <= bloom[0] <= MAX_PROBES:
                raise CorruptionError(
                    name, filter_off, "bloom filter block has no valid probe count"
                )
            try:
                self.bloom = BloomFilter(bloom, fmt >= BLOCKED_BLOOM_FORMAT)
            except ValueError as exc:
                raise CorruptionError(name, filter_off, str(exc)) from None
        try:
            props = boundedjson.loads(
                region(props_off, props_len), max_bytes=props_len, max_depth=_PROPS_DEPTH
            )
        except ValueError as exc:
            raise CorruptionError(
                name, props_off, f"properties block is not valid JSON ({exc})"
            ) from None
        if not isinstance(props, dict):
            raise CorruptionError(name, props_off, "properties block is not a JSON object")
        self.props: dict[str, Any] = props
        (self.block_offsets, self.block_sizes, self.last_keys, self.block_keys) = decode_index(
            region(index_off, index_len), filter_off, cache_id, name, index_off
        )
        self.key_index = key_index(self.last_keys)
        n = len(self.last_keys)
        self.charge = len(tail) + (56 if cache_id is None else 96) * n + 200


def decode_index(index: bytes, filter_off: int, cache_id: int | None, name: str,
                 index_off: int) -> tuple[array, array, list[bytes], list[int] | None]:
    """The index block's payload ``index``, decoded and checked: ``(block_offsets,
    block_sizes, last_keys, block_keys)`` as :class:`SstTail` holds them (``array('Q')``,
    ``array('I')``, a list of bytes, and the list of block keys ``cache_id + i`` or ``None``
    when ``cache_id`` is ``None``; ``cache_id`` is a base from
    :func:`silt.cache.block_key_base`, else :class:`TypeError`). A block count is a u32, so
    every index is below ``1 << silt.cache.BLOCK_INDEX_BITS``: keys of two SSTs never meet.

    The layout (docs/format.md): a u32 block count ``n``, ``n`` u64 offsets, ``n`` u32
    sizes, ``n`` u32 end offsets of the last keys, then the last keys end to end. The data
    blocks must tile the object from 0 up to ``filter_off``, each at least a trailer long,
    and the last keys must increase strictly. Damage raises :class:`CorruptionError` at
    ``index_off`` with ``malformed index block (...)`` and the first failed check, in this
    order: the regions do not add up (also: the block shorter than its arrays), the blocks
    do not tile the object, the key offsets decrease, the last keys are out of order.
    """
    if cache_id is not None and type(cache_id) is not int:
        raise TypeError("an SST's cache id is an int (silt.cache.block_key_base)")
    n = len(index) - INDEX_HEADER.size
    count = INDEX_HEADER.unpack_from(index, 0)[0] if n >= 0 else 0
    keys_at = INDEX_HEADER.size + 16 * count
    if n < 0 or len(index) < keys_at:
        raise _bad_index(name, index_off, "index regions do not add up")
    offsets = _read_array("Q", index, INDEX_HEADER.size, count, 8)
    sizes = _read_array("I", index, keys_at - 8 * count, count, 4)
    ends = _read_array("I", index, keys_at - 4 * count, count, 4)
    if count and len(index) - keys_at != ends[-1]:
        raise _bad_index(name, index_off, "index regions do not add up")
    # Data blocks fill the object from offset 0 up to the filter block, in order, each at
    # least a trailer long: so every block read stays inside the object.
    tiles = [0, *accumulate(sizes)]
    if offsets.tolist() != tiles[:count] or tiles[-1] != filter_off or (
        count and min(sizes) < TRAILER_SIZE
    ):
        raise _bad_index(name, index_off, "data block offsets and sizes do not tile the object")
    key_ends = ends.tolist()
    if key_ends != sorted(key_ends):
        raise _bad_index(name, index_off, "key offsets decrease")
    kbuf = index[keys_at:]
    last_keys = list(map(kbuf.__getitem__, map(slice, [0, *key_ends], key_ends)))
    if not all(map(lt, last_keys, islice(last_keys, 1, None))):
        raise _bad_index(name, index_off, "last keys of the blocks are not in increasing order")
    block_keys = None if cache_id is None else list(range(cache_id, cache_id + count))
    return offsets, sizes, last_keys, block_keys


def _bad_index(name: str, index_off: int, what: str) -> CorruptionError:
    return CorruptionError(name, index_off, f"malformed index block ({what})")


def key_index(last_keys: list[bytes]) -> Any:
    """The block index as the compiled reads search it, or ``None``: the pure-Python reads
    bisect ``last_keys`` itself. Compiled, a ``KeyIndex``: the first 8 bytes of every last key
    in one array, so a search misses the CPU cache only where two of them tie (each last key
    is an object of its own, and a bisect over a large SST's list touched a cold one per
    step)."""
    return None


def read_ranges(data: bytes, name: str = "<sst>") -> list[tuple[int, int]]:
    """The ``(start, length)`` ranges an :class:`SstReader` requests from the SST ``data``.

    First the tail (``SstInfo.tail_offset`` to the end), then every data block in order. A cache
    tier uses this to admit a freshly written SST (write-through) under exactly the ranges later
    reads ask for, without knowing the format. Raises ``CorruptionError`` if ``data`` is not a
    readable SST.
    """
    size = len(data)
    if size < FOOTER_SIZE:
        raise CorruptionError(name, 0, f"object of {size} bytes is too small to be an SST")
    tail_start = FOOTER.unpack_from(data, size - FOOTER_SIZE)[0]
    if not 0 <= tail_start < size:
        raise CorruptionError(name, size - FOOTER_SIZE, "footer offsets are inconsistent")
    tail = SstTail(data[tail_start:], tail_start, size, name)
    return [(tail_start, size - tail_start), *zip(tail.block_offsets, tail.block_sizes)]


#: The pure-Python twins stay reachable as ``decode_index_py`` and ``key_index_py``.
COMPILED = accelerate(globals(), ("decode_index", "key_index"))
