"""Writing an SST: sorted entries in, one immutable object's bytes out.

Layout: data blocks, then the tail (bloom filter block, properties block, index block, footer).
Every block is framed with a checksum (see :mod:`silt.sst.block`). The whole SST is built in
memory: SSTs are bounded by ``Settings.memtable_bytes`` (flush) or by the compaction target size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .._ext import accelerate
from ..checksum import crc32
from ..settings import Settings
from ..tierkit import check_name
from .block import _u32_bytes, encode_block, frame
from .bloom import build_blocked_bloom
from .format import (
    BLOCK_ENTRY_SIZE,
    BLOCK_EXPIRY_SIZE,
    COMPRESSION_CODES,
    COMPRESSION_NONE,
    FOOTER,
    INDEX_HEADER,
    MAX_EXPIRY_MS,
    MAX_OBJECT_BYTES,
    SST_FORMAT_VERSION,
    SST_MAGIC,
)


@dataclass(frozen=True)
class SstInfo:
    """What a manifest records about one SST (enough to read it with one GET for the tail).

    ``smallest``/``largest`` bound the keys; ``tail_offset`` is where the filter block starts.
    ``min_expiry_ms``/``max_expiry_ms`` cover expiring entries (0 when there are none).

    A **reference** to a sibling DB's SST (a rescale or a clone, :meth:`silt.DB.reference`)
    names that DB's folder in ``db`` (``""``: the object is this DB's own) and is **clipped**:
    only keys in ``[clip_start, clip_end)`` belong to this DB (``None``: unbounded), and
    ``smallest``/``largest`` are the first and last keys of the object inside that range, so
    every range check of the read path clips it. ``size``, ``entries`` and the other counts
    still describe the whole object.

    ``seq`` is the entry's place among the manifest's range tombstones (:mod:`silt.rangedel`):
    every tombstone with a sequence number <= ``seq`` was applied to the records before they
    were written; one with a greater number deletes the records in its range.

    An **inline** entry (``inline``) is an SST that was never uploaded: the manifest listing it
    carries its bytes (manifest format 5, :mod:`silt.manifest`). It is never a reference to a
    sibling's object (``db`` is empty), though it may be clipped (a reference copies it).
    """

    id: str
    size: int
    tail_offset: int
    smallest: bytes
    largest: bytes
    entries: int
    tombstones: int = 0
    expiring: int = 0
    min_expiry_ms: int = 0
    max_expiry_ms: int = 0
    db: str = ""
    clipped: bool = False
    clip_start: bytes | None = None
    clip_end: bytes | None = None
    seq: int = 0
    inline: bool = False

    def to_json(self) -> dict:
        out = self._json()
        if self.inline:
            out["inline"] = True
        if self.db:
            out["db"] = self.db
        if self.clipped:
            out["clip"] = [None if b is None else b.hex() for b in (self.clip_start, self.clip_end)]
        if self.seq:
            out["seq"] = self.seq
        return out

    def _json(self) -> dict:
        return {
            "id": self.id,
            "size": self.size,
            "tail_offset": self.tail_offset,
            "smallest": self.smallest.hex(),
            "largest": self.largest.hex(),
            "entries": self.entries,
            "tombstones": self.tombstones,
            "expiring": self.expiring,
            "min_expiry_ms": self.min_expiry_ms,
            "max_expiry_ms": self.max_expiry_ms,
        }

    @classmethod
    def from_json(cls, d: Any) -> SstInfo:
        """Parse what :meth:`to_json` wrote, checking every field's type and range.

        Raises ``ValueError`` naming the bad field (callers report it as corruption of the
        object that held it): sizes and offsets must fit the SST format (``tail_offset`` inside
        the object, room for a footer), counts must be non-negative, key ranges ordered.
        """
        if not isinstance(d, dict):
            raise ValueError(f"an SST entry must be an object, got {type(d).__name__}")
        sst_id = _field(d, "id", str)
        size = _int(d, "size", FOOTER.size, MAX_OBJECT_BYTES)
        tail_offset = _int(d, "tail_offset", 0, size - FOOTER.size)
        smallest = _hex(d, "smallest")
        largest = _hex(d, "largest")
        if smallest > largest:
            raise ValueError("SST entry's smallest key is greater than its largest")
        clip = d.get("clip")
        inline = _field(d, "inline", bool, False)
        if inline and "db" in d:
            raise ValueError("an inline SST entry cannot name a sibling DB")
        if "clip" in d and not (isinstance(clip, list) and len(clip) == 2):
            raise ValueError("SST entry's clip must be a list of two hex keys or nulls")
        return cls(
            id=check_name(sst_id, what="SST id"),
            size=size,
            tail_offset=tail_offset,
            smallest=smallest,
            largest=largest,
            entries=_int(d, "entries", 0, MAX_OBJECT_BYTES),
            tombstones=_int(d, "tombstones", 0, MAX_OBJECT_BYTES, 0),
            expiring=_int(d, "expiring", 0, MAX_OBJECT_BYTES, 0),
            min_expiry_ms=_int(d, "min_expiry_ms", 0, MAX_EXPIRY_MS, 0),
            max_expiry_ms=_int(d, "max_expiry_ms", 0, MAX_EXPIRY_MS, 0),
            db=check_name(_field(d, "db", str), what="sibling DB name") if "db" in d else "",
            clipped="clip" in d,
            clip_start=_hex_or_none(clip[0]) if "clip" in d else None,  # type: ignore[index]
            clip_end=_hex_or_none(clip[1]) if "clip" in d else None,  # type: ignore[index]
            seq=_int(d, "seq", 0, MAX_SEQ, 0),
            inline=inline,
        )

    @property
    def is_reference(self) -> bool:
        """Whether this entry points at another DB's object (see the class docstring)."""
        return bool(self.db)


