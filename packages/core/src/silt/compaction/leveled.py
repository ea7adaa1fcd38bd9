"""Leveled compaction: L0 merges into L1; each level is a sorted run ``level_size_ratio`` times
larger than the one above; an overfull level pushes one SST (and what it overlaps) down.

``manifest.levels[i]`` is level ``i + 1``. Levels never move, so a task names its target level.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..manifest import Manifest
from ..paths import id_time_ms
from ..settings import Settings
from ..sst.builder import SstInfo
from .layout import hull, nothing_below, overlapping, run_bytes
from .task import CompactionTask


class LeveledPolicy:
    """Scores L0 (SSTs / ``l0_compaction_trigger``) and each level (bytes / its target) and
    compacts the highest score of at least 1, like RocksDB; L0 always wins once it holds half of
    ``l0_stall_trigger`` SSTs. With no score that high, an SST that is mostly tombstones and
    expired entries is pushed down (to carry them to the bottom, where they are dropped), or
    rewritten in place without them when nothing lies below it.

    Scoring matters: with L0 always first, a steady stream of flushes would keep L0 at its
    trigger and no level would ever be pushed down (L1 would grow without bound).
    """

    def __init__(self, settings: Settings) -> None:
        self.l0_trigger = settings.l0_compaction_trigger
        self.l0_urgent = max(self.l0_trigger, settings.l0_stall_trigger // 2)
        self.ratio = settings.level_size_ratio
        self.level1_bytes = settings.level1_bytes

    def level_limit(self, level: int) -> int:
        """Target bytes of ``level`` (1-based)."""
        return self.level1_bytes * self.ratio ** (level - 1)

    def pick(self, manifest: Manifest, now_ms: int) -> CompactionTask | None:
        levels = manifest.levels
        best, best_score = -1, 1.0
        for i, run in enumerate(levels):
            if not run:
                continue
            score = run_bytes(run) / self.level_limit(i + 1)
            if score > best_score:
                best, best_score = i, score
        l0_score = len(manifest.l0) / self.l0_trigger
        if len(manifest.l0) >= self.l0_trigger and (
            l0_score >= best_score or len(manifest.l0) >= self.l0_urgent
        ):
            lo, hi = hull(manifest.l0)
            below = overlapping(levels[0], lo, hi) if levels else []
            inputs = [s.id for s in manifest.l0] + [s.id for s in below]
            out_lo, out_hi = hull([*manifest.l0, *below])
            return CompactionTask(
                tuple(inputs), "into_level", target_level=1,
                drop_tombstones=nothing_below(levels, 0, out_lo, out_hi),
                reason=f"L0 has {len(manifest.l0)} SSTs (trigger {self.l0_trigger})",
            )
        if best < 0:
            return self._pick_garbage(levels, now_ms)
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


    def _pick_garbage(self, levels: tuple[tuple[SstInfo, ...], ...], now_ms: int
                      ) -> CompactionTask | None:
        """No level is overfull: push down the SST with the most dead entries (tombstones and
        expired entries), if they are at least half of it and data lies below it.

        Size alone would leave tombstones in an upper level for as long as it stays under its
        target; pushing dead-heavy SSTs down one level at a time takes them to the bottom, where
        they are dropped (RocksDB's deletion-triggered compaction does the same).
        """
        best: tuple[int, int, SstInfo] | None = None
        for i, run in enumerate(levels):
            for s in run:
                dead = _dead(s, now_ms)
                if dead * 2 < s.entries or dead == 0:
                    continue
                if best is None or dead > best[0]:
                    best = (dead, i, s)
        if best is None:
            return None
        dead, i, victim = best
        if nothing_below(levels, i, victim.smallest, victim.largest):
            # Already at the bottom of its key range: rewrite it in place without the dead.
            return CompactionTask(
                (victim.id,), "into_level", target_level=i + 1, drop_tombstones=True,
                reason=f"{dead} of {victim.entries} entries of a bottom L{i + 1} SST are dead",
            )
        below = overlapping(levels[i + 1], victim.smallest, victim.largest)
        out_lo, out_hi = hull([victim, *below])
        return CompactionTask(
            (victim.id, *(s.id for s in below)), "into_level", target_level=i + 2,
            drop_tombstones=nothing_below(levels, i + 1, out_lo, out_hi),
            reason=f"{dead} of {victim.entries} entries of an L{i + 1} SST are dead",
        )


def _dead(s: SstInfo, now_ms: int) -> int:
    """Entries of ``s`` known to be dead: tombstones, plus expiring ones if all have expired."""
    expired = s.expiring if s.expiring and 0 < s.max_expiry_ms <= now_ms else 0
    return s.tombstones + expired


@hookimpl
def silt_register(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add_compaction_policy("leveled", LeveledPolicy)
