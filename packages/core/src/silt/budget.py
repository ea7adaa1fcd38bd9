"""One memory budget per process: a block cache shared by every DB, memtables charged to it.

A :class:`MemoryBudget` of ``B`` bytes owns one :class:`~silt.cache.BlockCache` and counts the
memtables of the DBs opened with it (RocksDB's shared ``Cache`` plus a ``WriteBufferManager``
that charges memtables to that cache):

* Memtables reserve their memory from the budget in chunks (:attr:`MemoryBudget.chunk`) as they
  grow, and give it back when their SST is uploaded (or the DB closes). A memtable's memory is
  :func:`memtable_charge`: its entries' bytes plus what the interpreter adds per entry. Every
  byte a memtable reserves is taken from the cache: the cache's capacity is ``B`` minus the
  reserved bytes, so a growing memtable evicts cold blocks first.
* Memtables together may reserve at most ``memtable_share * B``. A DB whose memtable would go
  over it freezes that memtable early (it is uploaded as a smaller SST) instead of growing it,
  so the cache always keeps at least ``(1 - memtable_share) * B``.
* A DB may always take its first chunk (an empty memtable never blocks a write), and a frozen
  memtable is charged its real size when that is larger than its reservation (a write batch
  applied whole): the reserved total may go over the share by about one chunk per writing DB.

* The loaded tails of open SSTs (index, bloom filter, properties: ``SstTail.charge``) are
  pinned: counted (:meth:`MemoryBudget.pin`) from the first read of an SST until its reader is
  dropped, and taken from the cache like memtables, never evicted. A tail loads on an SST's
  first read, not at open, so opening a DB pins nothing.

Blocks are counted at their decoded size (``Block.charge``), memtables by
:func:`memtable_charge`; ``bench/memory_bench.py`` measures peak RSS against the budget.
Compaction buffers and upload buffers are outside the budget, as are the tails of a DB with a
private cache.

:func:`process_budget` is the budget every DB uses unless it is opened with its own
(``silt.open(url, budget=...)``) or with a private cache (``Settings.block_cache_bytes``);
:func:`set_memory_budget` resizes it. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING

from .cache import BlockCache
from .errors import InvalidArgumentError, InvalidTypeError
from .settings import MAX_INT, KiB, MiB

if TYPE_CHECKING:
    from .memtable import Memtable

#: The process budget until :func:`set_memory_budget` changes it: a cache of at least 256 MiB
#: and up to 256 MiB of memtables, what one DB used before budgets existed.
DEFAULT_BUDGET_BYTES = 512 * MiB
#: The smallest budget: below it every memtable would be a few KiB and flush as a tiny SST.
MIN_BUDGET_BYTES = 1 * MiB
DEFAULT_MEMTABLE_SHARE = 0.5
#: Bounds of :attr:`MemoryBudget.chunk`, the step in which memtables reserve memory.
MIN_CHUNK_BYTES = 64 * KiB
MAX_CHUNK_BYTES = 8 * MiB
#: Bytes a memtable entry takes in the interpreter beyond what ``Memtable.approx_bytes`` counts
#: for it (key + value + ``silt.record.ENTRY_OVERHEAD``): two bytes objects' headers and the
#: dict's slot, measured with tracemalloc on CPython 3.11 (about 102 bytes whatever the value's
#: size).
MEMTABLE_ENTRY_OVERHEAD = 96


def memtable_charge(approx_bytes: int, entries: int) -> int:
    """The memory a memtable of ``approx_bytes`` (its ``approx_bytes``) and ``entries`` entries
    is charged to a budget."""
    return approx_bytes + MEMTABLE_ENTRY_OVERHEAD * entries


def check_budget_bytes(value: object, what: str = "memory budget") -> int:
    """``value`` if it is an int number of bytes in ``MIN_BUDGET_BYTES..MAX_INT``, else an
    :class:`~silt.errors.InvalidTypeError` / :class:`~silt.errors.InvalidArgumentError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(
            f"the {what} must be an int number of bytes, got {type(value).__name__} {value!r:.80}"
        )
    if not MIN_BUDGET_BYTES <= value <= MAX_INT:
        raise InvalidArgumentError(
            f"the {what} must be between {MIN_BUDGET_BYTES} bytes (1 MiB) and {MAX_INT}, got "
            f"{value}"
        )
    return value


def _check_share(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(
            f"memtable_share must be a number in (0, 1), got {type(value).__name__} {value!r:.80}"
        )
    if not 0 < value < 1:  # false for nan
        raise InvalidArgumentError(
            f"memtable_share must be a fraction of the budget strictly between 0 and 1 (the "
            f"rest is block cache), got {value!r}"
        )
    return float(value)


class MemoryBudget:
    """``capacity`` bytes for the block cache and memtables of every DB opened with it.

    Args:
        capacity_bytes: the whole budget, at least 1 MiB.
        memtable_share: the fraction of it memtables may reserve together (default 0.5).
    """

    def __init__(self, capacity_bytes: int, *,
                 memtable_share: float = DEFAULT_MEMTABLE_SHARE) -> None:
        self._lock = threading.Lock()
        self.capacity = check_budget_bytes(capacity_bytes)
        self.memtable_share = _check_share(memtable_share)
        #: Bytes memtables hold reserved now, and the most they ever held.
        self.memtable_bytes = 0
        self.peak_memtable_bytes = 0
        #: Reservations refused because memtables had their share (each froze a memtable early).
        self.refusals = 0
        #: Bytes pinned by the loaded tails (index, bloom filter, properties) of open SSTs.
        self.pinned_bytes = 0
        #: The block cache every DB of this budget shares.
        self.cache = BlockCache(self.capacity)
        #: Amounts given back by garbage-collection finalizers (:meth:`release_soon`,
        #: :meth:`unpin_soon`), applied by the next call that takes the lock.
        self._pending: deque[tuple[bool, int]] = deque()

    @property
    def memtable_limit(self) -> int:
        """The bytes memtables may reserve together."""
        return int(self.capacity * self.memtable_share)

    @property
    def chunk(self) -> int:
        """The step in which a memtable reserves memory: 1/64 of the memtable share, within
        64 KiB..8 MiB."""
        return max(MIN_CHUNK_BYTES, min(MAX_CHUNK_BYTES, self.memtable_limit // 64))

    def resize(self, capacity_bytes: int, *, memtable_share: float | None = None) -> None:
        """Change the budget (and memtable share); the cache evicts down to its new part at
        once, memtables over their new share freeze at their next reservation."""
        capacity = check_budget_bytes(capacity_bytes)
        share = self.memtable_share if memtable_share is None else _check_share(memtable_share)
        with self._lock:
            self._drain()
            self.capacity = capacity
            self.memtable_share = share
            self._fit_cache()

    def reserve(self, nbytes: int, *, force: bool = False) -> bool:
        """Reserve ``nbytes`` for a memtable: True if granted (the cache shrinks by as much);
        False, reserving nothing, when memtables would go over their share, unless ``force``."""
        with self._lock:
            self._drain()
            if not force and self.memtable_bytes + nbytes > self.memtable_limit:
                self.refusals += 1
                return False
            self.memtable_bytes += nbytes
            self.peak_memtable_bytes = max(self.peak_memtable_bytes, self.memtable_bytes)
            self._fit_cache()
            return True

    def release(self, nbytes: int) -> None:
        """Give back ``nbytes`` a memtable reserved (its SST is uploaded, or its DB closed)."""
        with self._lock:
            self._drain()
            self.memtable_bytes = max(0, self.memtable_bytes - nbytes)
            self._fit_cache()

    def pin(self, nbytes: int) -> None:
        """Count ``nbytes`` an open SST's loaded tail keeps in memory (index, bloom filter):
        the cache shrinks by as much. Never refused: a read needs its SST's tail."""
        with self._lock:
            self._drain()
            self.pinned_bytes += nbytes
            self._fit_cache()

    def unpin(self, nbytes: int) -> None:
        """Give back ``nbytes`` :meth:`pin` counted (the SST's reader is gone)."""
        with self._lock:
            self._drain()
            self.pinned_bytes = max(0, self.pinned_bytes - nbytes)
            self._fit_cache()

    def release_soon(self, nbytes: int) -> None:
        """:meth:`release`, applied by the budget's next call: for garbage-collection
        finalizers, which may run inside any allocation, including while this thread holds the
        budget's or the cache's lock (taking either there would deadlock). Takes no lock."""
        self._pending.append((True, nbytes))

    def unpin_soon(self, nbytes: int) -> None:
        """:meth:`unpin`, applied by the budget's next call (see :meth:`release_soon`)."""
        self._pending.append((False, nbytes))

    def _drain(self) -> None:
        """Apply what finalizers gave back (lock held)."""
        while self._pending:
            memtable, n = self._pending.popleft()
            if memtable:
                self.memtable_bytes = max(0, self.memtable_bytes - n)
            else:
                self.pinned_bytes = max(0, self.pinned_bytes - n)

    def _fit_cache(self) -> None:
        self.cache.resize(max(0, self.capacity - self.memtable_bytes - self.pinned_bytes))

    def stats(self) -> dict[str, int]:
        """``capacity``, reserved ``memtable_bytes`` (and their peak), ``pinned_bytes`` of
        SST tails, ``cache_bytes`` in use and the cache's current ``cache_capacity``,
        ``refusals``."""
        with self._lock:
            if self._pending:
                self._drain()
                self._fit_cache()
            return {
                "capacity": self.capacity,
                "memtable_bytes": self.memtable_bytes,
                "peak_memtable_bytes": self.peak_memtable_bytes,
                "pinned_bytes": self.pinned_bytes,
                "cache_bytes": self.cache.used,
                "cache_capacity": self.cache.capacity,
                "refusals": self.refusals,
            }

    def __repr__(self) -> str:
        return (f"<silt.MemoryBudget {self.capacity} bytes, memtables {self.memtable_bytes}/"
                f"{self.memtable_limit}, pinned {self.pinned_bytes}, "
                f"cache {self.cache.used}/{self.cache.capacity}>")


class MemtableAllowance:
    """What one DB's active memtable may hold: :attr:`limit`, the size (``approx_bytes``) at
    which the DB asks :meth:`grow` (or freezes), and :attr:`reserved`, the bytes it holds
    reserved from :attr:`budget`. Without a budget the limit is ``memtable_bytes`` for good;
    with one it is 0 until the first write. Owned by the DB's writer (its lock held), but for
    :meth:`give_back_soon`."""

    def __init__(self, budget: MemoryBudget | None, memtable_bytes: int) -> None:
        self.budget = budget
        #: ``Settings.memtable_bytes``: the size at which a memtable freezes whatever the budget.
        self.cap = memtable_bytes
        self.limit = memtable_bytes if budget is None else 0
        self.reserved = 0

    def grow(self, mem: Memtable) -> bool:
        """The active memtable ``mem`` reached :attr:`limit`. With a budget and below
        :attr:`cap`, reserve chunks until its memory (see :func:`memtable_charge`) fits, the
        first always granted, and set the next limit where the rest of the reservation would
        be used; ``False`` (freeze it) when the budget refuses."""
        budget = self.budget
        if budget is not None:
            approx = mem.approx_bytes
            cap = self.cap
            if approx < cap:
                need = memtable_charge(approx, len(mem))
                while need >= self.reserved:
                    if not budget.reserve(budget.chunk, force=self.reserved == 0):
                        break
                    self.reserved += budget.chunk
                if need < self.reserved:
                    # The rest, in memtable bytes, at the memtable's bytes-to-memory ratio so far.
                    rest = (self.reserved - need) * approx // max(need, 1)
                    self.limit = min(cap, approx + max(rest, 1))
                    return True
        return False

    def frozen(self, size: int, upload: Future[None] | None) -> None:
        """The active memtable, of memory ``size``, was frozen and is being uploaded
        (``upload``): with a budget it keeps its reservation (at least ``size``) until the
        upload is done, and the next memtable starts from nothing."""
        budget = self.budget
        if budget is not None:
            held, self.reserved, self.limit = self.reserved, 0, 0
            if size > held:
                budget.reserve(size - held, force=True)
                held = size
            assert upload is not None
            upload.add_done_callback(lambda _f: budget.release(held))

    def give_back_memtable(self) -> None:
        """The active memtable was replaced by an empty one without an upload: release its
        reservation."""
        budget = self.budget
        if budget is not None:
            held, self.reserved, self.limit = self.reserved, 0, 0
            if held:
                budget.release(held)

    def give_back(self) -> None:
        """Release what the active memtable held reserved (the DB closes)."""
        assert self.budget is not None
        self.budget.release(self.reserved)
        self.reserved = 0
        self.limit = 0

    def give_back_soon(self) -> None:
        """The same from the finalizer of a DB collected unclosed: it may run inside any
        allocation, with the budget's or the cache's lock held, so it takes no lock."""
        assert self.budget is not None
        self.budget.release_soon(self.reserved)
        self.reserved = 0


_process_lock = threading.Lock()
_process: MemoryBudget | None = None


def process_budget() -> MemoryBudget:
    """The process's budget (created at :data:`DEFAULT_BUDGET_BYTES` on first use)."""
    global _process
    with _process_lock:
        if _process is None:
            _process = MemoryBudget(DEFAULT_BUDGET_BYTES)
        return _process


def set_memory_budget(capacity_bytes: int, *, memtable_share: float | None = None) -> MemoryBudget:
    """Set the memory budget of this process (block cache plus memtables of every DB opened
    without a budget or cache of its own) to ``capacity_bytes``; returns it.

    DBs already open keep using it: the cache evicts down to its new size at once. Example::

        silt.set_memory_budget(2 * 1024**3)   # 2 GiB for all DBs of this process
    """
    capacity = check_budget_bytes(capacity_bytes)
    share = None if memtable_share is None else _check_share(memtable_share)
    budget = process_budget()
    budget.resize(capacity, memtable_share=share)
    return budget
