"""Size-tiered compaction: L0 becomes a new sorted run; runs of similar size are merged.

``manifest.levels`` is a list of sorted runs, newest first. A task merges an L0 suffix and/or
adjacent whole runs into one run that takes their place, so recency order is kept.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..manifest import Manifest
from ..settings import Settings
from .layout import run_bytes
from .task import CompactionTask


class TieredPolicy:
    """Flush L0 into a run at ``l0_compaction_trigger``; merge the newest runs while each next
    run is at most ``level_size_ratio`` times the sum so far; merge everything when there are
    more than ``tiered_max_runs`` runs."""

    def __init__(self, settings: Settings) -> None:
        self.l0_trigger = settings.l0_compaction_trigger
        self.ratio = settings.level_size_ratio
        self.max_runs = settings.tiered_max_runs

    def pick(self, manifest: Manifest, now_ms: int) -> CompactionTask | None:
        runs = [r for r in manifest.levels if r]
        if len(manifest.l0) >= self.l0_trigger:
            return CompactionTask(
                tuple(s.id for s in manifest.l0), "new_run", drop_tombstones=not runs,
                reason=f"L0 has {len(manifest.l0)} SSTs (trigger {self.l0_trigger})",
            )
        if len(runs) > self.max_runs:
            return self._merge(runs, len(runs), f"{len(runs)} runs > {self.max_runs}")
        # Newest runs first: grow the group while the next run is not much larger than it.
        total = run_bytes(runs[0]) if runs else 0
        width = 1
        while width < len(runs) and run_bytes(runs[width]) <= total * self.ratio / 2:
            total += run_bytes(runs[width])
            width += 1
        if width >= 4:
            return self._merge(runs, width, f"{width} runs of similar size")
        return None

    @staticmethod
    def _merge(runs, width: int, reason: str) -> CompactionTask:  # type: ignore[no-untyped-def]
        inputs = tuple(s.id for run in runs[:width] for s in run)
        return CompactionTask(inputs, "new_run", drop_tombstones=width == len(runs), reason=reason)


@hookimpl
def silt_register(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add_compaction_policy("tiered", TieredPolicy)
