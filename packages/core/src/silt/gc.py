"""Garbage collection: delete old versions, then objects no kept version needs.

One root may hold several DBs (the shards of a Spark operator live at ``<root>/kg-a-b/``); GC of
a root considers every DB under it together, because a manifest may reference SSTs of a sibling.

The order is what makes GC safe beside live writers (DESIGN.md section 8):

1. ``cutoff = now - grace``.
2. **Candidates**: one listing of the whole root; SSTs and compaction records whose id time is
   older than the cutoff. Anything younger is never touched.
3. **Manifests**, listed *after* the candidates: per DB, keep the newest ``retain_versions``
   versions plus every version a named checkpoint pins. The oldest kept version of the newest
   ones is the DB's *horizon*.
4. **Horizon marker** ``gc/horizon/<H>`` is created *before* any manifest is deleted. A writer
   checks the markers right after creating a manifest and withdraws a version below the horizon
   (so a stalled writer can never re-create a version GC deleted and have it stand). The
   manifests are then listed again: one created between the first listing and the marker was
   checked by a writer that could not see the marker yet, so what it references is kept. Then
   the checkpoints are read again, for the same reason: a version pinned meanwhile is kept (a
   checkpoint created after that re-read sees the marker and is withdrawn by its creator).
5. Delete manifests below the horizon that no checkpoint pins; then delete the candidates that
   no kept manifest and no young compaction record references.

References between sibling DBs (:mod:`silt.siblings`): an SST referenced by a sibling's manifest
counts as referenced under its owner's folder. A DB holding ``refs/<name>`` markers may be
referenced by sibling ``<name>``: the re-listing of step 4 covers those siblings' manifests too
(all horizon markers are written before any re-listing), and when the sibling lies outside this
GC's root (GC run on the owner DB alone) no SST of the owner is deleted at all.

Why an uploaded-but-unpublished SST is safe: a writer publishes only SSTs younger than half the
grace period (older ones are copied under a new id first). An SST that is a candidate is older
than the grace period at step 2, so its writer either published it before step 2 began (and the
step-3 listing sees that manifest) or will never publish it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import paths
from .clock import Clock
from .compaction.record import CompactionRecord
from .errors import CorruptionError, NotFoundError
from .manifest import Manifest
from .settings import check_seconds
from .store import ObjectStore, retrying

MANIFEST_MARK = "/" + paths.MANIFEST_PREFIX


@dataclass
class GcReport:
    """What one GC pass found and did (``dry_run`` passes delete nothing)."""

    dbs: list[str] = field(default_factory=list)
    kept_versions: dict[str, list[int]] = field(default_factory=dict)
    horizons: dict[str, int] = field(default_factory=dict)
    deleted_manifests: list[str] = field(default_factory=list)
    deleted_ssts: list[str] = field(default_factory=list)
    deleted_records: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    dry_run: bool = False


def _split(key: str) -> tuple[str, str]:
    """``(db_prefix, rest)`` where rest starts with a known top-level folder of a DB."""
    for folder in (paths.MANIFEST_PREFIX, paths.SST_PREFIX, paths.COMPACTION_PREFIX,
                   paths.CHECKPOINT_PREFIX, paths.HORIZON_PREFIX, paths.REFS_PREFIX):
        if key.startswith(folder):
            return "", key
        i = key.find("/" + folder)
        if i >= 0:
            return key[:i + 1], key[i + 1:]
    return "", ""


def read_checkpoints(store: ObjectStore, prefix: str = "") -> dict[str, int]:
    """Named checkpoints of the DB at ``prefix``: name -> pinned version."""
    out = {}
    base = prefix + paths.CHECKPOINT_PREFIX
    for info in retrying(lambda: list(store.list(base))):
        try:
            data = json.loads(retrying(lambda key=info.key: store.get(key)))
            out[info.key[len(base):]] = int(data["version"])
        except NotFoundError:
            continue  # removed while we listed
        except (ValueError, KeyError, TypeError):
            raise CorruptionError(info.key, 0, "checkpoint object is not valid JSON") from None
    return out


def horizon(store: ObjectStore, prefix: str = "") -> int:
    """The greatest GC horizon marker of the DB at ``prefix`` (0 when GC never ran)."""
    best = 0
    for info in retrying(lambda: list(store.list(prefix + paths.HORIZON_PREFIX))):
        v = paths.parse_horizon_key(info.key[len(prefix):])
        if v is not None and v > best:
            best = v
    return best


def collect_garbage(
    store: ObjectStore,
    *,
    retain_versions: int,
    grace_seconds: float,
    clock: Clock | None = None,
    dry_run: bool = False,
) -> GcReport:
    """Run one GC pass over every DB under ``store``'s root. See the module docstring."""
    if retain_versions < 1:
        raise ValueError("retain_versions must be at least 1: GC never deletes the latest version")
    check_seconds(grace_seconds, "grace_seconds", negative_ok=True)  # a number, finite
    clock = clock or Clock()
    report = GcReport(dry_run=dry_run)
    cutoff = clock.now_ms() - int(grace_seconds * 1000)

    # 2. candidates, from one listing of everything
    ssts: dict[str, int] = {}
    records: list[str] = []
    young_records: list[tuple[str, str]] = []
    dbs: set[str] = set()
    for info in retrying(lambda: list(store.list(""))):
        db, rest = _split(info.key)
        if not rest:
            continue
        if rest.startswith(paths.MANIFEST_PREFIX):
            dbs.add(db)
        if rest.startswith(paths.REFS_PREFIX):
            continue  # read in step 4b, after the horizon markers
        sst_id = paths.parse_sst_key(rest)
        if sst_id is not None:
            dbs.add(db)
            if _id_time(sst_id) < cutoff:
                ssts[info.key] = info.size
        elif rest.startswith(paths.COMPACTION_PREFIX):
            if _id_time(rest[len(paths.COMPACTION_PREFIX):]) < cutoff:
                records.append(info.key)
            else:
                young_records.append((db, info.key))
    report.dbs = sorted(dbs)

    # 3. manifests, listed after the candidates
    referenced: set[str] = set()
    doomed_manifests: list[str] = []
    listed: dict[str, list[int]] = {}
    pinned_by: dict[str, set[int]] = {}

    def keep(db: str, manifest: Manifest) -> None:
        for s in manifest.all_ssts():
            name = _object_of(db, s.db, s.id)
            if name is not None:
                referenced.add(name)

    for db in report.dbs:
        versions = listed[db] = _versions(store, db)
        if not versions:
            continue
        pinned = pinned_by[db] = set(read_checkpoints(store, db).values())
        newest = versions[-retain_versions:]
        h = newest[0]
        kept = sorted(set(newest) | (pinned & set(versions)))
        report.kept_versions[db] = kept
        report.horizons[db] = h
        for v in kept:
            manifest = _read(store, db, v)
            if manifest is not None:
                keep(db, manifest)
        doomed_manifests += [db + paths.manifest_key(v) for v in versions
                             if v < h and v not in pinned]
    # 4. the horizon markers go first, all of them before any re-listing (a sibling that
    # references a DB checks that DB's horizon after committing: see silt.siblings)
    if not dry_run:
        for db, h in report.horizons.items():
            if h > horizon(store, db):
                retrying(lambda db=db, h=h: store.put_if_absent(db + paths.horizon_key(h), b"{}"))
    # 4b. manifests created since the listing above: their writers may have read the horizon
    # before the marker existed, so they would not withdraw. Keep what they reference this
    # pass (a writer creating a manifest after this listing sees the marker and withdraws).
    # Siblings that may reference a DB (its refs/ markers, listed again now) are covered too.
    relist = set(report.dbs)
    protected: set[str] = set()
    for db in report.dbs:
        for name in _referrers(store, db):
            sibling = _sibling_prefix(db, name)
            if sibling is None:
                protected.add(db)  # the referrer is outside this root: keep all of db's SSTs
            else:
                relist.add(sibling)
    for db in sorted(relist):
        for v in _versions(store, db):
            if v in listed.get(db, ()):
                continue
            manifest = _read(store, db, v)
            if manifest is not None:
                keep(db, manifest)
    # 4c. checkpoints created since they were read: their creators may not have seen the
    # marker either (a checkpoint creator withdraws one below a horizon it sees), so the
    # versions they pin are kept this pass too.
    for db in report.dbs:
        if db not in pinned_by:
            continue
        for v in set(read_checkpoints(store, db).values()) - pinned_by[db]:
            name = db + paths.manifest_key(v)
            if name not in doomed_manifests:
                continue
            manifest = _read(store, db, v)
            if manifest is None:
                continue
            doomed_manifests.remove(name)
            report.kept_versions[db] = sorted({*report.kept_versions[db], v})
            keep(db, manifest)

    # Outputs of compaction records that are still young may be adopted soon: keep them.
    young_outputs: set[str] = set()
    for db, key in young_records:
        try:
            rec = CompactionRecord.decode(retrying(lambda key=key: store.get(key)), key)
        except (NotFoundError, CorruptionError):
            continue
        young_outputs.update(db + paths.sst_key(s.id) for s in rec.outputs)

    # 5. delete
    garbage = [k for k in ssts if k not in referenced and k not in young_outputs
               and _split(k)[0] not in protected]
    report.deleted_manifests = doomed_manifests
    report.deleted_ssts = sorted(garbage)
    report.deleted_records = sorted(records)
    report.deleted_bytes = sum(ssts[k] for k in garbage)
    if not dry_run:
        for batch in (doomed_manifests, garbage, records):
            for i in range(0, len(batch), 1000):
                chunk = batch[i:i + 1000]
                retrying(lambda chunk=chunk: store.delete_many(chunk))
    return report


