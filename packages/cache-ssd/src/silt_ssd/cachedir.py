"""The cache directory several processes share: its layout, its lock and ledger, and scans of it.

The layout is drawn in :mod:`silt_ssd.cache`; an entry file's format is :mod:`silt_ssd.entry`.
Readers take no lock. Every change to the set of entries happens under :meth:`CacheDir.locked`
(this process's mutex and an exclusive ``flock`` of ``state``), which also guards the ledger in
``state`` (bytes used, entries, a checksum), so limits are checked across processes without
scanning the disk. A ledger that is missing or fails its checksum is rebuilt by a scan.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator

from . import entry

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

#: Whether this system has ``fcntl.flock``, which the cache needs.
HAVE_FLOCK = fcntl is not None
#: Files in ``tmp/`` older than this are left over from a crashed writer and are removed.
STALE_TMP_SECONDS = 600.0

_LEDGER = struct.Struct("<QQI")  # bytes used, entries, crc32 of the first 16 bytes


class CacheDir:
    """The cache's files under ``cache_dir`` (an absolute path), set up when made.

    Raises ``OSError`` when they cannot be set up. Every method that takes the lock raises
    ``OSError`` (``EBADF``) once :meth:`close` was called; usable after ``os.fork`` (the child
    reopens the lock file, since ``flock`` locks belong to the open file).
    """

    def __init__(self, cache_dir: str) -> None:
        self.root = os.path.join(cache_dir, f"silt-ssd-v{entry.LAYOUT_VERSION}")
        self.objects = os.path.join(self.root, "objects")
        self.tmp = os.path.join(self.root, "tmp")
        self._state_path = os.path.join(self.root, "state")
        self._pid = os.getpid()
        self._mutex = threading.Lock()
        self.closed = False
        self._fd = -1
        try:
            os.makedirs(self.objects, exist_ok=True)
            os.makedirs(self.tmp, exist_ok=True)
            self._fd = os.open(self._state_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            with self.locked():
                self.read_ledger()
                self.clean_tmp()
        except OSError:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self.closed = True
            raise

    def close(self) -> None:
        """Close the lock file (entries stay on disk); later locking raises ``OSError``."""
        with self._mutex:
            if not self.closed:
                self.closed = True
                with contextlib.suppress(OSError):
                    os.close(self._fd)

    # -- where entries live -------------------------------------------------------------------
    def folder(self, ident: bytes) -> str:
        """The directory of the entries of the object ``ident`` (see :func:`entry.identity`)."""
        h = entry.object_hash(ident)
        return os.path.join(self.objects, h[:2], h[2:])

    def path(self, ident: bytes, start: int, length: int) -> str:
        """The entry file of the range ``(start, length)`` of the object ``ident``."""
        return os.path.join(self.folder(ident), entry.file_name(start, length))

    # -- the lock and the ledger --------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold this process's mutex and the cross-process ``flock`` of ``state``."""
        with self._mutex:
            if self.closed:
                raise OSError(errno.EBADF, "the cache is closed")
            if os.getpid() != self._pid:  # forked: flock locks belong to the open file
                self._fd = os.open(self._state_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                self._pid = os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def peek_ledger(self) -> tuple[int, int] | None:
        """``(bytes used, entries)`` without the lock; ``None`` when unreadable or damaged."""
        try:
            raw = os.pread(self._fd, _LEDGER.size, 0) if not self.closed else b""
        except OSError:
            return None
        if len(raw) != _LEDGER.size:
            return None
        used, count, crc = _LEDGER.unpack(raw)
        return (used, count) if zlib.crc32(raw[:16]) == crc else None

    def read_ledger(self) -> tuple[int, int]:
        """The ledger (caller holds the lock); rebuilt by a scan when missing or damaged."""
        ledger = self.peek_ledger()
        if ledger is None:
            found, used = self.scan()
            ledger = (used, len(found))
            self.write_ledger(*ledger)
        return ledger

    def write_ledger(self, used: int, count: int) -> None:
        """Store ``(used, count)`` as the ledger, negatives as 0 (caller holds the lock)."""
        head = struct.pack("<QQ", max(0, used), max(0, count))
        os.pwrite(self._fd, head + struct.pack("<I", zlib.crc32(head)), 0)

    # -- scans --------------------------------------------------------------------------------
    def scan(self) -> tuple[list[tuple[int, int, str]], int]:
        """Every entry as ``(mtime_ns, size, path)`` and their total size (caller holds the lock).

        Removes object directories that have no entries left.
        """
        found: list[tuple[int, int, str]] = []
        used = 0
        for top in _scandir(self.objects):
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

    def clean_tmp(self) -> None:
        """Remove files in ``tmp/`` left by writers that crashed (older than the stale age).

        Age is by ctime (the kernel's clock), since mtime carries the injectable recency clock.
        """
        cutoff = time.time() - STALE_TMP_SECONDS
        for item in _scandir(self.tmp):
            with contextlib.suppress(OSError):
                if item.stat(follow_symlinks=False).st_ctime < cutoff:
                    os.unlink(item.path)

    # -- dropping entries ---------------------------------------------------------------------
    def drop_if_unchanged(self, path: str, seen: os.stat_result) -> None:
        """Remove the entry at ``path`` unless another process already replaced it (the file
        is no longer the one ``seen``), and take it off the ledger. Raises ``OSError``."""
        with self.locked():
            try:
                current = os.stat(path)
            except FileNotFoundError:
                return
            if (current.st_ino, current.st_dev) != (seen.st_ino, seen.st_dev):
                return
            os.unlink(path)
            used, count = self.read_ledger()
            self.write_ledger(max(0, used - current.st_size), max(0, count - 1))

    def drop_object(self, folder: str) -> int:
        """Remove every entry in the object directory ``folder``, and the directory; returns
        how many. Raises ``OSError`` (``FileNotFoundError`` when the directory went away)."""
        with self.locked():
            used, count = self.read_ledger()
            dropped = 0
            with os.scandir(folder) as it:
                for item in it:
                    size = item.stat(follow_symlinks=False).st_size
                    os.unlink(item.path)
                    used, count, dropped = used - size, count - 1, dropped + 1
            with contextlib.suppress(OSError):
                os.rmdir(folder)
            self.write_ledger(max(0, used), max(0, count))
        return dropped


def _scandir(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return [e for e in it if e.is_dir(follow_symlinks=False) or e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []


__all__ = ["HAVE_FLOCK", "STALE_TMP_SECONDS", "CacheDir"]
