"""Reading an SST through an object store, lazily, with every byte checksummed.

The tail (bloom filter, properties, index, footer: decoded and checked by
:class:`~silt.sst.tail.SstTail`) is fetched with one ranged GET on first use (two when the tail
offset is unknown and larger than a guess) and kept for the reader's lifetime.
Data blocks come from the shared :class:`~silt.cache.BlockCache` or one ranged GET each.
Thread-safe: the tail is loaded under a lock; everything else is immutable.
"""

from __future__ import annotations

import random
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from .._ext import accelerate
from ..cache import BlockCache, block_key, block_key_base
from ..errors import (
    CorruptionError,
    NotFoundError,
    RetriesExhaustedError,
    TransientStoreError,
)
from ..record import MISSING
from ..store import ObjectStore, retrying
from .block import Block, decode_block
from .bloom import BloomFilter, bloom_hash
from .builder import SstInfo
from .format import FOOTER, FOOTER_SIZE, TAIL_GUESS
from .readahead import READAHEAD_FIRST as READAHEAD_FIRST  # named here too (tests)
from .readahead import Readahead
from .tail import SstTail
from .tail import read_ranges as read_ranges  # callers find it with the reader

if TYPE_CHECKING:
    from ..budget import MemoryBudget

_JITTER = random.Random()
#: A tail up to this size is fetched with one GET; a larger one (rare: a bloom filter of
#: millions of keys) reads its footer first, so a damaged size in a manifest cannot make the
#: reader allocate more than this.
_ONE_GET_TAIL = 16 * 1024 * 1024
#: ``SstReader._direct`` before the store was asked for a direct reader.
_UNASKED = object()


