"""Finding the latest version not greater than a number from an open DB's version, with GETs
instead of a LIST when that can be proved right (:meth:`silt.DB.advance`).

A listing of ``manifest/`` answers "the latest live version ``<= at_most``" for any root
(:func:`latest_at_most`: one LIST of manifests, one GET per fate record, one of the manifest).
A handle that already holds version ``v`` and knows the GC markers (:mod:`silt.markers`, read by
its last commit) can often answer with GETs (:func:`probe_at_most`):

1. probe ``manifest/<at_most>``, ``at_most - 1``, ... down to ``v + 1``, at most
   :data:`PROBES` numbers; each found manifest is read with its fate record
   (:func:`silt.versions.read_manifest`), exactly as a listing judges it: a withdrawn version
   (or a manifest a settled record of another token withdraws) is skipped, a reservation
   (``skip_to``) is a version with its base's state. A number inside a range a reservation
   skipped, or one never committed, has no manifest;
2. when no live manifest is found and every number down to ``v + 1`` was probed, the answer is
   ``v`` itself, once its fate record shows it was not withdrawn since;
3. last, one GET of the next GC epoch's name (:func:`silt.markers.unchanged`): while it does not
   exist no GC pass has begun its last listing of manifests since the markers were read, so a
   missing manifest in the probed range was never created, not collected.

It answers nothing (so the caller lists) when it cannot prove the answer: the GC markers are
not known, a GC pass was running when they were read, ``v`` is below the GC horizon (GC may be
collecting around it), ``at_most`` is below ``v``, more than :data:`PROBES` numbers would need a
probe, ``v`` was withdrawn, or the epoch moved. A commit from the version found then runs the
same checks after it as any other (:mod:`silt.commit`): the horizon, rollback and the base's
SSTs.
"""

from __future__ import annotations

from typing import Any

from . import paths
from .errors import InvalidArgumentError, InvalidTypeError, VersionNotFoundError
from .manifest import Manifest
from .markers import GcMarkers, unchanged
from .store import ObjectStore
from .versions import list_versions, read_fate, read_manifest

#: Version numbers below ``at_most`` a warm advance probes with GETs (two each when the
#: manifest exists, one when it does not) before it lists instead. A stream processor's shard
#: is usually behind by one or two batches of another worker process; idle batches leave gaps.
PROBES = 3


def check_at_most(at_most: Any) -> None:
    """Refuse an ``at_most`` that is not an int in ``-1..paths.MAX_VERSION`` (-1: nothing)."""
    if isinstance(at_most, bool) or not isinstance(at_most, int):
        raise InvalidTypeError(f"at_most must be an int version, got {type(at_most).__name__}")
    if not -1 <= at_most <= paths.MAX_VERSION:
        raise InvalidArgumentError(
            f"at_most must be between -1 (open empty) and {paths.MAX_VERSION}, got {at_most}"
        )


def latest_at_most(store: ObjectStore, at_most: int | None) -> tuple[Manifest | None, list[int]]:
    """The manifest of the latest live version ``<= at_most`` (any with ``None``), or ``None``
    when there is none, and every live version the listing found: one LIST, then the
    manifest's GETs."""
    listed = list_versions(store).versions
    found = listed if at_most is None else [v for v in listed if v <= at_most]
    return (read_manifest(store, found[-1]) if found else None), listed


def probe_at_most(store: ObjectStore, base: Manifest, markers: GcMarkers | None,
                  at_most: int) -> Manifest | None:
    """The manifest of the latest live version ``<= at_most``, found with GETs from ``base``
    (the handle's version, live when it was installed) and the GC markers ``markers`` known to
    the handle; ``None`` when that cannot be proved (then list: :func:`latest_at_most`). See
    the module docstring."""
    v = base.version
    if (markers is None or at_most < v or v < markers.horizon
            or not all(markers.passes.values())):
        return None
    lowest = max(v + 1, at_most - PROBES + 1)
    found: Manifest | None = None
    for n in range(at_most, lowest - 1, -1):
        try:
            found = read_manifest(store, n)
        except VersionNotFoundError:
            continue  # never created, inside a reserved range, or withdrawn
        break
    if found is None:
        if lowest > v + 1:
            return None  # numbers left unprobed
        fate = read_fate(store, v)
        if fate is not None and fate.withdraws(base):
            return None
        found = base
    return found if unchanged(store, markers) else None
