"""Compaction records: ``compaction/<id>``, the hand-off from a compactor to the writer.

WARNING: on-disk format (docs/format.md). Same framing as manifests::

    magic "SILTCMP1" | crc32 u32 of the rest | format_version u32 | JSON body
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass

from ..errors import CorruptionError
from ..sst.builder import SstInfo
from .task import CompactionTask

RECORD_MAGIC = b"SILTCMP1"
RECORD_FORMAT_VERSION = 1
_HEAD = struct.Struct("<8sII")


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
        body = json.dumps(
            {
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
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        rest = struct.pack("<I", RECORD_FORMAT_VERSION) + body
        return RECORD_MAGIC + struct.pack("<I", zlib.crc32(rest)) + rest

    @classmethod
    def decode(cls, data: bytes, object_name: str) -> CompactionRecord:
        if len(data) < _HEAD.size:
            raise CorruptionError(object_name, 0, "compaction record is truncated")
        magic, crc, fmt = _HEAD.unpack_from(data, 0)
        if magic != RECORD_MAGIC:
            raise CorruptionError(object_name, 0, "bad magic: not a compaction record")
        if zlib.crc32(memoryview(data)[12:]) != crc:
            raise CorruptionError(object_name, 12, "compaction record checksum mismatch")
        if fmt != RECORD_FORMAT_VERSION:
            raise CorruptionError(object_name, 12, f"unreadable record format {fmt}")
        try:
            d = json.loads(data[_HEAD.size:])
            task = CompactionTask(
                inputs=tuple(str(i) for i in d["inputs"]),
                mode=str(d["mode"]),
                target_level=int(d["target_level"]),
                drop_tombstones=bool(d["drop_tombstones"]),
                reason=str(d.get("reason", "")),
            )
            return cls(
                id=str(d["id"]),
                base_version=int(d["base_version"]),
                created_ms=int(d["created_ms"]),
                task=task,
                outputs=tuple(SstInfo.from_json(s) for s in d["outputs"]),
                input_bytes=int(d.get("input_bytes", 0)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptionError(object_name, _HEAD.size, f"malformed record ({exc})") from None
