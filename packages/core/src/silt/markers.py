"""GC markers: what garbage collection tells writers and checkpoints, read with one LIST of ``gc/``.

Three kinds of empty, create-only objects under a DB's ``gc/`` folder (names in :mod:`silt.paths`):

* ``gc/horizon/<v>``: no version below the greatest ``v`` may be created (zombie fencing).
* ``gc/pass/<cutoff>`` is created by a GC pass before it lists manifests for the last time, and
  ``gc/pass/<cutoff>.done`` after it deleted what it deletes. A pass deletes only objects older
  than its cutoff. So a writer that created a manifest and *then* lists ``gc/`` knows: a pass
  whose marker it does not see began its last listing after the manifest existed, and keeps
  everything the manifest references. A pass it sees with a cutoff newer than the writer's
  oldest new SST may have deleted that SST (if it is done, the SSTs' existence says whether it
  did) or may still delete it (if it is not done). See ``DB._post_commit``.
* ``gc/pin/<v>.<token>``: a checkpoint pinned version ``v``, whose manifest has commit token
  ``token`` (written before the checkpoint object). A version above a pinned one, or the same
  number with another token, can never be created again: creating it means the root was rolled
  back (its newest manifests deleted), which a writer detects after committing.

The markers carry no data, so they need no checksum: a damaged or foreign name is ignored, and
a missing marker only makes writers more cautious (horizon, pass) or rollback undetected (pin).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import paths
from .store import ObjectStore, retrying


@dataclass(frozen=True)
class GcMarkers:
    """The GC markers of one DB. ``passes`` maps a pass's cutoff (ms) to whether it is done."""

    horizon: int = 0
    passes: dict[int, bool] = field(default_factory=dict)
    #: ``(version, commit token)`` of every pinned version.
    pins: tuple[tuple[int, str], ...] = ()

    def passes_after(self, oldest_ms: int) -> tuple[list[int], list[int]]:
        """Passes whose cutoff is newer than ``oldest_ms`` (so they may delete an unreferenced
        object created then): ``(running, done)`` cutoffs."""
        running = sorted(c for c, done in self.passes.items() if c > oldest_ms and not done)
        done = sorted(c for c, d in self.passes.items() if c > oldest_ms and d)
        return running, done


def read_markers(store: ObjectStore, db: str = "") -> GcMarkers:
    """All GC markers of the DB at prefix ``db`` (one LIST)."""
    horizon = 0
    passes: dict[int, bool] = {}
    pins: list[tuple[int, str]] = []
    for info in retrying(lambda: list(store.list(db + paths.GC_PREFIX))):
        rest = info.key[len(db):]
        v = paths.parse_horizon_key(rest)
        if v is not None:
            horizon = max(horizon, v)
            continue
        pin = paths.parse_pin_key(rest)
        if pin is not None:
            pins.append(pin)
            continue
        parsed = paths.parse_pass_key(rest)
        if parsed is not None:
            cutoff, done = parsed
            passes[cutoff] = passes.get(cutoff, False) or done
    return GcMarkers(horizon=horizon, passes=passes, pins=tuple(pins))
