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
                   paths.CHECKPOINT_PREFIX, paths.HORIZON_PREFIX):
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
    for db in report.dbs:
        versions = _versions(store, db)
        if not versions:
            continue
        pinned = set(read_checkpoints(store, db).values())
        newest = versions[-retain_versions:]
        h = newest[0]
        kept = sorted(set(newest) | (pinned & set(versions)))
        report.kept_versions[db] = kept
        report.horizons[db] = h
        for v in kept:
            name = db + paths.manifest_key(v)
            try:
                manifest = Manifest.decode(retrying(lambda name=name: store.get(name)), name)
            except NotFoundError:
                continue
            for s in manifest.all_ssts():
                referenced.add(db + paths.sst_key(s.id))
        doomed_manifests += [db + paths.manifest_key(v) for v in versions
                             if v < h and v not in pinned]
        # 4. the horizon marker goes first
        if not dry_run and h > horizon(store, db):
            retrying(lambda db=db, h=h: store.put_if_absent(db + paths.horizon_key(h), b"{}"))
        # 4b. manifests created since the listing above: their writers may have read the horizon
        # before the marker existed, so they would not withdraw. Keep what they reference this
        # pass (a writer creating a manifest after this listing sees the marker and withdraws).
        for v in _versions(store, db):
            if v in versions:
                continue
            name = db + paths.manifest_key(v)
            try:
                manifest = Manifest.decode(retrying(lambda name=name: store.get(name)), name)
            except NotFoundError:
                continue
            for s in manifest.all_ssts():
                referenced.add(db + paths.sst_key(s.id))
        # 4c. checkpoints created since they were read: their creators may not have seen the
        # marker either (a checkpoint creator withdraws one below a horizon it sees), so the
        # versions they pin are kept this pass too.
        for v in set(read_checkpoints(store, db).values()) - pinned:
            name = db + paths.manifest_key(v)
            if name not in doomed_manifests:
                continue
            try:
                manifest = Manifest.decode(retrying(lambda name=name: store.get(name)), name)
            except NotFoundError:
                continue
            doomed_manifests.remove(name)
            report.kept_versions[db] = sorted({*report.kept_versions[db], v})
            for s in manifest.all_ssts():
                referenced.add(db + paths.sst_key(s.id))

    # Outputs of compaction records that are still young may be adopted soon: keep them.
    young_outputs: set[str] = set()
    for db, key in young_records:
        try:
            rec = CompactionRecord.decode(retrying(lambda key=key: store.get(key)), key)
        except (NotFoundError, CorruptionError):
            continue
        young_outputs.update(db + paths.sst_key(s.id) for s in rec.outputs)

    # 5. delete
    garbage = [k for k in ssts if k not in referenced and k not in young_outputs]
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