class SstReader:
    """Reads one SST. ``info`` comes from the manifest; ``tail`` may be passed by the writer."""

    def __init__(
        self,
        store: ObjectStore,
        object_name: str,
        info: SstInfo | None,
        cache: BlockCache | None,
        *,
        size: int | None = None,
        tail: bytes | None = None,
        tail_start: int | None = None,
    ) -> None:
        self.store = store
        self.name = object_name
        self.info = info
        self.size = info.size if info is not None else size
        if self.size is None:
            raise ValueError("SstReader needs the object size (from SstInfo or a listing)")
        self.cache = cache
        self.cache_id = block_key_base(info.id if info is not None else object_name)
        #: The store's fast path for this object's reads (ObjectStore.direct_reader) or None;
        #: asked for on the first read (opening a DB with many SSTs asks for none).
        self._direct: Any = _UNASKED
        #: A clipped reference (silt.siblings): iteration stays inside [smallest, largest].
        self.clipped = info is not None and info.clipped
        #: The decoded tail once loaded, else ``None``: what :attr:`tail` returns without a fetch
        #: (hot paths read it first and fall back to :attr:`tail`).
        self.loaded_tail: SstTail | None = None
        self._lock = threading.Lock()
        #: The budget the loaded tail is pinned in (see charge_tail_to), and the bytes pinned.
        self._budget: MemoryBudget | None = None
        self._pinned = 0
        self._unpin: weakref.finalize | None = None
        if tail is not None and tail_start is not None:
            self.loaded_tail = SstTail(tail, tail_start, self.size, self.name, self.cache_id)

    def charge_tail_to(self, budget: MemoryBudget) -> None:
        """Pin this reader's tail in ``budget`` from when it loads (now, if it is loaded) until
        the reader is garbage-collected. Once per reader; later calls do nothing."""
        with self._lock:
            if self._budget is not None:
                return
            self._budget = budget
            if self.loaded_tail is not None:
                self._pin(self.loaded_tail)

    def _pin(self, t: SstTail) -> None:
        """Pin ``t`` in the budget (lock held)."""
        budget = self._budget
        if budget is None or self._pinned:
            return
        self._pinned = t.charge
        budget.pin(t.charge)
        # (a finalizer may run inside any allocation, locks held: it takes none)
        self._unpin = weakref.finalize(self, budget.unpin_soon, t.charge)

    def unpin_tail(self) -> None:
        """Give the tail's pinned bytes back to the budget now (its DB closed); the reader
        stays usable, its tail simply no longer counted."""
        if self._unpin is not None and self._unpin.detach() is not None:
            self._budget.unpin(self._pinned)  # type: ignore[union-attr]

    # -- tail -------------------------------------------------------------------------------
    def preload_tail(self, tail: bytes, tail_start: int) -> None:
        """Take the tail's bytes read by someone else (a cold open's prefetch,
        :mod:`silt.coldopen`): the bytes from ``tail_start`` to the end of the object, decoded
        and checked as :attr:`tail` decodes what it fetches. Nothing when a tail is loaded;
        nothing either when the bytes do not decode (the first read fetches the tail again and
        reports the damage, as without a prefetch)."""
        with self._lock:
            if self.loaded_tail is not None:
                return
            try:
                t = SstTail(tail, tail_start, self.size, self.name, self.cache_id)
            except CorruptionError:
                return
            self.loaded_tail = t
            self._pin(t)

    @property
    def tail(self) -> SstTail:
        """The decoded tail (footer, index, filter, properties), fetched on first use."""
        t = self.loaded_tail
        if t is None:
            with self._lock:
                if self.loaded_tail is None:
                    self.loaded_tail = self._load_tail()
                    self._pin(self.loaded_tail)
                t = self.loaded_tail
        return t

    def _load_tail(self) -> SstTail:
        """Fetch and decode the tail: one ranged GET from where it starts (the manifest's
        ``tail_offset``) when that is at most ``_ONE_GET_TAIL`` bytes, else (or when the start
        is unknown) the last ``TAIL_GUESS`` bytes first, then the rest. A size or offset that
        the object does not have (a damaged or crafted manifest) is reported as corruption
        after reading at most ``_ONE_GET_TAIL`` bytes, never allocated in full."""
        size = self.size
        assert size is not None
        start = self.info.tail_offset if self.info is not None else None
        if start is not None and size - start <= _ONE_GET_TAIL:
            first = start
        else:
            first = max(0, size - TAIL_GUESS)
        # bytes: a direct reader may return a view of a map, which the tail must not keep
        data = bytes(self._get_range(first, size - first))
        if len(data) != size - first:
            raise CorruptionError(self.name, first, f"object is shorter than its {size} bytes")
        if start is None:
            start = first
            if len(data) >= FOOTER_SIZE:
                filter_off = FOOTER.unpack_from(data, len(data) - FOOTER_SIZE)[0]
                if filter_off < start:
                    start = filter_off
        if start < first:
            # The object really has ``size`` bytes (its end was just read), so this read stays
            # inside it.
            head = bytes(self._get_range(start, first - start))
            if len(head) != first - start:
                raise CorruptionError(self.name, start, f"object is shorter than its {size} bytes")
            data = head + data
        return SstTail(data, start, size, self.name, self.cache_id)

    def _get_range(self, start: int, length: int) -> bytes | memoryview:
        """``length`` bytes of the object from ``start``: through the store's direct reader
        when it has one, else (and to retry a transient failure of it) ``get_range`` with
        retries; a missing object is reported as a gone SST."""
        read = self._direct
        if read is _UNASKED:
            read = self.direct_read()
        if read is not None:
            try:
                return read(start, length)
            except Exception as exc:  # sorted out by direct_failed
                return self.direct_failed(exc, start, length)
        return self._retried_range(start, length)

    def direct_read(self) -> Callable[[int, int], bytes | memoryview] | None:
        """The store's direct reader of this SST (:meth:`ObjectStore.direct_reader`), asked
        once, or ``None``. The compiled miss path of a get calls it itself, and passes a
        failure to :meth:`direct_failed`."""
        read = self._direct
        if read is _UNASKED:
            direct = getattr(self.store, "direct_reader", None)
            read = self._direct = direct(self.name) if direct is not None else None
        return read

    def direct_failed(self, exc: Exception, start: int, length: int) -> bytes:
        """What a failed direct read of ``length`` bytes from ``start`` turns into: a transient
        failure is retried through ``get_range`` (with backoff), a missing object is reported
        as a gone SST, anything else (retries exhausted, a permanent error) is raised."""
        if isinstance(exc, RetriesExhaustedError):
            raise exc
        if isinstance(exc, TransientStoreError):
            return self._retried_range(start, length)
        if isinstance(exc, NotFoundError):
            raise self._gone(exc) from exc
        raise exc

    def _retried_range(self, start: int, length: int) -> bytes:
        """``get_range`` with retries; a missing object is reported as a gone SST."""
        # A shared jitter source: retrying() would otherwise seed a new Random (os.urandom)
        # for every block read.
        try:
            return retrying(lambda: self.store.get_range(self.name, start, length), rng=_JITTER)
        except NotFoundError as exc:
            raise self._gone(exc) from exc

    def _gone(self, exc: NotFoundError) -> NotFoundError:
        """The error of a read that found this SST missing (``exc``)."""
        return NotFoundError(
            f"SST {self.name!r} is gone ({exc}). Garbage collection removes the SSTs of "
            "versions below its horizon that no checkpoint pins, so a DB opened at an old "
            "version can lose them while it reads: reopen the latest version, or pin a "
            "version you read for long with DB.checkpoint(name) first. If GC did not run, "
            "the root is damaged: run `silt verify`"
        )

    @property
    def properties(self) -> dict[str, Any]:
        return self.tail.props

    @property
    def num_blocks(self) -> int:
        return len(self.tail.block_offsets)

    # -- blocks -----------------------------------------------------------------------------
    def block_index_for(self, key: bytes) -> int:
        """Index of the only block that can hold ``key``, or -1 when the key is past the end."""
        last_keys = self.tail.last_keys
        i = bisect_left(last_keys, key)
        return i if i < len(last_keys) else -1

    def may_contain(self, key: bytes) -> bool:
        bloom = self.tail.bloom
        return bloom is None or bloom.may_contain(key)

    def read_raw_block(self, i: int) -> bytes:
        """The framed bytes of block ``i`` straight from the store (no cache)."""
        t = self.tail
        off, size = t.block_offsets[i], t.block_sizes[i]
        data = self._get_range(off, size)
        if len(data) != size:
            raise CorruptionError(self.name, off, f"block truncated: {len(data)} of {size} bytes")
        return data

    def decode_block(self, i: int, framed: bytes) -> Block:
        off = self.tail.block_offsets[i]
        return decode_block(framed, self.name, off)

    def block(self, i: int, *, fill_cache: bool = True) -> Block:
        """Decoded block ``i``, from the cache when present."""
        cache = self.cache
        if cache is not None:
            blk = cache.get(block_key(self.cache_id, i))
            if blk is not None:
                return blk
        return self.read_block(i, fill_cache)

    def read_block(self, i: int, fill_cache: bool = True) -> Block:
        """Block ``i`` read from the store and decoded, without asking the cache (the caller has
        missed it); put into the cache when ``fill_cache``."""
        # read_raw_block and decode_block inlined: this is every block-cache miss of a get.
        t = self.loaded_tail
        if t is None:
            t = self.tail
        off, size = t.block_offsets[i], t.block_sizes[i]
        data = self._get_range(off, size)
        if len(data) != size:
            raise CorruptionError(self.name, off, f"block truncated: {len(data)} of {size} bytes")
        blk = decode_block(data, self.name, off)
        cache = self.cache
        if cache is not None and fill_cache:
            cache.put(t.block_keys[i], blk, blk.charge)
        return blk

    def read_run(self, first: int, stop: int, fill_cache: bool = True) -> list[Block]:
        """Blocks ``first`` to ``stop - 1`` read with one ranged GET (they are adjacent in the
        object) and decoded, each checked against its own checksum; put into the cache when
        ``fill_cache``. A miss of several neighbouring blocks (a scan, a compaction, a
        ``multi_get``) then costs one request instead of one per block."""
        return self.decode_run(first, stop, self.run_bytes(first, stop), fill_cache)

    def run_bytes(self, first: int, stop: int) -> bytes | memoryview:
        """The framed bytes of blocks ``first`` to ``stop - 1``: :meth:`read_run`'s request
        alone (its length checked), for :meth:`decode_run`."""
        t = self.tail
        offsets, sizes = t.block_offsets, t.block_sizes
        if not 0 <= first < stop <= len(offsets):
            raise IndexError(f"block run {first}..{stop} outside 0..{len(offsets)}")
        base = offsets[first]
        length = offsets[stop - 1] + sizes[stop - 1] - base
        data = self._get_range(base, length)
        if len(data) != length:
            what = "block" if stop - first == 1 else "block run"
            raise CorruptionError(
                self.name, base, f"{what} truncated: {len(data)} of {length} bytes"
            )
        return data

    def decode_run(self, first: int, stop: int, data: bytes | memoryview,
                   fill_cache: bool = True) -> list[Block]:
        """:meth:`read_run`'s decoding of ``data``, the bytes :meth:`run_bytes` read."""
        t = self.tail
        offsets, sizes = t.block_offsets, t.block_sizes
        if stop - first == 1:
            blk = decode_block(data, self.name, offsets[first])
            if fill_cache and self.cache is not None:
                self.cache.put(t.block_keys[first], blk, blk.charge)
            return [blk]
        base = offsets[first]
        view = memoryview(data)
        name = self.name
        cache = self.cache if fill_cache else None
        keys = t.block_keys
        out: list[Block] = []
        for i in range(first, stop):
            off = offsets[i] - base
            blk = decode_block(view[off:off + sizes[i]], name, offsets[i])
            if cache is not None:
                cache.put(keys[i], blk, blk.charge)
            out.append(blk)
        return out

    def run_end(self, first: int, max_bytes: int, limit: int | None = None) -> int:
        """The end (exclusive) of the run of blocks from ``first`` that one read of at most
        ``max_bytes`` covers (always at least one block), not past block ``limit - 1``; only
        ``first`` when the store asks for single blocks (``ObjectStore.coalesce_reads``)."""
        t = self.tail
        offsets, sizes = t.block_offsets, t.block_sizes
        n = len(offsets) if limit is None else min(limit, len(offsets))
        if not self.store.coalesce_reads:
            return first + 1
        end = offsets[first] + max_bytes
        stop = first + 1
        while stop < n and offsets[stop] + sizes[stop] <= end:
            stop += 1
        return stop

    def prefill(self, data: bytes) -> None:
        """Put every data block of this SST, from its whole bytes ``data`` (just built, so
        already trusted, but each block is still checked against its trailer), into the
        block cache; nothing without a cache."""
        cache = self.cache
        if cache is None:
            return
        t = self.tail
        name, cid = self.name, self.cache_id
        for i, (off, size) in enumerate(zip(t.block_offsets, t.block_sizes)):
            blk = decode_block(data[off:off + size], name, off)
            cache.put(cid + i, blk, blk.charge)

    def cached_block(self, i: int) -> Block | None:
        return self.cache.get(block_key(self.cache_id, i)) if self.cache is not None else None

    def cached_blocks(self, indexes: list[int]) -> list[Block | None]:
        """``cached_block(i)`` for each of ``indexes``."""
        cache = self.cache
        if cache is None:
            return [None] * len(indexes)
        keys = self.tail.block_keys  # the keys every read passes (no bytecode a block)
        return cache.get_many(list(map(keys.__getitem__, indexes)))

    def put_cached(self, i: int, blk: Block) -> None:
        if self.cache is not None:
            self.cache.put(block_key(self.cache_id, i), blk, blk.charge)

    # -- lookups ----------------------------------------------------------------------------
    def get(self, key: bytes, h: int = -1) -> object:
        """The record for ``key`` in this SST, or :data:`MISSING`.

        ``h`` is ``bloom_hash(key)`` when the caller has it (one hash for every SST of a get).
        """
        t = self.loaded_tail
        if t is None:
            t = self.tail
        i = find_block(t.bloom, t.last_keys, key, h)
        if i < 0:
            return MISSING
        cache = self.cache
        if cache is not None:
            blk = cache.get(t.block_keys[i])
            if blk is not None:
                return blk.get(key)
        return self.read_block(i).get(key)

    def iter_range(
        self, start: bytes | None, end: bytes | None, *, fill_cache: bool = False
    ) -> Iterator[tuple[bytes, object]]:
        """Iterate ``(key, record)`` for keys in ``[start, end)`` in key order (lazily: nothing
        is read before the first item is asked for). A clipped reference yields only keys inside
        its clip range."""
        if self.clipped:
            info = self.info
            assert info is not None
            if start is None or start < info.smallest:
                start = info.smallest
            upper = info.largest + b"\x00"
            if end is None or end > upper:
                end = upper
            if start >= end:
                return iter(())
        return RangeIter(self, start, end, fill_cache)

    def verify(self) -> int:
        """Read and check every block (bypassing the cache); return the entry count.

        Checks keys are strictly increasing within and across blocks, each block ends at its
        index key, every record decodes, and the count matches the properties. Raises
        :class:`CorruptionError` at the first damaged region.
        """
        self.loaded_tail = None
        t = self.tail
        total = 0
        prev: bytes | None = None
        for i in range(len(t.block_offsets)):
            blk = self.decode_block(i, self.read_raw_block(i))
            keys: Sequence[bytes] = blk.keys
            if (keys and prev is not None and keys[0] <= prev) or any(
                a >= b for a, b in pairwise(keys)
            ):
                raise CorruptionError(self.name, t.block_offsets[i], "keys out of order")
            if keys and keys[-1] != t.last_keys[i]:
                raise CorruptionError(self.name, t.block_offsets[i], "index does not match block")
            for j in range(len(blk)):
                blk.record_at(j)
            prev = keys[-1] if keys else prev
            total += len(blk)
        if total != t.props.get("entries"):
            raise CorruptionError(self.name, None, "entry count does not match properties")
        return total


