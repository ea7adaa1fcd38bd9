"""``everything-into-one-run``: an example third-party compaction policy for silt.

At ``Settings.l0_compaction_trigger`` L0 SSTs, merge L0 and every sorted run into one new run.
Pure: ``pick`` reads only the manifest, so it can be tested with no I/O.
"""

from __future__ import annotations

import silt
from silt.compaction import CompactionTask
from silt.manifest import Manifest

NAME = "everything-into-one-run"


class EverythingIntoOneRun:
    """Merge everything into one sorted run whenever L0 reaches the trigger."""

    def __init__(self, settings: silt.Settings) -> None:
        self.trigger = settings.l0_compaction_trigger

    def pick(self, manifest: Manifest, now_ms: int) -> CompactionTask | None:
        if len(manifest.l0) < self.trigger:
            return None
        inputs = tuple(s.id for s in manifest.all_ssts())
        return CompactionTask(
            inputs, "new_run", drop_tombstones=True,
            reason=f"{NAME}: L0 has {len(manifest.l0)} SSTs",
        )


@silt.hookimpl
def silt_register(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add_compaction_policy(NAME, EverythingIntoOneRun)
