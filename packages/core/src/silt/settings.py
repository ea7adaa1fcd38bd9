"""Engine settings: a frozen, serializable dataclass of plain values.

Settings hold numbers and names only. Components (the object store, the clock) are passed to
:func:`silt.open` separately, so tests and simulations can inject deterministic ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgumentError, InvalidTypeError

KiB = 1024
MiB = 1024 * KiB

COMPRESSIONS = ("lz4", "none")


@dataclass(frozen=True)
class Settings:
    """Tuning knobs of one open database. Every field has a documented default.

    Attributes:
        memtable_bytes: approximate size (keys + values + 16 bytes per entry) at which the active
            memtable is frozen and handed to the background uploader. Default 64 MiB.
        block_bytes: target uncompressed size of an SST data block. Default 64 KiB.
        compression: ``"lz4"`` (default) or ``"none"`` for data blocks.
        bloom_bits_per_key: bloom filter bits per key in each SST; 0 disables filters. Default 10
            (about 1% false positives).
        block_cache_bytes: bytes of decoded blocks kept in the in-memory LRU cache. Default 256 MiB.
        upload_parallelism: SST uploads that may run at once. Default 4.
        read_parallelism: block fetches ``multi_get`` and scans may issue at once. Default 8.
        max_pending_flushes: frozen memtables allowed to wait for upload before writes block
            (backpressure). Default 2.
        max_key_bytes: largest accepted key. Default 64 KiB.
        max_value_bytes: largest accepted value. Default 256 MiB.
    """

    memtable_bytes: int = 64 * MiB
    block_bytes: int = 64 * KiB
    compression: str = "lz4"
    bloom_bits_per_key: int = 10
    block_cache_bytes: int = 256 * MiB
    upload_parallelism: int = 4
    read_parallelism: int = 8
    max_pending_flushes: int = 2
    max_key_bytes: int = 64 * KiB
    max_value_bytes: int = 256 * MiB

    def __post_init__(self) -> None:
        minimums = {
            "memtable_bytes": 1,
            "block_bytes": 64,
            "bloom_bits_per_key": 0,
            "block_cache_bytes": 0,
            "upload_parallelism": 1,
            "read_parallelism": 1,
            "max_pending_flushes": 1,
            "max_key_bytes": 1,
            "max_value_bytes": 0,
        }
        for name, low in minimums.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidTypeError(
                    f"Settings.{name} must be an int, got {type(value).__name__} {value!r}"
                )
            if value < low:
                raise InvalidArgumentError(f"Settings.{name} must be >= {low}, got {value}")
        if self.max_key_bytes > 0xFFFF_FFFF or self.block_bytes > 0xFFFF_FFFF:
            raise InvalidArgumentError("Settings.max_key_bytes and block_bytes must be < 4 GiB")
        if self.bloom_bits_per_key > 64:
            raise InvalidArgumentError(
                f"Settings.bloom_bits_per_key must be <= 64, got {self.bloom_bits_per_key}"
            )
        if self.compression not in COMPRESSIONS:
            raise InvalidArgumentError(
                f"Settings.compression must be one of {COMPRESSIONS}, got {self.compression!r}"
            )

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied (validated like the constructor)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise InvalidArgumentError(f"unknown Settings fields: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-serializable dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        return cls().replace(**data)