def find_block(bloom: BloomFilter | None, last_keys: list[bytes], key: bytes, h: int = -1) -> int:
    """The only block of an SST that can hold ``key``, or -1 when the bloom filter rules the key
    out or it is past the last key. ``h`` is ``bloom_hash(key)`` when the caller has it."""
    if bloom is not None and not bloom.may_contain_hash(bloom_hash(key) if h < 0 else h):
        return -1
    i = bisect_left(last_keys, key)
    return i if i < len(last_keys) else -1


def get_from(readers: Sequence[SstReader], key: bytes, h: int = -1) -> object:
    """The record of ``key`` in the first of ``readers`` (SstReaders, newest first) whose key
    range holds it and that has it, or :data:`MISSING` (one bloom hash for all of them)."""
    # SstReader.get and find_block inlined: a Python frame per step is most of a warm get.
    for reader in readers:
        info = reader.info
        if info.smallest <= key <= info.largest:  # type: ignore[union-attr]
            t = reader.loaded_tail
            if t is None:
                t = reader.tail
            bloom = t.bloom
            if bloom is not None:
                if h < 0:
                    h = bloom_hash(key)
                if not bloom.may_contain_hash(h):
                    continue
            last_keys = t.last_keys
            i = bisect_left(last_keys, key)
            if i == len(last_keys):
                continue
            cache = reader.cache
            blk = None if cache is None else cache.get(reader.cache_id + i)
            if blk is None:
                blk = reader.read_block(i)
            r = blk.get(key)
            if r is not MISSING:
                return r
    return MISSING


