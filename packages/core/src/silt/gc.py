"""Garbage collection: delete old versions, then objects no kept version needs.

One root may hold several DBs (the shards of a Spark operator live at ``<root>/kg-a-b/``); GC of
a root considers every DB under it together, because a manifest may reference SSTs of a sibling.

The order is what makes GC safe beside live writers (docs/safety.md):

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
6. Ask the tier to remove what writes interrupted long ago left in its own scratch space
   (:meth:`~silt.store.ObjectStore.remove_stale_temporaries`: ``file://``'s ``.tmp/``) for
   each DB, if older than the grace period (and never younger than a minute).

References between sibling DBs (:mod:`silt.siblings`): an SST referenced by a sibling's manifest
counts as referenced under its owner's folder. A DB holding ``refs/<name>`` markers may be
referenced by sibling ``<name>``: the re-listing of step 4 covers those siblings' manifests too
(all horizon markers are written before any re-listing), and when the sibling lies outside this
GC's root (GC run on the owner DB alone) no SST of the owner is deleted at all.

Why an uploaded-but-unpublished SST is safe: a writer publishes only SSTs younger than half its
grace period (older ones are copied under a new id first), and GC refuses, before step 4, a
grace shorter than that of any writer that may still commit: every writer announces its grace
before its first upload, and GC lists those announcements after step 2 (:mod:`silt.graces`; the
newest manifest's recorded grace, or the default, counts too, for writers older than the
announcements). An SST that is a candidate is older than GC's grace at step 2, hence than its
writer's, so its writer either published it before step 2 began (and the step-3 listing sees
that manifest) or will never publish it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import paths
from .arguments import check_flag
from .checkpoints import decode_checkpoint
from .clock import Clock
from .compaction.record import CompactionRecord
from .errors import CorruptionError, InvalidArgumentError, InvalidTypeError, NotFoundError
from .graces import check_grace, required_grace
from .manifest import Manifest
from .markers import bump_epoch, read_markers
from .metrics import Metrics
from .progress import Progress
from .settings import Settings
from .store import ObjectStore, retrying
from .tierkit import name_problem
from .versions import list_versions

#: The grace assumed for a DB whose manifests do not record their writers' (none committed yet,
#: or written by an older silt): the default ``Settings.gc_grace_seconds``.
DEFAULT_GRACE_MS = int(Settings().gc_grace_seconds * 1000)
#: A pass marker that never got its ``.done`` is dropped after this long (its pass crashed).
ABANDONED_PASS_MS = 7 * 24 * 3600 * 1000

MANIFEST_MARK = "/" + paths.MANIFEST_PREFIX
#: Temporaries younger than this are never removed, whatever the grace (a write in flight).
TEMP_MIN_AGE_SECONDS = 60.0


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
    removed_temporaries: int = 0
    dry_run: bool = False


def read_checkpoints(store: ObjectStore, prefix: str = "") -> dict[str, int]:
    """Named checkpoints of the DB at ``prefix``: name -> pinned version.

    Raises :class:`CorruptionError` for a damaged checkpoint object: GC cannot tell what it pins.
    """
    out = {}
    base = prefix + paths.CHECKPOINT_PREFIX
    for info in retrying(lambda: list(store.list(base))):
        try:
            data = retrying(lambda key=info.key: store.get(key))
        except NotFoundError:
            continue  # removed while we listed
        out[info.key[len(base):]] = decode_checkpoint(data, info.key).version
    return out


def horizon(store: ObjectStore, prefix: str = "") -> int:
    """The greatest GC horizon marker of the DB at ``prefix`` (0 when GC never ran)."""
    return read_markers(store, prefix).horizon


def check_retain(retain_versions: object) -> int:
    """Validate a number of versions to retain: an int >= 1."""
    if isinstance(retain_versions, bool) or not isinstance(retain_versions, int):
        raise InvalidTypeError(
            f"retain_versions must be an int, got {type(retain_versions).__name__}"
        )
    if retain_versions < 1:
        raise InvalidArgumentError(
            f"retain_versions must be at least 1 (GC never deletes the latest version), got "
            f"{retain_versions}"
        )
    return retain_versions


def collect_for(store: ObjectStore, settings: Settings, clock: Clock, metrics: Metrics,
                retain_versions: int | None, grace_seconds: float | None,
                dry_run: bool) -> GcReport:
    """:func:`collect_garbage` run by an open DB (``DB.gc``) whose settings are ``settings``,
    its requests counted under the purpose ``gc``: ``None`` takes the DB's defaults. A grace
    shorter than the DB's own ``gc_grace_seconds`` is refused: GC could then delete SSTs this
    writer uploaded and has not committed yet."""
    check_flag(dry_run, "dry_run")
    if retain_versions is None:
        retain_versions = settings.retain_versions
    if grace_seconds is None:
        grace_seconds = settings.gc_grace_seconds
    else:
        check_grace(grace_seconds)
        if grace_seconds < settings.gc_grace_seconds:
            raise InvalidArgumentError(
                f"grace_seconds={grace_seconds!r} is shorter than this DB's "
                f"Settings.gc_grace_seconds={settings.gc_grace_seconds}: GC could "
                "delete SSTs this writer uploaded and has not committed yet. Use a grace "
                "at least that long, or open the DB with a shorter gc_grace_seconds"
            )
    with metrics.purpose("gc"):
        return collect_garbage(store, retain_versions=retain_versions,
                               grace_seconds=grace_seconds, clock=clock, dry_run=dry_run)


def collect_garbage(
    store: ObjectStore,
    *,
    retain_versions: int,
    grace_seconds: float,
    clock: Clock | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> GcReport:
    """Run one GC pass over every DB under ``store``'s root. See the module docstring.

    Raises :class:`InvalidArgumentError`, before deleting or writing anything, when
    ``grace_seconds`` is shorter than the ``gc_grace_seconds`` any writer of a DB announced
    (:mod:`silt.graces`), or than the one the DB's newest manifest records (the default, for a
    DB with no such record): GC could then delete SSTs a writer uploaded and has not committed
    yet.

    ``progress`` (:mod:`silt.progress`) hears of each DB whose versions were read (``"DBs"``)
    and of the objects deleted (``"objects"``, in batches; not with ``dry_run``).
    """
    retain_versions = check_retain(retain_versions)
    grace_ms = int(check_grace(grace_seconds) * 1000)
    clock = clock or Clock()
    report = GcReport(dry_run=dry_run)
    cutoff = clock.now_ms() - grace_ms

    # 2. candidates, from one listing of everything
    ssts: dict[str, int] = {}
    records: list[str] = []
    young_records: list[tuple[str, str]] = []
    dbs: set[str] = set()
    present: set[str] = set()  # every SST object listed
    for info in retrying(lambda: list(store.list(""))):
        db, rest = paths.split_db(info.key)
        if not rest:
            continue
        if rest.startswith(paths.MANIFEST_PREFIX):
            dbs.add(db)
        if rest.startswith(paths.REFS_PREFIX):
            continue  # read in step 4b, after the horizon markers
        sst_id = paths.parse_sst_key(rest)
        if sst_id is not None:
            dbs.add(db)
            present.add(info.key)
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
        for s in manifest.objects():  # inline SSTs are no objects (silt.inline)
            name = _object_of(db, s.db, s.id)
            if name is not None:
                referenced.add(name)

    required: dict[str, int] = {}  # db -> the grace its writers asked for (ms)
    doomed_fates: list[str] = []
    for done, db in enumerate(report.dbs):
        if progress is not None:
            progress("DBs", done, len(report.dbs))
        listing = list_versions(store, db)
        versions = listed[db] = listing.versions
        required[db] = DEFAULT_GRACE_MS
        if not versions:
            continue
        pinned = pinned_by[db] = set(read_checkpoints(store, db).values())
        # The newest retain_versions versions whose SSTs all exist count as retained; newer
        # ones with an SST missing (a commit stalled past the grace period whose writer has not
        # withdrawn it yet, or one created after the listing above) are kept besides, so that
        # the horizon never passes the last intact version.
        newest: list[int] = []
        manifests: dict[int, Manifest] = {}
        intact = 0
        for v in reversed(versions):
            manifest = _read(store, db, v)
            newest.append(v)
            if manifest is None:
                continue
            manifests[v] = manifest
            if v == versions[-1] and manifest.gc_grace_ms is not None:
                required[db] = manifest.gc_grace_ms
            names = (_object_of(db, s.db, s.id) for s in manifest.objects())
            if all(name is None or name in present for name in names):
                intact += 1
                if intact >= retain_versions:
                    break
        h = min(newest)
        kept = sorted(set(newest) | (pinned & set(versions)))
        report.kept_versions[db] = kept
        report.horizons[db] = h
        for v in kept:
            manifest = manifests.get(v) or _read(store, db, v)
            if manifest is not None:
                keep(db, manifest)
        doomed_manifests += [db + paths.manifest_key(v) for v in versions
                             if v < h and v not in pinned]
        # Withdrawn versions below the horizon: manifest first, then its fate record (a fate
        # record alone still keeps the number from being reused; below the horizon no writer
        # may create it anyway). Fate records of deleted versions go with them.
        doomed_manifests += [db + paths.manifest_key(v) for v in listing.withdrawn if v < h]
        doomed_fates += [db + paths.fate_key(v) for v in listing.fates
                         if v < h and (v not in pinned or v in listing.withdrawn)]
    if progress is not None:
        progress("DBs", len(report.dbs), len(report.dbs))
    # every writer that may still commit announced its grace before uploading (silt.graces):
    # listed after the candidates, so the writer of any candidate is among them
    required = {db: required_grace(store, db, ms) for db, ms in required.items()}
    short = {db: ms for db, ms in required.items() if grace_ms < ms}
    if short:
        db, ms = max(short.items(), key=lambda item: item[1])
        raise InvalidArgumentError(
            f"a GC grace of {grace_ms / 1000:g}s is shorter than the {ms / 1000:g}s "
            f"(Settings.gc_grace_seconds) that a writer of {db or 'the root'!r} uses: GC could "
            "delete SSTs a writer uploaded and has not committed yet. Use a grace of at least "
            f"{ms / 1000:g}s (nothing was deleted); to lower the writers' grace see "
            "silt.graces.lower_grace"
        )
    # 4. the horizon markers go first, all of them before any re-listing (a sibling that
    # references a DB checks that DB's horizon after committing: see silt.siblings)
    # The pass markers first: a writer that commits after this and sees one of them knows
    # that this pass may not see its manifest (see silt.markers and DB._check_age).
    if not dry_run:
        for db in report.dbs:
            known = read_markers(store, db)
            retrying(lambda db=db: store.put_if_absent(db + paths.pass_key(cutoff), b""))
            h = report.horizons.get(db)
            if h is not None and h > known.horizon:
                retrying(lambda db=db, h=h: store.put_if_absent(db + paths.horizon_key(h), b"{}"))
            # Writers that check the epoch instead of listing see the markers from now on.
            bump_epoch(store, db, known=known.epoch)
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
        for v in list_versions(store, db).versions:
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
            if name not in doomed_manifests and v in listed.get(db, ()):
                continue  # listed and kept already
            manifest = _read(store, db, v)
            if manifest is None:
                continue
            if name in doomed_manifests:
                doomed_manifests.remove(name)
            fate = db + paths.fate_key(v)
            if fate in doomed_fates:
                doomed_fates.remove(fate)
            report.kept_versions[db] = sorted({*report.kept_versions.get(db, ()), v})
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
               and paths.split_db(k)[0] not in protected]
    report.deleted_manifests = doomed_manifests
    report.deleted_ssts = sorted(garbage)
    report.deleted_records = sorted(records)
    report.deleted_bytes = sum(ssts[k] for k in garbage)
    if not dry_run:
        total = len(doomed_manifests) + len(doomed_fates) + len(garbage) + len(records)
        deleted = 0
        for batch in (doomed_manifests, doomed_fates, garbage, records):
            for i in range(0, len(batch), 1000):
                chunk = batch[i:i + 1000]
                retrying(lambda chunk=chunk: store.delete_many(chunk))
                deleted += len(chunk)
                if progress is not None:
                    progress("objects", deleted, total)
        for db in report.dbs:
            _finish_pass(store, db, cutoff, clock.now_ms())
        # Temporaries of writes interrupted long ago (file:// ``.tmp/``), by the tier's clock.
        for db in sorted({"", *report.dbs}):
            report.removed_temporaries += store.remove_stale_temporaries(
                db, max(grace_seconds, TEMP_MIN_AGE_SECONDS))
    return report


def _finish_pass(store: ObjectStore, db: str, cutoff: int, now_ms: int) -> None:
    """Mark this pass done, then drop the markers of older passes that are done (this pass's
    markers have a greater cutoff and say the same to writers) or long abandoned."""
    retrying(lambda: store.put_if_absent(db + paths.pass_done_key(cutoff), b""))
    markers = read_markers(store, db)
    bump_epoch(store, db, known=markers.epoch)
    stale = []
    for c, done in markers.passes.items():
        if c < cutoff and (done or c < now_ms - ABANDONED_PASS_MS):
            stale += [db + paths.pass_key(c), db + paths.pass_done_key(c)]
    # Older horizon markers say nothing the greatest does not.
    stale += [db + paths.horizon_key(h) for h in markers.horizons if h < markers.horizon]
    if stale:
        retrying(lambda: store.delete_many(stale))


def _read(store: ObjectStore, db: str, version: int) -> Manifest | None:
    name = db + paths.manifest_key(version)
    try:
        return Manifest.decode(retrying(lambda: store.get(name)), name)
    except NotFoundError:
        return None


def _sibling_prefix(db: str, name: str) -> str | None:
    """The prefix of sibling ``name`` of the DB at prefix ``db`` (None: outside this root).

    A name that is not a plain folder name (a crafted ``refs/`` marker) is treated as outside
    this root, which keeps everything of ``db``: GC never follows it anywhere."""
    if not db or name_problem(name) is not None:
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


def _id_time(ulid: str) -> int:
    try:
        return paths.id_time_ms(ulid)
    except ValueError:
        return 1 << 62  # not one of ours: never a candidate
