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

* ``gc/grace/<ms>``: a writer's GC grace (:mod:`silt.graces`), read by GC; the listing here
  keeps their values (``GcMarkers.graces``) only so that a writer that finds its own grace
  announced need not announce it again (the markers are never deleted while a writer that
  uses that grace may still commit).

* ``epoch/<n>``: whoever writes one of the markers above then creates the next epoch object
  (create-only: the smallest number not taken yet; named downwards, so the first name of a
  listing is the newest). A writer that read the markers when the greatest epoch was ``n`` and
  later finds no epoch ``n+1`` (one GET, :func:`refresh`) knows that no marker was written
  since, or that whoever is writing one has not finished: a GC pass bumps the epoch before its
  last listing of manifests, so it will see a manifest created before that GET. Warm commits so
  cost one GET of a missing object instead of a LIST. Epoch objects are never deleted (a
  writer's GET of a deleted successor would miss a change); they are empty and only the first
  page of their folder is ever listed.

The markers carry no data, so they need no checksum: a damaged or foreign name is ignored. A
*missing* marker is not detectable: a deleted horizon or pass marker lets a stale or stalled
commit stand that should have been withdrawn, a deleted pin marker leaves a rollback undetected,
and a deleted epoch object hides a change from warm writers. Never delete them by hand; GC
removes only pass markers of finished passes and horizon markers below the greatest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import paths
from .errors import NotFoundError
from .store import ObjectStore, retrying


@dataclass(frozen=True)
class GcMarkers:
    """The GC markers of one DB. ``passes`` maps a pass's cutoff (ms) to whether it is done."""

    horizon: int = 0
    passes: dict[int, bool] = field(default_factory=dict)
    #: ``(version, commit token)`` of every pinned version.
    pins: tuple[tuple[int, str], ...] = ()
    #: The greatest epoch object seen (0: none; see the module docstring).
    epoch: int = 0
    #: Every horizon marker (GC drops all but the greatest).
    horizons: tuple[int, ...] = ()
    #: The writer graces (ms) announced under ``gc/grace/`` (:mod:`silt.graces`) when listed;
    #: empty when unknown (markers handed over or refreshed by a GET carry the last listing's).
    graces: tuple[int, ...] = ()

    def passes_after(self, oldest_ms: int) -> tuple[list[int], list[int]]:
        """Passes whose cutoff is newer than ``oldest_ms`` (so they may delete an unreferenced
        object created then): ``(running, done)`` cutoffs."""
        running = sorted(c for c, done in self.passes.items() if c > oldest_ms and not done)
        done = sorted(c for c, d in self.passes.items() if c > oldest_ms and d)
        return running, done


def newest_epoch(store: ObjectStore, db: str = "") -> int:
    """The greatest epoch object of the DB at prefix ``db``, 0 with none (one LIST)."""
    first = retrying(lambda: next(iter(store.list(db + paths.EPOCH_PREFIX)), None))
    return 0 if first is None else (paths.parse_epoch_key(first.key[len(db):]) or 0)


def read_markers(store: ObjectStore, db: str = "", *, epoch: int | None = None) -> GcMarkers:
    """All GC markers of the DB at prefix ``db`` (two LISTs: the newest epoch, then ``gc/``).

    ``epoch``: an epoch known to exist *before this call* (read before, or at once with an
    earlier request): the first LIST is skipped and the markers record that epoch. Every
    marker whose bump that epoch includes was written before it, so before the listing of
    ``gc/`` here, which sees it (the same reason the epoch is listed first otherwise)."""
    horizon = 0
    passes: dict[int, bool] = {}
    pins: list[tuple[int, str]] = []
    horizons: list[int] = []
    graces: list[int] = []
    # The epoch first: markers written before it are in the listing that follows.
    if epoch is None:
        epoch = newest_epoch(store, db)
    for info in retrying(lambda: list(store.list(db + paths.GC_PREFIX))):
        rest = info.key[len(db):]
        v = paths.parse_horizon_key(rest)
        if v is not None:
            horizon = max(horizon, v)
            horizons.append(v)
            continue
        pin = paths.parse_pin_key(rest)
        if pin is not None:
            pins.append(pin)
            continue
        parsed = paths.parse_pass_key(rest)
        if parsed is not None:
            cutoff, done = parsed
            passes[cutoff] = passes.get(cutoff, False) or done
            continue
        grace = paths.parse_grace_key(rest)
        if grace is not None:
            graces.append(grace)
    return GcMarkers(horizon=horizon, passes=passes, pins=tuple(pins), epoch=epoch,
                     horizons=tuple(horizons), graces=tuple(sorted(graces)))


def unchanged(store: ObjectStore, known: GcMarkers, db: str = "") -> bool:
    """Whether no marker was written since ``known`` was read (one GET of the next epoch's
    name, which does not exist while nothing changed). ``known.epoch`` may be 0: the first
    marker writer of a root creates epoch 1."""
    try:
        retrying(lambda: store.get(db + paths.epoch_key(known.epoch + 1)))
    except NotFoundError:
        return True
    return False


def refresh(store: ObjectStore, known: GcMarkers | None, db: str = "") -> GcMarkers:
    """The markers now: ``known`` itself when its epoch has no successor yet (one GET,
    :func:`unchanged`; on a root where no marker was ever written, the GET of epoch 1), else
    a listing of ``gc/`` (one LIST: the successor the GET found is the epoch the new markers
    record, as it existed before the listing; a later refresh finds any newer one). With
    nothing known, a listing of both (two LISTs)."""
    if known is None:
        return read_markers(store, db)
    if unchanged(store, known, db):
        return known
    return read_markers(store, db, epoch=known.epoch + 1)


def bump_epoch(store: ObjectStore, db: str = "", *, known: int = 0) -> int:
    """Create the next epoch object after writing markers; returns its number. ``known``: an
    epoch known to exist (saves probing from 1)."""
    epoch = known + 1
    for _ in range(64):
        if retrying(lambda epoch=epoch: store.put_if_absent(db + paths.epoch_key(epoch), b"")):
            return epoch
        epoch += 1
    epoch = read_markers(store, db).epoch + 1  # far behind: list, then try past the greatest
    while not retrying(lambda epoch=epoch: store.put_if_absent(db + paths.epoch_key(epoch), b"")):
        epoch += 1
    return epoch
