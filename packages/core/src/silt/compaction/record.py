"""Compaction records: ``compaction/<id>``, the hand-off from a compactor to the writer.

WARNING: on-disk format (docs/format.md). Framed like manifests (:mod:`silt.framing`)::

    magic "SILTCMP1" | crc32 u32 of the rest | format_version u32 | JSON body
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CorruptionError, NotFoundError
from ..framing import FRAME_HEAD, decode_framed, encode_framed
from ..paths import COMPACTION_PREFIX, MAX_VERSION
from ..sst.builder import SstInfo
from ..store import ObjectStore, retrying
from .task import CompactionTask

RECORD_MAGIC = b"SILTCMP1"
RECORD_FORMAT_VERSION = 1
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
#: No compaction output is larger (outputs are cut at ``Settings.target_sst_bytes``): a record
#: that says otherwise is damaged or crafted, and is refused before anything reads that much.
MAX_OUTPUT_BYTES = 1 << 40
_MAX_MS = (1 << 48) - 1  # the time range of an object id (silt.paths.new_id)
_OUTPUT_COUNTS = ("size", "tail_offset", "entries", "tombstones", "expiring", "min_expiry_ms",
                  "max_expiry_ms")


@dataclass(frozen=True)
class CompactionRecord:
    """A finished compaction: the task, the version it was picked from, and its outputs."""

    id: str
    base_version: int
    created_ms: int
    task: CompactionTask
    outputs: tuple[SstInfo, ...]
    input_bytes: int = 0

    def encode(self) -> bytes:
        return encode_framed(RECORD_MAGIC, RECORD_FORMAT_VERSION, {
            "id": self.id,
            "base_version": self.base_version,
            "created_ms": self.created_ms,
            "inputs": list(self.task.inputs),
            "mode": self.task.mode,
            "target_level": self.task.target_level,
            "drop_tombstones": self.task.drop_tombstones,
            "reason": self.task.reason,
            "outputs": [s.to_json() for s in self.outputs],
            "input_bytes": self.input_bytes,
        })

    @classmethod
    def decode(cls, data: bytes, object_name: str) -> CompactionRecord:
        """Parse and check a record; raises :class:`CorruptionError` naming the object (and
        nothing else, whatever the bytes)."""
        _fmt, d = decode_framed(data, object_name, magic=RECORD_MAGIC,
                                formats=(RECORD_FORMAT_VERSION,), what="compaction record")
        try:
            task = CompactionTask(
                inputs=tuple(_text(i) for i in d["inputs"]),
                mode=_text(d["mode"]),
                target_level=_count(d["target_level"]),
                drop_tombstones=_flag(d["drop_tombstones"]),
                reason=_text(d.get("reason", "")),
            )
            record = cls(
                id=_ulid(d["id"]),
                base_version=_count(d["base_version"], MAX_VERSION),
                created_ms=_count(d["created_ms"], _MAX_MS),
                task=task,
                outputs=tuple(SstInfo.from_json(s) for s in d["outputs"]),
                input_bytes=_count(d.get("input_bytes", 0)),
            )
            for raw, out in zip(d["outputs"], record.outputs, strict=True):
                _ulid(out.id)
                for name in _OUTPUT_COUNTS:
                    _count(raw.get(name, 0))
                if out.db or out.clipped:
                    raise ValueError(f"output {out.id} is a reference; outputs are the DB's own")
                if not (0 <= out.tail_offset < out.size <= MAX_OUTPUT_BYTES
                        and out.expiring <= out.entries and out.tombstones <= out.entries
                        and 1 <= out.entries <= out.size and out.smallest <= out.largest):
                    raise ValueError(f"output {out.id} has impossible sizes, counts or key range")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError,
                OverflowError) as exc:
            raise CorruptionError(object_name, FRAME_HEAD.size, f"malformed record ({exc})") \
                from None
        return record


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, found {type(value).__name__}")
    return value


def _count(value: object, limit: int = 1 << 63) -> int:
    if type(value) is not int or not 0 <= value <= limit:
        raise ValueError(f"expected an integer in [0, {limit}], found {value!r:.40}")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, found {type(value).__name__}")
    return value


def _ulid(value: object) -> str:
    """An object id made by :func:`silt.paths.new_id` (never a path: no '/' nor '..')."""
    if not isinstance(value, str) or not _ULID.fullmatch(value):
        raise ValueError(f"{value!r:.40} is not a silt object id")
    return value


def read_records(store: ObjectStore, prefix: str = ""
                 ) -> list[tuple[str, CompactionRecord | CorruptionError]]:
    """Every compaction record of the DB at ``prefix``: ``(object name, record or the error
    decoding it)``. A record deleted while being listed (adopted or collected) is skipped."""
    out: list[tuple[str, CompactionRecord | CorruptionError]] = []
    for info in retrying(lambda: list(store.list(prefix + COMPACTION_PREFIX))):
        try:
            data = retrying(lambda key=info.key: store.get(key))  # type: ignore[misc]
        except NotFoundError:
            continue
        try:
            out.append((info.key, CompactionRecord.decode(data, info.key)))
        except CorruptionError as exc:
            out.append((info.key, exc))
    return out
