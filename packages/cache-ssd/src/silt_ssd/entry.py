"""One cache entry on disk: a self-describing, checksummed file. WARNING: on-disk format.

Changing this layout makes existing cache directories unreadable; bump :data:`LAYOUT_VERSION`
(which names the directory the cache lives in, so an old layout is simply never looked at).

An entry file holds the bytes of one ``get_range(key, start, length)`` (or one whole ``get``,
``length == WHOLE``) of the object ``key`` of the store ``url``::

    magic      8 bytes  b"SILTSSD1"
    crc32      u32      of every byte after this field (rest of header, identity, data)
    start      u64      as requested
    length     i64      as requested; -1 (WHOLE) for a whole-object get
    data_len   u64      bytes of data (fewer than length when the object ends first)
    ident_len  u16      bytes of identity
    identity   utf-8    "<store url>\\0<object key>"
    data

All integers are little-endian. The identity makes a hash collision of file names harmless (the
entry would not match and is treated as damaged); the checksum makes a torn or damaged file
harmless (it is dropped and refetched, never returned).
"""

from __future__ import annotations

import hashlib
import struct

from silt.checksum import crc32

LAYOUT_VERSION = 1
MAGIC = b"SILTSSD1"
HEADER = struct.Struct("<8sIQqQH")
HEADER_SIZE = HEADER.size  # 38
WHOLE = -1


class DamagedEntry(Exception):
    """An entry file failed its checks (internal: the cache drops it and refetches)."""


def identity(url: str, key: str) -> bytes:
    return f"{url}\0{key}".encode()


def object_hash(ident: bytes) -> str:
    """32 hex digits naming the directory of one object's entries."""
    return hashlib.blake2b(ident, digest_size=16).hexdigest()


def file_name(start: int, length: int) -> str:
    return "all" if length == WHOLE else f"{start}+{length}"


def encode(ident: bytes, start: int, length: int, data: bytes) -> list[bytes]:
    """The entry's bytes as chunks (header, identity, data) for a gathered write."""
    rest = struct.pack("<QqQH", start, length, len(data), len(ident))
    crc = crc32(data, crc32(ident, crc32(rest)))
    return [MAGIC + struct.pack("<I", crc) + rest, ident, data]


def entry_size(ident: bytes, data: bytes) -> int:
    return HEADER_SIZE + len(ident) + len(data)


def decode(buf: bytes, ident: bytes, start: int, length: int) -> bytes:
    """The data of an entry file's bytes ``buf``, checked; raises :class:`DamagedEntry`."""
    if len(buf) < HEADER_SIZE:
        raise DamagedEntry(f"{len(buf)} bytes is shorter than an entry header")
    magic, crc, e_start, e_length, data_len, ident_len = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise DamagedEntry("bad magic")
    if HEADER_SIZE + ident_len + data_len != len(buf):
        raise DamagedEntry(f"size {len(buf)} does not match the header")
    view = memoryview(buf)
    if crc32(view[12:]) != crc:
        raise DamagedEntry("checksum mismatch")
    if (e_start, e_length) != (start, length) or view[HEADER_SIZE:HEADER_SIZE + ident_len] != ident:
        raise DamagedEntry("entry belongs to another object or range")
    return bytes(view[HEADER_SIZE + ident_len:])
