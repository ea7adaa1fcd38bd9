"""One shard's part of a micro-batch, inside a Spark task (docs/architecture.md, "A Spark
micro-batch").

The task for batch ``b`` of shard ``i``:

1. picks the latest version ``<= b - 1`` as its base: a cold task opens the shard (one LIST);
   a warm handle (cached by this worker process) at version ``b - 1`` is that base with no
   request, and one at an older version checks that no other process committed since with two
   GETs of missing objects; when one did, the first of them read its manifest, and the handle
   advances to the latest version ``<= b - 1`` and proves that nothing is newer in the same
   step (:meth:`silt.DB.catch_up`: 4 GETs in 3 round trips when another process committed
   ``b - 1``; it keeps its readers and cached blocks, and lists only when GETs cannot prove
   the answer), unless the worker that committed ``b - 1`` on this executor left its handle
   (``_handoff.py``): then no request either;
2. refuses a shard whose latest manifest was written by another streaming query (unless the
   operator was built with ``take_over=True``, which deletes that shard's objects first), and a
   shard that already has versions newer than ``b`` (the checkpoint is older than the state;
   a warm handle at ``b - 1`` finds that out when its commit of ``b`` conflicts, since every
   newer version implies a manifest named ``b``);
3. processes its rows against the base, and commits version ``b`` with the query id in the
   manifest's meta. A shard that changed nothing commits nothing.

If version ``b`` already exists (a retried task, or a batch Spark re-executes after a restart),
the task recomputes from ``b - 1`` and emits its output again, but the committed version stands:
nothing is written. The same happens when a concurrent attempt wins the commit
(``CommitConflict``). Output therefore equals the first attempt's as long as the processing is
deterministic given the base state and the batch's rows.

Open shard handles are cached per Python worker process between batches (warm block cache); a
handle leaves the cache while a task uses it and goes back only when the task succeeded without
leaving uncommitted writes, so a failed attempt's writes can never leak into a later batch.

Memory: every shard a worker opens shares the worker's silt memory budget (one block cache, the
memtables charged to it; ``spark.silt.memoryBudget`` sets it), so the handles it caches add
their SST indexes and filters, not a cache each.

A task opens its shard on first use: a shard with no rows and nothing due never opens, and
reads its time bounds from a cached handle known current (``ShardTask.base_meta``) with no
request.

Simplifications: the cache is a per-process LRU of :data:`MAX_CACHED_SHARDS` handles;
``take_over`` only clears shards as tasks reach them (a shard that never receives data keeps its
old objects).
"""

from __future__ import annotations

import logging
from typing import Any

import silt
from silt.errors import NotFoundError
from silt.tierkit import public_url

from ..errors import (
    BatchConflictError,
    ForeignStateError,
    ReplayInputError,
    StateAheadError,
)
from . import _handoff, _layout, _lifecycle, _watermark
from ._handles import CACHE, MAX_CACHED_SHARDS, Cached
from ._names import META_BATCH_ID, META_MAINTAINED, META_QUERY_ID, META_ROWS_IN
from ._root import OperatorSpec
from ._sources import migrate, newer_base

log = logging.getLogger("silt_spark")




