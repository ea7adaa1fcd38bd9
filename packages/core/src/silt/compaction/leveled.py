"""Leveled compaction: L0 merges into L1; each level is a sorted run ``level_size_ratio`` times
larger than the one above; an overfull level pushes one SST (and what it overlaps) down.

``manifest.levels[i]`` is level ``i + 1``. Levels never move, so a task names its target level.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..manifest import Manifest
from ..paths import id_time_ms
from ..settings import Settings
from .layout import hull, nothing_below, overlapping, run_bytes
from .task import CompactionTask


class LeveledPolicy:
    """Picks L0 -> L1 when L0 has ``l0_compaction_trigger`` SSTs, else the most overfull level."""

    def __init__(self, settings: Settings) -> None:
        self.l0_trigger = settings.l0_compaction_trigger
        self.ratio = settings.level_size_ratio
        self.level1_bytes = settings.level1_bytes

    def level_limit(self, level: int) -> int:
        """Target bytes of ``level`` (1-based)."""
        return self.level1_bytes * self.ratio ** (level - 1)

    def pick(self, manifest: Manifest, now_ms: int) -> CompactionTask | None:
        levels = manifest.levels
        if len(manifest.l0) >= self.l0_trigger:
            lo, hi = hull(manifest.l0)
            below = overlapping(levels[0], lo, hi) if levels else []
            inputs = [s.id for s in manifest.l0] + [s.id for s in below]
            out_lo, out_hi = hull([*manifest.l0, *below])
            return CompactionTask(
                tuple(inputs), "into_level", target_level=1,
                drop_tombstones=nothing_below(levels, 0, out_lo, out_hi),
                reason=f"L0 has {len(manifest.l0)} SSTs (trigger {self.l0_trigger})",
            )
        best, best_score = -1, 1.0
        for i, run in enumerate(levels):
            if not run:
                continue
            score = run_bytes(run) / self.level_limit(i + 1)
            if score > best_score:
                best, best_score = i, score
        if best < 0:
            return None
        run = levels[best]
        # The oldest SST of the level goes down first: a stateless round robin.
        victim = min(run, key=lambda s: (id_time_ms(s.id), s.id))
        nxt = levels[best + 1] if best + 1 < len(levels) else ()
        below = overlapping(nxt, victim.smallest, victim.largest)
        out_lo, out_hi = hull([victim, *below])
        return CompactionTask(
            (victim.id, *(s.id for s in below)), "into_level", target_level=best + 2,
            drop_tombstones=nothing_below(levels, best + 1, out_lo, out_hi),
            reason=f"L{best + 1} is {best_score:.1f}x its target size",
        )


@hookimpl
def silt_register(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add_compaction_policy("leveled", LeveledPolicy)