_NO_DEFAULT: Any = object()
#: Range-tombstone sequence numbers are signed 64-bit (docs/format.md, manifest format 4).
MAX_SEQ = 2**63 - 1


def _field(d: dict, name: str, kind: type, default: Any = _NO_DEFAULT) -> Any:
    """``d[name]`` (or ``default`` when absent and a default is given), which must be a
    ``kind`` (not a bool for int); a str must also be valid Unicode (no lone surrogates)."""
    if name not in d:
        if default is _NO_DEFAULT:
            raise ValueError(f"SST entry has no {name!r}")
        return default
    value = d[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ValueError(f"SST entry's {name!r} must be a {kind.__name__}, got {value!r:.80}")
    if isinstance(value, str):
        value.encode()  # UnicodeEncodeError (a ValueError) for a lone surrogate
    return value


def _int(d: dict, name: str, low: int, high: int, default: Any = _NO_DEFAULT) -> int:
    value = _field(d, name, int, default)
    if not low <= value <= high:
        raise ValueError(f"SST entry's {name!r} is {value}, outside {low}..{high}")
    return value


def _hex(d: dict, name: str) -> bytes:
    return bytes.fromhex(_field(d, name, str))


def _hex_or_none(text: Any) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"an SST clip bound must be a hex string or null, got {text!r:.80}")
    return bytes.fromhex(text)


