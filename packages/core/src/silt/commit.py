"""The commit protocol: how one writer turns a manifest into a committed version, safely beside
other writers, readers, checkpoints and GC (docs/architecture.md, docs/safety.md).

A commit of a DB (:meth:`silt.DB.commit`) reads top to bottom in :meth:`CommitSteps.commit`:
:meth:`Committer.prepare` settles an earlier commit whose outcome was unknown;
:meth:`CommitSteps.plan` picks the version and merges the meta (refusing bad input before
anything changes); :meth:`silt.inline.DeltaFreezer.freeze_delta` freezes the delta (inline,
folded or uploaded); :meth:`CommitSteps.publish` waits for the uploads, lets finished
compactions join, counts the requests paid, and publishes with :meth:`Committer.publish`; the
published manifest becomes the base of the DB's state (:meth:`silt.state.TreeState.install`).
Compactions that finished before the commit already serve reads
(:mod:`silt.compaction.early`); the commit adopts them from the base manifest all the same, and
after every attempt, landed or not, the view shows what may still be shown.

A :class:`Committer` holds what the protocol remembers between commits of one DB:

* the **lineage**: the version its next manifest names as parent (the base, or a reservation or
  withdrawn version standing for it) and the smallest number it may create;
* an **uncertain** commit: one whose manifest PUT (or the checks after it) failed without an
  answer; the next commit reads the manifest back and compares the commit token;
* a **withdrawal** decided but whose fate record could not be written yet, and whether GC
  **fenced** this writer for good.

Creating version ``v`` from base ``b`` (:meth:`Committer.publish`):

1. If ``v`` skips numbers, first create a *reservation* at the next free number (the base's
   state, ``skip_to = v``): every writer from ``b`` races for that one name, so no version is
   ever built beside a newer one. (On an empty root there is no base: the first commit creates
   its version directly and then lists the versions, withdrawing its own if another exists.)
   A name held by a reservation from the same lineage or by a withdrawn version is moved past;
   any other holder means another writer won (:class:`CommitConflict`).
2. Create ``manifest/<v>`` with ``put_if_absent``. A conflict whose object carries this
   attempt's token is our own (a lost response retried).
3. Read the GC markers (:mod:`silt.markers`: one GET on a warm writer whose markers did not
   change, a listing otherwise) and withdraw the version if GC's horizon passed it
   (zombie: :class:`FencedError`), if a checkpoint once pinned this number for another commit
   (rollback: :class:`CorruptionError`), if a GC pass may collect an SST it newly publishes
   (stall: :class:`WithdrawnError`), or if GC of a referenced sibling passed the referenced
   version. Withdrawing writes the fate record (:mod:`silt.versions`) and keeps the manifest,
   so the number is never used again; a checkpoint that settled the version first wins.

Round trips: the PUT, then one round of checks (2; 3 with an SST upload first; a warm writer
checks with one GET of the next GC epoch). A first commit lists the markers: only the LIST of
``gc/`` must follow the PUT; the epoch, read before that LIST begins, is all it needs
(:func:`silt.markers.read_markers`), so it is listed at once with the PUT
(:meth:`Committer._create_first`), or not at all when the handle's open listed it (an empty
root) or read the markers (any other root; then the first commit is a warm one:
:mod:`silt.coldopen`). Independent requests go out at once (the DB's ``gather``).

The :class:`Committer` never touches the DB's state: :class:`CommitSteps` passes it what it
needs (base manifest, references) and installs what :meth:`Committer.publish` returns; the DB
calls :meth:`CommitSteps.commit` and nothing else. Not thread-safe: the DB's writer lock
serializes both.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from . import paths
from .clock import Clock
from .cost import META_REQUESTS, RESERVED_META_PREFIX, encode_requests, user_meta
from .errors import (
    CommitConflict,
    CorruptionError,
    FencedError,
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    StoreError,
    WithdrawnError,
)
from .gather import Gather, serially
from .manifest import Manifest, check_meta
from .markers import GcMarkers, newest_epoch
from .metrics import MeteredStore
from .postcheck import PostChecks
from .rangedel import EMPTY, RangeTombstones
from .siblings import Base, Reference, SiblingStores, mark_referrers, split_parent
from .sst.builder import SstInfo
from .store import retrying
from .versions import read_fate

if TYPE_CHECKING:
    from .compaction.driver import CompactionDriver
    from .compaction.early import EarlyInstall
    from .flush import Flusher
    from .inline import DeltaFreezer
    from .metrics import Metrics
    from .refill import Refiller
    from .sst.reader import SstReader
    from .state import TreeState
    from .view import ReadView

#: Errors after which the version is settled either way (no read-back on the next commit).
_DECIDED = (CommitConflict, FencedError, CorruptionError, WithdrawnError)


class Committer(PostChecks):
    """The commit protocol of one DB (see the module docstring)."""

    def __init__(self, store: MeteredStore, url: str, clock: Clock, grace_ms: int,
                 siblings: SiblingStores, gather: Gather = serially) -> None:
        self._store = store
        self._gather = gather  # runs the independent requests of one round at once
        #: The newest GC epoch, listed with a first commit's PUT (:meth:`_create_first`).
        self._epoch_seen: int | None = None
        self._url = url
        self._clock = clock
        self._grace_ms = grace_ms
        self._siblings = siblings
        self.writer_id = uuid.uuid4().hex
        #: The version the next manifest names as parent, and the smallest number it may use.
        self.lineage: int | None = None
        self.next = 1
        #: A commit whose outcome is unknown, with the DB's bookkeeping for when it landed.
        self.uncertain: tuple[Manifest, Any] | None = None
        #: A withdrawal decided but whose fate record is not created yet (retried by commit).
        self.withdrawing: tuple[Manifest, str] | None = None
        self._withdrawn = True
        #: Why this writer is stale, once GC fenced it: every later commit raises.
        self.fenced: str | None = None
        #: The last version committed here (its post-commit checks passed).
        self.confirmed: int | None = None
        #: A base another writer made that :meth:`_check_base` found intact.
        self.base_checked: int | None = None
        #: The GC markers as last read (a warm commit checks only that they did not change).
        self.markers: GcMarkers | None = None
        #: A GC epoch listed by the handle's open when it read no markers (an empty root,
        #: silt.coldopen): the first commit lists gc/ with it, not the epoch again.
        self.epoch_listed: int | None = None

    # -- state --------------------------------------------------------------------------------
    def based_on(self, manifest: Manifest | None) -> None:
        """The DB installed ``manifest`` as its base."""
        if manifest is None:
            self.lineage, self.next = None, 0  # version 0 is a stream processor's batch 0
        else:
            self.lineage, self.next = manifest.version, manifest.next_version

    def landed(self, manifest: Manifest) -> None:
        """``manifest`` is committed and checked."""
        self.confirmed = manifest.version

    def prepare(self, base: Manifest | None,
                refs: list[Reference]) -> tuple[Manifest, Any] | None:
        """Before a commit: finish an interrupted withdrawal, refuse if fenced, and resolve an
        uncertain commit. Returns ``(manifest, bookkeeping)`` when that commit had landed."""
        self._finish_withdrawal()
        if self.fenced is not None:
            raise FencedError(self.fenced)
        if self.uncertain is None:
            return None
        manifest, pending = self.uncertain
        ours = self._is_ours(manifest)
        self.uncertain = None
        if not ours:
            return None
        try:
            self._post_commit(manifest, base, refs, resolving=True)
        except _DECIDED:
            raise
        except StoreError:
            self.uncertain = (manifest, pending)
            raise
        return manifest, pending

    def target(self, version: int | None, base_version: int | None) -> tuple[int, bool]:
        """The version to create (``version``, or the next free number) and whether it was
        chosen here; refuses a number this lineage may not use."""
        if version is None:
            return (max(self.next, 1) if self.lineage is None else self.next), True
        check_version(version)
        if version < self.next:
            if base_version is not None and version <= base_version:
                raise InvalidArgumentError(
                    f"cannot commit version {version}: this DB is at version {base_version}; "
                    "commit a greater version (or leave version=None for the next one)"
                )
            raise InvalidArgumentError(
                f"cannot commit version {version} of {self._url!r}: the versions before "
                f"{self.next} were skipped (reserved by a commit that skipped them, or "
                f"withdrawn) and are never created; commit version {self.next} or later"
            )
        return version, False

    # -- publishing ---------------------------------------------------------------------------
    def publish(self, version: int, auto: bool, base: Manifest | None,
                l0: tuple[SstInfo, ...], levels: tuple[tuple[SstInfo, ...], ...],
                meta: dict[str, str], refs: list[Reference], pending: Any, *, seq: int = 0,
                tombs: RangeTombstones = EMPTY,
                inline: dict[str, bytes] | None = None) -> Manifest:
        """Create version ``version`` listing ``l0``/``levels`` and run the checks after it
        (steps 1-3 of the module docstring), with the range-delete counter ``seq`` and range
        tombstones ``tombs`` (:mod:`silt.rangedel`) and the bytes of its inline entries
        ``inline`` (:mod:`silt.inline`). ``pending`` is kept with an uncertain
        commit and handed back by :meth:`prepare` when it turns out to have landed."""
        self._epoch_seen = None
        while True:
            if version > self.next and self.lineage is not None:
                self._reserve(version, base, self.next)
                continue
            manifest = Manifest(
                version=version, parent=self.lineage, writer_id=self.writer_id,
                token=uuid.uuid4().hex, created_ms=self._clock.now_ms(), l0=l0,
                levels=levels, meta=meta, gc_grace_ms=self._grace_ms, seq=seq,
                range_tombstones=tombs, inline=inline or {},
            )
            try:
                created = self._create_first(manifest)
            except StoreError:
                # The manifest may exist: resolved by reading back on the next commit.
                self.uncertain = (manifest, pending)
                raise
            if created:
                break
            placeholder = self._adopt_placeholder(version)
            if placeholder and auto:
                version = max(self.next, 1)
                continue
            if placeholder == "withdrawn":
                why = "was withdrawn by its writer and is never committed again"
            elif placeholder == "reserved":
                why = (f"is reserved by a commit that skipped to version {self.next} from the "
                       "same base")
            else:
                why = "was already committed by another writer"
            raise CommitConflict(
                f"version {version} of {self._url!r} {why}; reopen the latest version "
                "(silt.open) and redo the work from there",
                version=version, withdrawn=placeholder == "withdrawn",
            )
        try:
            self._post_commit(manifest, base, refs)
        except _DECIDED:
            raise
        except StoreError:
            # Checks after the PUT failed: resolved on the next commit.
            self.uncertain = (manifest, pending)
            raise
        return manifest

    def _create(self, manifest: Manifest) -> bool:
        """Create ``manifest``'s object; True if it now exists as ours (a lost response whose
        retry found our own object counts), False if another object has that name."""
        name = paths.manifest_key(manifest.version)
        data = manifest.encode()
        return retrying(lambda: self._store.put_if_absent(name, data)) or self._is_ours(manifest)

    def _create_first(self, manifest: Manifest) -> bool:
        """:meth:`_create`; with no GC markers known yet, the newest GC epoch is listed at once
        with the PUT, unless the open listed it (module docstring, "Round trips")."""
        if self.markers is not None:
            return self._create(manifest)
        if self.epoch_listed is not None:  # listed before this PUT, so before gc/'s listing
            self._epoch_seen = self.epoch_listed
            return self._create(manifest)
        created, self._epoch_seen = self._gather(
            [partial(self._create, manifest), partial(newest_epoch, self._store)])
        return bool(created)

    def _is_ours(self, manifest: Manifest) -> bool:
        """Read back the manifest of ``manifest.version`` and compare the commit token."""
        name = paths.manifest_key(manifest.version)
        try:
            existing = Manifest.decode(retrying(lambda: self._store.get(name)), name)
        except NotFoundError:
            return False
        return existing.token == manifest.token

    def _reserve(self, target: int, base: Manifest | None, n: int) -> None:
        """Create the version at ``n`` (the first free number) that reserves the numbers up to
        ``target``, with the base's state (same SSTs and meta). A name held by a stand-in for
        the same state is moved past (:meth:`_adopt_placeholder`); anything else:
        :class:`CommitConflict`."""
        reservation = Manifest(
            version=n, parent=self.lineage, writer_id=self.writer_id, token=uuid.uuid4().hex,
            created_ms=self._clock.now_ms(),
            l0=base.l0 if base is not None else (),
            levels=base.levels if base is not None else (),
            meta=dict(base.meta) if base is not None else {},
            skip_to=target, gc_grace_ms=self._grace_ms,
            seq=base.seq if base is not None else 0,
            range_tombstones=base.range_tombstones if base is not None else EMPTY,
            inline=base.inline if base is not None else {},
        )
        if self._create(reservation):
            self.lineage, self.next = n, target
            # A zombie whose base GC kept (a checkpoint pins it) finds the next names free once
            # GC collected them: fence it before it creates a version above the horizon.
            self._check_horizon(reservation, self._refresh_markers())
            return
        if not self._adopt_placeholder(n):
            raise CommitConflict(
                f"cannot commit version {target} of {self._url!r} from base "
                f"{base.version if base is not None else None}: version {n} was committed by "
                "another writer meanwhile; reopen the latest version (silt.open) and redo the "
                "work from there",
                version=target,
            )
        if self.next > target:
            raise CommitConflict(
                f"cannot commit version {target} of {self._url!r}: another commit from the same "
                f"base reserved the versions up to {self.next - 1}",
                version=target,
            )

    def _adopt_placeholder(self, version: int) -> str:
        """If ``manifest/<version>`` is no competing state, move past it and say why:
        ``"reserved"`` for a reservation made from this lineage (it stands for the base state),
        ``"withdrawn"`` for a withdrawn version (dead for everyone: its number is skipped,
        whoever made it); ``""`` when it is another writer's live commit."""
        name = paths.manifest_key(version)
        try:
            existing = Manifest.decode(retrying(lambda: self._store.get(name)), name)
        except NotFoundError:
            return ""  # deleted meanwhile (GC below its horizon): a plain conflict
        fate = read_fate(self._store, version)
        if fate is not None and fate.withdraws(existing):
            if existing.parent == self.lineage:
                self.lineage = version  # it stands for our base: the lineage goes through it
            self.next = version + 1
            return "withdrawn"
        if existing.parent != self.lineage or existing.skip_to is None:
            return ""
        self.lineage, self.next = version, existing.next_version
        return "reserved"


