"""The writer's side of compaction: schedule tasks, gather finished records, adopt them.

A :class:`CompactionDriver` belongs to one DB. In ``background`` mode it runs one compaction at
a time in its own thread, picked by the policy from the version just committed; in ``external``
mode it only lists ``compaction/`` (at most every ``compaction_poll_seconds``) for records that
``silt compact`` wrote. Either way, records are adopted by the writer's next commit
(:func:`.adopt.adopt`) or refused, and their objects are then deleted.

Thread safety: called only from the writer's commit path (under the DB lock); the background
thread only runs :func:`.compactor.run_compaction`.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor

from .. import paths
from ..clock import Clock
from ..errors import CorruptionError, NotFoundError
from ..manifest import Manifest
from ..metrics import Metrics
from ..settings import Settings
from ..siblings import SiblingStores
from ..sst.builder import SstInfo
from ..store import ObjectStore, retrying
from .adopt import Refused, adopt
from .compactor import run_compaction
from .record import CompactionRecord
from .task import CompactionTask, make_policy

log = logging.getLogger("silt.compaction")


class CompactionDriver:
    """Schedules, gathers and adopts compactions for one writer."""

    def __init__(self, store: ObjectStore, settings: Settings, clock: Clock,
                 metrics: Metrics, siblings: SiblingStores | None = None) -> None:
        self.store = store
        self.siblings = siblings
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.policy = make_policy(settings.compaction, settings)
        self.mode = settings.compaction_mode
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future[CompactionRecord] | None = None
        self._ready: list[CompactionRecord] = []
        self._resolved: set[str] = set()
        self._last_poll = float("-inf")
        self.last_error: BaseException | None = None

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

    def schedule(self, manifest: Manifest | None) -> CompactionTask | None:
        """Start the policy's next task for ``manifest`` if nothing is running or waiting."""
        if self.policy is None or self.mode != "background" or manifest is None:
            return None
        self._harvest()
        if self._future is not None or self._ready:
            return None
        task = self.policy.pick(manifest, self.clock.now_ms())
        if task is None:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="silt-compact")
        self._future = self._pool.submit(self._run, manifest, task)
        self.metrics.add("compactions_started")
        return task

    def _run(self, manifest: Manifest, task: CompactionTask) -> CompactionRecord:
        with self.metrics.purpose("compaction"):
            return run_compaction(self.store, manifest, task, self.settings, self.clock,
                                  siblings=self.siblings)

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
            self.mode == "background"
        ):
            if self._future is None and not self._ready:
                self.schedule(manifest)
            if self._future is not None:
                start = time.monotonic()
                self._future.exception()
                self.metrics.add("stall_seconds", time.monotonic() - start)
                self.metrics.add("stalls")
        self._harvest()
        if self.mode == "external":
            now = time.monotonic()
            if now - self._last_poll >= self.settings.compaction_poll_seconds:
                self._last_poll = now
                self._poll()
        return sorted(self._ready, key=lambda r: (r.created_ms, r.id))

    def _poll(self) -> None:
        known = self._resolved | {r.id for r in self._ready}
        for info in retrying(lambda: list(self.store.list(paths.COMPACTION_PREFIX))):
            rid = info.key[len(paths.COMPACTION_PREFIX):]
            if rid in known:
                continue
            try:
                data = retrying(lambda key=info.key: self.store.get(key))
                self._ready.append(CompactionRecord.decode(data, info.key))
            except (NotFoundError, CorruptionError) as exc:
                log.warning("ignoring compaction record %s: %s", info.key, exc)
                self._resolved.add(rid)

    def apply(
        self,
        l0: tuple[SstInfo, ...],
        levels: tuple[tuple[SstInfo, ...], ...],
        records: list[CompactionRecord],
    ) -> tuple[tuple[SstInfo, ...], tuple[tuple[SstInfo, ...], ...], list[CompactionRecord],
               list[CompactionRecord]]:
        """Apply what can be adopted; returns the new tree, adopted and refused records."""
        adopted, refused = [], []
        max_age = int(self.settings.gc_grace_seconds * 500)  # half the grace period, in ms
        now = self.clock.now_ms()
        for record in records:
            oldest = min((paths.id_time_ms(s.id) for s in record.outputs), default=now)
            if now - oldest > max_age:
                refused.append(record)  # GC may already consider its outputs garbage
                continue
            try:
                l0, levels = adopt(l0, levels, record)
                adopted.append(record)
            except Refused as why:
                log.info("compaction %s not adopted: %s", record.id, why)
                refused.append(record)
        return l0, levels, adopted, refused

    def resolved(self, adopted: list[CompactionRecord], refused: list[CompactionRecord]) -> None:
        """After a commit landed: forget the records and delete their objects."""
        done = {r.id for r in adopted} | {r.id for r in refused}
        if not done:
            return
        self._ready = [r for r in self._ready if r.id not in done]
        self._resolved |= done
        self.metrics.add("compactions_adopted", len(adopted))
        self.metrics.add("compactions_refused", len(refused))
        self.metrics.add("compaction_input_bytes", sum(r.input_bytes for r in adopted))
        self.metrics.add("compaction_output_bytes",
                         sum(s.size for r in adopted for s in r.outputs))
        try:
            with self.metrics.purpose("compaction"):
                keys = [paths.compaction_key(i) for i in sorted(done)]
                retrying(lambda: self.store.delete_many(keys))
        except Exception as exc:  # only hints: GC removes them later
            log.warning("could not delete compaction records: %s", exc)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
