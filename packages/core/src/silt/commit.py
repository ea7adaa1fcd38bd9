"""The commit protocol: how one writer turns a manifest into a committed version, safely beside
other writers, readers, checkpoints and GC (docs/architecture.md, docs/safety.md).

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
(:meth:`Committer._create_first`). Independent requests go out at once (the DB's ``gather``).

The committer never touches the DB: the DB passes what it needs (base manifest, references) and
installs what :meth:`publish` returns. Not thread-safe: the DB's writer lock serializes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from . import paths
from .clock import Clock
from .errors import (
    CommitConflict,
    CorruptionError,
    FencedError,
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    SiltError,
    StoreError,
    WithdrawnError,
)
from .gc import horizon, read_checkpoints
from .manifest import Manifest
from .markers import GcMarkers, newest_epoch, read_markers, refresh, unchanged
from .metrics import MeteredStore
from .rangedel import EMPTY, RangeTombstones
from .reopen import Gather, serially
from .siblings import Reference, SiblingStores
from .sst.builder import SstInfo
from .store import retrying
from .versions import WITHDRAWN, Fate, VersionListing, list_versions, read_fate

#: Errors after which the version is settled either way (no read-back on the next commit).
_DECIDED = (CommitConflict, FencedError, CorruptionError, WithdrawnError)


class Committer:
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
        with the PUT (module docstring, "Round trips")."""
        if self.markers is not None:
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

    def _check_empty_root(self, manifest: Manifest, listing: VersionListing | None) -> None:
        """A first commit on an empty root creates its version directly (no base whose next
        name writers could race for). So after creating it, it lists the versions (``listing``):
        if any other live version exists, another writer committed on this root meanwhile (or
        before: this writer's view of an empty root was stale), and this one withdraws its own.
        Two such writers may both withdraw; never both stand. One LIST, on a DB's first
        commit only."""
        if manifest.parent is not None or listing is None:
            return
        others = [v for v in listing.versions if v != manifest.version]
        if not others:
            return
        why = (f"version {manifest.version} of {self._url!r} was committed from an empty root, "
               f"but the root has version {others[-1]} (committed meanwhile, or this writer's "
               "view of the root was stale)")
        if self._withdraw(manifest, why):
            raise CommitConflict(
                f"{why}; reopen the latest version (silt.open) and redo the work from there",
                version=manifest.version,
            )

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

    # -- checks after the manifest exists ---------------------------------------------------------
    def _post_commit(self, manifest: Manifest, base: Manifest | None, refs: list[Reference],
                     *, resolving: bool = False) -> None:
        """Step 3: the GC markers (one GET when nothing changed since the last commit,
        :func:`silt.markers.refresh`; on a first commit one LIST), on an empty root the versions
        too, at once; more requests only on the rare paths."""
        calls: list[Callable[[], Any]] = [self._refresh_markers]
        if manifest.parent is None:
            calls.append(partial(list_versions, self._store))
        markers, *listing = self._gather(calls)
        self._check_empty_root(manifest, listing[0] if listing else None)
        self._check_horizon(manifest, markers)
        self._check_rollback(manifest, markers)
        self._check_age(manifest, base, markers, resolving=resolving)
        if base is not None:
            self._check_base(manifest, base, markers)
        if refs and base is None:
            self._check_sources(manifest, refs)

    def nothing_after(self, base: Manifest) -> bool:
        """Whether no version after ``base`` exists, proved with two GETs of objects that do not
        exist while that holds; ``False`` when unsure (then list). First the name every commit
        on top of ``base`` creates first (``base.next_version``: a commit that skips numbers
        reserves it, so any newer version implies it), then the next GC epoch (GC deletes a
        manifest only after bumping it, so a successor deleted before the first GET shows).
        Unsure without known markers, with a commit or withdrawal in flight, or when ``base``
        is below the known GC horizon (GC may have deleted its successor before the markers
        were read, without a later epoch; at or above it, GC deletes nothing of a number above
        ``base`` before bumping the epoch)."""
        if (self.markers is None or self.uncertain is not None or self.withdrawing is not None
                or base.version < self.markers.horizon):
            return False
        name = paths.manifest_key(base.next_version)
        try:
            retrying(lambda: self._store.get_range(name, 0, 1))
            return False
        except NotFoundError:
            pass
        return unchanged(self._store, self.markers)

    def gc_reach(self) -> int:
        """The newest cutoff (ms) of a GC pass this writer knows of (its GC markers as last
        read, running or done), 0 with none: an unpublished SST older than it may have been
        collected by that pass, or may still be. The next commit copies such SSTs first
        (:meth:`silt.flush.Flusher.refresh_aged`), which is what lets a commit withdrawn by
        :meth:`_check_age` succeed when committed again."""
        return max(self.markers.passes, default=0) if self.markers is not None else 0

    def _refresh_markers(self) -> GcMarkers:
        """The GC markers after the PUT (one LIST of ``gc/`` after :meth:`_create_first`)."""
        epoch, self._epoch_seen = self._epoch_seen, None
        self.markers = (read_markers(self._store, epoch=epoch) if self.markers is None
                        and epoch is not None else refresh(self._store, self.markers))
        return self.markers

    def relearn_markers(self) -> None:
        """With a listing of versions (:func:`silt.reopen.latest_at_most`): read the GC markers
        again if they changed (one GET if not; else both LISTs: a GC pass bumps the epoch twice),
        so the next advance proves its answer with GETs again. Nothing when none are known."""
        if self.markers is not None and not unchanged(self._store, self.markers):
            self.markers = read_markers(self._store)

    def _check_horizon(self, manifest: Manifest, markers: GcMarkers) -> None:
        """Withdraw ``manifest`` if GC's horizon passed it (this writer is a zombie)."""
        h = markers.horizon
        parent = manifest.parent
        if manifest.version >= h and (parent is None or parent >= h):
            return
        if manifest.version == h:
            # The marker names this very version: the GC pass that wrote it listed this
            # manifest and kept everything it references (e.g. a commit whose response was lost
            # and that GC saw before this writer resolved it). Withdrawing it would lose data.
            return
        if parent is not None and parent < h <= manifest.version:
            if parent in read_checkpoints(self._store).values():
                return  # the base is pinned: its SSTs are kept
        self._fence(manifest, (
            f"version {manifest.version} (from base {parent}) of {self._url!r} is below the "
            f"garbage-collection horizon {h}: newer versions exist and GC has removed older "
            "ones, so this writer is stale. The commit was withdrawn; reopen the latest version "
            "(silt.open) and redo the work from there"
        ))

    def _check_rollback(self, manifest: Manifest, markers: GcMarkers) -> None:
        """Withdraw ``manifest`` if a checkpoint once pinned a version at or above it that is
        not this commit: its number was seen before, so the root was rolled back."""
        v = manifest.version
        seen = [p for p in markers.pins if p[0] > v or (p[0] == v and p[1] != manifest.token)]
        if not seen:
            return
        pinned, _ = max(seen)
        detail = (
            f"a checkpoint pinned version {pinned} of {self._url!r}, but the newest version "
            f"found was {manifest.parent}: the root was rolled back (newer manifests deleted or "
            f"restored from an older copy). Version {v} would reuse a number already seen, so "
            "the commit was withdrawn. Restore the missing manifests, or run `silt verify` to "
            "see what is missing"
        )
        self._fence(manifest, detail, error=CorruptionError(
            paths.manifest_key(pinned), None, detail))

    def _check_age(self, manifest: Manifest, base: Manifest | None, markers: GcMarkers, *,
                   resolving: bool = False) -> None:
        """Withdraw ``manifest`` if garbage collection may collect an SST it newly publishes.

        A GC pass deletes only unreferenced objects older than its cutoff, and writes its
        ``gc/pass`` marker before its last listing of manifests. So when no marker of a pass
        with a cutoff past this commit's oldest new SST is visible now (after the manifest
        exists), every pass that could collect those SSTs sees the manifest and keeps them:
        the usual case, decided without a request more. Otherwise: if the passes are done and
        every new SST is still there, nothing was collected; if a pass is still running, it may
        yet delete them, and the version is withdrawn (unless a checkpoint settled it first,
        or GC already kept it as its horizon).
        """
        old = {s.id for s in base.all_ssts()} if base is not None else set()
        # References to siblings' SSTs are protected by the sources' horizons instead; inline
        # SSTs are no objects (the manifest carries them).
        ids = [s.id for s in manifest.objects() if s.id not in old and not s.db]
        if not ids:
            return
        oldest = min(paths.id_time_ms(i) for i in ids)
        running, done = markers.passes_after(oldest)
        if not running and not done:
            return
        try:
            present = all_exist(self._store, ids)
        except StoreError:
            present = False  # cannot tell: in danger, withdraw rather than risk it
        if present and markers.horizon == manifest.version:
            return  # a GC pass listed this manifest, intact, as the horizon and keeps it
        if present and (not running or resolving):
            # Every pass that could collect them has finished and they are all there; or a
            # commit whose outcome was unknown, resolved late, whose SSTs GC has not deleted:
            # passes that ran since the PUT listed the manifest.
            return
        age = self._clock.now_ms() - oldest
        why = (
            f"the commit stalled until an SST it publishes was {age // 1000}s old and a garbage"
            f"-collection pass (cutoff {max(running + done)}) "
            + ("deleted one of them" if not present else "that may delete them is running")
        )
        if self._withdraw(manifest, why):
            raise WithdrawnError(
                f"version {manifest.version} of {self._url!r} was withdrawn: {why}. Its number "
                "is never used again. Commit again: the DB keeps its writes pending, and the "
                "next commit publishes copies, under new names, of every SST a GC pass could "
                "reach (or fails saying the writes are lost, without using a version number)"
            )

    def _check_base(self, manifest: Manifest, base: Manifest, markers: GcMarkers) -> None:
        """On the first commit on a base this writer did not commit (it opened the version, or
        another process made it): make sure GC did not collect an SST the base published.

        That happens when the base's writer stalled past the grace period while a GC pass ran,
        created its manifest anyway, and died (or lost its store) before its own checks
        (:meth:`_check_age`): the version stands with an SST missing, and building on it would
        carry the loss into every later version. The check costs nothing unless a GC pass with
        a cutoff past the base's oldest SST is visible; then the base's parent is read (its new
        SSTs are the base's minus the parent's) and, when such a pass could have collected
        them, their existence is checked. One is gone: the base and ``manifest`` are both
        withdrawn (their numbers are never used again, so a stream processor whose versions
        are batch ids cannot silently carry on from the version before) and this writer is
        fenced (:class:`WithdrawnError`). A pass still running could yet delete them after
        this check: docs/safety.md.
        """
        if base.version in (self.confirmed, self.base_checked):
            return
        own = [s for s in base.objects() if not s.db]
        oldest = min((paths.id_time_ms(s.id) for s in own), default=None)
        if oldest is None or markers.passes_after(oldest) == ([], []):
            self.base_checked = base.version
            return
        before: set[str] = set()
        if base.parent is not None:
            name = paths.manifest_key(base.parent)
            try:
                parent = Manifest.decode(retrying(lambda: self._store.get(name)), name)
                before = {s.id for s in parent.all_ssts()}
            except NotFoundError:
                pass  # collected by GC: check every SST of the base
        ids = [s.id for s in own if s.id not in before]
        if (not ids or markers.passes_after(min(paths.id_time_ms(i) for i in ids)) == ([], [])
                or all_exist(self._store, ids)):
            self.base_checked = base.version
            return
        why = (
            f"its base, version {base.version} of {self._url!r}, lost an SST to garbage "
            "collection (the base's writer stalled past the grace period while a GC pass ran, "
            "and did not withdraw it)"
        )
        self.withdrawing = (base, why)
        self._finish_withdrawal()
        if not self._withdrawn:
            raise CorruptionError(
                paths.manifest_key(base.version), None,
                f"version {base.version} of {self._url!r} lost an SST to garbage collection, "
                "but a checkpoint settled it: restore the missing SST or roll back to an "
                "earlier checkpoint")
        self._fence(manifest, why, error=WithdrawnError(
            f"version {manifest.version} of {self._url!r} was withdrawn: {why}. Both numbers "
            "are never used again. Reopen the latest version (silt.open) and redo the work "
            "of both from there"
        ))

    def _check_sources(self, manifest: Manifest, refs: list[Reference]) -> None:
        """Withdraw ``manifest`` if GC of a referenced source passed the referenced version."""
        for r in refs:
            h = horizon(self._siblings.named(r.source))
            if r.version >= h:
                continue
            self._fence(manifest, (
                f"version {manifest.version} of {self._url!r} references version {r.version} of "
                f"sibling {r.source!r}, which garbage collection has passed (horizon {h}): its "
                "SSTs may be gone. The commit was withdrawn; reopen the source at its latest "
                "version and reference it again from a new DB"
            ))

    # -- withdrawing --------------------------------------------------------------------------
    def _fence(self, manifest: Manifest, why: str, error: SiltError | None = None) -> None:
        """Withdraw ``manifest`` and fence this writer: it never commits again. Raises ``error``
        (default :class:`FencedError`) unless a checkpoint settled the version first."""
        self.fenced = why
        if not self._withdraw(manifest, why):
            self.fenced = None  # pinned and settled by a checkpoint: it stands
            return
        raise error if error is not None else FencedError(why)

    def _withdraw(self, manifest: Manifest, why: str) -> bool:
        """Withdraw this writer's ``manifest``: create its fate record (``withdrawn``), which
        keeps its number from ever being committed again; the manifest stays until GC.

        Returns False when a checkpoint had settled the version first (it then stands). When
        the record cannot be created, the next commit retries it and raises meanwhile.
        """
        self.withdrawing = (manifest, why)
        self._finish_withdrawal()
        return self._withdrawn

    def _finish_withdrawal(self) -> None:
        """Create the fate record of a withdrawal decided earlier (retried by every commit)."""
        if self.withdrawing is None:
            return
        manifest, why = self.withdrawing
        v = manifest.version
        fate = Fate(v, WITHDRAWN, why, manifest.token)
        name = paths.fate_key(v)
        try:
            created = retrying(lambda: self._store.put_if_absent(name, fate.encode()))
            existing = None if created else read_fate(self._store, v)
        except StoreError as exc:
            raise FencedError(
                f"{why}. Recording the withdrawal of version {v} ({name!r}) failed ({exc}); "
                "the next commit of this DB retries it"
            ) from exc
        self.withdrawing = None
        # A record settling another manifest of this number (a rollback's reuse) withdraws it.
        self._withdrawn = existing is None or existing.withdraws(manifest)
        if self._withdrawn and manifest.parent == self.lineage:
            self.lineage, self.next = v, manifest.next_version  # skip the withdrawn number


def check_version(version: Any) -> None:
    """Refuse what is not a version number (an int in ``0..paths.MAX_VERSION``)."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidTypeError(f"a version must be an int, got {type(version).__name__}")
    if not 0 <= version <= paths.MAX_VERSION:
        raise InvalidArgumentError(
            f"a version must be between 0 and {paths.MAX_VERSION}, got {version}"
        )


def all_exist(store: MeteredStore, sst_ids: list[str]) -> bool:
    """Whether every SST in ``sst_ids`` is still in the store (one ranged GET each)."""
    for sst_id in sst_ids:
        name = paths.sst_key(sst_id)
        try:
            retrying(lambda name=name: store.get_range(name, 0, 1))
        except NotFoundError:
            return False
    return True
