"""The writer's side of compaction: schedule tasks, gather finished records, adopt them.

A :class:`CompactionDriver` belongs to one DB. In ``background`` mode it runs one compaction at
a time, picked by the policy from the version just committed (or from the tree :mod:`.early`
shows with the records that finished since), in the compaction subprocess when
the DB qualifies (:mod:`.worker`: a merge in a thread would hold the writer's GIL), else in its
own thread; in ``external`` mode it only lists ``compaction/`` (at most every
``compaction_poll_seconds``) for records that ``silt compact`` wrote. Either way, records are
adopted by the writer's next commit (:func:`.adopt.adopt`) or refused, and their objects are then
deleted.

Outputs are checked before they can be adopted (:func:`check_outputs`), since once adopted and
GC has removed the inputs they are the only copy of their data: a record from ``compaction/``
(external mode: another process, maybe another machine, wrote it) must pass its own checksum and
name itself, and every output is read whole and checked (tail, every block, and size, entry
counts and key range against the record) when the record is first seen; the background thread
checks its own outputs' tails (it built them from bytes it held) before handing the record over.
A record whose outputs fail is refused (logged, counted as ``compactions_damaged``) and deleted
like any refused record, so its outputs become garbage and a compactor may redo the task.

Finished records serve reads before that commit (:mod:`.early`: the same checks and
:func:`.adopt.adopt` applied to the base's tree, shown in the read view); the commit is as before.

Thread safety: called only under the DB lock (the commit path, and :mod:`.early`); the background
thread only runs :func:`.compactor.run_compaction` and :func:`check_outputs` on its result, then
calls :attr:`CompactionDriver.finished`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from .. import paths
from ..clock import Clock
from ..errors import CorruptionError, NotFoundError, StoreError
from ..inline import without_inline
from ..manifest import Manifest
from ..metrics import Metrics
from ..settings import Settings
from ..siblings import SiblingStores
from ..sst.builder import SstInfo
from ..sst.check import check_sst
from ..store import ObjectStore, retrying
from .adopt import Refused, adopt
from .compactor import run_compaction
from .record import CompactionRecord
from .task import CompactionTask, make_policy
from .worker import can_run_elsewhere, run_elsewhere

log = logging.getLogger("silt.compaction")


class CompactionDriver:
    """Schedules, gathers and adopts compactions for one writer."""

    def __init__(self, store: ObjectStore, settings: Settings, clock: Clock,
                 metrics: Metrics, siblings: SiblingStores | None = None,
                 announce: Callable[[], None] | None = None,
                 reach: Callable[[], int] | None = None) -> None:
        self.store = store
        #: Announces the writer's GC grace before compaction uploads outputs (silt.graces).
        self.announce = announce
        #: The newest cutoff of a GC pass the writer knows of (Committer.gc_reach).
        self.reach = reach
        self.siblings = siblings
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.policy = make_policy(settings.compaction, settings)
        self.mode = settings.compaction_mode
        #: Background compaction in this process ("background": the compaction subprocess where
        #: the DB qualifies, else a thread; "thread": always a thread).
        self.in_process = self.mode in ("background", "thread")
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future[CompactionRecord] | None = None
        self._ready: list[CompactionRecord] = []
        self._resolved: set[str] = set()
        #: Records whose outputs failed :func:`check_outputs`: id -> why (refused by apply).
        self._damaged: dict[str, str] = {}
        self._last_poll = float("-inf")
        #: Leftovers (:mod:`.leftovers`) whose blocks are not checked yet: they serve reads,
        #: and a commit checks every block before it may adopt them (as for external records).
        self._unchecked: set[str] = set()
        #: A leftover's own age limit (ms), when shorter than :attr:`max_age_ms`.
        self._limits: dict[str, int] = {}
        #: Starts reading every block of unchecked leftovers (:mod:`.leftovers`), called by
        #: :meth:`gather` under the writer lock; None: no leftovers here.
        self.check_leftovers: Callable[[list[CompactionRecord]], None] | None = None
        self.last_error: BaseException | None = None
        #: Called with no argument, on the compaction thread, when a compaction of this
        #: writer finished (:meth:`.early.EarlyInstall.finished_soon` installs it for reads).
        self.finished: Callable[[], None] | None = None

    @property
    def running(self) -> bool:
        return self._future is not None and not self._future.done()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running compaction (if any); True when none is running afterwards."""
        future = self._future
        if future is None:
            return True
        try:
            future.exception(timeout)
        except TimeoutError:
            return False
        return True

    def schedule(self, manifest: Manifest | None, *,
                 behind_ready: bool = False) -> CompactionTask | None:
        """Start the policy's next task for ``manifest`` if nothing is running or waiting;
        ``behind_ready``: also while finished records wait for a commit (``manifest`` is then
        the base with them applied, as :mod:`.early` shows it: the new record's inputs may be
        their outputs, and a commit tries records in the order they finished)."""
        if self.policy is None or not self.in_process or manifest is None:
            return None
        self._harvest()
        if self._future is not None or (self._ready and not behind_ready):
            return None
        # Policies pick from the uploaded SSTs only: inline deltas stay at the head of L0
        # until a commit folds them (silt.inline).
        manifest = without_inline(manifest)
        task = self.policy.pick(manifest, self.clock.now_ms())
        if task is None:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="silt-compact")
        self._future = future = self._pool.submit(self._run, manifest, task)
        self.metrics.add("compactions_started")
        if self.finished is not None:
            finished = self.finished
            future.add_done_callback(lambda _future: finished())
        return task

    def _run(self, manifest: Manifest, task: CompactionTask) -> CompactionRecord:
        with self.metrics.purpose("compaction"):
            if self.announce is not None:
                self.announce()
            if self.mode == "background" and can_run_elsewhere(self.store, manifest, task,
                                                               self.clock):
                # the merge runs in the compaction subprocess: this thread waits without the
                # GIL, so the writer's reads and writes go on at full speed
                record = run_elsewhere(self.store, manifest, task, self.settings, self.metrics)
                self.metrics.add("compactions_in_subprocess")
            else:
                record = run_compaction(self.store, manifest, task, self.settings, self.clock,
                                        siblings=self.siblings)
            why = check_outputs(self.store, record, blocks=False)
        if why is not None:
            self.metrics.add("compactions_damaged")
            raise StoreError(f"compaction {record.id} is not adopted: {why}")
        return record

    def _harvest(self) -> None:
        future = self._future
        if future is None or not future.done():
            return
        self._future = None
        try:
            self._ready.append(future.result())
        except Exception as exc:  # a failed compaction is retried by a later schedule
            self.last_error = exc
            self.metrics.add("compaction_failures")
            log.warning("compaction failed (it will be picked again): %s", exc)

    def gather(self, manifest: Manifest | None, l0_count: int) -> list[CompactionRecord]:
        """Finished records to try at this commit. Stalls while L0 is at the stall trigger."""
        if l0_count >= self.settings.l0_stall_trigger and self.policy is not None and (
            self.in_process
        ):
            if self._future is None and not self._ready:
                self.schedule(manifest)
            if self._future is not None:
                start = time.monotonic()
                self._future.exception()
                self.metrics.add("stall_seconds", time.monotonic() - start)
                self.metrics.add("stalls")
        pending = [r for r in self._ready if r.id in self._unchecked]
        if pending and self.check_leftovers is not None:
            self.check_leftovers(pending)
        return self.ready(poll=True)

    def ready(self, *, poll: bool, reads: bool = False) -> list[CompactionRecord]:
        """The finished records not adopted or refused yet, in the order a commit tries them,
        without waiting for anything; with ``poll`` in external mode, ``compaction/`` is
        listed first (at most every ``compaction_poll_seconds``) for records ``silt compact``
        wrote (their outputs are read and checked in full then). Leftovers whose blocks are not
        checked yet only with ``reads`` (what reads may be shown, :mod:`.early`)."""
        self._harvest()
        if poll and self.mode == "external":
            now = time.monotonic()
            if now - self._last_poll >= self.settings.compaction_poll_seconds:
                self._last_poll = now
                self._poll()
        # By creation time; a tie keeps the order they were found in (finished, or listed by
        # id), so a record made behind another (schedule's behind_ready) comes after it.
        return sorted((r for r in self._ready if reads or r.id not in self._unchecked),
                      key=lambda r: r.created_ms)

    def known(self) -> set[str]:
        """Ids of the records this driver holds or resolved (a leftover search skips them)."""
        return self._resolved | {r.id for r in self._ready}

    def add_leftovers(self, records: list[CompactionRecord], limit_ms: int) -> int:
        """Hold ``records``, found by :mod:`.leftovers` with their outputs' tails checked, as
        ready: they serve reads at once, and a commit adopts them once every block of their
        outputs was read and checked (the first :meth:`gather` that finds them starts that, on
        a thread, and adopts none of them: :meth:`checked`); none is shown or adopted past
        ``limit_ms`` of age. Returns how many were new."""
        known = self.known()
        fresh = [r for r in records if r.id not in known]
        for r in fresh:
            self._ready.append(r)
            self._unchecked.add(r.id)
            self._limits[r.id] = min(limit_ms, self.max_age_ms)
        return len(fresh)

    def checked(self, record_id: str, why: str | None) -> None:
        """Every block of leftover ``record_id``'s outputs was read: ``why`` it failed, or
        ``None`` (a commit may adopt it now). Under the writer lock."""
        if record_id not in self._unchecked:
            return
        self._unchecked.discard(record_id)
        if why is not None:
            log.warning("compaction %s is not adopted: %s", record_id, why)
            self.metrics.add("compactions_damaged")
            self._damaged[record_id] = why

    def _poll(self) -> None:
        known = self._resolved | {r.id for r in self._ready}
        for info in retrying(lambda: list(self.store.list(paths.COMPACTION_PREFIX))):
            rid = info.key[len(paths.COMPACTION_PREFIX):]
            if rid in known:
                continue
            try:
                data = retrying(lambda key=info.key: self.store.get(key))
                record = CompactionRecord.decode(data, info.key)
                if record.id != rid:
                    raise CorruptionError(info.key, None, f"the record names itself {record.id}")
            except NotFoundError:
                self._resolved.add(rid)  # adopted or collected since the listing
                continue
            except CorruptionError as exc:
                log.warning("ignoring compaction record %s: %s", info.key, exc)
                self.metrics.add("compactions_damaged")
                self._resolved.add(rid)
                continue
            try:
                with self.metrics.purpose("compaction"):
                    why = check_outputs(self.store, record, blocks=True)
            except StoreError as exc:  # not NotFound: the store failed, try again next poll
                log.warning("could not check compaction %s (retried later): %s", rid, exc)
                continue
            if why is not None:
                log.warning("compaction %s is not adopted: %s", rid, why)
                self.metrics.add("compactions_damaged")
                self._damaged[rid] = why
            self._ready.append(record)

    def apply(
        self,
        l0: tuple[SstInfo, ...],
        levels: tuple[tuple[SstInfo, ...], ...],
        records: list[CompactionRecord],
        max_seq: int = 0,
        *,
        quiet: bool = False,
    ) -> tuple[tuple[SstInfo, ...], tuple[tuple[SstInfo, ...], ...], list[CompactionRecord],
               list[CompactionRecord]]:
        """Apply what can be adopted; returns the new tree, adopted and refused records.

        ``max_seq`` is the writer's range-delete counter: a record whose outputs claim a
        greater ``seq`` (range tombstones it cannot have applied) is refused. ``quiet``: log
        nothing (installing early, :mod:`.early`, asks again and again)."""
        adopted, refused = [], []
        now = self.clock.now_ms()
        reach = self.reach() if self.reach is not None else 0
        for record in records:
            why = self.refusal(record, now, reach, max_seq)
            if why is None:
                try:
                    l0, levels = adopt(l0, levels, record)
                    adopted.append(record)
                    continue
                except Refused as exc:
                    why = str(exc)
            if not quiet and why:
                log.info("compaction %s not adopted: %s", record.id, why)
            refused.append(record)
        return l0, levels, adopted, refused

    def refusal(self, record: CompactionRecord, now: int, reach: int,
                max_seq: int) -> str | None:
        """Why ``record`` may not be adopted at time ``now`` whatever the tree (``""`` when the
        reason was logged when found), or ``None``. ``reach``: the newest cutoff of a GC pass
        the writer knows of (:meth:`silt.commit.Committer.gc_reach`)."""
        if record.id in self._damaged:
            return ""  # its outputs failed their check (logged then): never adopted
        # Outputs older than half the grace, or than a GC pass the writer knows of, may be
        # collected by GC (a commit adopting them was withdrawn for that): never adopted, so
        # a retry is not withdrawn again for the same outputs (the inputs still hold the data).
        oldest = min((paths.id_time_ms(s.id) for s in record.outputs), default=now)
        if now - oldest > self.max_age_of(record) or oldest < reach:
            return "GC may already consider its outputs garbage"
        if any(s.seq > max_seq for s in record.outputs):
            return (f"its outputs claim range-delete number "
                    f"{max(s.seq for s in record.outputs)}, above this writer's {max_seq}")
        return None

    @property
    def max_age_ms(self) -> int:
        """The age (ms) past which a record's outputs are never adopted: half the grace."""
        return int(self.settings.gc_grace_seconds * 500)

    def max_age_of(self, record: CompactionRecord) -> int:
        """:attr:`max_age_ms`, or a leftover's shorter limit (:mod:`.leftovers`)."""
        return self._limits.get(record.id, self.max_age_ms)

    def resolved(self, adopted: list[CompactionRecord], refused: list[CompactionRecord]) -> None:
        """After a commit landed: forget the records and delete their objects."""
        done = {r.id for r in adopted} | {r.id for r in refused}
        if not done:
            return
        self._ready = [r for r in self._ready if r.id not in done]
        self._resolved |= done
        for rid in done:
            self._damaged.pop(rid, None)
            self._unchecked.discard(rid)
        self.metrics.add("compactions_adopted", len(adopted))
        self.metrics.add("compactions_refused", len(refused))
        self.metrics.add("compaction_input_bytes", sum(r.input_bytes for r in adopted))
        self.metrics.add("compaction_output_bytes",
                         sum(s.size for r in adopted for s in r.outputs))
        # A refused leftover may be another live writer's (its inputs in a version this handle
        # does not have): its object is left to that writer, or to GC.
        drop = {r.id for r in adopted} | {r.id for r in refused if r.id not in self._limits}
        try:
            with self.metrics.purpose("compaction"):
                keys = [paths.compaction_key(i) for i in sorted(drop)]
                if keys:
                    retrying(lambda: self.store.delete_many(keys))
        except Exception as exc:  # only hints: GC removes them later
            log.warning("could not delete compaction records: %s", exc)
        for rid in done:
            self._limits.pop(rid, None)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def check_outputs(store: ObjectStore, record: CompactionRecord, *, blocks: bool) -> str | None:
    """Why ``record``'s outputs must not be adopted, or ``None`` when they check out.

    Each output SST must exist and pass :func:`silt.sst.check.check_sst` against what the
    record says of it (with ``blocks``: every data block is read and checked too). Store errors
    other than a missing object propagate (the check can be tried again later).
    """
    for out in record.outputs:
        key = paths.sst_key(out.id)
        try:
            check_sst(store, key, out, blocks=blocks)
        except NotFoundError:
            return f"output {key!r} does not exist"
        except CorruptionError as exc:
            return str(exc)
    return None
