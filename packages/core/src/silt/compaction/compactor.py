"""The compactor: runs a :class:`CompactionTask` against the store and writes its record.

It reads the input SSTs (newest first, so the newest record of each key wins), passes each live
value through ``Settings.value_rewriter`` if one is set (:mod:`.rewrite`), writes the merged
entries as new SSTs of at most ``Settings.target_sst_bytes``, then creates
``compaction/<id>`` naming inputs and outputs. It never writes or changes a manifest, so any
number of compactors may run anywhere: the writer decides what to adopt. Output SSTs and records
are create-only objects with fresh ids (nothing is ever overwritten).

Range tombstones (:mod:`silt.rangedel`): the manifest's tombstones are applied to every input
they cover (its records in their ranges are dropped), so the outputs hold nothing any tombstone
of the manifest deletes and carry the manifest's counter as their ``seq``: tombstones made
later cover them, and a tombstone stays in the manifest only while an older SST overlaps it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from .. import paths
from ..clock import Clock
from ..errors import StoreError
from ..manifest import Manifest
from ..merge import merge_newest_first
from ..progress import Progress
from ..rangedel import RangeTombstones
from ..settings import Settings
from ..siblings import SiblingStores
from ..sst.builder import SstInfo, build_sst
from ..store import ObjectStore, retrying
from . import rewrite
from .record import CompactionRecord
from .task import CompactionTask


def _sources(manifest: Manifest, task: CompactionTask, siblings: SiblingStores
             ) -> list[Iterator[tuple[bytes, object]]]:
    ids = set(task.inputs)
    tombs = manifest.range_tombstones
    sources: list[Iterator[tuple[bytes, object]]] = []
    for s in manifest.l0:
        if s.id in ids:
            sources.append(_records(siblings, s, tombs))
    for run in manifest.levels:
        chosen = [s for s in run if s.id in ids]
        if chosen:
            sources.append(_chain(siblings, chosen, tombs))
    return sources


def _records(siblings: SiblingStores, s: SstInfo,
             tombs: RangeTombstones) -> Iterator[tuple[bytes, object]]:
    """The SST's records, less those a range tombstone newer than it deletes."""
    # A clipped reference to a sibling's SST yields only its keys inside the clip range.
    it = siblings.reader(s).iter_range(None, None)
    return tombs.mask(it, s.seq, True) if tombs.covers_any(s) else it


def _chain(siblings: SiblingStores, run: list[SstInfo],
           tombs: RangeTombstones) -> Iterator[tuple[bytes, object]]:
    for s in run:
        yield from _records(siblings, s, tombs)


def upload_sst(store: ObjectStore, keys: list[bytes], records: list[object], settings: Settings,
               now_ms: int, seq: int = 0) -> tuple[SstInfo, bytes]:
    """Build and upload one SST create-only; returns its info (with ``seq``) and bytes."""
    sst_id = paths.new_id(now_ms)
    data, info = build_sst(sst_id, keys, records, settings, created_ms=now_ms)
    if seq:
        info = replace(info, seq=seq)
    name = paths.sst_key(sst_id)
    if not retrying(lambda: store.put_if_absent(name, data)):
        tail = retrying(lambda: store.get_range(name, len(data) - 52, 52))
        if tail != data[-52:]:
            raise StoreError(f"SST name {name!r} already holds another object")
    return info, data


def run_compaction(
    store: ObjectStore,
    manifest: Manifest,
    task: CompactionTask,
    settings: Settings,
    clock: Clock,
    *,
    siblings: SiblingStores | None = None,
    progress: Progress | None = None,
) -> CompactionRecord:
    """Do ``task`` (picked from ``manifest``) and publish its record; return the record.

    ``siblings`` opens the stores of sibling DBs whose SSTs ``manifest`` references (needed
    only when it references any; see :mod:`silt.siblings`). Outputs always go to ``store``.
    ``progress`` (:mod:`silt.progress`) hears of each output SST uploaded (``"SSTs"``, total
    not known in advance).
    """
    by_id = {s.id: s for s in manifest.all_ssts()}
    missing = [i for i in task.inputs if i not in by_id]
    if missing:
        raise ValueError(f"task inputs {missing[:3]} are not in version {manifest.version}")
    input_bytes = sum(by_id[i].size for i in task.inputs)
    outputs: list[SstInfo] = []
    if task.mode != "drop":
        now = clock.now_ms()
        drop = task.drop_tombstones
        target = settings.target_sst_bytes
        keys: list[bytes] = []
        records: list[object] = []
        size = 0
        if siblings is None:
            if any(by_id[i].db for i in task.inputs):
                raise ValueError(
                    "the task reads sibling DBs' SSTs: pass siblings=SiblingStores(url, store)"
                )
            siblings = SiblingStores("", store)
        # Policies never pick inline SSTs (silt.inline), but a task that names some reads
        # them from the manifest; adoption keeps what stays inline at the head of L0.
        siblings.add_inline(manifest.inline, paths.manifest_key(manifest.version))
        rewriter = (None if settings.value_rewriter is None
                    else rewrite.load(settings.value_rewriter, settings.value_rewriter_config))
        for key, r in merge_newest_first(_sources(manifest, task, siblings)):
            if rewriter is not None and r is not None:
                r = rewrite.apply(rewriter, key, r)
            if r.__class__ is bytes:
                size += len(key) + len(r) + 9  # type: ignore[arg-type]
            elif r is None:
                if drop:
                    continue
                size += len(key) + 9
            else:
                if drop and r[1] <= now:  # type: ignore[index]
                    continue
                size += len(key) + len(r[0]) + 17  # type: ignore[index]
            keys.append(key)
            records.append(r)
            if size >= target:
                outputs.append(upload_sst(store, keys, records, settings, clock.now_ms(),
                                          manifest.seq)[0])
                keys, records, size = [], [], 0
                if progress is not None:
                    progress("SSTs", len(outputs), None)
        if keys:
            outputs.append(upload_sst(store, keys, records, settings, clock.now_ms(),
                                      manifest.seq)[0])
            if progress is not None:
                progress("SSTs", len(outputs), None)
    now = clock.now_ms()
    record = CompactionRecord(
        id=paths.new_id(now),
        base_version=manifest.version,
        created_ms=now,
        task=task,
        outputs=tuple(outputs),
        input_bytes=input_bytes,
    )
    name = paths.compaction_key(record.id)
    data = record.encode()
    if not retrying(lambda: store.put_if_absent(name, data)):
        existing = retrying(lambda: store.get(name))
        if existing != data:
            raise StoreError(f"compaction record {name!r} already holds another object")
    return record
