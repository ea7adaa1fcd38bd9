"""The ``file://`` tier's block reads: one ``pread`` through the process's cached descriptor.

:class:`CachedReads` is what :meth:`silt.tiers.file.FileStore.direct_reader` returns, the
callable the SST reader reads every block-cache miss through. A read whose descriptor is
cached and was checked recently (the lenient borrow of :mod:`silt.tiers.fdcache`: a check less
than ``RECHECK_SECONDS`` old, no ``put`` or delete through a store of this process since) is
the borrow, one ``pread`` and the release, inline; every other read (no cached descriptor, a
check due, a failed ``pread``, arguments out of range) goes to the tier's own slow path, which
checks, opens, maps errors and drops a stale descriptor exactly as before.

Why a ``pread`` and not a copy out of a memory map (measured on a 68 MB SST, 8.3 KiB random
reads, CPU time per read in one process, load 6: ``pread`` 2.3-2.5 us; ``fstat`` + copy out of
the map 4.4-4.8 us, of which the ``fstat`` 1.6 us and the copy with its page faults 1.6-1.9 us):

* **Damage is a short read, never SIGBUS.** A file shrunk or truncated by another process
  reads short (or empty), and the SST reader reports :class:`~silt.errors.CorruptionError`.
  A map needed an ``fstat`` before every copy to avoid touching a page the file no longer
  has, and still had a window between the check and the copy; a ``pread`` has none.
* **One system call**, no page faults on first touch, and no mapped pages resident beside the
  block cache's copies (a fresh process's peak RSS after 100k cold gets at 5M keys: 1,143 MiB
  with maps, 543 MiB with ``pread``).

Thread safety: any thread may call a :class:`CachedReads`. The borrow and release are the
cache's :meth:`~silt.tiers.fdcache.FdCache.lend` and
:meth:`~silt.tiers.fdcache.FdCache.release` (inline, under the cache's ``lock``, on the pure
cache), so a descriptor in use is never closed (its number cannot be reused under a read); the
``pread`` itself runs unlocked (and, compiled, without the GIL).

The compiled twin (``silt._speedups.CachedReads``) does the same in C: no Python frame per
block read, and on the compiled cache (``silt._speedups.FdCache``) no Python lock, attribute
or call either: the borrow and release are C calls on the cache's C fields.
tests/test_file_block_reads.py holds both to the same results.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from time import monotonic

from .._ext import accelerate
from . import fdcache
from .fdcache import FdCache
from .fileio import read_fully


class CachedReads:
    """``read(start, length) -> bytes``: up to ``length`` bytes of the object cached as
    ``ident`` in ``cache`` from ``start`` (fewer only at its end, ``b""`` past it), read with
    ``pread`` through its cached descriptor when a lenient borrow may trust it without a new
    check (its bounds read from :mod:`~silt.tiers.fdcache` at each call, ``RECHECK_SECONDS``
    and ``SWEEP_EVERY``); otherwise (and after a failed ``pread``) ``slow(start, length)``,
    which must read like :meth:`~silt.tiers.file.FileStore.get_range` (the tier's checked
    path). Never returns anything that refers to the file (no map): a kept block holds its
    own bytes. Arguments that are not non-negative ``int`` go to ``slow`` too.
    """

    __slots__ = ("cache", "ident", "slow")

    def __init__(self, cache: FdCache, ident: Hashable,
                 slow: Callable[[int, int], bytes]) -> None:
        self.cache = cache
        self.ident = ident
        self.slow = slow

    def __call__(self, start: int, length: int) -> bytes:
        cache = self.cache
        if type(start) is not int or type(length) is not int or start < 0 or length < 0:
            return self.slow(start, length)
        inline = type(cache) is fdcache.FdCache_py
        if inline:  # FdCache.lend, without its frame
            ident = self.ident
            now = monotonic()
            sweep = False
            with cache.lock:
                entry = cache.entries.get(ident)
                if (entry is None or entry.epoch != cache.epoch
                        or not now - entry.checked < fdcache.RECHECK_SECONDS):
                    entry = None
                else:
                    cache.entries.move_to_end(ident)
                    entry.users += 1
                    cache.hits += 1
                    cache.reads += 1
                    sweep = cache.reads % fdcache.SWEEP_EVERY == 0
        else:  # the compiled cache (a pure reader beside it, as the tests pair them)
            entry = cache.lend(self.ident)
            sweep = False
        if entry is None:
            return self.slow(start, length)
        data: bytes | None = None
        try:
            if sweep:
                cache.sweep()
            data = os.pread(entry.fd, length, start)
            if len(data) < length and data:  # a short read (signal, network file system)
                data += read_fully(entry.fd, start + len(data), length - len(data))
        except OSError:
            data = None  # the slow path reads again, maps the error, drops a stale descriptor
        finally:
            if inline:  # FdCache.release, without its frame while the entry is cached
                with cache.lock:
                    dropped = entry.dropped
                    if not dropped:
                        entry.users -= 1
                if dropped:  # out of the cache meanwhile: the last release closes it
                    cache.release(entry)
            else:
                cache.release(entry)
        if data is None:
            return self.slow(start, length)
        return data


COMPILED = accelerate(globals(), ["CachedReads"])

__all__ = ["COMPILED", "CachedReads"]
