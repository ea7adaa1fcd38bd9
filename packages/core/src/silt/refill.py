"""Cache refill after compaction: the part of the state that was cached stays cached.

A compaction replaces its input SSTs with new output SSTs. Once the writer installs the record
for reads (:mod:`silt.compaction.early`) or, if it was not installed, adopts it, every cached
block of an input is dead, and the first read of each key the inputs held misses the cache: on
a remote store, a ranged GET per run of blocks, tens of milliseconds each, in the middle of the
next micro-batch. So at that moment the writer reads, in the background,
the blocks of the outputs that cover the key ranges the inputs had in the cache, with the
reads ``multi_get`` makes (runs of adjacent blocks, several at once), into the block cache
(RisingWave's Hummock calls this *cache refill*).

Contract:

* **Bounded by what was cached**: an output block is read only when a cached input block
  covers part of its keys, so a refill reads at most about twice the bytes the inputs had
  cached (an input block can straddle two output blocks), and the cache's own bound holds.
* **Never in the way**: the refill runs on background threads of the DB (one planning,
  ``Settings.read_parallelism`` reading runs), once the record is installed or adopted; it
  never holds the DB's lock, and a read that wants a block before the refill got to it reads
  it itself, as before. :meth:`Refiller.close` (the DB closes) stops it between runs.
* **Never an error**: a refill that fails (the store, a deleted SST) is logged and counted
  (``refill_failures``); the blocks it did not read are read on demand.
* Only for remote stores (``ObjectStore.local`` false) and with
  ``Settings.refill_after_compaction`` (default on): a local read costs microseconds, far less
  than keeping the cache warm in advance. Its requests count under the purpose ``refill``
  (``DB.stats()["requests"]``), its blocks as ``refill_blocks``.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .fetch import COALESCE_GAP_BYTES, COALESCE_MAX_BYTES, coalesce
from .metrics import Metrics
from .sst.reader import SstReader

log = logging.getLogger("silt")

def hot_ranges(readers: Iterable[SstReader], cache: Any) -> list[tuple[bytes, bytes]]:
    """The key ranges ``[lo, hi]`` (inclusive, sorted, merged) covered by the blocks of
    ``readers`` that ``cache`` holds. Looks without touching the cache's LRU order or its
    hit counts (``BlockCache.holds``); a reader whose tail was never loaded has nothing cached
    and costs nothing."""
    ranges: list[tuple[bytes, bytes]] = []
    for reader in readers:
        tail = reader.loaded_tail
        if tail is None or reader.info is None:
            continue
        last = tail.last_keys
        cid = reader.cache_id
        held = cache.holds([cid + i for i in range(len(last))])
        smallest = reader.info.smallest
        for i, h in enumerate(held):
            if h:
                ranges.append((smallest if i == 0 else last[i - 1], last[i]))
    ranges.sort()
    merged: list[tuple[bytes, bytes]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1]:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def blocks_over(reader: SstReader, ranges: Sequence[tuple[bytes, bytes]]) -> list[int]:
    """Indexes of the blocks of ``reader`` holding keys of ``ranges`` (from :func:`hot_ranges`),
    sorted. Loads the reader's tail only when a range meets its key span."""
    info = reader.info
    assert info is not None
    meets = [(lo, hi) for lo, hi in ranges if hi >= info.smallest and lo <= info.largest]
    if not meets:
        return []
    last = reader.tail.last_keys
    n = len(last)
    wanted: list[int] = []
    for lo, hi in meets:
        a = bisect_left(last, lo)
        b = min(bisect_left(last, hi), n - 1)
        if a < n:
            wanted.extend(range(max(a, wanted[-1] + 1 if wanted else a), b + 1))
    return wanted


class Refiller:
    """Refills the block cache after adoptions (see the module): one coordinating thread, and
    ``parallelism`` threads reading runs of blocks (started on first use)."""

    def __init__(self, cache: Any, parallelism: int, metrics: Metrics) -> None:
        self._cache = cache
        self._parallelism = parallelism
        self._metrics = metrics
        self._coordinator: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def submit(self, inputs: list[SstReader], outputs: list[SstReader]) -> None:
        """Refill, in the background, the blocks of ``outputs`` that cover the key ranges
        ``inputs`` have cached now (the readers of an adopted compaction's SSTs)."""
        if not inputs or not outputs:
            return
        with self._lock:
            if self._stop.is_set():
                return
            if self._coordinator is None:
                self._coordinator = ThreadPoolExecutor(1, thread_name_prefix="silt-refill")
                self._readers = ThreadPoolExecutor(self._parallelism,
                                                   thread_name_prefix="silt-refill-read")
            self._coordinator.submit(self._run, inputs, outputs, self._readers)

    def _run(self, inputs: list[SstReader], outputs: list[SstReader],
             pool: ThreadPoolExecutor) -> None:
        try:
            ranges = hot_ranges(inputs, self._cache)
            if not ranges:
                return
            for reader in outputs:
                if self._stop.is_set():
                    return
                with self._metrics.purpose("refill"):
                    wanted = blocks_over(reader, ranges)  # may load the output's tail
                if not wanted:
                    continue
                cid = reader.cache_id
                held = self._cache.holds([cid + i for i in wanted])
                missing = [i for i, h in zip(wanted, held) if not h]
                if not missing:
                    continue
                runs = coalesce(reader, missing, COALESCE_GAP_BYTES,
                                COALESCE_MAX_BYTES if reader.store.coalesce_reads else 0)
                for n in pool.map(lambda run, r=reader: self._read(r, run), runs):
                    self._metrics.add("refill_blocks", n)
        except Exception as exc:  # a hint, never an error: the blocks are read on demand
            if not self._stop.is_set():
                self._metrics.add("refill_failures")
                log.warning("cache refill after compaction failed (reads fetch the blocks "
                            "themselves): %s", exc)

    def _read(self, reader: SstReader, run: tuple[int, int]) -> int:
        """Read one run of blocks into the cache; the blocks read (0 once stopping)."""
        if self._stop.is_set():
            return 0
        with self._metrics.purpose("refill"):
            reader.read_run(run[0], run[1])
        return run[1] - run[0]

    def wait(self) -> None:
        """Wait until the refills submitted so far are done (tests, benchmarks)."""
        self._shut_down(cancel=False)

    def close(self) -> None:
        """Stop: refills still queued are dropped, a running one stops before its next run of
        blocks; returns once no refill thread touches the store."""
        self._stop.set()
        self._shut_down(cancel=True)

    def _shut_down(self, cancel: bool) -> None:
        """Take the threads (a later :meth:`submit` starts new ones) and wait for them."""
        with self._lock:
            pools = (self._coordinator, self._readers)
            self._coordinator = self._readers = None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=cancel)