def check_version(version: Any) -> None:
    """Refuse what is not a version number (an int in ``0..paths.MAX_VERSION``)."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidTypeError(f"a version must be an int, got {type(version).__name__}")
    if not 0 <= version <= paths.MAX_VERSION:
        raise InvalidArgumentError(
            f"a version must be between 0 and {paths.MAX_VERSION}, got {version}"
        )


@dataclass
class Plan:
    """What :meth:`CommitSteps.plan` decided before anything changes: the version to create
    (and whether it was chosen here), the merged meta, and the base's SSTs."""

    version: int
    auto: bool
    meta: dict[str, str]
    base: Manifest | None
    base_l0: tuple[SstInfo, ...]
    base_levels: tuple[tuple[SstInfo, ...], ...]


class Published(NamedTuple):
    """A committed manifest, the compactions it adopted and refused, and the request totals
    its ``silt.requests`` meta counted up to."""

    manifest: Manifest
    adopted: list
    refused: list
    paid: dict[str, int]


class CommitSteps:
    """The steps of one DB's commits (module docstring), over the rooms they go through; it
    remembers what the previous commit counted as paid. The DB's writer lock serializes it."""

    def __init__(self, committer: Committer, flusher: Flusher, deltas: DeltaFreezer,
                 compaction: CompactionDriver, siblings: SiblingStores, metrics: Metrics,
                 url: str, refiller: Refiller | None, early: EarlyInstall) -> None:
        self._committer = committer
        #: Shows finished compactions to reads before a commit publishes them.
        self._early = early
        #: Refills the cache with adopted compactions' outputs (None: never, see silt.refill).
        self._refiller = refiller
        self._flusher = flusher
        self._deltas = deltas
        self._compaction = compaction
        self._siblings = siblings
        self._metrics = metrics
        self._url = url
        #: Requests by kind counted into the previous commit's ``silt.requests`` (silt.cost).
        self._paid: dict[str, int] = {}

    def commit(self, state: TreeState, version: int | None,
               meta: dict[str, str] | None) -> int:
        """One commit of the DB whose state is ``state``, top to bottom (module docstring):
        settle an earlier uncertain commit, plan, freeze the delta, publish, and install what
        was published. Returns the version created."""
        try:
            landed = self._committer.prepare(state.manifest, state.refs)
            if landed is not None:  # an earlier commit whose outcome was unknown had landed
                self._landed(state, landed[0], *landed[1])
            plan = self.plan(version, meta, state.manifest, state.ref_base)
            state.freeze_delta(self._deltas, plan.base_l0)
            published = self.publish(plan, state.view, state.refs, state.seq)
            self._landed(state, published.manifest, published.adopted, published.refused)
        finally:
            # Whatever happened: a GC pass the commit learned of, or a new base, changes what
            # finished compactions the view may show (silt.compaction.early).
            self._early.settle()
        self._paid = published.paid  # the next commit counts from these totals
        return published.manifest.version

    def _landed(self, state: TreeState, manifest: Manifest, adopted: list,
                refused: list) -> None:
        """Once ``manifest`` is committed: install it as ``state``'s base, settle compactions
        (and refill the cache with the adopted ones' outputs not refilled when they were
        installed early, see :mod:`silt.refill`)."""
        inputs: list[SstReader] = []
        refill = self._early.landed(adopted, refused)
        if refill and self._refiller is not None:
            by_id = state.readers.by_id  # the inputs' readers, before install drops them
            inputs = [r for rec in refill for i in rec.task.inputs
                      if (r := by_id.get(i)) is not None]
        state.install(manifest)
        if inputs:
            assert self._refiller is not None
            self._refiller.submit(inputs, [state.reader(s) for rec in refill
                                           for s in rec.outputs])
        self._committer.landed(manifest)
        state.references_landed()
        self._deltas.landed()
        self._metrics.add("commits")
        self._compaction.resolved(adopted, refused)
        self._compaction.schedule(manifest)

    def plan(self, version: int | None, meta: dict[str, str] | None, base: Manifest | None,
             ref_base: Base) -> Plan:
        """The version to create from ``base`` and the meta merged into the base's; the base's
        SSTs are those of the references (``ref_base``) on an empty root."""
        version, auto = self._committer.target(version, base.version if base else None)
        merged_meta = user_meta(base.meta) if base is not None else {}
        if meta is not None:
            for k, v in check_meta(meta).items():
                if k.startswith(RESERVED_META_PREFIX):
                    raise InvalidArgumentError(
                        f"commit meta key {k!r}: keys starting with "
                        f"{RESERVED_META_PREFIX!r} are silt's own; name yours otherwise")
                merged_meta[k] = v
        base_l0, base_levels = (base.l0, base.levels) if base is not None else ref_base
        return Plan(version, auto, merged_meta, base, base_l0, base_levels)

    def publish(self, plan: Plan, view: ReadView, refs: list[Reference],
                seq: int) -> Published:
        """Wait for the uploads of ``view``'s parts (copying those GC may reach), let finished
        compactions join the new L0 and levels, count the requests paid since the previous
        commit (this manifest's PUT included) into the meta, and publish."""
        old = plan.base
        parts = view.parts
        self._flusher.wait(parts)
        self._flusher.refresh_aged(parts, self._committer.gc_reach(),
                                   old.version if old is not None else None)
        new_l0 = tuple(p.info for p in reversed(parts))  # type: ignore[misc]
        base_l0 = tuple(s for s in plan.base_l0 if s.id not in self._deltas.folded)
        records = self._compaction.gather(
            old, sum(1 for s in (*new_l0, *base_l0) if not s.inline))
        l0, levels, adopted, refused = self._compaction.apply(
            new_l0 + base_l0, plan.base_levels, records, seq)
        # What this handle paid since its previous commit, this manifest's PUT included.
        paid = self._metrics.totals()
        paid["PUT"] += 1
        merged_meta = plan.meta
        merged_meta[META_REQUESTS] = encode_requests(
            {k: n - self._paid.get(k, 0) for k, n in paid.items()})
        tombs = view.tombs.prune([*l0, *(s for run in levels for s in run)])
        with self._metrics.purpose("commit"):
            if old is None and refs:
                # Before the manifest exists: the owners' GC must know it may be referenced.
                mark_referrers(self._siblings, [*l0, *(s for run in levels for s in run)],
                               split_parent(self._url)[1])
            manifest = self._committer.publish(
                plan.version, plan.auto, old, l0, levels, merged_meta, refs,
                pending=(adopted, refused), seq=seq, tombs=tombs,
                inline=self._siblings.inline_bytes([s.id for s in l0 if s.inline]),
            )
        return Published(manifest, adopted, refused, paid)
