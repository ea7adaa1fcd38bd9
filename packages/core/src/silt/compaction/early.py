"""Early installation: a finished compaction serves reads before the commit that publishes it.

A finished compaction used to change nothing until the writer's next commit adopted it, so right
after a bulk load every get probed each L0 SST the load left (up to 13 at 5M keys) until a
commit came. Now, as soon as a compaction of this writer has finished and its outputs passed
their check (:func:`.driver.check_outputs`), :class:`EarlyInstall` shows reads the tree the next
commit would publish: the base's committed SSTs with every finished record applied by the same
rules a commit adopts it with (:meth:`.driver.CompactionDriver.apply`, :func:`.adopt.adopt`),
through :meth:`silt.state.TreeState.show`, which swaps the read view whole. The commit that
publishes the records is unchanged: it adopts them from the base manifest exactly as before
(same manifest, same checks after the PUT, same GC fencing), and the installed manifest then
becomes the view's tree again.

Why reads answer the same. Adoption keeps every key's answer (:mod:`.adopt`): the inputs are
replaced by outputs at their own depth, L0 inputs only as the oldest L0 SSTs, and tombstones are
dropped only where nothing lies below. Everything newer than the compaction's inputs stays
above its outputs: the memtable and the frozen parts are above L0 in every view, L0 SSTs
committed after the compaction was picked sit above its L0 inputs, and a range delete made
while it ran has a greater number than every output's ``seq`` (a record claiming more than the
writer's counter is refused), so it still masks them. A reader that took the view before keeps
its own (views are immutable: :mod:`silt.view`) and reads the inputs, which the base manifest
still lists.

Why GC cannot take the outputs from under a reader. Until a commit publishes them, the outputs
are referenced by this handle's read view alone, like the uploaded SSTs of parts not committed
yet, and the same rule protects them: GC deletes an unreferenced object only once it is older
than its grace, which is never shorter than this writer's (the compaction announced the
writer's grace before uploading, :mod:`silt.graces`), and the young record keeps its outputs
too. So a record is shown only while its oldest output is younger than half the writer's grace
and than every GC pass the writer knows of (the rule a commit refuses stale records by,
:meth:`.driver.CompactionDriver.refusal`), and a wake-up at that age (:meth:`silt.clock.Clock.
call_at`) takes it out of the view again: reads go back to the inputs, which the base manifest
keeps. The half grace left is the margin for a wake-up that waits for the writer's lock; as
for parts, a scan iterator kept open longer than the grace is not protected.

Zombies and withdrawals. A writer fenced by GC never commits again: what it showed leaves its
view at the same age, and the outputs and the record become garbage GC collects, as a refused
record's do. A withdrawn commit changes neither the view nor the records (the next commit tries
them again); the GC markers it read are applied at once (:meth:`EarlyInstall.refresh` after
every commit attempt), so outputs a GC pass may collect leave the view. A follower handle
(:meth:`silt.DB.advance`, :meth:`silt.DB.catch_up`) installs nothing: only a base this handle
committed itself is shown with its records, since the records are its own compactions of its
own versions; moving to another writer's version shows that version as committed.

When. In ``background`` and ``thread`` modes, as soon as the compaction finishes (a thread
started then waits for the writer's lock); :meth:`silt.DB.wait_for_compaction` returns after it
is installed. The policy's next task is then picked from the tree shown and starts at once
(:meth:`.driver.CompactionDriver.schedule` ``behind_ready``), so L0 shrinks compaction after
compaction with no commit in between; its inputs may be outputs of the records shown, which the
commit adopts first (records are tried in the order they finished; a record whose inputs are
gone, its predecessor having been refused, is refused as usual). In ``external`` mode, records
``silt compact`` wrote are looked for at each commit, as before, and by
:meth:`silt.DB.wait_for_compaction` (which installs them).

Thread safety: :meth:`EarlyInstall.finished`, :meth:`EarlyInstall.finished_soon` and
:meth:`EarlyInstall.close` may be called from any thread; every other method runs under the DB's
writer lock.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from .. import paths
from ..clock import Clock, Wakeup
from ..metrics import Metrics

if TYPE_CHECKING:
    from ..refill import Refiller
    from ..sst.reader import SstReader
    from ..state import TreeState
    from .driver import CompactionDriver
    from .record import CompactionRecord

log = logging.getLogger("silt.compaction")

#: How long a wake-up waits for the writer's lock at a time before it looks again whether the DB
#: closes (a close holds the lock while it stops the DB's threads).
LOCK_POLL_SECONDS = 0.05


class Confirmations(Protocol):
    """What the early install reads of the DB's committer (``silt.commit.Committer``): the
    last version this writer committed whose post-commit checks passed (``None`` before its
    first)."""

    confirmed: int | None


class EarlyInstall:
    """Shows one writer's finished compactions to its reads (see the module docstring)."""

    def __init__(self, state: TreeState, driver: CompactionDriver, committer: Confirmations,
                 clock: Clock, metrics: Metrics, refiller: Refiller | None) -> None:
        self._state = state
        self._driver = driver
        self._committer = committer
        self._clock = clock
        self._metrics = metrics
        self._refiller = refiller
        self._closing = threading.Event()
        self._wakeup: Wakeup | None = None
        #: Ids of the records the view shows now.
        self.shown: frozenset[str] = frozenset()
        #: Ids of records whose outputs were refilled into the cache when first shown.
        self.refilled: set[str] = set()
        #: The version this handle opened, once leftovers were found for it (:mod:`.leftovers`):
        #: shown with its records like a version this handle committed.
        self.opened: int | None = None

    def refresh(self, *, poll: bool = False) -> None:
        """Show the base's tree with every finished record applied that a commit would adopt
        now, or the base's own tree (module docstring); ``poll``: look for external records
        first (:meth:`.driver.CompactionDriver.ready`). Under the writer lock."""
        state = self._state
        base = state.manifest
        if self._closing.is_set():
            return
        records = self._driver.ready(poll=poll, reads=True)
        # Only a base this handle committed, or the one it opened when leftovers were found
        # for it (:mod:`.leftovers`): a follower shows what it follows.
        if base is None or base.version not in (self._committer.confirmed, self.opened) or (
                not records):
            self._show(None, [])
            return
        now = self._clock.now_ms()
        l0, levels, adopted, _refused = self._driver.apply(base.l0, base.levels, records,
                                                           state.seq, quiet=True)
        self._show((l0, levels) if adopted else None, adopted)
        if adopted and len(adopted) == len(records) and base.version == self._committer.confirmed:
            # The next compaction need not wait for a commit either: it is picked from the
            # tree shown (the commit adopts both, in the order they finished). Not on the base
            # a handle opened: a handle compacts only once it commits (a reader never does).
            self._driver.schedule(replace(base, l0=l0, levels=levels), behind_ready=True)
        ends = [min(paths.id_time_ms(s.id) for s in r.outputs) + self._driver.max_age_of(r)
                for r in adopted if r.outputs]
        if ends:  # (a record with no outputs reads nothing GC could take)
            # The first moment a commit would refuse the oldest: take them out then.
            self._wake_at(max(min(ends) + 1, now + 1))

    def settle(self) -> None:
        """:meth:`refresh` after a commit attempt, which must not hide the commit's own error:
        a failure here is logged (the view keeps what it showed, still within its age)."""
        try:
            self.refresh()
        except Exception:
            log.exception("could not install finished compactions for reads")

    def _show(self, tree: object, adopted: list[CompactionRecord]) -> None:
        state = self._state
        shown = frozenset(r.id for r in adopted)
        fresh = [r for r in adopted if r.id not in self.shown and r.id not in self.refilled]
        inputs: list[SstReader] = []
        if fresh and self._refiller is not None:
            by_id = state.readers.by_id
            inputs = [r for rec in fresh for i in rec.task.inputs
                      if (r := by_id.get(i)) is not None]
        # Always: a commit or an advance may have put the base's own tree back meanwhile.
        state.show(tree)  # type: ignore[arg-type]
        self._metrics.add("compactions_installed", len(shown - self.shown))
        self.shown = shown
        if not any(r.outputs for r in adopted) and self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
        if inputs:
            assert self._refiller is not None
            self._refiller.submit(inputs, [state.reader(s) for rec in fresh for s in rec.outputs])
            self.refilled.update(r.id for r in fresh)

    def _wake_at(self, at_ms: int) -> None:
        if self._wakeup is not None:
            if self._wakeup.at_ms == at_ms:
                return
            self._wakeup.cancel()
        self._wakeup = self._clock.call_at(at_ms, self.finished)

    def landed(self, adopted: list[CompactionRecord],
               refused: list[CompactionRecord]) -> list[CompactionRecord]:
        """A commit adopted ``adopted`` and refused ``refused``: the adopted records whose
        cache was not refilled when they were shown (the commit refills them)."""
        todo = [r for r in adopted if r.id not in self.refilled]
        self.refilled -= {r.id for r in (*adopted, *refused)}
        return todo

    def finished_soon(self) -> None:
        """A compaction finished (called on the compaction thread): :meth:`finished` on a
        thread of its own, so the compaction thread never waits for the writer's lock (a
        stalled commit holds it while it waits for the next compaction on that thread)."""
        if not self._closing.is_set():
            threading.Thread(target=self.finished, name="silt-install", daemon=True).start()

    def finished(self) -> None:
        """A compaction finished, or a shown record reached its age (any thread): refresh
        under the writer lock, unless the DB closes first. Never raises."""
        lock = self._state.lock
        while not self._closing.is_set():
            if lock.acquire(timeout=LOCK_POLL_SECONDS):
                try:
                    self.refresh()
                except Exception:  # the next commit adopts or refuses as before
                    log.exception("could not install finished compactions for reads")
                finally:
                    lock.release()
                return

    def close(self) -> None:
        """Stop wake-ups (the DB closes; any thread)."""
        self._closing.set()
        if self._wakeup is not None:
            self._wakeup.cancel()
