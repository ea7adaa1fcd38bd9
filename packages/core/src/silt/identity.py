"""The check of a DB's version identity, for ``silt verify``: does every number name one state?

:func:`check_identity` reads the objects of the version-identity protocol
(docs/architecture.md, invariant 8; docs/format.md) of one DB and reports what breaks it, each
finding naming the object:

* a fate record (``manifest/<v>.fate``) that does not decode, or whose manifest is gone above
  the GC horizon (GC deletes a withdrawn manifest only below it, then its fate record);
* a pin marker (``gc/pin/<v>.<token>``) at or above the horizon whose version's manifest is
  missing, or one whose manifest carries another commit token: the root was rolled back (its
  newest manifests deleted, or restored from an older copy);
* a reference (an SST entry with ``db``) of a live version whose object in the sibling DB is
  missing;
* a live version built beside another: a live version strictly between it and its parent (a
  withdrawn parent stands for its own parent, so the chain is followed through it), or a
  version inside the numbers a reservation skipped (a **fork**);
* a reservation (manifest with ``skip_to``) whose SSTs are not its parent's state.

The last two look only at versions GC keeps (at or above the horizon, or pinned by a
checkpoint): below the horizon a parent may be collected, or its name re-created by a stale
writer that withdraws it when it sees the horizon, so nothing can be concluded there.

Withdrawn versions, reservations and settled versions are normal and only counted. The check
lists ``manifest/`` before it reads the GC markers, so a GC pass deleting below a new horizon
meanwhile is never mistaken for damage (the pass writes its horizon marker before it deletes).
Cost: one LIST of ``manifest/`` and ``gc/``, one GET per manifest and fate record, one LIST of
``sst/`` per referenced sibling.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from . import paths
from .checkpoints import decode_checkpoint
from .errors import CorruptionError, NotFoundError, SiltError
from .manifest import Manifest
from .markers import read_markers
from .rangedel import EMPTY
from .siblings import SiblingStores
from .store import ObjectStore, retrying
from .versions import Fate

#: How many withdrawn parents a fork check follows (a chain of withdrawals is short).
_MAX_CHAIN = 64


@dataclass(frozen=True)
class Finding:
    """One thing that breaks version identity: ``kind`` is ``"corruption"``, ``"missing"``,
    ``"rollback"`` or ``"fork"``; ``object`` the object name (relative to the DB)."""

    kind: str
    object: str
    message: str
    offset: int | None = None


@dataclass
class IdentityReport:
    """What :func:`check_identity` found. ``live``: versions not withdrawn (a version whose fate
    record does not decode counts as live), ascending."""

    live: list[int] = field(default_factory=list)
    withdrawn: list[int] = field(default_factory=list)
    reservations: list[int] = field(default_factory=list)
    settled: list[int] = field(default_factory=list)
    pins: int = 0
    horizon: int = 0
    references: int = 0
    findings: list[Finding] = field(default_factory=list)


def check_identity(store: ObjectStore, url: str) -> IdentityReport:
    """Check the version identity of the DB at ``url`` (whose objects ``store`` holds)."""
    report = IdentityReport()
    found = report.findings
    manifest_names: set[int] = set()
    fate_names: dict[int, str] = {}
    for info in retrying(lambda: list(store.list(paths.MANIFEST_PREFIX))):
        v = paths.parse_manifest_key(info.key)
        if v is not None:
            manifest_names.add(v)
            continue
        v = paths.parse_fate_key(info.key)
        if v is not None:
            fate_names[v] = info.key
    markers = read_markers(store)  # after the listing: see the module docstring
    h = report.horizon = markers.horizon

    fates: dict[int, Fate] = {}
    for v, name in sorted(fate_names.items()):
        try:
            fates[v] = Fate.decode(retrying(lambda name=name: store.get(name)), name, v)  # type: ignore[misc]
        except NotFoundError:
            continue  # GC deleted it while we listed
        except CorruptionError as exc:
            found.append(Finding("corruption", name, str(exc), exc.offset))
    manifests: dict[int, Manifest] = {}
    for v in sorted(manifest_names):
        name = paths.manifest_key(v)
        try:
            manifests[v] = Manifest.decode(retrying(lambda name=name: store.get(name)), name)  # type: ignore[misc]
        except NotFoundError:
            continue  # GC deleted it while we listed
        except CorruptionError as exc:
            found.append(Finding("corruption", name, str(exc), exc.offset))
    present = manifest_names  # a corrupt manifest still exists
    for v, fate in fates.items():
        m = manifests.get(v)
        if m is not None and fate.withdraws(m):
            report.withdrawn.append(v)
        elif m is not None:
            report.settled.append(v)
    withdrawn = set(report.withdrawn)
    report.live = sorted(v for v in manifest_names if v not in withdrawn)
    report.reservations = [v for v in report.live
                           if v in manifests and manifests[v].skip_to is not None]

    # Fate records without their manifest, above the horizon (a pin marker of the same version
    # is reported instead: one lost manifest, one finding).
    pinned = {v for v, _ in markers.pins}
    for v, fate in sorted(fates.items()):
        if v in present or v < h or v in pinned:
            continue
        what = ("its writer withdrew it" if fate.withdrawn
                else "a checkpoint settled it: its state is lost")
        found.append(Finding("missing", fate_names[v], (
            f"fate record {fate_names[v]!r} of {url!r} says version {v} is {fate.fate} ({what}), "
            f"but {paths.manifest_key(v)!r} does not exist although it is not below the "
            f"garbage-collection horizon {h}: the manifest was deleted (the root was rolled "
            "back?); restore it from a replica")))

    # Pin markers: the pinned manifest must still be the one pinned.
    for v, token in sorted(markers.pins):
        report.pins += 1
        pin = paths.pin_key(v, token)
        if v not in present:
            if v < h:
                continue  # released and collected (a checkpoint still naming it is reported)
            found.append(Finding("rollback", pin, (
                f"a checkpoint pinned version {v} of {url!r} ({pin!r}), but "
                f"{paths.manifest_key(v)!r} does not exist: the root was rolled back (its "
                "newest manifests deleted or restored from an older copy). Restore the missing "
                "manifests from a replica; commits meanwhile are withdrawn as rollbacks")))
        elif v in manifests and manifests[v].token != token:
            found.append(Finding("rollback", pin, (
                f"a checkpoint pinned version {v} of {url!r} with commit token {token}, but "
                f"{paths.manifest_key(v)!r} now holds commit {manifests[v].token}: the root "
                "was rolled back and the number reused (the reuse reads as withdrawn). "
                "Restore the pinned manifest from a replica")))

    # Links and reservations, among the versions GC keeps: below the horizon a manifest may be
    # gone, or a zombie's, created after GC deleted that name and withdrawn when it checks.
    pinned |= _checkpointed(store)
    kept = {v for v in manifest_names if v >= h or v in pinned}
    live = {v for v in report.live if v in kept}
    for v in sorted(live):
        m = manifests.get(v)
        if m is not None:
            _check_links(url, m, manifests, live, withdrawn & kept, found)
            if m.skip_to is not None:
                _check_reservation(url, m, manifests, withdrawn, kept, found)
    _check_references(store, url, [manifests[v] for v in report.live if v in manifests],
                      report, found)
    return report


def _check_links(url: str, m: Manifest, manifests: dict[int, Manifest], live: set[int],
                 withdrawn: set[int], found: list[Finding]) -> None:
    """Report ``m`` as a fork if a live version lies strictly between it and its parent (then
    between that parent and its own parent while the parent is withdrawn), or inside the
    numbers its parent reservation skipped."""
    child = m.version
    parent = m.parent
    for _ in range(_MAX_CHAIN):
        low = -1 if parent is None else parent
        beside = sorted(x for x in live if low < x < child)
        if beside:
            found.append(Finding("fork", paths.manifest_key(m.version), (
                f"version {m.version} of {url!r} was built on version {parent} although "
                f"version(s) {beside} lie between them: two writers committed from one base "
                "and history forked. Keep the branch you trust: open it explicitly, copy what "
                "the other lacks, and commit a new version")))
            return
        pm = manifests.get(parent) if parent is not None and parent in live | withdrawn \
            else None
        if pm is None:
            return
        if child == m.version and pm.skip_to is not None and m.version < pm.skip_to:
            found.append(Finding("fork", paths.manifest_key(m.version), (
                f"version {m.version} of {url!r} was built on version {parent}, which reserved "
                f"the numbers up to {pm.skip_to - 1} (skip_to {pm.skip_to}): a writer "
                "committed inside reserved numbers and history forked")))
            return
        if parent not in withdrawn:
            return
        child, parent = parent, pm.parent  # a withdrawn version stands for its parent


def _checkpointed(store: ObjectStore) -> set[int]:
    """Versions the checkpoints pin (damaged ones are ``silt verify``'s to report)."""
    pinned: set[int] = set()
    for info in retrying(lambda: list(store.list(paths.CHECKPOINT_PREFIX))):
        try:
            pinned.add(decode_checkpoint(retrying(lambda k=info.key: store.get(k)),  # type: ignore[misc]
                                         info.key).version)
        except (NotFoundError, CorruptionError):
            continue
    return pinned


def _state(m: Manifest) -> tuple[object, ...]:
    def entry(s: object) -> tuple[object, ...]:
        return (s.id, s.db, s.clip_start, s.clip_end)  # type: ignore[attr-defined]
    return (tuple(entry(s) for s in m.l0), tuple(tuple(entry(s) for s in run) for run in m.levels),
            m.seq, m.range_tombstones)


def _check_reservation(url: str, m: Manifest, manifests: dict[int, Manifest],
                       withdrawn: set[int], kept: set[int], found: list[Finding]) -> None:
    """Report reservation ``m`` if its SSTs are not its parent's state (a withdrawn parent
    stands for its own parent). Unknowable (and not reported) once GC passed the parent."""
    parent = m.parent
    for _ in range(_MAX_CHAIN):
        if parent is None:
            expected: tuple[object, ...] = ((), (), 0, EMPTY)
            break
        pm = manifests.get(parent)
        if pm is None or parent not in kept:
            return
        if parent not in withdrawn:
            expected = _state(pm)
            break
        parent = pm.parent
    else:
        return
    if _state(m) != expected:
        found.append(Finding("corruption", paths.manifest_key(m.version), (
            f"version {m.version} of {url!r} reserves the numbers up to {m.skip_to} and must "
            f"hold the state of version {parent}, but its SSTs or range tombstones differ: a "
            "reservation was altered or forged, and reading it gives another state than its "
            "number promises")))


def _references(manifests: list[Manifest]) -> Iterator[tuple[Manifest, str, str]]:
    for m in manifests:
        for s in m.all_ssts():
            if s.db:
                yield m, s.db, s.id


def _check_references(store: ObjectStore, url: str, manifests: list[Manifest],
                      report: IdentityReport, found: list[Finding]) -> None:
    """Report every reference of a live version whose SST is missing in its sibling DB."""
    refs = list(_references(manifests))
    if not refs:
        return
    siblings = SiblingStores(url, store)
    listed: dict[str, set[str] | SiltError] = {}
    reported: set[tuple[str, str]] = set()
    try:
        for m, db, sst_id in refs:
            report.references += 1
            if db not in listed:
                try:
                    where = siblings.named(db)
                    listed[db] = {i.key for i in retrying(
                        lambda where=where: list(where.list(paths.SST_PREFIX)))}  # type: ignore[misc]
                except SiltError as exc:
                    listed[db] = exc
            name = f"../{db}/{paths.sst_key(sst_id)}"
            got = listed[db]
            if (db, sst_id) in reported:
                continue
            if isinstance(got, SiltError):
                reported.add((db, sst_id))
                found.append(Finding("corruption", paths.manifest_key(m.version), (
                    f"version {m.version} of {url!r} references SST {name!r}, which cannot be "
                    f"reached: {got}")))
            elif paths.sst_key(sst_id) not in got:
                reported.add((db, sst_id))
                found.append(Finding("missing", name, (
                    f"SST {name!r}, referenced by version {m.version} of {url!r} from sibling "
                    f"DB {db!r}, does not exist: GC of {db!r} alone, or a deletion, removed it. "
                    "Restore it from a replica, or open a version that does not reference it")))
    finally:
        siblings.close()
