"""Manifests: the record of one committed version. WARNING: on-disk format (docs/format.md).

Object ``manifest/<version:020d>``, created with ``put_if_absent``, framed by
:mod:`silt.framing`::

    magic "SILTMNF1" (8 bytes) | crc32 u32 of everything after it | format_version u32 | JSON body

The JSON body holds the version, its parent, the writer id, a token unique to the commit attempt,
the creation time, the SSTs (L0 newest first, then levels of sorted runs, each with key range and
size), the range tombstones with their sequence counter (format 4, :mod:`silt.rangedel`) and
an opaque ``meta`` map of strings for the layer above (Spark query id, watermarks).

Format 5 adds **inline** SSTs: small deltas a commit did not upload (:mod:`silt.inline`). Their
entries (``"inline": true``) are the head of L0, and the manifest carries their bytes in a binary
appendix after the JSON body (:mod:`silt.framing`), in the order the entries are listed, each as
long as its entry's ``size``; the frame's CRC covers it::

    magic | crc32 | format_version 5 | body_length u32 | JSON body | inline SST bytes...
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import paths
from .errors import CorruptionError, InvalidArgumentError, InvalidTypeError
from .framing import FRAME_HEAD as _HEAD
from .framing import decode_framed_appendix, encode_framed
from .rangedel import EMPTY, RangeTombstones, check_seq
from .sst.builder import SstInfo

MANIFEST_MAGIC = b"SILTMNF1"
#: Only grows; readers accept every version in READABLE_MANIFEST_FORMATS. Format 2 adds
#: references to sibling DBs' SSTs (``db`` and ``clip`` fields of an SST entry); a manifest
#: without references is still written as format 1, so older readers keep reading it, and a
#: reader that predates references refuses a manifest that has them instead of misreading it.
#: Format 3 adds ``skip_to`` (a version that reserves the numbers up to a later one, written when
#: a commit skips version numbers): written only by such manifests, so that a reader or writer
#: that predates it refuses it instead of committing inside the reserved numbers.
#: Format 4 adds range tombstones: ``seq`` (the counter of range deletes), ``range_tombstones``
#: (fragments ``[start_hex, end_hex, seq]``) and a ``seq`` field per SST entry; written only by
#: a manifest whose counter is not 0, so a reader that predates range deletes refuses it instead
#: of reading deleted keys.
#: Format 5 adds inline SSTs (entries with ``"inline": true`` at the head of L0, their bytes in
#: an appendix after the JSON body): written only by a manifest that has one, so a reader that
#: predates them refuses it instead of looking for objects that were never uploaded.
#: ``gc_grace_ms`` (the writer's Settings.gc_grace_seconds, which GC may not undercut) is an
#: optional field any format may carry; older readers ignore it.
MANIFEST_FORMAT_VERSION = 5
READABLE_MANIFEST_FORMATS = frozenset({1, 2, 3, 4, 5})
#: Formats whose frame carries an appendix (the inline SSTs' bytes).
_APPENDIX_FORMATS = frozenset({5})
#: ``created_ms`` and ``gc_grace_ms`` are signed 64-bit counts of milliseconds.
MAX_MS = 2**63 - 1


@dataclass(frozen=True)
class Manifest:
    """One committed version. Immutable; ``levels[i]`` is a sorted run of non-overlapping SSTs."""

    version: int
    parent: int | None
    writer_id: str
    token: str
    created_ms: int
    l0: tuple[SstInfo, ...] = ()
    levels: tuple[tuple[SstInfo, ...], ...] = ()
    meta: dict[str, str] = field(default_factory=dict)
    #: Set on a version that only reserves numbers: its state is its parent's, and the next
    #: version of this lineage is ``skip_to`` (versions in between never exist).
    skip_to: int | None = None
    #: The committing writer's ``Settings.gc_grace_seconds`` in ms (GC refuses a shorter grace).
    gc_grace_ms: int | None = None
    #: The range-delete counter: the greatest sequence number given to a range tombstone in
    #: this lineage (or in the sources it references); 0 when there was none.
    seq: int = 0
    #: Range tombstones still deleting something (fragments, :mod:`silt.rangedel`).
    range_tombstones: RangeTombstones = EMPTY
    #: The bytes of every inline entry listed (by SST id): a manifest is self-contained.
    inline: dict[str, bytes] = field(default_factory=dict)

    @property
    def next_version(self) -> int:
        """The smallest version number a commit on top of this one may create."""
        return self.skip_to if self.skip_to is not None else self.version + 1

    def all_ssts(self) -> Iterator[SstInfo]:
        """Every SST the version references, in read order (newest data first)."""
        yield from self.l0
        for level in self.levels:
            yield from level

    def objects(self) -> Iterator[SstInfo]:
        """Every entry that names an object in a store (all but the inline entries)."""
        return (s for s in self.all_ssts() if not s.inline)

    @property
    def inline_entries(self) -> tuple[SstInfo, ...]:
        """The inline entries: the head of L0, newest first."""
        n = 0
        while n < len(self.l0) and self.l0[n].inline:
            n += 1
        return self.l0[:n]

    def encode(self) -> bytes:
        body: dict[str, object] = {
            "version": self.version,
            "parent": self.parent,
            "writer_id": self.writer_id,
            "token": self.token,
            "created_ms": self.created_ms,
            "l0": [s.to_json() for s in self.l0],
            "levels": [[s.to_json() for s in level] for level in self.levels],
            "meta": self.meta,
        }
        if self.skip_to is not None:
            body["skip_to"] = self.skip_to
        if self.gc_grace_ms is not None:
            body["gc_grace_ms"] = self.gc_grace_ms
        if self.seq:
            body["seq"] = self.seq
            body["range_tombstones"] = self.range_tombstones.to_json()
        inline = self.inline_entries
        if inline:
            appendix = b"".join(self.inline[s.id] for s in inline)
            return encode_framed(MANIFEST_MAGIC, 5, body, appendix)
        if self.seq:
            fmt = 4
        elif self.skip_to is not None:
            fmt = 3
        elif any(s.db or s.clipped for s in self.all_ssts()):
            fmt = 2
        else:
            fmt = 1
        return encode_framed(MANIFEST_MAGIC, fmt, body)

    @classmethod
    def decode(cls, data: bytes, object_name: str) -> Manifest:
        """Parse and check a manifest; raises :class:`CorruptionError` naming the object."""
        fmt, d, appendix = decode_framed_appendix(
            data, object_name, magic=MANIFEST_MAGIC, formats=READABLE_MANIFEST_FORMATS,
            what="manifest", appendix_formats=_APPENDIX_FORMATS)
        try:
            version = _int(d, "version", 0, paths.MAX_VERSION)
            parent = _get(d, "parent")
            if parent is not None:
                parent = _int(d, "parent", 0, version - 1)
            l0 = _list(d, "l0")
            levels = _list(d, "levels")
            for level in levels:
                if not isinstance(level, list):
                    raise ValueError("'levels' must be a list of lists of SST entries")
            skip_to = None if d.get("skip_to") is None else _int(d, "skip_to", 0, paths.MAX_VERSION)
            if skip_to is not None and skip_to <= version:
                raise ValueError(f"skip_to {skip_to} is not after version {version}")
            seq = check_seq(d.get("seq", 0))
            tombs = RangeTombstones.from_json(d.get("range_tombstones", []), seq)
            l0_infos = tuple(SstInfo.from_json(s) for s in l0)
            level_infos = tuple(tuple(SstInfo.from_json(s) for s in lv) for lv in levels)
            for s in (*l0_infos, *(s for lv in level_infos for s in lv)):
                if s.seq > seq:
                    raise ValueError(f"SST {s.id}'s seq {s.seq} is above the manifest's {seq}")
            inline = _split_inline(l0_infos, level_infos, appendix, fmt)
            return cls(
                version=version,
                parent=parent,
                writer_id=_str(d, "writer_id"),
                token=_str(d, "token"),
                created_ms=_int(d, "created_ms", 0, MAX_MS),
                l0=l0_infos,
                levels=level_infos,
                meta=check_meta(_get(d, "meta"), "'meta'"),
                skip_to=skip_to,
                gc_grace_ms=None if d.get("gc_grace_ms") is None
                else _int(d, "gc_grace_ms", 0, MAX_MS),
                seq=seq,
                range_tombstones=tombs,
                inline=inline,
            )
        except (ValueError, TypeError) as exc:
            raise CorruptionError(
                object_name, _HEAD.size, f"malformed manifest body ({exc})"
            ) from None


def _split_inline(l0: tuple[SstInfo, ...], levels: tuple[tuple[SstInfo, ...], ...],
                  appendix: bytes, fmt: int) -> dict[str, bytes]:
    """The bytes of each inline entry, cut from ``appendix`` in listing order; ``ValueError``
    unless the inline entries are the head of L0 with distinct ids and their sizes add up to
    the appendix exactly."""
    n = 0
    while n < len(l0) and l0[n].inline:
        n += 1
    if any(s.inline for s in l0[n:]) or any(s.inline for lv in levels for s in lv):
        raise ValueError("inline SST entries must be the newest L0 entries")
    if n and fmt < 5:
        raise ValueError(f"format {fmt} cannot list inline SST entries")
    if n == 0 and fmt >= 5:
        raise ValueError("a format 5 manifest lists no inline SST entry")
    out: dict[str, bytes] = {}
    pos = 0
    for s in l0[:n]:
        if s.id in out:
            raise ValueError(f"inline SST {s.id} is listed twice")
        if pos + s.size > len(appendix):
            raise ValueError(f"the bytes of inline SST {s.id} pass the end of the manifest")
        out[s.id] = appendix[pos:pos + s.size]
        pos += s.size
    if pos != len(appendix):
        raise ValueError(f"{len(appendix) - pos} bytes after the inline SSTs")
    return out


def check_meta(meta: Any, what: str = "commit meta") -> dict[str, str]:
    """``meta`` as a new dict, after checking it maps str to str, every string valid Unicode
    (no lone surrogates, so it can be encoded and printed). Raises ``InvalidTypeError`` (not a
    dict, or a key or value that is not a str) or ``InvalidArgumentError`` (a string that is not
    valid Unicode), naming ``what``. ``DB.commit`` calls it before writing anything."""
    if not isinstance(meta, dict):
        raise InvalidTypeError(f"{what} must be a dict of str to str, got {type(meta).__name__}")
    for k, v in meta.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidTypeError(
                f"{what} must map str to str, got {type(k).__name__} {k!r:.80} -> "
                f"{type(v).__name__}"
            )
        for text in (k, v):
            try:
                text.encode()
            except UnicodeEncodeError:
                raise InvalidArgumentError(
                    f"{what} entry {k!r:.80} is not valid Unicode (it holds a lone surrogate)"
                    + ("; pass text that encodes as UTF-8" if what == "commit meta" else "")
                ) from None
    return dict(meta)


def _get(d: dict, name: str) -> Any:
    if name not in d:
        raise ValueError(f"no {name!r} field")
    return d[name]


def _int(d: dict, name: str, low: int, high: int) -> int:
    value = _get(d, name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name!r} must be an integer, got {value!r:.80}")
    if not low <= value <= high:
        raise ValueError(f"{name!r} is {value}, outside {low}..{high}")
    return value


def _str(d: dict, name: str) -> str:
    value = _get(d, name)
    if not isinstance(value, str):
        raise ValueError(f"{name!r} must be a string, got {value!r:.80}")
    value.encode()  # UnicodeEncodeError (a ValueError) for a lone surrogate
    return value


def _list(d: dict, name: str) -> list:
    value = _get(d, name)
    if not isinstance(value, list):
        raise ValueError(f"{name!r} must be a list, got {type(value).__name__}")
    return value
