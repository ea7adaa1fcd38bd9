"""Reading an SST's blocks off the store: the rule that coalesces missed blocks into ranged
reads, and the :class:`BlockFetcher` that makes them (docs/architecture.md, "The read path";
docs/tuning.md, "Round trips").

A read that plans its blocks first (``multi_get``, ``multi_scan``, the tails a cold handle
loads: :mod:`silt.readplan`) hands the fetcher the block indexes of one SST at a time; cached
blocks come from the block cache, the others as runs of adjacent blocks
(:func:`silt.sst.probe.coalesce`), one ranged read each. The gap a run may bridge follows the
tier: on a remote store (``ObjectStore.local`` false, or reads measured slow) blocks up to
:data:`COALESCE_GAP_BYTES` apart share a read, which goes to the fetcher's thread pool; on a
local one only adjacent blocks do, read in the calling thread. Shared by every read of one DB
(``silt.rooms``); it knows nothing of read views or commits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial
from typing import Any

from .sst.probe import coalesce, missing_runs, read_runs
from .sst.reader import SstReader

#: A block read (one ranged GET) that waits longer than this on average is remote (an object
#: store): a ``multi_get`` then coalesces the blocks it misses and reads them on the thread pool.
#: A faster one is served by local disk or the page cache (~10 us), where handing a read to a
#: thread costs more than it overlaps, so they are read in the calling thread. The wait is the
#: request's time less the reading thread's CPU time, decoding left out: decoding a run of a
#: cold SST's blocks (a few ms per MiB) is work a pool cannot overlap, not a sign of a remote
#: store, and a loaded machine's wait for the CPU during it must not look like one either.
REMOTE_READ_SECONDS = 0.002
#: With remote reads, missed blocks of one SST at most this many bytes apart are read with one
#: ranged GET (the bytes between them come along: a request costs far more than 64 KiB more of
#: it), as SlateDB's multi_get does; locally only adjacent blocks are merged.
COALESCE_GAP_BYTES = 64 * 1024
#: The largest single read a coalesced run of blocks may make.
COALESCE_MAX_BYTES = 1024 * 1024

#: Kept importable from here (silt.refill, tests): the rule is the probe's.
__all__ = ["COALESCE_GAP_BYTES", "COALESCE_MAX_BYTES", "REMOTE_READ_SECONDS", "BlockFetcher",
           "coalesce"]


class BlockFetcher:
    """Reads the blocks a ``multi_get`` needs: cached ones from the cache, the others as runs
    of adjacent blocks (:func:`~silt.sst.probe.coalesce`) with one ranged GET each, in the
    calling thread while reads are fast and on a pool of ``parallelism`` threads (started on
    first need) once they are slow (:data:`REMOTE_READ_SECONDS`); every block read is cached.

    Thread-safe; :meth:`close` waits for reads in flight. ``clock`` and ``cpu_clock`` (the
    calling thread's CPU time) time the reads: where the store has a direct reader, an SST's
    first missed run alone, and while it says local, the rest go in one compiled loop
    (:func:`silt.sst.probe.read_runs`: no Python frame per block on a cold local read).
    """

    def __init__(self, parallelism: int, *, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self._parallelism = parallelism
        self._clock, self._cpu_clock = clock, cpu_clock
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        #: typical wait of one run's read, its time less its CPU time (updated without a lock:
        #: a lost update only delays the switch between serial and pooled reads)
        self.read_seconds = 0.0

    def remote(self, reader: SstReader) -> bool:
        """Whether ``reader``'s blocks are read as from an object store (coalesced with gaps,
        on the pool): its store is not local (``ObjectStore.local``: known from the tier, so a
        cold handle plans its first reads right), or its reads were measured slow (a "local"
        file system that is a network mount)."""
        return not reader.store.local or self.read_seconds > REMOTE_READ_SECONDS

    def runs(self, reader: SstReader, indexes: list[int]) -> list[tuple[int, int]]:
        """The coalesced runs that read the ascending block ``indexes`` of ``reader``: the
        tier-aware gap rule (blocks up to :data:`COALESCE_GAP_BYTES` apart share a GET on a
        remote store, only adjacent ones on a local one)."""
        return coalesce(reader, indexes, *self._rule(reader))

    def _rule(self, reader: SstReader) -> tuple[int, int]:
        """``(gap, max_bytes)`` of :func:`~silt.sst.probe.coalesce` for ``reader`` now."""
        return (COALESCE_GAP_BYTES if self.remote(reader) else 0,
                COALESCE_MAX_BYTES if reader.store.coalesce_reads else 0)

    def __call__(self, reader: SstReader, indexes: list[int]) -> list[Any]:
        out = reader.cached_blocks(indexes)
        if None not in out:
            return out
        return self.fill(reader, indexes, out)

    def fill(self, reader: SstReader, indexes: list[int], out: list[Any]) -> list[Any]:
        """Read the blocks ``indexes[j]`` (ascending) of ``reader`` that ``out[j]`` lacks
        (``None``: the block cache missed them) into ``out``, and return it: what
        :meth:`__call__` does after its cache lookups (the compiled ``probe_sst`` makes those
        itself). Every block read is cached."""
        remote = self.remote(reader)
        where, runs = missing_runs(reader, indexes, out, *self._rule(reader))
        k = 0
        # On a local store the first run is read here: its time tells local from remote again
        # (a pooled read's time also holds its wait for the GIL behind the other reads).
        while k < len(runs) and (not remote or len(runs) - k == 1):
            first, blocks = self.read_run(reader, runs[k])
            _place(first, blocks, where, out)
            remote = self.remote(reader)
            k += 1
            if not remote and k < len(runs) and (read := reader.direct_read()) is not None:
                read_runs(reader, read, runs[k:], where, out)  # the rest: one compiled loop
                return out
        if k < len(runs):
            for first, blocks in self.gather([partial(self.read_run, reader, run)
                                              for run in runs[k:]]):
                _place(first, blocks, where, out)
        return out

    def _started(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        self._parallelism, thread_name_prefix="silt-read"
                    )
        return self._pool

    def gather(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run independent remote reads at once and return their results in order: the first
        in the calling thread, the others on the read pool (so ``calls`` must not wait for one
        another). Waits for every call before it returns or raises (the first error raised)."""
        if len(calls) <= 1:
            return [call() for call in calls]
        futures = [self._started().submit(call) for call in calls[1:]]
        try:
            first = calls[0]()
        finally:
            wait(futures)
        return [first, *(f.result() for f in futures)]

    def read_run(self, reader: SstReader, run: tuple[int, int]) -> tuple[int, list[Any]]:
        """Read the blocks ``run = (first, stop)`` of ``reader`` with one ranged GET (cached);
        returns ``(first, blocks)``."""
        start, cpu = self._clock(), self._cpu_clock()
        data = reader.run_bytes(run[0], run[1])  # the request alone: decoding never waits
        took = max(0.0, self._clock() - start - (self._cpu_clock() - cpu))
        blocks = reader.decode_run(run[0], run[1], data)
        # Falls at once to a fast read and rises slowly: a local read that waited for the CPU
        # or the GIL (a loaded machine) must not look remote, a remote one never looks local.
        self.read_seconds = min(took, 0.9 * self.read_seconds + 0.1 * took)
        return run[0], blocks

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None


def _place(first: int, blocks: list[Any], where: dict[int, int], out: list[Any]) -> None:
    """Put the blocks of a run starting at block ``first`` where ``out`` wants them."""
    for i, blk in enumerate(blocks, first):
        j = where.get(i)
        if j is not None:
            out[j] = blk
