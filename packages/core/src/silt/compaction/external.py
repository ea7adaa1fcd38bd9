"""One pass of an external compactor (``silt compact``): compaction outside the writer.

A pass reads the latest committed version, asks the policy for a task, and runs it with
:func:`~silt.compaction.compactor.run_compaction`, which writes output SSTs and a compaction
record and never a manifest: the writer adopts the result at its next commit, as it adopts its
own background compactions. A pass is skipped while a record the writer has not adopted yet
covers some of the same live inputs (doing that work twice would only waste requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..clock import Clock
from ..inline import without_inline
from ..progress import Progress
from ..settings import Settings
from ..siblings import SiblingStores
from ..store import ObjectStore
from ..versions import live_versions, read_manifest
from .compactor import run_compaction
from .record import CompactionRecord, read_records


@dataclass(frozen=True)
class CompactionPass:
    """What one pass did: ``status`` is ``"empty"`` (no committed version), ``"idle"`` (the
    policy found nothing to do), ``"waiting"`` (an unadopted record, ``waiting_for``, already
    covers the task) or ``"compacted"`` (``record`` was written)."""

    status: str
    version: int | None
    record: CompactionRecord | None = None
    waiting_for: str | None = None


def compact_once(store: ObjectStore, url: str, settings: Settings, policy: Any,
                 clock: Clock, progress: Progress | None = None) -> CompactionPass:
    """Run one pass over the latest version of the DB in ``store`` (at ``url``, for sibling
    references). Never writes a manifest. Raises what reading the manifest or running the task
    raises (:class:`~silt.errors.CorruptionError`, :class:`~silt.errors.StoreError`).
    ``progress`` is passed to :func:`~silt.compaction.compactor.run_compaction`."""
    found = live_versions(store)
    if not found:
        return CompactionPass("empty", None)
    m = without_inline(read_manifest(store, found[-1]))
    task = policy.pick(m, clock.now_ms())
    if task is None:
        return CompactionPass("idle", m.version)
    live = {s.id for s in m.all_ssts()}
    for name, rec in read_records(store):
        if isinstance(rec, CompactionRecord) and set(rec.task.inputs) <= live and (
            set(rec.task.inputs) & set(task.inputs)
        ):
            return CompactionPass("waiting", m.version, waiting_for=name)
    siblings = SiblingStores(url, store)
    try:
        record = run_compaction(store, m, task, settings, clock, siblings=siblings,
                                progress=progress)
    finally:
        siblings.close()
    return CompactionPass("compacted", m.version, record=record)
