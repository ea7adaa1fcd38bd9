"""Engine settings: a frozen, serializable dataclass of plain values.

Settings hold numbers and names only. Components (the object store, the clock) are passed to
:func:`silt.open` separately, so tests and simulations can inject deterministic ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgumentError, InvalidTypeError
from .paths import VERSION_DIGITS

KiB = 1024
MiB = 1024 * KiB

COMPRESSIONS = ("lz4", "none")
COMPACTION_MODES = ("background", "thread", "external")

#: The largest data block, key or value: a block closes once it reaches ``block_bytes`` and so
#: may hold one more entry; block sizes and offsets inside a block are u32 on disk and lz4
#: compresses at most ~2 GiB at once, so ``block_bytes + max_key_bytes + max_value_bytes`` must
#: stay well below 2 GiB.
MAX_BLOCK_PART_BYTES = 512 * MiB
#: Bound of the int fields without a tighter one: a count or byte size in a signed 64-bit field.
MAX_INT = 2**63 - 1
#: Bound of the parallelism and queue-length fields (threads and queued memtables).
MAX_THREADS = 1024
#: Bound of the seconds fields (about 317 years): they become int milliseconds and deadlines.
MAX_SECONDS = 10**10

#: Bound of the inline settings: a manifest carries its inline deltas in full, and every
#: commit writes them again (64 MiB is far past any useful value).
MAX_INLINE_BYTES = 64 * 1024 * 1024

#: ``(minimum, maximum)`` of every int field of :class:`Settings`.
INT_RANGES: dict[str, tuple[int, int]] = {
    "memtable_bytes": (1, MAX_INT),
    "block_bytes": (64, MAX_BLOCK_PART_BYTES),
    "bloom_bits_per_key": (0, 64),
    "block_cache_bytes": (0, MAX_INT),
    "upload_parallelism": (1, MAX_THREADS),
    "read_parallelism": (1, MAX_THREADS),
    "max_pending_flushes": (1, MAX_THREADS),
    "max_key_bytes": (1, MAX_BLOCK_PART_BYTES),
    "max_value_bytes": (0, MAX_BLOCK_PART_BYTES),
    "target_sst_bytes": (1, MAX_INT),
    "l0_compaction_trigger": (1, MAX_INT),
    "l0_stall_trigger": (1, MAX_INT),
    "level_size_ratio": (2, MAX_INT),
    "level1_bytes": (1, MAX_INT),
    "tiered_max_runs": (2, MAX_INT),
    "retain_versions": (1, 10**VERSION_DIGITS - 1),
    "inline_delta_bytes": (0, MAX_INLINE_BYTES),
    "inline_max_bytes": (0, MAX_INLINE_BYTES),
    "inline_max_entries": (1, 4096),
}
#: Int fields that may also be ``None`` (see their docs).
OPTIONAL_INTS = frozenset({"block_cache_bytes"})


def check_seconds(value: Any, what: str, *, negative_ok: bool = False) -> float:
    """``value`` if it is a number of seconds (int or float, not bool) in ``0..MAX_SECONDS``
    (``-MAX_SECONDS..MAX_SECONDS`` with ``negative_ok``); else raises
    :class:`~silt.errors.InvalidTypeError` or :class:`~silt.errors.InvalidArgumentError` naming
    ``what`` and the range. ``nan`` and infinities are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(
            f"{what} must be a number of seconds, got {type(value).__name__} {value!r:.80}"
        )
    low = -MAX_SECONDS if negative_ok else 0
    if not low <= value <= MAX_SECONDS:  # false for nan
        raise InvalidArgumentError(
            f"{what} must be a number of seconds in {low}..{MAX_SECONDS}, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class Settings:
    """Tuning knobs of one open database. Every field has a documented default.

    Attributes:
        memtable_bytes: approximate size (keys + values + 16 bytes per entry) at which the active
            memtable is frozen and handed to the background uploader. Default 64 MiB.
        block_bytes: target uncompressed size of an SST data block. Default 8 KiB: a point read
            that misses the block cache reads, checks and searches one block (bench/README.md).
        compression: ``"lz4"`` (default) or ``"none"`` for data blocks.
        bloom_bits_per_key: bloom filter bits per key in each SST; 0 disables filters. Default 10
            (about 1% false positives).
        block_cache_bytes: ``None`` (default): the DB shares the process's block cache, and its
            memtables are charged to the same memory budget (:func:`silt.set_memory_budget`,
            512 MiB unless set; see :mod:`silt.budget`). An int: the DB has a private LRU cache
            of that many bytes of decoded blocks and its memtables are outside any budget.
        upload_parallelism: SST uploads that may run at once. Default 4.
        read_parallelism: threads of the read pool: the ranged GETs a planned read (a cold
            ``multi_get``, ``multi_scan``, the tails of a cold handle) has in flight at once on a
            remote store, besides the calling thread's own (a wave of more than
            ``read_parallelism + 1`` takes a round trip per that many). Threads start on first
            need; a local store's reads stay in the calling thread. Default 31: with the calling
            thread, 32 requests in flight, the connection pool of the S3 and Azure tiers
            (``max_pool_connections``, ``max_connections``); a restarted 2M-key aggregate's
            shard reads its 19 runs in one wave (two at 16).
        max_pending_flushes: frozen memtables allowed to wait for upload before writes block
            (backpressure). Default 2.
        max_key_bytes: largest accepted key. Default 64 KiB.
        max_value_bytes: largest accepted value. Default 256 MiB.
        compaction: name of the compaction policy (a plugin name: ``"leveled"``, ``"tiered"``,
            ``"ttl"``, or a third party's), or ``"none"``. Default ``"leveled"``.
        compaction_mode: ``"background"`` (the writer's compaction subprocess merges where the DB
            qualifies, a ``file://`` root on the system clock, so a merge never holds the
            writer's GIL; otherwise a thread of the writer; see :mod:`silt.compaction.worker`;
            the writer adopts the result at its next commit), ``"thread"`` (always a thread of
            the writer) or ``"external"`` (``silt compact URL`` runs elsewhere; the writer adopts
            the records it finds under ``compaction/``). Default background.
        compaction_poll_seconds: in external mode, how often a commit lists ``compaction/``.
        refill_after_compaction: on a remote store (``ObjectStore.local`` false), when the
            writer installs or adopts a compaction, read into the block cache, in the
            background, the blocks of its outputs that hold the key ranges its inputs had
            cached (so the hot part of the state stays cached across compactions instead of
            being read again by the next batch's gets, one request per run of blocks).
            Default True; see :mod:`silt.refill`.
        target_sst_bytes: size at which compaction starts a new output SST. Default 64 MiB.
        l0_compaction_trigger: L0 SSTs that make a policy compact L0. Default 4.
        l0_stall_trigger: L0 SSTs at which a commit waits for the running compaction instead of
            letting L0 grow (the ``stall_seconds`` metric counts the wait). Default 12.
        level_size_ratio: size ratio between adjacent levels (leveled) and the size ratio that
            groups runs (tiered). Default 10.
        level1_bytes: target size of level 1 (leveled). Default 256 MiB.
        tiered_max_runs: sorted runs above which tiered merges the newest ones. Default 8.
        retain_versions: versions GC keeps (the newest ones), besides named checkpoints. Default 10.
        gc_grace_seconds: age an unreferenced object must reach before GC deletes it; a writer
            publishes only SSTs younger than half of it. Writers and GC must agree. Default 3600.
        inline_delta_bytes: a commit whose delta, built as an SST, is at most this many bytes
            carries it inside its manifest (an *inline* entry, docs/format.md) instead of
            uploading an SST: one PUT per commit instead of two. 0 disables. Default 32 KiB.
        inline_max_bytes: most bytes of inline deltas one manifest carries (every manifest
            carries all of them: the next commit copies them forward). A commit that would pass
            it, or whose delta is not small, folds every inline delta and its own delta into one
            uploaded SST. 0 disables inlining. Default 256 KiB.
        inline_max_entries: most inline deltas one manifest carries (each is an L0 entry a point
            read probes, in memory); the commit that would pass it folds them. Default 16.
        value_rewriter: ``None`` (default) or ``"package.module:factory"``: compaction passes
            each live value it copies to the rewriter ``factory(value_rewriter_config)`` returns,
            and writes what it gives back (``None``: the value as it is). For applications whose
            value encoding evolves; see :mod:`silt.compaction.rewrite` for the contract.
        value_rewriter_config: the string given to the rewriter's factory. Default ``""``.
    """

    memtable_bytes: int = 64 * MiB
    block_bytes: int = 8 * KiB
    compression: str = "lz4"
    bloom_bits_per_key: int = 10
    block_cache_bytes: int | None = None
    upload_parallelism: int = 4
    read_parallelism: int = 31
    max_pending_flushes: int = 2
    max_key_bytes: int = 64 * KiB
    max_value_bytes: int = 256 * MiB
    compaction: str = "leveled"
    compaction_mode: str = "background"
    compaction_poll_seconds: float = 10.0
    refill_after_compaction: bool = True
    target_sst_bytes: int = 64 * MiB
    l0_compaction_trigger: int = 4
    l0_stall_trigger: int = 12
    level_size_ratio: int = 10
    level1_bytes: int = 256 * MiB
    tiered_max_runs: int = 8
    retain_versions: int = 10
    gc_grace_seconds: float = 3600.0
    inline_delta_bytes: int = 32 * KiB
    inline_max_bytes: int = 256 * KiB
    inline_max_entries: int = 16
    value_rewriter: str | None = None
    value_rewriter_config: str = ""

    def __post_init__(self) -> None:
        for name, (low, high) in INT_RANGES.items():
            value = getattr(self, name)
            if value is None and name in OPTIONAL_INTS:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidTypeError(
                    f"Settings.{name} must be an int in {low}..{high}"
                    f"{' or None' if name in OPTIONAL_INTS else ''}, got "
                    f"{type(value).__name__} {value!r:.80}"
                )
            if not low <= value <= high:
                raise InvalidArgumentError(
                    f"Settings.{name} must be in {low}..{high}, got {value}"
                )
        for name in ("compaction_poll_seconds", "gc_grace_seconds"):
            check_seconds(getattr(self, name), f"Settings.{name}")
        if not isinstance(self.refill_after_compaction, bool):
            raise InvalidTypeError(
                "Settings.refill_after_compaction must be True or False, got "
                f"{type(self.refill_after_compaction).__name__} "
                f"{self.refill_after_compaction!r:.80}")
        if self.compaction_mode not in COMPACTION_MODES:
            raise InvalidArgumentError(
                f"Settings.compaction_mode must be one of {COMPACTION_MODES}, got "
                f"{self.compaction_mode!r}"
            )
        if not isinstance(self.compaction, str) or not self.compaction:
            raise InvalidArgumentError(
                "Settings.compaction must name a compaction policy (e.g. 'leveled') or be 'none'"
            )
        if self.value_rewriter is not None:
            check_rewriter_name(self.value_rewriter)
        if not isinstance(self.value_rewriter_config, str):
            raise InvalidTypeError(
                "Settings.value_rewriter_config must be a str (JSON, by convention), got "
                f"{type(self.value_rewriter_config).__name__}"
            )
        if self.compression not in COMPRESSIONS:
            raise InvalidArgumentError(
                f"Settings.compression must be one of {COMPRESSIONS}, got {self.compression!r}"
            )

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied (validated like the constructor).

        Every field is checked for type and range (see ``INT_RANGES``, ``MAX_SECONDS``); a bad
        value raises :class:`~silt.errors.InvalidTypeError` or
        :class:`~silt.errors.InvalidArgumentError` naming the field and its allowed range.
        """
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
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            raise InvalidTypeError(
                f"Settings.from_dict takes a dict of field names, got {type(data).__name__}"
            )
        return cls().replace(**data)


def check_rewriter_name(name: str) -> None:
    """Refuse a ``value_rewriter`` that is not ``"module:attribute"`` (before importing it)."""
    module, sep, attr = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not sep or not module or not attr or not all(
        part.isidentifier() for part in (*module.split("."), *attr.split("."))
    ):
        raise InvalidArgumentError(
            f"Settings.value_rewriter must name a factory as 'package.module:function', got "
            f"{name!r:.120}"
        )
