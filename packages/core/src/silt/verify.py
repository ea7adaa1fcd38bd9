"""Verifying a root: :func:`verify` reads everything in scope and reports what is damaged.

It reads every manifest in scope and every block of every SST they name (each checked against
its checksum and against the manifest's record of it), every checkpoint and compaction record
(with the outputs a writer has not adopted yet), and checks the version identity of the DB
(:mod:`silt.identity`: every version number names one state). It only reads, never writes.

A root of several DBs (an operator's shards ``kg-0-63/``, ``kg-64-127/``: no manifest of its
own, DBs under it) is verified DB by DB: the report's ``dbs`` holds one report per DB.

``silt verify`` is this function plus printing; what the report holds is what the command shows
(``--json`` is :meth:`VerifyReport.to_json`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import paths
from .checkpoints import decode_checkpoint
from .compaction.record import read_records
from .errors import CorruptionError, NotFoundError, VersionNotFoundError
from .identity import IdentityReport, check_identity
from .inline import InlineBytes
from .manifest import Manifest
from .plugins import open_store
from .progress import Progress
from .roots import child_dbs, db_url
from .siblings import SiblingStores
from .sst.builder import SstInfo
from .sst.check import check_sst
from .store import ObjectStore, retrying
from .tierkit import public_url
from .versions import list_versions

#: The counters of a :class:`VerifyReport`, in the order ``silt verify --json`` shows them.
COUNTS = ("versions", "manifests_bytes", "ssts", "blocks", "entries", "sst_bytes",
          "checkpoints", "records", "record_outputs", "inline_ssts")


@dataclass(frozen=True)
class Problem:
    """Damage found: ``kind`` is ``"corruption"`` (a checksum or size mismatch, a record that
    does not decode), ``"missing"`` (an object something needs does not exist), ``"rollback"``
    or ``"fork"`` (version identity, :mod:`silt.identity`); ``object`` the object's name
    relative to the DB (``../<sibling>/sst/...`` for a sibling's SST); ``offset`` the byte offset
    of the damage when known."""

    kind: str
    object: str
    message: str
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "object": self.object, "offset": self.offset,
                "message": self.message}


@dataclass(frozen=True)
class Note:
    """Something worth fixing that is not damage (e.g. a checkpoint without a checksum)."""

    object: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"object": self.object, "message": self.message}


@dataclass
class VerifyReport:
    """What :func:`verify` found in one DB (or, with ``dbs``, in a root of several DBs).

    ``versions``: the versions in scope (all live versions, or the one asked for);
    ``all_versions``: whether every live version was in scope; ``counts``: what was read (keys
    :data:`COUNTS`; an SST two versions share counts once); ``identity``: the version-identity
    summary; ``log``: problems and notes in the order they were found.
    """

    url: str
    versions: list[int] = field(default_factory=list)
    all_versions: bool = False
    problems: list[Problem] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    identity: IdentityReport = field(default_factory=IdentityReport)
    log: list[Problem | Note] = field(default_factory=list)
    dbs: dict[str, VerifyReport] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No problem here nor in any DB of the root (notes do not count)."""
        return not self.problems and all(r.ok for r in self.dbs.values())

    @property
    def bytes(self) -> int:
        """Bytes read and checked: manifests plus SSTs."""
        return self.counts["manifests_bytes"] + self.counts["sst_bytes"]

    def problem(self, kind: str, name: str, message: str, offset: int | None = None) -> None:
        """Record a problem, once per ``(kind, object)`` (the manifests' check and the identity
        check may both find one)."""
        if any(p.kind == kind and p.object == name for p in self.problems):
            return
        p = Problem(kind, name, message, offset)
        self.problems.append(p)
        self.log.append(p)

    def note(self, name: str, message: str) -> None:
        n = Note(name, message)
        self.notes.append(n)
        self.log.append(n)

    def to_json(self) -> dict[str, Any]:
        """The report as ``silt verify --json`` prints it (for a root of several DBs: the root,
        ``ok`` and one such object per DB under ``dbs``)."""
        if self.dbs:
            return {"root": self.url, "ok": self.ok,
                    "dbs": {name: r.to_json() for name, r in self.dbs.items()}}
        i = self.identity
        return {
            **self.counts, "bytes": self.bytes, "ok": self.ok,
            "problems": [p.to_json() for p in self.problems],
            "notes": [n.to_json() for n in self.notes],
            "withdrawn": i.withdrawn, "reservations": i.reservations, "settled": i.settled,
            "pins": i.pins, "horizon": i.horizon, "references": i.references,
        }


def verify(url_or_store: str | ObjectStore, *, version: int | None = None,
           all_versions: bool = False, progress: Progress | None = None) -> VerifyReport:
    """Verify the DB at ``url_or_store`` (a URL, or an open store, which is not closed): the
    latest version, exactly ``version``, or with ``all_versions`` every live version.

    Returns a :class:`VerifyReport` (``report.ok`` when nothing is damaged); damage is reported,
    never raised. Raises :class:`~silt.errors.VersionNotFoundError` when the root has no
    committed versions or ``version`` does not exist. A root with no manifest of its own but
    several DBs under it (an operator's shards, :func:`silt.roots.child_dbs`) is verified DB by
    DB into ``report.dbs``: ``version`` then applies to each; without it a DB with no committed
    version is skipped.

    ``progress`` (:mod:`silt.progress`) hears of each DB of a root (``"DBs"``) and of each SST
    of the DB being verified (``"SSTs"``, uploaded and inline) as it is checked.
    """
    if isinstance(url_or_store, ObjectStore):
        return _verify_root(url_or_store, url_or_store.url, version, all_versions, progress)
    store = open_store(url_or_store)
    try:
        return _verify_root(store, url_or_store, version, all_versions, progress)
    finally:
        store.close()


def _verify_root(store: ObjectStore, url: str, version: int | None,
                 all_versions: bool, progress: Progress | None) -> VerifyReport:
    dbs = child_dbs(store)
    if not dbs:
        return _verify_db(store, url, version, all_versions, progress)
    report = VerifyReport(url, all_versions=all_versions)
    for done, db in enumerate(dbs):
        if progress is not None:
            progress("DBs", done, len(dbs))
        if version is None and not list_versions(store, db).versions:
            continue  # nothing committed (yet): nothing to check, as silt inspect skips it
        child = open_store(db_url(url, db))
        try:
            report.dbs[db.rstrip("/")] = _verify_db(child, db_url(url, db), version, all_versions,
                                                    progress)
        finally:
            child.close()
    if progress is not None:
        progress("DBs", len(dbs), len(dbs))
    return report


def _verify_db(store: ObjectStore, url: str, version: int | None,
               all_versions: bool, progress: Progress | None = None) -> VerifyReport:
    report = VerifyReport(url, all_versions=all_versions)
    counts = report.counts
    # Every version's identity first (it lists versions without trusting fate records).
    identity = report.identity = check_identity(store, url)
    if all_versions or version is None:
        versions = identity.live if all_versions else identity.live[-1:]
        if not versions:
            raise VersionNotFoundError(f"{public_url(url)!r} has no committed versions")
    else:
        versions = [version]
    report.versions = list(versions)
    # Each distinct entry (not each object: two versions may record one object
    # differently, and each record must match it) -> the first version naming it.
    ssts: dict[SstInfo, int] = {}
    #: Inline entries (silt.inline) -> the first manifest carrying them, and their bytes.
    inline: dict[SstInfo, tuple[str, bytes]] = {}
    for v in versions:
        name = paths.manifest_key(v)
        try:
            data = retrying(lambda name=name: store.get(name))  # type: ignore[misc]
        except NotFoundError:
            if all_versions:  # collected since the listing
                continue
            raise VersionNotFoundError(
                f"version {v} of {public_url(url)!r} does not exist; "
                f"'silt ls {public_url(url)}' lists the versions"
            ) from None
        counts["versions"] += 1
        counts["manifests_bytes"] += len(data)
        try:
            m = Manifest.decode(data, name)
        except CorruptionError as exc:
            report.problem("corruption", name, str(exc), exc.offset)
            continue
        for info in m.all_ssts():
            if info.inline:
                inline.setdefault(info, (name, m.inline[info.id]))
            else:
                ssts.setdefault(info, v)
    step = None
    if progress is not None:
        total, done = len(ssts) + len(inline), 0
        progress("SSTs", 0, total)

        def step() -> None:
            nonlocal done
            done += 1
            progress("SSTs", done, total)

    _verify_ssts(store, url, ssts, report, step)
    _verify_inline(inline, report, step)
    for f in identity.findings:
        report.problem(f.kind, f.object, f.message, f.offset)
    _verify_metadata(store, url, {i.id for i in ssts}, report)
    return report


def _verify_ssts(store: ObjectStore, url: str, ssts: dict[SstInfo, int],
                 report: VerifyReport, step: Callable[[], None] | None = None) -> None:
    """Check every SST entry in ``ssts`` (entry -> the first version naming it) whole, calling
    ``step`` after each."""
    counts = report.counts
    problem = report.problem
    siblings = SiblingStores(url, store)
    listings: dict[str, dict[str, int]] = {}
    counted: set[tuple[str, str]] = set()
    started = False
    try:
        for info, version in ssts.items():
            if step is not None and started:
                step()  # the previous entry is done, however its check ended
            started = True
            sst_id = info.id
            # A reference to a sibling DB's SST (silt.siblings) is checked where it lives.
            where = siblings.store_for(info)
            if info.db not in listings:
                listings[info.db] = {
                    o.key: o.size
                    for o in retrying(lambda where=where: list(where.list(paths.SST_PREFIX)))
                }
            listed = listings[info.db]
            key = paths.sst_key(sst_id)
            name = key if not info.db else f"../{info.db}/{key}"
            first = (info.db, sst_id) not in counted
            counted.add((info.db, sst_id))
            counts["ssts"] += first
            if key not in listed:
                problem("missing", name, f"SST {name!r} referenced by version {version} does not "
                        "exist; restore it from a replica or open a version that does not need it")
                continue
            if listed[key] != info.size:
                problem("corruption", name, str(CorruptionError(
                    name, None, f"object is {listed[key]} bytes but the manifest of version "
                    f"{version} records {info.size}")))
                continue
            try:
                entries, blocks = check_sst(where, key, info, blocks=True, name=name)
            except CorruptionError as exc:
                problem("corruption", name, str(exc), exc.offset)
                continue
            except NotFoundError:
                problem("missing", name, f"SST {name!r} referenced by version {version} "
                        "disappeared while being verified")
                continue
            if first:
                counts["blocks"] += blocks
                counts["entries"] += entries
                counts["sst_bytes"] += info.size
        if step is not None and started:
            step()
    finally:
        siblings.close()


def _verify_inline(inline: dict[SstInfo, tuple[str, bytes]], report: VerifyReport,
                   step: Callable[[], None] | None = None) -> None:
    """Check every inline SST (bytes a manifest carries) whole, as an uploaded one: every
    block's checksum and order, the tail, the properties against the entry; call ``step``
    for each. Damage is reported against the manifest carrying the bytes."""
    counts = report.counts
    seen: set[str] = set()
    for info, (manifest_name, data) in inline.items():
        if step is not None:
            step()  # counted as it starts: the check is in memory, and may end in continue
        key = paths.sst_key(info.id)
        try:
            entries, blocks = check_sst(InlineBytes(key, data), key, info, blocks=True,
                                        name=manifest_name)
        except CorruptionError as exc:
            report.problem("corruption", manifest_name,
                           f"inline SST {info.id}: {exc.detail}", exc.offset)
            continue
        if info.id not in seen:
            seen.add(info.id)
            counts["inline_ssts"] += 1
            counts["blocks"] += blocks
            counts["entries"] += entries


def _verify_metadata(store: ObjectStore, url: str, verified: set[str],
                     report: VerifyReport) -> None:
    """Check every checkpoint and compaction record of the DB at ``url``.

    Each must pass its checksum, and what it names must exist: a checkpoint's version (live,
    not withdrawn), a record's output SSTs (each checked whole against the record, as a writer
    does before adopting it; ``verified`` are SST ids the manifests' check already covered).
    """
    counts = report.counts
    problem = report.problem
    versions = set(report.identity.live)
    withdrawn = set(report.identity.withdrawn)
    for info in retrying(lambda: list(store.list(paths.CHECKPOINT_PREFIX))):
        name = info.key
        try:
            cp = decode_checkpoint(retrying(lambda name=name: store.get(name)), name)  # type: ignore[misc]
        except NotFoundError:
            continue  # released while we listed
        except CorruptionError as exc:
            problem("corruption", name, str(exc), exc.offset)
            continue
        counts["checkpoints"] += 1
        if cp.version in withdrawn:
            problem("missing", name, f"checkpoint {name!r} pins version {cp.version} of "
                    f"{public_url(url)!r}, which its writer withdrew (it reads as its parent, "
                    "and opening it by number is refused): delete the checkpoint and "
                    "checkpoint a live version")
        elif cp.version not in versions:
            problem("missing", name, f"checkpoint {name!r} pins version {cp.version} of "
                    f"{public_url(url)!r}, "
                    f"which does not exist: restore {paths.manifest_key(cp.version)!r} from a "
                    "replica, or delete the checkpoint if that state is not needed")
        if not cp.checksummed:
            report.note(name, f"checkpoint {name!r} was written by an older silt without a "
                        "checksum; re-create it (delete the object, then 'silt checkpoint') "
                        "to protect it")
    for name, rec in read_records(store):
        counts["records"] += 1
        if isinstance(rec, CorruptionError):
            problem("corruption", name, str(rec), rec.offset)
            continue
        if name != paths.compaction_key(rec.id):
            problem("corruption", name, str(CorruptionError(
                name, None, f"the record names itself {rec.id}")))
            continue
        for out in rec.outputs:
            if out.id in verified:
                continue  # adopted: checked with the manifests
            key = paths.sst_key(out.id)
            counts["record_outputs"] += 1
            try:
                check_sst(store, key, out, blocks=True)
            except CorruptionError as exc:
                problem("corruption", key, str(exc), exc.offset)
            except NotFoundError:
                try:
                    retrying(lambda name=name: store.get_range(name, 0, 1))  # type: ignore[misc]
                except NotFoundError:
                    break  # the record went too (GC or the writer resolved it meanwhile)
                problem("missing", key, f"SST {key!r}, an output of compaction record {name!r}, "
                        "does not exist; the record cannot be adopted (a writer refuses it and "
                        "a compactor may redo the task)")
