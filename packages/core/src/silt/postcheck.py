"""The checks after a manifest exists (step 3 of :mod:`silt.commit`) and withdrawals.

:class:`PostChecks` is the half of :class:`~silt.commit.Committer` that reads the GC markers
(:mod:`silt.markers`) after the PUT and withdraws a version that GC may have undercut: a zombie
below the horizon, a rollback, a stalled commit, a base that lost an SST, a reference whose
source GC passed. The committer holds the state both halves share (declared below); this module
never creates a manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from . import paths
from .clock import Clock
from .errors import (
    CommitConflict,
    CorruptionError,
    FencedError,
    NotFoundError,
    SiltError,
    StoreError,
    WithdrawnError,
)
from .gather import Gather
from .gc import horizon, read_checkpoints
from .manifest import Manifest
from .markers import GcMarkers, read_markers, refresh, unchanged
from .metrics import MeteredStore
from .siblings import Reference, SiblingStores
from .store import retrying
from .versions import WITHDRAWN, Fate, VersionListing, list_versions, read_fate


class PostChecks:
    """The checks after a commit's PUT and the withdrawals of :class:`~silt.commit.Committer`
    (its base class; the attributes are the committer's, see there)."""

    _store: MeteredStore
    _gather: Gather
    _epoch_seen: int | None
    _url: str
    _clock: Clock
    _siblings: SiblingStores
    lineage: int | None
    next: int
    uncertain: tuple[Manifest, Any] | None
    withdrawing: tuple[Manifest, str] | None
    _withdrawn: bool
    fenced: str | None
    confirmed: int | None
    base_checked: int | None
    markers: GcMarkers | None

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
        """The GC markers after the PUT (one LIST of ``gc/`` after
        :meth:`silt.commit.Committer._create_first`)."""
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


def all_exist(store: MeteredStore, sst_ids: list[str]) -> bool:
    """Whether every SST in ``sst_ids`` is still in the store (one ranged GET each)."""
    for sst_id in sst_ids:
        name = paths.sst_key(sst_id)
        try:
            retrying(lambda name=name: store.get_range(name, 0, 1))
        except NotFoundError:
            return False
    return True