def key_bounds(l0: Sequence[SstReader], levels: Sequence[Any]) -> tuple[bytes, bytes] | None:
    """The smallest and the largest key of the SSTs ``l0`` and ``levels`` (as
    :func:`get_levels` takes them), or ``None`` when there is none."""
    firsts = [r.info.smallest for r in l0]
    lasts = [r.info.largest for r in l0]
    for level in levels:
        if level.readers:
            firsts.append(level.readers[0].info.smallest)
            lasts.append(level.readers[-1].info.largest)
    return (min(firsts), max(lasts)) if firsts else None


def get_levels(
    l0: Sequence[SstReader], levels: Sequence[Any], key: bytes, h: int = -1,
    bounds: tuple[bytes, bytes] | None = None,
) -> object:
    """The record of ``key`` in the L0 SSTs ``l0`` (newest first), else in the first of
    ``levels`` (sorted runs, each with ``readers`` and their ``largest`` keys, as
    :class:`silt.view.Level`) that has it, or :data:`MISSING`: :func:`get_from` over L0 and one
    bisect per level, with one bloom hash for all (a DB's whole point read below its memtables
    in one call). ``bounds`` is :func:`key_bounds` of ``l0`` and ``levels`` when the caller
    keeps it: a key outside it is answered without looking at any SST."""
    if bounds is not None and (key < bounds[0] or key > bounds[1]):
        return MISSING
    if h < 0:
        h = bloom_hash(key)
    if l0:
        r = get_from(l0, key, h)
        if r is not MISSING:
            return r
    for level in levels:
        largest = level.largest
        i = bisect_left(largest, key)
        if i < len(largest):
            r = get_from((level.readers[i],), key, h)
            if r is not MISSING:
                return r
    return MISSING


def RangeIter(
    reader: SstReader, start: bytes | None, end: bytes | None, fill_cache: bool = False
) -> Iterator[tuple[bytes, object]]:
    """``(key, record)`` for keys in ``[start, end)`` of one SST, block by block, in key order."""
    t = reader.tail
    last_keys = t.last_keys
    n = len(last_keys)
    i = bisect_left(last_keys, start) if start is not None else 0
    first = i
    blocks = Readahead(reader, end, fill_cache)
    while i < n:
        blk = blocks.block(i)
        yield from blk.items_from(start if i == first else None, end)
        if end is not None and last_keys[i] >= end:
            return
        i += 1


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), (
    "find_block",
    "get_from",
    "get_levels", "key_bounds",
    "RangeIter",
))
