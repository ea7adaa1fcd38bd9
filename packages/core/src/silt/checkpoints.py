"""Checkpoint objects: ``checkpoint/<name>`` pins one version against GC.

WARNING: on-disk format (docs/format.md). Created once with ``put_if_absent`` by
:meth:`silt.DB.checkpoint`, read by GC (:func:`silt.gc.read_checkpoints`) and ``silt verify``.
Format 2 is framed like manifests (:mod:`silt.framing`)::

    magic "SILTCKP1" | crc32 u32 of the rest | format_version u32 = 2 | JSON body

with the body ``{"created_ms": ..., "token": "...", "version": ...}``, so a changed digit can
never silently re-point a checkpoint. Format 1, written by silt before checkpoints were
checksummed, is the bare JSON body; it is still read (a root's existing checkpoints keep
pinning their versions) but carries no checksum, so ``silt verify`` says so: re-create such a
checkpoint (delete the object, then ``silt checkpoint``) to protect it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CorruptionError
from .framing import FRAME_HEAD, decode_framed, encode_framed, parse_json_object
from .paths import MAX_VERSION

CHECKPOINT_MAGIC = b"SILTCKP1"
#: Only grows. 1: bare JSON (no checksum; read, never written); 2: framed and checksummed.
CHECKPOINT_FORMAT_VERSION = 2
READABLE_CHECKPOINT_FORMATS = frozenset({2})


@dataclass(frozen=True)
class Checkpoint:
    """One decoded checkpoint object.

    ``version`` is the pinned version; ``created_ms`` is informational; ``token`` (random, may
    be empty in format 1) lets the creator recognise its own object after a lost response;
    ``format_version`` is 1 for an old, unchecksummed object.
    """

    version: int
    created_ms: int = 0
    token: str = ""
    format_version: int = CHECKPOINT_FORMAT_VERSION

    @property
    def checksummed(self) -> bool:
        return self.format_version >= 2


def encode_checkpoint(version: int, created_ms: int, token: str) -> bytes:
    """The bytes of a new checkpoint object pinning ``version`` (always the newest format)."""
    if type(version) is not int or not 0 <= version <= MAX_VERSION:
        raise ValueError(f"a checkpoint pins a version in [0, {MAX_VERSION}], got {version!r}")
    return encode_framed(CHECKPOINT_MAGIC, CHECKPOINT_FORMAT_VERSION,
                         {"version": version, "created_ms": created_ms, "token": token})


def decode_checkpoint(data: bytes, key: str) -> Checkpoint:
    """Parse and check the checkpoint object ``key``.

    Raises :class:`CorruptionError` naming ``key`` for anything that is not a well-formed
    checkpoint (damaged bytes, another kind of object, a version out of range), and nothing
    else whatever the bytes.
    """
    if bytes(data[:1]) == b"{":  # format 1: the bare JSON body, from before checksums
        fmt, body, offset = 1, parse_json_object(bytes(data), key, 0, "checkpoint"), 0
    else:
        fmt, body = decode_framed(data, key, magic=CHECKPOINT_MAGIC,
                                  formats=READABLE_CHECKPOINT_FORMATS, what="checkpoint")
        offset = FRAME_HEAD.size
    version = body.get("version")
    if type(version) is not int or not 0 <= version <= MAX_VERSION:
        raise CorruptionError(key, offset, f"checkpoint version {version!r:.40} is not a version "
                              f"number in [0, {MAX_VERSION}]")
    created_ms = body.get("created_ms", 0)
    token = body.get("token", "")
    if type(created_ms) is not int or not 0 <= created_ms < 1 << 48 or not isinstance(token, str):
        raise CorruptionError(key, offset, "checkpoint fields 'created_ms' or 'token' have the "
                              "wrong type")
    return Checkpoint(version=version, created_ms=created_ms, token=token, format_version=fmt)
