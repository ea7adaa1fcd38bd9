"""Read-only memory maps of the ``file://`` tier's immutable objects (SSTs).

A block read through a map is a slice of the page cache: no ``pread`` copies it into freshly
allocated memory, which is most of what a block-cache miss costs once the state is larger than
the cache (measured on 5M keys: 3.3 us for a ``pread`` of 8 KiB into a new buffer and its
checksum, against 1.3 us for a slice of a map and its checksum). LevelDB reads its tables the
same way.

:func:`map_file` maps a whole file and returns a read-only ``memoryview`` of it. The map holds
no descriptor (``mmap(2)`` keeps the file, not the descriptor) and is unmapped when the last
view of it (the whole-file view, or any slice a cached block keeps) is gone, so its life is
bounded by what refers to it, not by the descriptor cache.

What a map promises, and why it is safe here:

* **Immutable objects only.** silt never writes an object in place: a ``put`` writes a
  temporary file and renames it over the name, deletes unlink. A map keeps the inode it was
  made from, so it reads that object's own bytes after a rename or delete, as a kept descriptor
  does (:mod:`silt.tiers.fdcache`). A file **truncated in place** by something outside silt
  while mapped would make a read of the lost pages fail with ``SIGBUS``, which stops the
  process; that is why maps are made only of objects silt wrote and never modifies, and why
  ``SILT_FILE_MMAP=0`` turns them off (reads then use ``pread``).
* **Disk space of deleted objects** stays allocated while a map of them lives: until every
  cached block read from the object has left the block cache (the descriptor cache's sweep
  closes descriptors, not maps).
* Where ``mmap`` is missing or fails (Windows, a file system that cannot map, an empty file),
  :func:`map_file` returns ``None`` and the caller reads with ``pread``.

Thread safety: every function may be called from any thread.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref

_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")


def _switch(value: str) -> bool:
    """``SILT_FILE_MMAP``'s value read as on or off; anything else is refused (a setting
    silently read the wrong way would leave maps on where they were meant to be off)."""
    v = value.strip().lower()
    if v in _OFF:
        return False
    if v in _ON:
        return True
    raise ValueError(
        f"SILT_FILE_MMAP={value!r} is not understood: set SILT_FILE_MMAP=0 to read SST files "
        "with pread instead of memory maps, or 1 (the default) to map them"
    )


#: Whether objects are mapped at all (``SILT_FILE_MMAP=0`` in the environment turns it off).
ENABLED = _switch(os.environ.get("SILT_FILE_MMAP", "1")) and hasattr(mmap, "PROT_READ")


def _libc() -> ctypes.CDLL | None:
    """libc's ``mmap`` and ``munmap``, typed, or ``None`` where they cannot be loaded."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_int64]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):  # pragma: no cover - no libc with mmap (Windows)
        return None
    return libc


_LIBC = _libc() if ENABLED else None
_MAP_FAILED = ctypes.c_void_p(-1).value


def map_file(fd: int) -> memoryview | None:
    """A read-only view of the whole file open as ``fd`` (its size now), mapped shared and
    read-only; ``None`` when mapping is off, unsupported or fails, or the file is empty. The
    descriptor may be closed afterwards: the map stays until the view and all its slices are
    gone."""
    libc = _LIBC
    if libc is None:
        return None
    try:
        size = os.fstat(fd).st_size
    except OSError:
        return None
    if size <= 0:
        return None
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        return None
    # A type of its own per map, marked ``stable_buffer``: its bytes never move or change while
    # it lives, so a block decoded from a slice may keep the array instead of the slice
    # (silt._speedups.decode_block: one object per file rather than one per cached block).
    mapped = type("MappedFile", (ctypes.c_char * size,), {"stable_buffer": True})
    array = mapped.from_address(addr)
    # Unmapped when the array goes: every view and slice of it refers to the array. Not at
    # interpreter exit (the process's end unmaps it), where a thread still reading would
    # otherwise touch unmapped memory.
    weakref.finalize(array, libc.munmap, addr, size).atexit = False
    return memoryview(array).cast("B").toreadonly()


__all__ = ["ENABLED", "map_file"]