def build_sst(
    sst_id: str,
    keys: list[bytes],
    records: list[object],
    settings: Settings,
    *,
    created_ms: int = 0,
) -> tuple[bytes, SstInfo]:
    """Encode sorted, unique ``keys`` with their ``records`` into SST bytes.

    Preconditions: ``keys`` is non-empty, strictly increasing, and as long as ``records``.
    Returns the object's bytes and the :class:`SstInfo` a manifest records for it.
    """
    if not keys:
        raise ValueError("an SST needs at least one entry")
    compression = COMPRESSION_CODES[settings.compression]
    chunks: list[bytes] = []
    offset = 0
    block_offsets: list[int] = []
    block_sizes: list[int] = []
    last_keys: list[bytes] = []
    n = len(keys)
    ends, tombstones, expiring, min_exp, max_exp = split_blocks(
        keys, records, settings.block_bytes
    )
    start = 0
    for end in ends:
        framed = frame(encode_block(keys[start:end], records[start:end]), compression)
        chunks.append(framed)
        block_offsets.append(offset)
        block_sizes.append(len(framed))
        last_keys.append(keys[end - 1])
        offset += len(framed)
        start = end

    filter_off = offset
    bloom = frame(build_blocked_bloom(keys, settings.bloom_bits_per_key), COMPRESSION_NONE) if (
        settings.bloom_bits_per_key
    ) else b""
    chunks.append(bloom)
    offset += len(bloom)

    props = {
        "format_version": SST_FORMAT_VERSION,
        "id": sst_id,
        "entries": n,
        "tombstones": tombstones,
        "expiring": expiring,
        "min_expiry_ms": min_exp,
        "max_expiry_ms": max_exp,
        "smallest": keys[0].hex(),
        "largest": keys[-1].hex(),
        "blocks": len(block_offsets),
        "compression": settings.compression,
        "bloom_bits_per_key": settings.bloom_bits_per_key,
        "created_ms": created_ms,
    }
    props_off = offset
    props_block = frame(json.dumps(props, sort_keys=True).encode(), COMPRESSION_NONE)
    chunks.append(props_block)
    offset += len(props_block)

    index_payload = b"".join(
        (
            INDEX_HEADER.pack(len(block_offsets)),
            b"".join(o.to_bytes(8, "little") for o in block_offsets),
            _u32_bytes(block_sizes),
            _u32_bytes(_ends(last_keys)),
            b"".join(last_keys),
        )
    )
    index_off = offset
    index_block = frame(index_payload, COMPRESSION_NONE)
    chunks.append(index_block)
    offset += len(index_block)

    head = FOOTER.pack(
        filter_off, len(bloom), props_off, len(props_block), index_off, len(index_block),
        SST_FORMAT_VERSION, 0, SST_MAGIC,
    )[:40]
    footer = head + FOOTER.pack(0, 0, 0, 0, 0, 0, 0, crc32(head), SST_MAGIC)[40:]
    chunks.append(footer)
    data = b"".join(chunks)
    info = SstInfo(
        id=sst_id,
        size=len(data),
        tail_offset=filter_off,
        smallest=keys[0],
        largest=keys[-1],
        entries=n,
        tombstones=tombstones,
        expiring=expiring,
        min_expiry_ms=min_exp,
        max_expiry_ms=max_exp,
    )
    return data, info


def split_blocks(
    keys: list[bytes], records: list[object], target: int
) -> tuple[list[int], int, int, int, int]:
    """Where :func:`build_sst` closes data blocks, and the SST's tombstone/expiry counters.

    A block is closed once its estimated encoded size reaches ``target`` (and after the last
    entry). Returns ``(ends, tombstones, expiring, min_expiry_ms, max_expiry_ms)``; ``ends[j]``
    is the exclusive end index of block ``j``.
    """
    n = len(keys)
    ends: list[int] = []
    tombstones = expiring = 0
    min_exp = max_exp = 0
    size = 0
    entry = BLOCK_ENTRY_SIZE
    expiring_entry = BLOCK_ENTRY_SIZE + BLOCK_EXPIRY_SIZE
    for i in range(n):
        r = records[i]
        if r.__class__ is bytes:
            size += len(keys[i]) + len(r) + entry  # type: ignore[arg-type]
        elif r is None:
            size += len(keys[i]) + entry
            tombstones += 1
        else:
            size += len(keys[i]) + len(r[0]) + expiring_entry  # type: ignore[index]
            expiring += 1
            exp = r[1]  # type: ignore[index]
            min_exp = exp if not min_exp or exp < min_exp else min_exp
            max_exp = exp if exp > max_exp else max_exp
        if size >= target or i == n - 1:
            ends.append(i + 1)
            size = 0
    return ends, tombstones, expiring, min_exp, max_exp


def _ends(items: list[bytes]) -> list[int]:
    out, total = [], 0
    for item in items:
        total += len(item)
        out.append(total)
    return out


#: The pure-Python twins stay reachable as ``<name>_py`` (tests compare both).
COMPILED = accelerate(globals(), ("split_blocks",))
