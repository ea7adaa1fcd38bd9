"""Admitting entries into the cache directory, evicting the least recently used to make room.

An entry is written to ``tmp/`` and published with ``os.replace``, so a name either does not exist
or names a complete file. Both limits are honoured at every admission: ``size_limit`` (sum of
entry file sizes, as the ledger counts them) and the ``reserve`` of free space (``statvfs``). An
admission that would break either first evicts, least-recently-used by file mtime: the eviction
pass scans the tree (under the lock), corrects the ledger from what it finds and evicts the oldest
entries until usage is :data:`EVICT_SLACK` of the limit *below* it, so a full cache pays for one
scan per ~10% of turnover rather than one per miss. Entries larger than the whole budget are not
admitted. The ledger is raised *before* an entry is published: a crash can only over-count.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from typing import Any

from . import entry
from .cachedir import CacheDir
from .counters import Counters
from .options import Reserve

#: After an eviction pass, usage is this fraction of the size limit below the limit.
EVICT_SLACK = 0.1

DiskUsage = Callable[[str], Any]  # shutil.disk_usage-shaped: .total, .free

#: What :meth:`Admission.admit` writes: (object identity, start, length, data).
Item = tuple[bytes, int, int, bytes]


def _write_all(fd: int, chunks: list[bytes]) -> None:
    """Write every chunk to ``fd`` (a module function so crash tests can stall a writer)."""
    data = b"".join(chunks)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Admission:
    """Writes entries into ``cachedir`` within ``size_limit`` and ``reserve``, counting into
    ``counters``; ``clock`` (nanoseconds) stamps a new entry's recency, ``disk_usage`` measures
    the file system. Never raises: a disk error is counted and the entry left out."""

    def __init__(self, cachedir: CacheDir, counters: Counters, clock: Callable[[], int], *,
                 size_limit: int, reserve: Reserve, disk_usage: DiskUsage) -> None:
        self._dir = cachedir
        self._counters = counters
        self._clock = clock
        self._size_limit = size_limit
        self._reserve = reserve
        self._disk_usage = disk_usage

    def admit(self, items: list[Item], *, write_through: bool) -> None:
        """Write ``items`` as entries (write-through ones only where none is cached yet)."""
        if self._dir.closed:
            return
        staged: list[tuple[str, str, int]] = []
        for ident, start, length, data in items:
            path = self._dir.path(ident, start, length)
            size = entry.entry_size(ident, data)
            if size > self._size_limit:
                self._counters.add(rejected=1)
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
            with self._dir.locked():
                used, count = self._dir.read_ledger()
                for tmp, path, size in staged:
                    done += 1
                    if os.path.exists(path):  # another thread or process cached it meanwhile
                        os.unlink(tmp)
                        continue
                    fits, used, count = self._make_room(used, count, size)
                    if not fits:
                        os.unlink(tmp)
                        self._counters.add(rejected=1)
                        continue
                    # Count first, publish second: a crash in between over-counts, never under.
                    self._dir.write_ledger(used + size, count + 1)
                    try:
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        os.replace(tmp, path)
                    except OSError:
                        self._dir.write_ledger(used, count)
                        raise
                    used, count = used + size, count + 1
                    self._counters.add(admitted=1, admitted_bytes=size,
                                       write_through=1 if write_through else 0)
        except OSError:
            self._counters.add(errors=1)
        finally:
            for tmp, _path, _size in staged[max(0, done - 1):]:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def _write_tmp(self, chunks: list[bytes]) -> str | None:
        tmp = os.path.join(self._dir.tmp, f"{os.getpid()}-{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                _write_all(fd, chunks)
                now = self._clock()  # recency at full clock resolution, not the kernel's tick
                os.utime(fd, ns=(now, now))
            finally:
                os.close(fd)
        except OSError:
            self._counters.add(errors=1)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return None
        return tmp

    def _make_room(self, used: int, count: int, size: int) -> tuple[bool, int, int]:
        """Evict until an entry of ``size`` fits both limits (caller holds the lock).

        Returns ``(fits, used, count)`` with the ledger values after any eviction.
        """
        limit = self._size_limit
        root = self._dir.root
        usage = self._disk_usage(root)
        reserve = self._reserve.resolve(usage.total)
        free = usage.free  # the staged entry is already on disk, so it is already subtracted
        if used + size <= limit and free >= reserve:
            return True, used, count
        slack = int(limit * EVICT_SLACK)
        found, used = self._dir.scan()  # exact usage: corrects any drift of the ledger
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
                free = self._disk_usage(root).free
        self._dir.write_ledger(used, count)
        self._counters.add(evictions=evicted, evicted_bytes=evicted_bytes)
        self._dir.clean_tmp()
        return used + size <= limit and free >= reserve, used, count


__all__ = ["EVICT_SLACK", "Admission", "DiskUsage", "Item"]
