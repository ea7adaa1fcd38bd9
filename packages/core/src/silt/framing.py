"""Checksummed JSON objects: the one framing of silt's metadata objects. WARNING: on-disk format.

Manifests (``manifest/``), compaction records (``compaction/``) and checkpoints
(``checkpoint/``) are all stored as (docs/format.md)::

    magic (8 bytes) | crc32 u32 of everything after it | format_version u32 | UTF-8 JSON body

The magic names the kind of object, so one kind can never be mistaken for another; the CRC-32
(zlib's polynomial, :mod:`silt.checksum`) covers the format version and every byte of the body,
so any damaged byte is a :class:`~silt.errors.CorruptionError` naming the object, never a
silently different value.

A format may carry a binary **appendix** after its JSON (manifest format 5: the bytes of inline
SSTs); the body's length then comes first, and the CRC covers the appendix too::

    magic | crc32 u32 | format_version u32 | body_length u32 | UTF-8 JSON body | appendix
:func:`decode_framed` checks the frame and parses the JSON; the caller checks the fields (and
turns ``ValueError``/``KeyError``/``TypeError`` from that into ``CorruptionError`` as well).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Collection
from typing import Any

from . import boundedjson
from .checksum import crc32
from .errors import CorruptionError

#: Magic, CRC-32 of the rest, format version. WARNING: on-disk format.
FRAME_HEAD = struct.Struct("<8sII")
#: The body length of a frame with an appendix. WARNING: on-disk format.
BODY_LENGTH = struct.Struct("<I")
#: Limits checked before a body is parsed. Every framed object nests at most 5 deep (a
#: manifest: body, ``levels``, a level, an SST entry, its ``clip``); a manifest of 256 MiB
#: would list about a million SSTs.
MAX_BODY_BYTES = 256 * 1024 * 1024
MAX_BODY_DEPTH = 16


def encode_framed(magic: bytes, format_version: int, body: dict[str, Any],
                  appendix: bytes | None = None) -> bytes:
    """``body`` as compact JSON with sorted keys, framed with ``magic`` and its checksum; with
    an ``appendix``, the body's length first and the appendix after it."""
    if len(magic) != 8:
        raise ValueError("a frame magic is exactly 8 bytes")
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    if appendix is None:
        rest = struct.pack("<I", format_version) + text
    else:
        rest = b"".join((struct.pack("<I", format_version), BODY_LENGTH.pack(len(text)), text,
                         appendix))
    return magic + struct.pack("<I", crc32(rest)) + rest


def decode_framed(data: bytes, object_name: str, *, magic: bytes, formats: Collection[int],
                  what: str) -> tuple[int, dict[str, Any]]:
    """:func:`decode_framed_appendix` for formats with no appendix."""
    fmt, body, _ = decode_framed_appendix(data, object_name, magic=magic, formats=formats,
                                          what=what)
    return fmt, body


def decode_framed_appendix(
    data: bytes, object_name: str, *, magic: bytes, formats: Collection[int], what: str,
    appendix_formats: Collection[int] = (),
) -> tuple[int, dict[str, Any], bytes]:
    """Check the frame of ``data`` and parse its body: ``(format_version, JSON object)``.

    Raises :class:`CorruptionError` naming ``object_name`` when the object is truncated, has
    another magic, fails its checksum, has a format outside ``formats`` (``what`` names the kind
    of object in messages, e.g. ``"manifest"``), or its body is not a JSON object. Never raises
    anything else, whatever the bytes. Formats in ``appendix_formats`` carry an appendix
    (returned third; ``b""`` for the others).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CorruptionError(object_name, 0, f"{what} is not bytes")
    if len(data) < FRAME_HEAD.size:
        raise CorruptionError(object_name, 0, f"{what} of {len(data)} bytes is truncated")
    found, crc, fmt = FRAME_HEAD.unpack_from(data, 0)
    if found != magic:
        raise CorruptionError(object_name, 0, f"bad magic: not a silt {what}")
    if crc32(memoryview(data)[12:]) != crc:
        raise CorruptionError(object_name, 12, f"{what} checksum mismatch")
    if fmt not in formats:
        raise CorruptionError(
            object_name, 12, f"{what} format {fmt} is not readable by this silt "
            f"(reads {sorted(formats)}); upgrade silt-core"
        )
    if fmt not in appendix_formats:
        return fmt, parse_json_object(bytes(data[FRAME_HEAD.size:]), object_name,
                                      FRAME_HEAD.size, what), b""
    start = FRAME_HEAD.size + BODY_LENGTH.size
    if len(data) < start:
        raise CorruptionError(object_name, FRAME_HEAD.size, f"{what} of {len(data)} bytes "
                              "is truncated")
    length = BODY_LENGTH.unpack_from(data, FRAME_HEAD.size)[0]
    if start + length > len(data):
        raise CorruptionError(object_name, FRAME_HEAD.size, f"{what} body length {length} "
                              f"passes the end of the object ({len(data)} bytes)")
    body = parse_json_object(bytes(data[start:start + length]), object_name, start, what)
    return fmt, body, bytes(data[start + length:])


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
