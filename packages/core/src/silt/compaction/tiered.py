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
    """Size-tiered compaction.

    * At ``l0_compaction_trigger`` L0 SSTs, L0 becomes a new run; the newest runs join it when
      they form a group of similar size with it (at least ``MIN_MERGE_WIDTH`` runs, each next
      run at most ``level_size_ratio / 2`` times the sum so far), and every run joins it when
      the tree would otherwise hold more than ``tiered_max_runs`` runs.
    * Otherwise the newest runs are merged when they form such a group, and all runs when there
      are more than ``tiered_max_runs``.

    L0 is flushed first and absorbs the run merges, so a steady stream of flushes can never keep
    the runs from being merged (their number stays bounded).
    """

    MIN_MERGE_WIDTH = 4

    def __init__(self, settings: Settings) -> None:
        self.l0_trigger = settings.l0_compaction_trigger
        self.ratio = settings.level_size_ratio
        self.max_runs = settings.tiered_max_runs

    def _group(self, first_bytes: int, runs: list) -> int:  # type: ignore[type-arg]
        """How many of ``runs`` (newest first) join a run of ``first_bytes`` as similar."""
        total, width = first_bytes, 0
        while width < len(runs) and run_bytes(runs[width]) <= total * self.ratio / 2:
            total += run_bytes(runs[width])
            width += 1
        return width

    def pick(self, manifest: Manifest, now_ms: int) -> CompactionTask | None:
        runs = [r for r in manifest.levels if r]
        if len(manifest.l0) >= self.l0_trigger:
            width = self._group(run_bytes(manifest.l0), runs)
            reason = f"L0 has {len(manifest.l0)} SSTs (trigger {self.l0_trigger})"
            if len(runs) + 1 > self.max_runs:
                width = len(runs)
                reason += f", and {len(runs) + 1} runs > {self.max_runs}"
            elif width + 1 < self.MIN_MERGE_WIDTH:
                width = 0
            else:
                reason += f", with {width} runs of similar size"
            inputs = tuple(s.id for s in manifest.l0) + tuple(
                s.id for run in runs[:width] for s in run
            )
            return CompactionTask(inputs, "new_run", drop_tombstones=width == len(runs),
                                  reason=reason)
        if len(runs) > self.max_runs:
            return self._merge(runs, len(runs), f"{len(runs)} runs > {self.max_runs}")
        width = 1 + self._group(run_bytes(runs[0]), runs[1:]) if runs else 0
        if width >= self.MIN_MERGE_WIDTH:
            return self._merge(runs, width, f"{width} runs of similar size")
        return None

    @staticmethod
    def _merge(runs, width: int, reason: str) -> CompactionTask:  # type: ignore[no-untyped-def]
        inputs = tuple(s.id for run in runs[:width] for s in run)
        return CompactionTask(inputs, "new_run", drop_tombstones=width == len(runs), reason=reason)


@hookimpl
def silt_register(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add_compaction_policy("tiered", TieredPolicy)
