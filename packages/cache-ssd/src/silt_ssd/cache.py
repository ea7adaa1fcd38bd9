"""``SsdCache``: a read-through cache of immutable object byte ranges on local disk.

It wraps any :class:`~silt.store.ObjectStore` and is itself one, so the engine does not know it
is there. ``get_range``/``get`` of *cacheable* keys (by default the engine's SSTs, ``sst/*.sst``:
the only objects the engine reads by range and never rewrites) are served from local files when
present, otherwise fetched from the inner store and stored. Everything else - manifests, listings,
writes, deletes - goes straight to the inner store. Negative answers (``NotFoundError``) are never
cached.

On-disk layout under ``cache_dir``::

    silt-ssd-v1/
      state                        lock file (fcntl.flock) holding the ledger: bytes used, entries
      tmp/<pid>-<random>.tmp       entries being written; never read
      objects/<h:2>/<h:30>/<start>+<length>   one file per cached range (see silt_ssd.entry)
      objects/<h:2>/<h:30>/all                a whole-object ``get``

``h`` is a 128-bit BLAKE2b hash of (store URL, object key), so one directory holds one object's
entries and dropping an object is one directory. Entry files carry their identity and a CRC32.

Why files and a lock, not a database or a daemon: the index *is* the directory tree, so it survives
restarts (warm after restart), needs no recovery step, and any number of processes share it
(Spark runs several Python workers per executor). Readers take no lock at all: an entry is written
to ``tmp/`` and published with ``os.replace``, so a name either does not exist or names a complete
file. Every change to the set of entries - publishing, evicting, dropping a damaged or deleted
entry - happens under an exclusive ``flock`` of ``state``, which also holds the ledger (bytes and
entries in use) so that limits are checked across processes without scanning the disk.

Limits, both honoured at every admission: ``size_limit`` (sum of entry file sizes) and ``reserve``
(free space the file system must keep, measured with ``statvfs``). An admission that would break
either first evicts. Eviction is least-recently-used by file mtime: a hit refreshes the entry's
mtime, at most once per ``touch_interval`` seconds (so recency costs one ``futimens`` per hot entry
per interval, shared by all processes). An eviction pass scans the tree (under the lock), corrects
the ledger from what it finds and evicts the oldest entries until usage is
:data:`~silt_ssd.admission.EVICT_SLACK` of the limit *below* it, so a full cache pays for one scan
per ~10% of turnover rather than one per miss.
Entries larger than the whole budget are not cached.

Never failing a read: at run time every disk error is counted and the read served from the inner
store; a ``cache_dir`` that cannot be set up at all (read-only, not a directory, junk where the
cache's own files go) makes :meth:`SsdCache.from_options`, the factory behind ``?cache=ssd``,
return the inner store with one :class:`CacheDisabledWarning`.

Crash safety: a process killed mid-write leaves only a file in ``tmp/`` (removed by a later pass
once older than :data:`~silt_ssd.cachedir.STALE_TMP_SECONDS`). Entries are not fsynced: after a
power loss an entry may be empty or damaged, which its checksum detects; a damaged entry is
dropped and refetched, never returned. The ledger is raised *before* an entry is published, so a
crash can only make it over-count (the next eviction pass recounts), never let the cache grow
past its limit.

Simplifications, on purpose:

* A request hits an entry of exactly its range, else the smallest entry holding it, else a
  chain of adjacent entries covering it (found by listing the object's directory, so a miss
  costs one ``scandir``; a whole-object entry holds every range): the engine reads runs of
  adjacent blocks with one request, then single blocks of them, and write-through admits single
  blocks that a later run is joined from. A range not covered is fetched whole (the parts it
  shares with cached entries are not merged or trimmed).
* Concurrent misses of one range in one process both fetch it (no request coalescing).
* Deleting a key drops its entries for this process's later reads; a read racing with the delete
  in another process may re-admit the old bytes. silt never re-creates a deleted SST name with other
  bytes (ULIDs; invariant 1 of docs/architecture.md), so such an entry is merely garbage until
  evicted.
* Entry sizes count file bytes, not allocated blocks (small entries use more disk than counted; the
  reserve, measured from the file system, covers the difference).
* ``memory://`` stores are per process: do not share one cache directory between processes that
  each have their own ``memory://`` store of the same name.
* POSIX only (``fcntl.flock``); cache_dir should be on a local file system.

Thread safety: every method may be called from several threads at once; an instance may be used
after ``os.fork`` (it reopens its lock file in the child).

Where each part lives: the directory, its lock and ledger in :mod:`silt_ssd.cachedir`; finding a
range among entries in :mod:`silt_ssd.lookup`; admission and eviction in
:mod:`silt_ssd.admission`; the entry file format in :mod:`silt_ssd.entry`.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError, StoreError
from silt.store import ObjectInfo, ObjectStore

from . import entry
from .admission import EVICT_SLACK, Admission, DiskUsage
from .cachedir import HAVE_FLOCK, CacheDir
from .counters import Counters
from .lookup import Lookup
from .options import CacheOptions, Reserve
from .ssts import is_sst_key, sst_read_ranges

#: Default: a hit refreshes an entry's recency at most this often (seconds).
TOUCH_INTERVAL = 5.0


class CacheDisabledWarning(RuntimeWarning):
    """``?cache=ssd`` was asked for but its ``cache_dir`` cannot be used: reads go straight to
    the tier (issued once per store opened, by :meth:`SsdCache.from_options`)."""


class UnusableCacheDir(InvalidArgumentError):
    """``SsdCache(...)`` could not set up its files in ``cache_dir`` (the message says why)."""


class SsdCache(ObjectStore):
    """Read-through local-disk cache in front of ``inner``. See the module docstring.

    Entries are the ranges asked for; a range inside a cached one is cut from it, so readers
    may coalesce adjacent blocks into one request (``coalesce_reads``): each block of such a
    run is served from the run's entry later.

    Parameters
    ----------
    inner:
        the store to cache (any tier).
    cache_dir:
        directory on local disk, created if missing; may be shared by several processes.
        :class:`UnusableCacheDir` (an ``InvalidArgumentError``) when the cache's files cannot be
        set up there; :meth:`from_options` (``?cache=ssd``) turns the cache off instead.
    size_limit:
        most bytes the entries may hold (positive).
    reserve:
        free disk space to leave (a :class:`~silt_ssd.options.Reserve`, or bytes as an int).
    write_through:
        also admit the tail and block ranges of SSTs written through this store. ``None`` (the
        default) turns it on in front of a remote store (``inner.local`` false: a restart on this
        machine then starts warm instead of fetching every block again) and off in front of a
        local one, whose blocks the page cache already holds.
    cacheable:
        which keys are cached; default :func:`is_sst_key`. Only keys whose objects never change
        may be cached.
    disk_usage:
        ``shutil.disk_usage``-shaped function (injectable for tests).
    touch_interval:
        at most how often (seconds) a hit refreshes an entry's recency.
    clock:
        wall clock in nanoseconds (``time.time_ns``), used as recency; injectable for tests.

    Example
    -------
    >>> from silt.tiers.memory import MemoryStore
    >>> cache = SsdCache(MemoryStore(), "/tmp/silt-ssd-doctest", size_limit=1 << 20, reserve=0)
    >>> cache.put("sst/x.sst", b"0123456789")
    >>> cache.get_range("sst/x.sst", 2, 3), cache.get_range("sst/x.sst", 2, 3)
    (b'234', b'234')
    >>> cache.stats()["hits"], cache.stats()["misses"]
    (1, 1)
    """

    def __init__(
        self,
        inner: ObjectStore,
        cache_dir: str | os.PathLike[str],
        *,
        size_limit: int,
        reserve: Reserve | int = 0,
        write_through: bool | None = None,
        cacheable: Callable[[str], bool] = is_sst_key,
        disk_usage: DiskUsage = shutil.disk_usage,
        touch_interval: float = TOUCH_INTERVAL,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        if not HAVE_FLOCK:  # pragma: no cover
            raise StoreError("silt-cache-ssd needs a POSIX system (fcntl.flock)")
        if not isinstance(inner, ObjectStore):
            raise InvalidTypeError(f"SsdCache wraps an ObjectStore, got {type(inner).__name__}")
        if isinstance(size_limit, bool) or not isinstance(size_limit, int) or size_limit <= 0:
            raise InvalidArgumentError(f"size_limit must be a positive int, got {size_limit!r}")
        if isinstance(reserve, int) and not isinstance(reserve, bool):
            if reserve < 0:
                raise InvalidArgumentError(f"reserve must be >= 0 bytes, got {reserve}")
            reserve = Reserve(bytes=reserve)
        if not isinstance(reserve, Reserve):
            raise InvalidTypeError(f"reserve must be an int or a Reserve, got {reserve!r}")
        self.inner = inner
        self.url = inner.url
        self.coalesce_reads = True
        self.shared_across = inner.shared_across  # the objects are the inner store's
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.size_limit = size_limit
        self.reserve = reserve
        self.write_through = (not inner.local) if write_through is None else bool(write_through)
        self._cacheable = cacheable
        self._disk_usage = disk_usage
        self._counters = Counters()
        try:
            self._dir = CacheDir(self.cache_dir)
        except OSError as exc:
            raise UnusableCacheDir(
                f"cache_dir {self.cache_dir!r} cannot be used: {exc.strerror or exc}; point "
                "cache_dir at a writable directory on local disk (it holds only the cache's "
                "own files)"
            ) from None
        self.root = self._dir.root
        self._lookup = Lookup(self._dir, self._counters, clock, int(touch_interval * 1e9))
        self._admission = Admission(self._dir, self._counters, clock, size_limit=size_limit,
                                    reserve=reserve, disk_usage=disk_usage)

    @classmethod
    def from_options(cls, inner: ObjectStore, options: dict[str, str]) -> SsdCache:
        """The cache factory silt calls for ``?cache=ssd``: ``options`` are the ``cache_*`` ones.

        Raises :class:`~silt.errors.InvalidArgumentError` naming a bad option. A ``cache_dir``
        that cannot be used (read-only, not a directory, something else where the cache's own
        files go) never makes opening fail: the cache is left out, ``inner`` itself is returned,
        and one :class:`CacheDisabledWarning` says why - the cache never makes a read fail.

        >>> from silt.tiers.memory import MemoryStore
        >>> SsdCache.from_options(MemoryStore(), {"cache_dir": "/tmp/c", "cache_size": "1GB"})
        ... # doctest: +ELLIPSIS
        SsdCache(...)
        """
        opts = CacheOptions.from_options(options)
        try:
            return cls(
                inner,
                opts.cache_dir,
                size_limit=opts.size_limit,
                reserve=opts.reserve,
                write_through=opts.write_through,
            )
        except UnusableCacheDir as exc:
            warnings.warn(
                f"silt-cache-ssd is off for {inner.url}: {exc}; reading straight from the tier",
                CacheDisabledWarning,
                stacklevel=2,
            )
            return inner

    def stats(self) -> dict[str, Any]:
        """This process's counters plus the cache directory's usage (shared by all processes).

        ``hits``/``misses``/``bytes_served`` (from disk)/``bytes_fetched`` (from the inner store)
        count cacheable reads; ``bypassed`` counts reads of other keys. ``evictions`` counts the
        entries this process evicted, ``dropped_damaged`` entries that failed their checksum.
        ``used_bytes``/``entries`` come from the shared ledger (``None`` if it is being rebuilt).
        """
        out: dict[str, Any] = self._counters.snapshot()
        lookups = out["hits"] + out["misses"]
        out["hit_ratio"] = out["hits"] / lookups if lookups else None
        ledger = self._dir.peek_ledger()
        out["used_bytes"], out["entries"] = ledger if ledger else (None, None)
        out["size_limit"] = self.size_limit
        try:
            out["reserve_bytes"] = self.reserve.resolve(self._disk_usage(self.root).total)
        except OSError:
            out["reserve_bytes"] = None
        out["cache_dir"] = self.cache_dir
        return out

    # -- the ObjectStore contract -------------------------------------------------------------
    def get(self, key: str) -> bytes:
        if not self._cacheable(key):
            self._counters.add(bypassed=1)
            return self.inner.get(key)
        return self._read_through(key, 0, entry.WHOLE, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if not self._cacheable(key) or not _valid_range(start, length):
            self._counters.add(bypassed=1)
            return self.inner.get_range(key, start, length)
        return self._read_through(
            key, start, length, lambda: self.inner.get_range(key, start, length)
        )

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)
        self._after_write(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        created = self.inner.put_if_absent(key, data)
        if created:
            self._after_write(key, data)
        return created

    def delete_many(self, keys: Iterable[str]) -> None:
        if isinstance(keys, (str, bytes)):
            self.inner.delete_many(keys)  # the inner store rejects a lone key in its own words
            return
        batch = list(keys)
        self.inner.delete_many(batch)
        for key in batch:
            if self._cacheable(key):
                self._invalidate(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after)

    def remove_stale_temporaries(self, prefix: str, older_than_seconds: float) -> int:
        """Forwarded to the inner store (the cache's own ``tmp/`` is cleaned when it opens)."""
        return self.inner.remove_stale_temporaries(prefix, older_than_seconds)

    def take_extra_reads(self) -> int:
        """Forwarded: the hedged requests of this thread's reads that reached the inner store."""
        return self.inner.take_extra_reads()

    def close(self) -> None:
        """Close the inner store and the cache's lock file. Entries stay on disk for later use.

        Reads after ``close`` still work (from disk or the inner store) but admit nothing.
        """
        self._dir.close()
        self.inner.close()

    def __repr__(self) -> str:
        return f"SsdCache({self.inner!r}, cache_dir={self.cache_dir!r})"

    # -- read-through and write-through ------------------------------------------------------
    def _read_through(
        self, key: str, start: int, length: int, fetch: Callable[[], bytes]
    ) -> bytes:
        ident = entry.identity(self.url, key)
        data = self._lookup.find(ident, start, length)
        if data is not None:
            self._counters.add(hits=1, bytes_served=len(data))
            return data
        data = fetch()  # NotFoundError and other store errors propagate; nothing is cached
        self._counters.add(misses=1, bytes_fetched=len(data))
        self._admission.admit([(ident, start, length, bytes(data))], write_through=False)
        return data

    def _after_write(self, key: str, data: bytes) -> None:
        if not self._cacheable(key):
            return
        self._invalidate(key)  # only ever non-empty if a key was (wrongly) rewritten
        if self.write_through:
            ident = entry.identity(self.url, key)
            items = [(ident, s, n, bytes(data[s:s + n])) for s, n in sst_read_ranges(data)]
            self._admission.admit(items, write_through=True)

    def _invalidate(self, key: str) -> None:
        """Drop every entry of ``key`` (after a write or delete of it through this store)."""
        folder = self._dir.folder(entry.identity(self.url, key))
        if self._dir.closed or not os.path.isdir(folder):
            return
        try:
            self._counters.add(invalidated=self._dir.drop_object(folder))
        except FileNotFoundError:
            pass
        except OSError:
            self._counters.add(errors=1)

def _valid_range(start: object, length: object) -> bool:
    return (
        isinstance(start, int) and isinstance(length, int) and not isinstance(start, bool)
        and not isinstance(length, bool) and start >= 0 and length >= 0
    )


__all__ = [
    "EVICT_SLACK",
    "CacheDisabledWarning",
    "SsdCache",
    "UnusableCacheDir",
    "is_sst_key",
    "sst_read_ranges",
]
