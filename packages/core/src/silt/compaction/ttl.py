"""TTL compaction: drop whole SSTs whose entries have all expired, without rewriting anything.

An expired entry still shadows older values of its key, so an SST is dropped only when every
older SST overlapping it is dropped too (or there is none). When nothing can be dropped the
policy falls back to ``leveled`` so L0 stays bounded.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..manifest import Manifest
from ..settings import Settings
from ..sst.builder import SstInfo
from .leveled import LeveledPolicy
from .task import CompactionTask


def fully_expired(s: SstInfo, now_ms: int) -> bool:
    """Every entry of ``s`` is an expiring put whose time has come."""
    return s.entries > 0 and s.expiring == s.entries and 0 < s.max_expiry_ms <= now_ms


def droppable(manifest: Manifest, now_ms: int) -> list[SstInfo]:
    """SSTs that can go: fully expired, and everything older that overlaps them can go too."""
    layers: list[list[SstInfo]] = [[s] for s in manifest.l0] + [list(r) for r in manifest.levels]
    chosen: set[str] = set()
    # Walk from the oldest layer up, so "everything below" is decided before each SST.
    for depth in range(len(layers) - 1, -1, -1):
        for s in layers[depth]:
            if not fully_expired(s, now_ms):
                continue
            below_ok = all(
                t.id in chosen
                for layer in layers[depth + 1:]
                for t in layer
                if t.smallest <= s.largest and t.largest >= s.smallest
            )
            if below_ok:
                chosen.add(s.id)
    return [s for layer in layers for s in layer if s.id in chosen]


class TtlPolicy:
    """Drop fully expired SSTs first; otherwise compact like ``leveled``."""

    def __init__(self, settings: Settings) -> None:
        self.fallback = LeveledPolicy(settings)

    def pick(self, manifest: Manifest, now_ms: int) -> CompactionTask | None:
        gone = droppable(manifest, now_ms)
        if gone:
            return CompactionTask(
                tuple(s.id for s in gone), "drop", reason=f"{len(gone)} SSTs fully expired"
            )
        return self.fallback.pick(manifest, now_ms)


@hookimpl
def silt_register(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add_compaction_policy("ttl", TtlPolicy)
