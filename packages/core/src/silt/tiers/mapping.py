"""Read-only memory maps of the ``file://`` tier's immutable objects (SSTs).

A block read through a map is a copy out of the page cache without a system call to read it
(measured on 5M keys: 3.3 us for a ``pread`` of 8 KiB into a new buffer and its checksum,
against 1.3 us for a slice of a map and its checksum; the size check and copy that make a map
safe against damage, :func:`read_map`, add about 1.2 us). LevelDB reads its tables the same
way.

:func:`map_file` maps a whole file and returns a read-only ``memoryview`` of it. The map holds
no descriptor (``mmap(2)`` keeps the file, not the descriptor) and is unmapped when the last
view of it (the whole-file view, or any slice a cached block keeps) is gone, so its life is
bounded by what refers to it, not by the descriptor cache.

What a map promises, and why it is safe here:

* **Immutable objects only.** silt never writes an object in place: a ``put`` writes a
  temporary file and renames it over the name, deletes unlink. A map keeps the inode it was
  made from, so it reads that object's own bytes after a rename or delete, as a kept descriptor
  does (:mod:`silt.tiers.fdcache`).
* **Damage: a file shrunk in place** by something outside silt. Touching a page of a map that
  the file no longer has raises ``SIGBUS``, which kills the process with no message. So a map is
  read only through :func:`read_map`, which checks the file's size first and copies what it
  reads (nothing kept refers to the map): a read past the file's current end never touches the
  map, and is reported as corruption like a short ``pread``. Its docstring gives the cost and
  the one window left, and why ``SILT_FILE_MMAP=0`` (reads with ``pread``) closes it.
* **Disk space of deleted objects** stays allocated while a map of them lives: the map is kept
  with the object's cached descriptor and goes when the last read using it ends after the
  descriptor cache dropped it.
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
    # A type of its own per map, marked ``stable_buffer`` (silt._speedups.decode_block would
    # keep the array instead of a slice). Its bytes can still go (a file shrunk by damage), so
    # reads copy out of it (read_map) and no block is ever decoded over it.
    mapped = type("MappedFile", (ctypes.c_char * size,), {"stable_buffer": True})
    array = mapped.from_address(addr)
    # Unmapped when the array goes: every view and slice of it refers to the array. Not at
    # interpreter exit (the process's end unmaps it), where a thread still reading would
    # otherwise touch unmapped memory.
    weakref.finalize(array, libc.munmap, addr, size).atexit = False
    return memoryview(array).cast("B").toreadonly()


def read_map(view: memoryview, fd: int, start: int, length: int) -> bytes | None:
    """A copy of up to ``length`` bytes of ``view`` (a :func:`map_file` map of the file open
    as ``fd``) from ``start`` (``b""`` past its end), or ``None`` when the file is now shorter
    than those bytes: then the map is not touched, and the caller reads the file with
    ``pread`` (which returns what is left, so the SST reader reports the damage as
    :class:`~silt.errors.CorruptionError`) and should not use the map again.

    The file's size is checked (``fstat``) at every read, right before the copy, and what is
    returned is a copy, so nothing a caller keeps (a cached block, an SST tail) refers to the
    map: a later read of kept bytes never touches it. Cost: an ``fstat`` and a copy of the
    block, about 1.2 us per block-cache miss of 10 KiB (a miss was 2.7 us with a bare slice;
    a ``pread`` costs 4.3 us: measured in the same run).

    The window that remains: a file truncated by another process *between* the ``fstat`` and
    the end of the copy (well under a microsecond for a block) still raises ``SIGBUS`` there.
    No check can close it (the kernel can take the pages away after any check), only a
    ``SIGBUS`` handler that jumps out of the copy, which Python cannot install (a Python signal
    handler runs after the faulting instruction, which faults again; ``faulthandler`` only
    prints the stack of a process that then dies). It is accepted because silt never
    truncates or rewrites an object (a ``put`` renames a new file over the name, which a map
    survives), so it takes damage from outside silt landing within that microsecond; where
    that must be ruled out too, ``SILT_FILE_MMAP=0`` reads every block with ``pread``, which
    has no window.
    """
    end = min(start + length, len(view))
    if start < end and os.fstat(fd).st_size < end:
        return None
    return bytes(view[start:end])


__all__ = ["ENABLED", "map_file", "read_map"]
