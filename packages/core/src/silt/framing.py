"""Checksummed JSON objects: the one framing of silt's metadata objects. WARNING: on-disk format.

Manifests (``manifest/``), compaction records (``compaction/``) and checkpoints
(``checkpoint/``) are all stored as (docs/format.md)::

    magic (8 bytes) | crc32 u32 of everything after it | format_version u32 | UTF-8 JSON body

The magic names the kind of object, so one kind can never be mistaken for another; the CRC-32
(zlib's polynomial) covers the format version and every byte of the body, so any damaged byte
is a :class:`~silt.errors.CorruptionError` naming the object, never a silently different value.
:func:`decode_framed` checks the frame and parses the JSON; the caller checks the fields (and
turns ``ValueError``/``KeyError``/``TypeError`` from that into ``CorruptionError`` as well).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Collection
from typing import Any

from . import boundedjson
from .errors import CorruptionError

#: Magic, CRC-32 of the rest, format version. WARNING: on-disk format.
FRAME_HEAD = struct.Struct("<8sII")
#: Limits checked before a body is parsed. Every framed object nests at most 5 deep (a
#: manifest: body, ``levels``, a level, an SST entry, its ``clip``); a manifest of 256 MiB
#: would list about a million SSTs.
MAX_BODY_BYTES = 256 * 1024 * 1024
MAX_BODY_DEPTH = 16


def encode_framed(magic: bytes, format_version: int, body: dict[str, Any]) -> bytes:
    """``body`` as compact JSON with sorted keys, framed with ``magic`` and its checksum."""
    if len(magic) != 8:
        raise ValueError("a frame magic is exactly 8 bytes")
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    rest = struct.pack("<I", format_version) + text
    return magic + struct.pack("<I", zlib.crc32(rest)) + rest


def decode_framed(data: bytes, object_name: str, *, magic: bytes, formats: Collection[int],
                  what: str) -> tuple[int, dict[str, Any]]:
    """Check the frame of ``data`` and parse its body: ``(format_version, JSON object)``.

    Raises :class:`CorruptionError` naming ``object_name`` when the object is truncated, has
    another magic, fails its checksum, has a format outside ``formats`` (``what`` names the kind
    of object in messages, e.g. ``"manifest"``), or its body is not a JSON object. Never raises
    anything else, whatever the bytes.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CorruptionError(object_name, 0, f"{what} is not bytes")
    if len(data) < FRAME_HEAD.size:
        raise CorruptionError(object_name, 0, f"{what} of {len(data)} bytes is truncated")
    found, crc, fmt = FRAME_HEAD.unpack_from(data, 0)
    if found != magic:
        raise CorruptionError(object_name, 0, f"bad magic: not a silt {what}")
    if zlib.crc32(memoryview(data)[12:]) != crc:
        raise CorruptionError(object_name, 12, f"{what} checksum mismatch")
    if fmt not in formats:
        raise CorruptionError(
            object_name, 12, f"{what} format {fmt} is not readable by this silt "
            f"(reads {sorted(formats)}); upgrade silt-core"
        )
    return fmt, parse_json_object(bytes(data[FRAME_HEAD.size:]), object_name, FRAME_HEAD.size,
                                  what)


def parse_json_object(text: bytes, object_name: str, offset: int, what: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object, or :class:`CorruptionError` (at ``offset``).

    Covers every way JSON parsing can fail on hostile bytes: invalid UTF-8 or JSON, a body over
    ``MAX_BODY_BYTES`` or nested deeper than ``MAX_BODY_DEPTH`` (both refused before parsing, see
    :mod:`silt.boundedjson`), numbers too long to convert.
    """
    try:
        body = boundedjson.loads(text, max_bytes=MAX_BODY_BYTES, max_depth=MAX_BODY_DEPTH)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError, UnicodeDecodeError and over-long integers.
        raise CorruptionError(object_name, offset, f"{what} body is not valid JSON "
                              f"({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(body, dict):
        raise CorruptionError(object_name, offset, f"{what} body is not a JSON object")
    return body
