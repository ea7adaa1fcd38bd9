"""Pinning a version with a named checkpoint, safely beside its writer and GC.

:func:`pin` creates ``checkpoint/<name>`` (create-only: naming a version twice is fine,
re-pointing a name is an error), then checks that the version can be kept:

* below the GC horizon it may already be collected: refused;
* committed by another handle, its writer may still be finishing that commit and could withdraw
  it (:mod:`silt.commit`): the checkpoint **settles** it first, by creating the version's fate
  record as ``settled`` (the same create-only name a withdrawal uses, so exactly one of the two
  wins). It settles only when no GC pass that could collect the version's new SSTs is still
  running, and when the passes that are done left them all in place; otherwise it refuses.

A refused checkpoint is deleted again. Before all this, ``gc/pin/<v>.<token>`` records that the
number ``v`` named the manifest with that commit token (rollback detection, :mod:`silt.markers`).
"""

from __future__ import annotations

import re
import uuid

from . import paths
from .checkpoints import decode_checkpoint, encode_checkpoint
from .clock import Clock
from .errors import (
    AlreadyExistsError,
    CorruptionError,
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    VersionNotFoundError,
)
from .gc import read_checkpoints
from .manifest import Manifest
from .markers import GcMarkers, bump_epoch, read_markers
from .postcheck import all_exist
from .store import ObjectStore, retrying
from .versions import SETTLED, Fate, read_fate

_CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


def check_checkpoint_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidTypeError(f"a checkpoint name must be a str, got {type(name).__name__}")
    if not _CHECKPOINT_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"checkpoint names are 1-128 characters of letters, digits, '.', '_' and '-', got "
            f"{name!r}"
        )
    return name


def checkpoint(store: ObjectStore, url: str, manifest: Manifest | None, name: object,
               clock: Clock, confirmed: int | None) -> int:
    """``DB.checkpoint``: check ``name``, then :func:`pin` the base version ``manifest`` of the
    DB at ``url`` whose last version committed and checked here is ``confirmed``."""
    name = check_checkpoint_name(name)
    if manifest is None:
        raise InvalidArgumentError("nothing is committed yet: commit before checkpointing")
    return pin(store, url, manifest, name, clock,
               committed_here=manifest.version == confirmed)


def pin(store: ObjectStore, url: str, manifest: Manifest, name: str, clock: Clock, *,
        committed_here: bool) -> int:
    """Pin ``manifest``'s version under checkpoint ``name``; returns the version.

    ``committed_here``: the caller committed this version itself and its checks passed (no
    settling needed). Raises :class:`VersionNotFoundError` when the version cannot be kept.
    """
    version = manifest.version
    known = read_markers(store)
    if retrying(lambda: store.put_if_absent(paths.pin_key(version, manifest.token), b"")):
        bump_epoch(store, known=known.epoch)
    key = paths.checkpoint_key(name)
    token = uuid.uuid4().hex
    body = encode_checkpoint(version, clock.now_ms(), token)
    created = retrying(lambda: store.put_if_absent(key, body))
    if not created:
        pinned = read_checkpoints(store).get(name)
        if pinned != version:
            raise AlreadyExistsError(
                f"checkpoint {name!r} already pins version {pinned} of {url!r}; choose another "
                "name"
            )
        try:  # a lost response whose retry found our own object?
            created = decode_checkpoint(retrying(lambda: store.get(key)), key).token == token
        except (NotFoundError, CorruptionError):
            created = False
    if not created:
        return version
    markers = read_markers(store)
    refusal = None
    if version < markers.horizon:
        # GC has passed this version (it may already be deleted, or be deleted by a GC pass
        # that read the checkpoints before this one existed).
        refusal = (
            f"version {version} of {url!r} is below the garbage-collection horizon "
            f"{markers.horizon} and may be collected, so it cannot be checkpointed; checkpoint a "
            "newer version"
        )
    elif not committed_here:
        refusal = settle(store, url, manifest, markers)
    if refusal is not None:
        retrying(lambda: store.delete_many([key]))
        raise VersionNotFoundError(refusal)
    return version


def settle(store: ObjectStore, url: str, manifest: Manifest, markers: GcMarkers) -> str | None:
    """Create ``manifest``'s fate record saying ``settled`` (its writer cannot withdraw it any
    more), after checking that no GC pass may collect what it newly published. Returns why it
    cannot be settled, or None."""
    version = manifest.version
    ids = new_ssts(store, manifest)
    if ids:
        running, done = markers.passes_after(min(paths.id_time_ms(i) for i in ids))
        if running:
            return (
                f"version {version} of {url!r} cannot be checkpointed yet: its commit may still "
                f"be withdrawn, as a garbage-collection pass (cutoff {running[-1]}) that may "
                "collect its SSTs is running. Retry when GC is done, or checkpoint a newer "
                "version"
            )
        if done and not all_exist(store, ids):  # type: ignore[arg-type]
            return (
                f"version {version} of {url!r} lost SSTs to garbage collection (its commit "
                "stalled past the grace period) and is being withdrawn; checkpoint another "
                "version"
            )
    fate = Fate(version, SETTLED, "pinned by a checkpoint", manifest.token)
    name = paths.fate_key(version)
    if retrying(lambda: store.put_if_absent(name, fate.encode())):
        return None
    existing = read_fate(store, version)
    if existing is not None and existing.withdraws(manifest):
        return (
            f"version {version} of {url!r} was withdrawn by its writer ({existing.reason}); "
            "checkpoint another version"
        )
    return None


def new_ssts(store: ObjectStore, manifest: Manifest) -> list[str]:
    """Ids of the SSTs ``manifest`` published itself (not in its parent's state, not
    references). Reads the parent manifests it needs (a reservation or a withdrawn version
    stands for its own parent)."""
    own = {s.id for s in manifest.objects() if not s.db}
    parent = manifest.parent
    for _ in range(8):
        if parent is None or not own:
            return sorted(own)
        name = paths.manifest_key(parent)
        try:
            pm = Manifest.decode(retrying(lambda name=name: store.get(name)), name)
        except NotFoundError:
            return sorted(own)  # collected: count every SST as new
        fate = read_fate(store, parent)
        if pm.skip_to is None and (fate is None or not fate.withdraws(pm)):
            return sorted(own - {s.id for s in pm.all_ssts()})
        parent = pm.parent
    return sorted(own)