def _read(store: ObjectStore, db: str, version: int) -> Manifest | None:
    name = db + paths.manifest_key(version)
    try:
        return Manifest.decode(retrying(lambda: store.get(name)), name)
    except NotFoundError:
        return None


def _sibling_prefix(db: str, name: str) -> str | None:
    """The prefix of sibling ``name`` of the DB at prefix ``db`` (None: outside this root)."""
    if not db:
        return None
    parent = db.rstrip("/").rpartition("/")[0]
    return f"{parent}/{name}/" if parent else f"{name}/"


def _object_of(db: str, owner: str, sst_id: str) -> str | None:
    """Object name, under this GC's root, of SST ``sst_id`` listed by the DB at ``db`` and held
    by sibling ``owner`` (``""``: by that DB itself); None when the owner is outside the root."""
    if not owner:
        return db + paths.sst_key(sst_id)
    prefix = _sibling_prefix(db, owner)
    return None if prefix is None else prefix + paths.sst_key(sst_id)


def _referrers(store: ObjectStore, db: str) -> list[str]:
    """Names of the siblings that marked the DB at ``db`` as referenced (``refs/``)."""
    base = db + paths.REFS_PREFIX
    return [i.key[len(base):] for i in retrying(lambda: list(store.list(base)))]


def _versions(store: ObjectStore, db: str) -> list[int]:
    """The committed versions of the DB at prefix ``db``, ascending."""
    return sorted(
        v for v in (
            paths.parse_manifest_key(i.key[len(db):])
            for i in retrying(lambda: list(store.list(db + paths.MANIFEST_PREFIX)))
        ) if v is not None
    )


def _id_time(ulid: str) -> int:
    try:
        return paths.id_time_ms(ulid)
    except ValueError:
        return 1 << 62  # not one of ours: never a candidate
