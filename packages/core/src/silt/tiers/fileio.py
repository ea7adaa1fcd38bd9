"""The ``file://`` tier's low-level file operations: complete positional reads and durable
directory entries.

:func:`read_fully` returns every byte asked for up to the end of the file, however short the
reads of a signal-interrupted call or a network file system; :func:`fsync_dir` makes the names
in a directory durable where the platform can (skipped on Windows and where the file system
refuses, see :data:`~silt.tiers.oserrors.NO_DIR_FSYNC_ERRNOS`); :func:`unlink_quietly` removes a
temporary file whose removal may fail harmlessly. Thread-safe: each call works on its own
descriptor or name.
"""

from __future__ import annotations

import os

from .oserrors import NO_DIR_FSYNC_ERRNOS

#: Flags of ranged reads: read-only, binary (Windows), closed on exec.
O_RDONLY = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


def _pread(fd: int, length: int, start: int) -> bytes:
    """``os.pread`` where it exists (POSIX), else seek and read (Windows)."""
    if _HAS_PREAD:
        return os.pread(fd, length, start)
    os.lseek(fd, start, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, length)  # pragma: no cover


_HAS_PREAD = hasattr(os, "pread")


def read_fully(fd: int, start: int, length: int) -> bytes:
    """``length`` bytes from ``start`` of ``fd``, fewer only at the end of the file."""
    data = _pread(fd, length, start)
    got = len(data)
    if got < length and got:  # a short read (signal, network file system): go on
        parts = [data]
        while got < length:
            more = _pread(fd, length - got, start + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        data = b"".join(parts)
    return data


def fsync_dir(path: str) -> None:
    """fsync a directory so the names in it are durable (where the platform supports it)."""
    if os.name == "nt":  # pragma: no cover - directories cannot be opened on Windows
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in NO_DIR_FSYNC_ERRNOS:
            raise
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> None:
    """Remove ``path``, ignoring any error (a stale temporary file is harmless)."""
    try:
        os.unlink(path)
    except OSError:
        pass
