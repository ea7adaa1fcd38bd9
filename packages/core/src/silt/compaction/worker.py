"""The compaction subprocess: background merges run outside the writer's process.

A merge is CPU-bound Python (decode, merge, encode, bloom): run in a thread of the writer, it
holds the GIL for most of its run, and every foreground read that releases the GIL (a block read
from the store) waits up to a switch interval to get it back, so gets slow down several times
while a compaction runs. :func:`run_elsewhere` runs :func:`.compactor.run_compaction` in one
worker process per writer process (``spawn``-started on first need and shared by every DB the
process opens), while the driver's thread only waits for it, without the GIL. Nothing changes
for adoption: the worker writes the outputs and the record create-only, exactly as the thread
did, and returns the record; the writer adopts it at a commit as before.

Only a DB whose store another process can open the same way (a ``file://`` root; the object
store tiers carry options and credentials that are not in their URL), with the system clock
(a :class:`~silt.clock.ManualClock` lives in this process only) and a task that reads no sibling
DB's SSTs qualifies (:func:`can_run_elsewhere`); the others compact in the driver's thread as
before. The worker's requests are counted into the DB's metrics under ``compaction``.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..clock import Clock
from ..errors import StoreError
from ..manifest import Manifest
from ..metrics import MeteredStore, Metrics
from ..settings import Settings
from ..store import ObjectStore
from ..tiers.file import FileStore
from .record import CompactionRecord
from .task import CompactionTask

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None


def _file_root(store: ObjectStore) -> str | None:
    """The root directory of ``store`` when it is a ``file://`` store (through metering)."""
    inner = store.inner if isinstance(store, MeteredStore) else store
    return inner.root if type(inner) is FileStore else None


def can_run_elsewhere(store: ObjectStore, manifest: Manifest, task: CompactionTask,
                      clock: Clock) -> bool:
    """Whether ``task`` can run in the compaction subprocess (see the module docstring)."""
    if type(clock) is not Clock or _file_root(store) is None:
        return False
    ids = set(task.inputs)
    return not any(s.db for s in manifest.all_ssts() if s.id in ids)


def _worker_pool() -> ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            # spawn, not fork: the writer has threads (uploads, reads), and a forked child
            # would inherit their locks in whatever state they were
            _pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _drop_pool(broken: ProcessPoolExecutor) -> None:
    global _pool
    with _lock:
        if _pool is broken:
            _pool = None
    broken.shutdown(wait=False, cancel_futures=True)


def run_elsewhere(store: ObjectStore, manifest: Manifest, task: CompactionTask,
                  settings: Settings, metrics: Metrics) -> CompactionRecord:
    """:func:`.compactor.run_compaction` of ``task`` in the compaction subprocess; returns its
    record. Call only when :func:`can_run_elsewhere` says so. Errors of the compaction are
    raised here (as the same exception when it can cross the process boundary, else as a
    :class:`~silt.errors.StoreError` naming it); a worker that died is replaced on the next
    call and reported as a :class:`~silt.errors.StoreError`."""
    root = _file_root(store)
    assert root is not None
    pool = _worker_pool()
    try:
        outcome = pool.submit(_compact, root, manifest.encode(), task, settings).result()
    except BrokenProcessPool as exc:
        _drop_pool(pool)
        raise StoreError(f"the compaction subprocess died ({exc}); the task is picked "
                         "again by a later commit") from None
    kind, payload, requests = outcome
    for (_, op), (count, nbytes) in requests.items():
        entry = metrics.requests[(metrics.current_purpose(), op)]
        entry[0] += count
        entry[1] += nbytes
    if kind == "error":
        raise payload
    return CompactionRecord.decode(payload, "compaction subprocess")


def _compact(root: str, manifest_data: bytes, task: CompactionTask,
             settings: Settings) -> tuple[str, Any, dict[tuple[str, str], list[int]]]:
    """In the worker: run the task against ``root``; ``("ok", record bytes, requests)`` or
    ``("error", exception, requests)``."""
    from .compactor import run_compaction

    metrics = Metrics()
    store = MeteredStore(FileStore(root), metrics)
    try:
        with metrics.purpose("compaction"):
            manifest = Manifest.decode(manifest_data, "manifest from the writer")
            record = run_compaction(store, manifest, task, settings, Clock())
        return "ok", record.encode(), dict(metrics.requests)
    except Exception as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            exc = StoreError(f"compaction failed: {type(exc).__name__}: {exc}")
        return "error", exc, dict(metrics.requests)
