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
the ledger from what it finds and evicts the oldest entries until usage is ``EVICT_SLACK`` of the
limit *below* it, so a full cache pays for one scan per ~10% of turnover rather than one per miss.
Entries larger than the whole budget are not cached.

Never failing a read: at run time every disk error is counted and the read served from the inner
store; a ``cache_dir`` that cannot be set up at all (read-only, not a directory, junk where the
cache's own files go) makes :meth:`SsdCache.from_options`, the factory behind ``?cache=ssd``,
return the inner store with one :class:`CacheDisabledWarning`.

Crash safety: a process killed mid-write leaves only a file in ``tmp/`` (removed by a later pass
once older than ``STALE_TMP_SECONDS``). Entries are not fsynced: after a power loss an entry may be
empty or damaged, which its checksum detects; a damaged entry is dropped and refetched, never
returned. The ledger is raised *before* an entry is published, so a crash can only make it
over-count (the next eviction pass recounts), never let the cache grow past its limit.

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
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import struct
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from silt.errors import CorruptionError, InvalidArgumentError, InvalidTypeError, StoreError
from silt.store import ObjectInfo, ObjectStore

from . import entry
from .options import CacheOptions, Reserve

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

#: After an eviction pass, usage is this fraction of the size limit below the limit.
EVICT_SLACK = 0.1
#: Files in ``tmp/`` older than this are left over from a crashed writer and are removed.
STALE_TMP_SECONDS = 600.0
#: Default: a hit refreshes an entry's recency at most this often (seconds).
TOUCH_INTERVAL = 5.0

_LEDGER = struct.Struct("<QQI")  # bytes used, entries, crc32 of the first 16 bytes

DiskUsage = Callable[[str], Any]  # shutil.disk_usage-shaped: .total, .free


class CacheDisabledWarning(RuntimeWarning):
    """``?cache=ssd`` was asked for but its ``cache_dir`` cannot be used: reads go straight to
    the tier (issued once per store opened, by :meth:`SsdCache.from_options`)."""


class UnusableCacheDir(InvalidArgumentError):
    """``SsdCache(...)`` could not set up its files in ``cache_dir`` (the message says why)."""


def is_sst_key(key: str) -> bool:
    """The default cacheable-key predicate: the engine's SST objects (``[.../]sst/<id>.sst``)."""
    return isinstance(key, str) and key.endswith(".sst") and (
        key.startswith("sst/") or "/sst/" in key
    )


def sst_read_ranges(data: bytes) -> list[tuple[int, int]]:
    """The ``(start, length)`` ranges the engine reads from the SST ``data``: tail, then blocks.

    Empty when ``data`` is not a readable SST (write-through then admits nothing). The layout
    knowledge lives in core (:func:`silt.sst.reader.read_ranges`).
    """
    from silt.sst.reader import read_ranges

    try:
        return read_ranges(data, "write-through")
    except (CorruptionError, ValueError, struct.error):
        return []


def _write_all(fd: int, chunks: list[bytes]) -> None:
    """Write every chunk to ``fd`` (a module function so crash tests can stall a writer)."""
    data = b"".join(chunks)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


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
        if fcntl is None:  # pragma: no cover
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
        self._touch_ns = int(touch_interval * 1e9)
        self._clock = clock
        self.root = os.path.join(self.cache_dir, f"silt-ssd-v{entry.LAYOUT_VERSION}")
        self._objects = os.path.join(self.root, "objects")
        self._tmp = os.path.join(self.root, "tmp")
        self._state_path = os.path.join(self.root, "state")
        self._pid = os.getpid()
        self._mutex = threading.Lock()
        self._closed = False
        self._fd = -1
        self._counters_lock = threading.Lock()
        self._counters = dict.fromkeys(
            ("hits", "misses", "bytes_served", "bytes_fetched", "admitted", "admitted_bytes",
             "write_through", "rejected", "evictions", "evicted_bytes", "dropped_damaged",
             "invalidated", "bypassed", "errors"),
            0,
        )
        try:
            os.makedirs(self._objects, exist_ok=True)
            os.makedirs(self._tmp, exist_ok=True)
            self._fd = os.open(self._state_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            with self._locked():
                self._read_ledger()
                self._clean_tmp()
        except OSError as exc:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self._closed = True
            raise UnusableCacheDir(
                f"cache_dir {self.cache_dir!r} cannot be used: {exc.strerror or exc}; point "
                "cache_dir at a writable directory on local disk (it holds only the cache's "
                "own files)"
            ) from None

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

    # -- counters -----------------------------------------------------------------------------
    def _count(self, **deltas: int) -> None:
        with self._counters_lock:
            for name, delta in deltas.items():
                self._counters[name] += delta

    def stats(self) -> dict[str, Any]:
        """This process's counters plus the cache directory's usage (shared by all processes).

        ``hits``/``misses``/``bytes_served`` (from disk)/``bytes_fetched`` (from the inner store)
        count cacheable reads; ``bypassed`` counts reads of other keys. ``evictions`` counts the
        entries this process evicted, ``dropped_damaged`` entries that failed their checksum.
        ``used_bytes``/``entries`` come from the shared ledger (``None`` if it is being rebuilt).
        """
        with self._counters_lock:
            out: dict[str, Any] = dict(self._counters)
        lookups = out["hits"] + out["misses"]
        out["hit_ratio"] = out["hits"] / lookups if lookups else None
        ledger = self._peek_ledger()
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
            self._count(bypassed=1)
            return self.inner.get(key)
        return self._read_through(key, 0, entry.WHOLE, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if not self._cacheable(key) or not _valid_range(start, length):
            self._count(bypassed=1)
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
        with self._mutex:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(OSError):
                    os.close(self._fd)
        self.inner.close()

    def __repr__(self) -> str:
        return f"SsdCache({self.inner!r}, cache_dir={self.cache_dir!r})"

    # -- reads --------------------------------------------------------------------------------
    def _path(self, ident: bytes, start: int, length: int) -> str:
        h = entry.object_hash(ident)
        return os.path.join(self._objects, h[:2], h[2:], entry.file_name(start, length))

    def _read_through(
        self, key: str, start: int, length: int, fetch: Callable[[], bytes]
    ) -> bytes:
        ident = entry.identity(self.url, key)
        path = self._path(ident, start, length)
        data = self._lookup(path, ident, start, length)
        if data is None and length != entry.WHOLE:
            data = self._lookup_within(os.path.dirname(path), ident, start, length)
        if data is not None:
            self._count(hits=1, bytes_served=len(data))
            return data
        data = fetch()  # NotFoundError and other store errors propagate; nothing is cached
        self._count(misses=1, bytes_fetched=len(data))
        self._admit([(path, ident, start, length, bytes(data))], write_through=False)
        return data

    def _lookup(self, path: str, ident: bytes, start: int, length: int) -> bytes | None:
        try:
            with open(path, "rb", buffering=0) as f:
                st = os.fstat(f.fileno())
                buf = f.read()
                now = self._clock()
                if now - st.st_mtime_ns >= self._touch_ns:
                    with contextlib.suppress(OSError):
                        os.utime(f.fileno(), ns=(now, now))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            self._count(errors=1)
            return None
        try:
            return entry.decode(buf, ident, start, length)
        except entry.DamagedEntry:
            self._count(dropped_damaged=1)
            self._drop_damaged(path, st)
            return None

    def _lookup_within(self, folder: str, ident: bytes, start: int,
                       length: int) -> bytes | None:
        """``[start, start + length)`` from the object's cached ranges other than its exact
        one: cut from the smallest entry holding it (a run of blocks read with one request
        holds each of its blocks; a whole-object entry holds every range), else joined from
        adjacent entries that cover it (single blocks admitted by write-through cover a run);
        ``None`` when they do not."""
        end = start + length
        spans: list[tuple[int, int]] = []  # (start, length) of each cached range
        whole = False
        try:
            with os.scandir(folder) as it:
                for e in it:
                    if e.name == "all":
                        whole = True
                        continue
                    s_, plus, n_ = e.name.partition("+")
                    if plus and s_.isdigit() and n_.isdigit():
                        spans.append((int(s_), int(n_)))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            self._count(errors=1)
            return None
        holding = [(n, s) for s, n in spans if s <= start and end <= s + n]
        if holding:
            n, s = min(holding)
            return self._cut(folder, ident, s, n, start, end)
        if whole:
            return self._cut(folder, ident, 0, entry.WHOLE, start, end)
        # A chain of entries, each starting inside the previous one, from start to end.
        pieces: list[bytes] = []
        pos = start
        while pos < end:
            reach = [(s + n, s, n) for s, n in spans if s <= pos < s + n]
            if not reach:
                return None
            _, s, n = max(reach)
            data = self._cut(folder, ident, s, n, pos, end)
            if data is None:
                return None
            pieces.append(data)
            pos += len(data)
            if pos < min(s + n, end):  # the object ends inside this entry
                break
        return b"".join(pieces)

    def _cut(self, folder: str, ident: bytes, s: int, n: int, start: int,
             end: int) -> bytes | None:
        """Bytes ``[start, end)`` of the object from its entry ``(s, n)`` (``None``: gone or
        damaged, then dropped); fewer where the object ends first."""
        data = self._lookup(os.path.join(folder, entry.file_name(s, n)), ident, s, n)
        if data is None:
            return None
        return data[start - s:end - s]

    # -- admission ----------------------------------------------------------------------------
    def _after_write(self, key: str, data: bytes) -> None:
        if not self._cacheable(key):
            return
        self._invalidate(key)  # only ever non-empty if a key was (wrongly) rewritten
        if self.write_through:
            ident = entry.identity(self.url, key)
            items = [
                (self._path(ident, s, n), ident, s, n, bytes(data[s:s + n]))
                for s, n in sst_read_ranges(data)
            ]
            self._admit(items, write_through=True)

    def _write_tmp(self, chunks: list[bytes]) -> str | None:
        tmp = os.path.join(self._tmp, f"{os.getpid()}-{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                _write_all(fd, chunks)
                now = self._clock()  # recency at full clock resolution, not the kernel's tick
                os.utime(fd, ns=(now, now))
            finally:
                os.close(fd)
        except OSError:
            self._count(errors=1)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return None
        return tmp

    def _admit(
        self, items: list[tuple[str, bytes, int, int, bytes]], *, write_through: bool
    ) -> None:
        """Write ``items`` (path, identity, start, length, data) as entries; never raises."""
        if self._closed:
            return
        staged: list[tuple[str, str, int]] = []
        for path, ident, start, length, data in items:
            size = entry.entry_size(ident, data)
            if size > self.size_limit:
                self._count(rejected=1)
                continue
            if write_through and os.path.exists(path):
                continue
            tmp = self._write_tmp(entry.encode(ident, start, length, data))
            if tmp is not None:
                staged.append((tmp, path, size))
        if not staged:
            return
        done = 0
        try:
            with self._locked():
                used, count = self._read_ledger()
                for tmp, path, size in staged:
                    done += 1
                    if os.path.exists(path):  # another thread or process cached it meanwhile
                        os.unlink(tmp)
                        continue
                    fits, used, count = self._make_room(used, count, size)
                    if not fits:
                        os.unlink(tmp)
                        self._count(rejected=1)
                        continue
                    # Count first, publish second: a crash in between over-counts, never under.
                    self._write_ledger(used + size, count + 1)
                    try:
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        os.replace(tmp, path)
                    except OSError:
                        self._write_ledger(used, count)
                        raise
                    used, count = used + size, count + 1
                    self._count(admitted=1, admitted_bytes=size,
                                write_through=1 if write_through else 0)
        except OSError:
            self._count(errors=1)
        finally:
            for tmp, _path, _size in staged[max(0, done - 1):]:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def _make_room(self, used: int, count: int, size: int) -> tuple[bool, int, int]:
        """Evict until an entry of ``size`` fits both limits (caller holds the lock).

        Returns ``(fits, used, count)`` with the ledger values after any eviction.
        """
        limit = self.size_limit
        usage = self._disk_usage(self.root)
        reserve = self.reserve.resolve(usage.total)
        free = usage.free  # the staged entry is already on disk, so it is already subtracted
        if used + size <= limit and free >= reserve:
            return True, used, count
        slack = int(limit * EVICT_SLACK)
        found, used = self._scan()  # exact usage: corrects any drift of the ledger
        count = len(found)
        goal_used = limit - size - (slack if used + size > limit else 0)
        goal_free = reserve + (slack if free < reserve else 0)
        found.sort()
        evicted = evicted_bytes = 0
        for _mtime, esize, path in found:
            if used <= goal_used and free >= goal_free:
                break
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            used -= esize
            count -= 1
            evicted += 1
            evicted_bytes += esize
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))  # only succeeds when the object has no entries
            if free < goal_free:
                free = self._disk_usage(self.root).free
        self._write_ledger(used, count)
        self._count(evictions=evicted, evicted_bytes=evicted_bytes)
        self._clean_tmp()
        return used + size <= limit and free >= reserve, used, count

    # -- dropping entries ---------------------------------------------------------------------
    def _drop_damaged(self, path: str, seen: os.stat_result) -> None:
        """Remove the damaged entry at ``path`` unless another process already replaced it."""
        if self._closed:
            return
        try:
            with self._locked():
                try:
                    current = os.stat(path)
                except FileNotFoundError:
                    return
                if (current.st_ino, current.st_dev) != (seen.st_ino, seen.st_dev):
                    return
                os.unlink(path)
                used, count = self._read_ledger()
                self._write_ledger(max(0, used - current.st_size), max(0, count - 1))
        except OSError:
            self._count(errors=1)

    def _invalidate(self, key: str) -> None:
        """Drop every entry of ``key`` (after a write or delete of it through this store)."""
        h = entry.object_hash(entry.identity(self.url, key))
        folder = os.path.join(self._objects, h[:2], h[2:])
        if self._closed or not os.path.isdir(folder):
            return
        try:
            with self._locked():
                used, count = self._read_ledger()
                dropped = 0
                with os.scandir(folder) as it:
                    for item in it:
                        size = item.stat(follow_symlinks=False).st_size
                        os.unlink(item.path)
                        used, count, dropped = used - size, count - 1, dropped + 1
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
                self._write_ledger(max(0, used), max(0, count))
                self._count(invalidated=dropped)
        except FileNotFoundError:
            pass
        except OSError:
            self._count(errors=1)

    # -- the lock, the ledger and scans -------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold this process's mutex and the cross-process ``flock`` of ``state``."""
        with self._mutex:
            if self._closed:
                raise OSError(errno.EBADF, "the cache is closed")
            if os.getpid() != self._pid:  # forked: flock locks belong to the open file
                self._fd = os.open(self._state_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                self._pid = os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _peek_ledger(self) -> tuple[int, int] | None:
        try:
            raw = os.pread(self._fd, _LEDGER.size, 0) if not self._closed else b""
        except OSError:
            return None
        if len(raw) != _LEDGER.size:
            return None
        used, count, crc = _LEDGER.unpack(raw)
        return (used, count) if zlib.crc32(raw[:16]) == crc else None

    def _read_ledger(self) -> tuple[int, int]:
        """The ledger (caller holds the lock); rebuilt by a scan when missing or damaged."""
        ledger = self._peek_ledger()
        if ledger is None:
            found, used = self._scan()
            ledger = (used, len(found))
            self._write_ledger(*ledger)
        return ledger

    def _write_ledger(self, used: int, count: int) -> None:
        head = struct.pack("<QQ", max(0, used), max(0, count))
        os.pwrite(self._fd, head + struct.pack("<I", zlib.crc32(head)), 0)

    def _scan(self) -> tuple[list[tuple[int, int, str]], int]:
        """Every entry as ``(mtime_ns, size, path)`` and their total size (caller holds the lock).

        Removes object directories that have no entries left.
        """
        found: list[tuple[int, int, str]] = []
        used = 0
        for top in _scandir(self._objects):
            for obj in _scandir(top.path):
                empty = True
                for item in _scandir(obj.path):
                    try:
                        st = item.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    found.append((st.st_mtime_ns, st.st_size, item.path))
                    used += st.st_size
                    empty = False
                if empty:
                    with contextlib.suppress(OSError):
                        os.rmdir(obj.path)
        return found, used

    def _clean_tmp(self) -> None:
        """Remove files in ``tmp/`` left by writers that crashed (older than the stale age).

        Age is by ctime (the kernel's clock), since mtime carries the injectable recency clock.
        """
        cutoff = time.time() - STALE_TMP_SECONDS
        for item in _scandir(self._tmp):
            with contextlib.suppress(OSError):
                if item.stat(follow_symlinks=False).st_ctime < cutoff:
                    os.unlink(item.path)


def _scandir(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return [e for e in it if e.is_dir(follow_symlinks=False) or e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []


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