class ShardTask:
    """The open shard of one task: ``db`` at the base version, plus the batch's identity.

    Operators read and write ``db`` directly and set :attr:`changed` when they wrote anything;
    :attr:`meta_updates` are merged into the committed manifest's meta (watermarks, timers).
    """

    def __init__(
        self, spec: OperatorSpec, shard: int, batch_id: int, query_id: str, attempt: int,
        run_id: str = "",
    ) -> None:
        self.spec = spec
        self.shard = shard
        self.batch_id = batch_id
        self.query_id = query_id
        self.attempt = attempt
        self.first_kg, self.last_kg = _layout.shard_range(shard, spec.num_shards, spec.key_groups)
        self.url = spec.shard_url(shard)
        self.url_name = _layout.shard_dir(shard, spec.num_shards, spec.key_groups, spec.generation)
        #: Whose cached handle this task may reuse: this query, on this incarnation of the root.
        self.cache_owner = f"{query_id}/{spec.incarnation}"
        self.changed = False
        #: True when version ``batch_id`` already exists: recompute and emit, never commit.
        self.replay = False
        self.committed = False
        self.meta_updates: dict[str, str] = {}
        #: Entries copied from the previous layout's shards (rescale), 0 otherwise.
        self.migrated = 0
        #: SSTs of the previous layout's shards referenced (rescale), 0 otherwise.
        self.referenced = 0
        self.started_ms = _now_ms()
        #: The query-wide watermark of this batch (event-time operators; see _watermark.py):
        #: Spark's watermark for eviction (close, forget, expire, fire timers) ...
        self.watermark: int | None = None
        #: ... and for late events (rows at or before it are dropped): batch ``b - 1``'s.
        self.late_watermark: int | None = None
        self._observed: _watermark.Observed | None = None
        self._event_seen: list[int | None] = []
        #: Requests made at the operator root (not the shard's DB), by purpose and kind.
        self.root_requests: dict[str, dict[str, int]] = {"lifecycle": {}, "watermark": {}}
        #: Waits for the root's origin check and raises its error (_lifecycle.py).
        self.origin_checked = _lifecycle.start_origin_check(
            spec.root, spec.incarnation, query_id, batch_id,
            checked_root=spec.records_origin, take_over=spec.take_over,
            counts=self.root_requests["lifecycle"], storage_options=spec.storage_options,
        )
        delays = spec.event_time_delays
        if delays:
            self._observed = _watermark.observe(
                spec.root, query_id, batch_id, delays, prune=shard == 0,
                counts=self.root_requests["watermark"], incarnation=spec.incarnation,
                storage_options=spec.storage_options, run_id=run_id,
            )
            self.watermark = self._observed.watermark_ms
            late = spec.ticks or not spec.no_data_batches
            self.late_watermark = self._observed.late_ms if late else self.watermark
            self._event_seen = [None] * len(delays)
        budget = spec.memory_budget
        if budget is not None and silt.memory_budget().capacity != budget:
            silt.set_memory_budget(budget)
        #: The shard's DB, opened on first use (:attr:`db`); ``None`` until then.
        self._db: Any = None
        self._base_meta: dict[str, str] = {}
        #: Wraps the DB when it is opened (:class:`silt_spark.runtime._metrics.TaskProbe`).
        self.probe: Any = None
        self.open_ms = 0.0
        #: State maintenance in this task (:meth:`_collect_garbage`): its duration and the
        #: objects it deleted.
        self.maintenance_ms = 0.0
        self.gc_deleted = 0

    # -- opening ------------------------------------------------------------------------------
    @property
    def opened(self) -> bool:
        """Whether this task has opened its shard (a task that never needs it makes no request)."""
        return self._db is not None

    @property
    def db(self) -> Any:
        """The shard's DB at this batch's base, opened on first use (see the module docstring):
        a :class:`silt.DB`, or the probe's counting wrapper of one."""
        if self._db is None:
            t0 = _perf()
            db = _lifecycle.checked_open(self._open, self.origin_checked)
            self.open_ms = (_perf() - t0) * 1000
            self._db = self.probe.wrap(db) if self.probe is not None else db
        return self._db

    @property
    def base_meta(self) -> dict[str, str]:
        """The base version's manifest meta (after a rescale: combined from the old shards').

        An idle shard reads it without opening, so without any request, when this process's
        cached handle is known to be the shard's latest version through batch ``b - 1``: every
        attempt of a batch sees the same rows and base state, so a batch that left the shard
        unopened here committed nothing anywhere, and the handle stays current (the operators'
        decisions from meta are deterministic: their time bounds against the batch's watermark,
        or processing time, which only moves forward)."""
        if self._db is None:
            quiet = self._current_handle()
            if quiet is not None:
                return quiet.db.meta
            _ = self.db
        return self._base_meta

    @base_meta.setter
    def base_meta(self, meta: dict[str, str]) -> None:
        self._base_meta = meta

    @property
    def base_version(self) -> int | None:
        """The base version (``None``: the shard has none), without opening when
        :attr:`base_meta` would not."""
        if self._db is None:
            quiet = self._current_handle()
            if quiet is not None:
                return quiet.db.version
        return self.db.version

    def _current_handle(self) -> Cached | None:
        """The cached handle, if it is known to be exactly this batch's base."""
        cached = CACHE.get(self.url)
        if (
            cached is None
            or cached.owner != self.cache_owner
            or cached.current_through != self.batch_id - 1
            or (cached.db.version is not None and cached.db.version >= self.batch_id)
            or (cached.db.version is None and self.spec.generation > 0)  # must migrate first
        ):
            return None
        return cached

    def may_need_migration(self) -> bool:
        """Whether this shard of a rescaled layout may have no version of its own yet (this
        process holds no handle of it with a version): then the task opens it even when idle,
        so every shard of a new layout takes its state, by reference, at the layout's first
        batch and the rescale completes at once."""
        if self.spec.generation == 0 or self._db is not None:
            return False
        cached = CACHE.get(self.url)
        return cached is None or cached.owner != self.cache_owner or cached.db.version is None

    def db_seen(self) -> silt.DB | None:
        """The shard's plain DB if this task has it without a request (opened, or this
        process's cached handle of exactly the base), else ``None`` (metrics)."""
        if self._db is not None:
            return getattr(self._db, "inner", self._db)
        quiet = self._current_handle()
        return None if quiet is None else quiet.db

    def base_version_seen(self) -> int | None:
        """The base version if this task knows it without a request (metrics)."""
        if self._db is not None:
            return self._db.version
        quiet = self._current_handle()
        return None if quiet is None else quiet.db.version

    def _open(self) -> silt.DB:
        b = self.batch_id
        db = None
        current = self._current_handle()
        cached = CACHE.pop(self.url, None)
        if cached is not None:
            version = cached.db.version
            if (cached.owner == self.cache_owner and (version is None or version < b)
                    and cached.db.settings == self.spec.silt_settings()):
                db = cached.db
            else:
                # Another query's handle, one at/after this batch (a re-run: the base is older
                # than the handle), or one opened with other settings (a restart that changed
                # them): reopen at the latest version <= b - 1.
                cached.db.close()
        try:
            if db is not None and (db.version == b - 1 or current is not None):
                # A warm handle at version b - 1, or one known to be the latest through b - 1
                # (see base_meta), holds exactly this batch's base: no request.
                # (An attempt of this batch that commits first makes ours a replay, at commit.)
                self.base_meta = db.meta
                return db
            handed = _handoff.take(self, db)  # another worker's handle at b - 1: no request
            if handed is not None:
                self.base_meta = handed.meta
                return handed
            if db is None:
                db = self._open_at_most(b - 1)
                # The versions after the base, from the LIST opening made (none more).
                known = newer_base(db, db.listed_at_open or [])
            elif db.warm:
                # Nothing newer than the handle: two GETs of missing objects prove it. Another
                # worker process committed the shard since: the first of them found its
                # manifest, and the handle moves to the latest version <= b - 1 and learns the
                # versions after it in the same step (GETs, issued at once where their order
                # does not matter; it keeps its readers and cached blocks). A LIST only when
                # GETs cannot prove the answer, or something newer exists (a replay, or state
                # ahead of the checkpoint). See silt.DB.catch_up.
                _, known = db.catch_up(b - 1)
            else:
                known = db.newer_versions()  # it never committed: a LIST
            if db.version is not None:
                known.insert(0, db.version)
            if known:
                latest = known[-1]
                meta = (
                    db.meta if db.version == latest
                    else silt.read_manifest(db.store, latest).meta
                )
                owner = meta.get(META_QUERY_ID)
                if owner is not None and owner != self.query_id:
                    if not self.spec.take_over:
                        raise ForeignStateError(
                            _lifecycle.foreign_message(self.url, owner, self.query_id))
                    log.warning("take_over: discarding %s (state of query %s)",
                                public_url(self.url), owner)
                    db.close()
                    db = None
                    _lifecycle.delete_all(self.url, self.spec.storage_options)
                    db = self._open_at_most(b - 1)
                    known = []
            self._check_not_ahead(known)
            self.replay = b in known
            if any(v < b for v in newer_base(db, known)):
                # Versions before this batch newer than the base: committed by another worker
                # process since the handle's version (one that never committed, so could not
                # advance by GETs), or while this task opened it: move to the latest <= b - 1.
                db.advance(b - 1)
            self.base_meta = db.meta
            if db.version is None and self.spec.generation > 0 and not self.spec.take_over:
                # A shard of a rescaled layout without a version of its own yet.
                self.base_meta, self.migrated, self.referenced = migrate(
                    self.spec, db, self.first_kg, self.last_kg, b - 1
                )
                self.meta_updates.update(self._base_meta)
                self.changed = True
            return db
        except BaseException:
            if db is not None:
                db.close()
            raise

    def _check_not_ahead(self, versions: list[int]) -> None:
        newer = [v for v in versions if v > self.batch_id]
        if newer:
            raise StateAheadError(
                f"the state at {self.url!r} already has version {newer[-1]}, newer than "
                f"micro-batch {self.batch_id}: the query's checkpoint is older than its state. "
                "Restore the matching checkpoint or start with a new state_url"
            )

    def _open_at_most(self, version: int) -> silt.DB:
        return silt.open(self.url, at_most=version, settings=self.spec.silt_settings(),
                         storage_options=self.spec.storage_options)

    def observe_event_time(self, max_ms: int | None, input_index: int = 0) -> None:
        """Note the largest event time (ms) among this shard's rows of an input in this batch,
        late rows included (Spark measures every row that reaches ``withWatermark``)."""
        if max_ms is None:
            return
        old = self._event_seen[input_index]
        if old is None or max_ms > old:
            self._event_seen[input_index] = int(max_ms)

    # -- finishing ----------------------------------------------------------------------------
    def finish(self) -> None:
        """Record the batch's event times (before the commit, so a committed version always
        has its markers), then commit version ``batch_id`` if anything changed (and it is not a
        replay)."""
        self.origin_checked()
        observed = self._observed
        if observed is not None and (observed.new_run
                                     or any(m is not None for m in self._event_seen)):
            _watermark.record(
                self.spec.root, self.query_id, self.batch_id, self.url_name,
                self._event_seen, self._observed, self.root_requests["watermark"],
                storage_options=self.spec.storage_options,
            )
        # Timings for inspection (see docs/spark.md and _metrics.py): the commit's own duration
        # is about manifest.created_ms - task_start_ms - open_ms - process_ms.
        # (started_ms is wall-clock ms, truncated: a sub-ms task could come out negative)
        process_ms = self.process_ms = max(0.0, _now_ms() - self.started_ms - self.open_ms)
        self.commit_ms = 0.0
        if self.replay:
            self._check_replay_input()
            return
        if not self.changed:
            return
        maintain, maintained = self._maintenance_due()
        meta = {
            **self.meta_updates,
            "spark.task_start_ms": str(self.started_ms),
            "spark.open_ms": f"{self.open_ms:.1f}",
            "spark.process_ms": f"{process_ms:.1f}",
            META_QUERY_ID: self.query_id,
            META_BATCH_ID: str(self.batch_id),
            "spark.operator": self.spec.kind,
            "spark.key_groups": str(self.spec.key_groups),
            "spark.first_key_group": str(self.first_kg),
            "spark.last_key_group": str(self.last_kg),
            **({META_MAINTAINED: str(maintained)} if maintained is not None else {}),
        }
        t0 = _perf()
        try:
            self.db.commit(self.batch_id, meta=meta)
            self.committed = True
        except silt.CommitConflict as exc:
            # Usually another attempt of this task committed first, and its version stands.
            # Versions after this batch mean the checkpoint is older than the state (a warm
            # handle at b - 1 learns it here). A conflict on a reserved or withdrawn number
            # leaves no version of this batch: then the batch's state would be lost, so the
            # task fails instead.
            newer = self.db.newer_versions()
            self._check_not_ahead(newer)
            if exc.withdrawn or self.batch_id not in newer:
                raise BatchConflictError(
                    f"{public_url(self.url)}: micro-batch {self.batch_id} could not be committed "
                    f"and no version of it exists ({exc}); restart the query from its checkpoint"
                ) from exc
            log.info("%s: version %d was committed by another attempt", public_url(self.url),
                     self.batch_id)
            self.replay = True
            self._check_replay_input()
        self.commit_ms = (_perf() - t0) * 1000
        if maintain and self.committed:
            self._collect_garbage()

    def _maintenance_due(self) -> tuple[bool, int | None]:
        """Whether this batch's commit collects the shard's garbage, and the batch to record as
        the last collection (``None``: leave the meta as it is). A pass is due
        ``spec.maintenance_batches`` batches after the last one; a shard's first commit
        records a virtual pass, moved back by the shard's number, so that its first real pass
        comes one interval later and the shards of an operator do not all collect in the same
        batch."""
        every = self.spec.maintenance_batches
        if every <= 0:
            return False, None
        last = self.base_meta.get(META_MAINTAINED)
        if last is None:
            return False, self.batch_id - self.shard % every
        if self.batch_id - int(last) >= every:
            return True, self.batch_id
        return False, None

    def _collect_garbage(self) -> None:
        """State maintenance, after this task's commit: one GC pass over the shard's own
        folder (``DB.gc`` with the shard's retention settings: the newest
        ``Settings.retain_versions`` versions and named checkpoints stay, nothing younger
        than ``Settings.gc_grace_seconds`` goes; SSTs that a rescaled layout's shards reference
        stay, see docs/spark.md). Best effort: a failure is logged, the batch stands, and the
        next due batch tries again."""
        t0 = _perf()
        try:
            report = self.db.gc()
        except silt.SiltError as exc:
            log.warning("%s: state maintenance (GC) failed, retried in %d batches: %s",
                        public_url(self.url), self.spec.maintenance_batches, exc)
            return
        self.maintenance_ms = (_perf() - t0) * 1000
        self.gc_deleted = (len(report.deleted_ssts) + len(report.deleted_manifests)
                           + len(report.deleted_records))
        log.info("%s: state maintenance at batch %d deleted %d objects (%d bytes) in %.0f ms",
                 public_url(self.url), self.batch_id, self.gc_deleted, report.deleted_bytes,
                 self.maintenance_ms)

    def _check_replay_input(self) -> None:
        """On a replay, refuse input that cannot be the committed attempt's: one attempt had
        rows and the other none (:class:`ReplayInputError`). Every attempt of a batch must see
        the same rows (replayable sources, a fixed plan); a plan changed between the attempts
        (for example an operator moved inside a union, where an empty task could act as another
        shard) would otherwise make the stale version stand and lose this attempt's rows. Costs
        one GET, on replays only; versions without the count are not checked."""
        mine = self.meta_updates.get(META_ROWS_IN)
        if mine is None:
            return
        try:
            committed = silt.read_manifest(self.db.store, self.batch_id).meta.get(META_ROWS_IN)
        except NotFoundError:
            return  # withdrawn or collected since: the commit path decides
        if committed is None or (int(committed) > 0) == (int(mine) > 0):
            return
        raise ReplayInputError(
            f"{public_url(self.url)}: micro-batch {self.batch_id} is committed from "
            f"{committed} input rows but runs again with {mine}: the query's plan or source "
            "changed between the two attempts (for example the operator was moved into a "
            "union). Restore the plan the batch ran with, or start with a new state_url"
        )

    def release(self, ok: bool) -> None:
        """Return the handle to the worker's cache, or close it (failure, pending writes).

        A handle goes back marked current through this batch when this task committed it, or
        opened it and found nothing newer; a task that never opened its shard extends the
        cached handle's mark when the handle was this batch's base (see :attr:`base_meta`)."""
        probe = self.probe
        db = probe.unwrap() if probe is not None else self._db
        if db is None:
            self._db = None
            if ok:
                quiet = self._current_handle()
                if quiet is not None:
                    quiet.current_through = self.batch_id
            return
        self._db = db
        if ok and not (self.changed and not self.committed):
            current = self.batch_id if not self.replay else None
            if self.committed:  # for the next batch's task in another worker (_handoff.py)
                _handoff.leave(self.url, self.cache_owner, db)
            CACHE[self.url] = Cached(self.cache_owner, db, current)
            while len(CACHE) > MAX_CACHED_SHARDS:
                CACHE.popitem(last=False)[1].db.close()
            if probe is not None:
                probe.cached()
        else:
            db.close()


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _perf() -> float:
    import time

    return time.perf_counter()
