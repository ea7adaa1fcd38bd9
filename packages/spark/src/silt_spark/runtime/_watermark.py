"""The query-wide event-time watermark, as Spark defines it, derived inside the tasks.

Spark's watermark is one value for the whole query: after each micro-batch the driver takes the
largest event time seen so far per input (``withWatermark``), subtracts the input's delay, and
for several inputs keeps the minimum (``spark.sql.streaming.multipleWatermarkPolicy=min``, the
default); it starts at 0 and never goes down. Micro-batch ``b`` runs with the value computed from
batches ``< b``. A silt operator's Spark plan has no Spark state, so the driver computes nothing
for it: each shard's task derives the same value from small **marker objects** the query
committed in earlier batches (docs/spark.md, "Event time")::

    <operator root>/watermark/<query id>/<batch:020d>.<input>.<shard folder>.<max event ms>

* Before it commits version ``b``, a shard writes (create-only, empty body) one marker per input
  whose largest event time in batch ``b`` exceeds the largest the query had committed before
  ``b``. Spark's micro-batch inputs are fixed by its offset log, so a retried or re-run task
  writes the same name; a marker that already exists is left alone (objects are immutable).
* The task for batch ``b`` LISTs the query's markers (one request) and keeps those of batches
  ``< b``: every such batch had finished before Spark started ``b``, so each attempt of ``b``,
  and any re-run after a restart, sees the same markers and the same watermark. Markers of a
  batch are only written above the largest value committed before it, so the newest marked
  batch of an input holds that input's maximum.
* Spark keeps **two** watermarks per batch (``eventTimeWatermarkForEviction`` and
  ``eventTimeWatermarkForLateEvents``): batch ``b`` closes windows, forgets keys, expires join
  rows and fires timers with the first, the value of the batches ``< b``
  (:attr:`Observed.watermark_ms`), but judges its rows late against the watermark batch
  ``b - 1`` ran with, the value of the batches ``< b - 1`` (:attr:`Observed.late_ms`). The two
  differ only when batches run back to back (a backlog); after a no-data batch (silt's tick,
  ``_tick.py``) they are equal. So shard 0 deletes an input's markers only when a newer marked
  batch ``< b - 1`` supersedes them: a re-run of the last batch still finds both values (Spark
  never re-runs a batch before ``b - 1`` once ``b`` has started).
* Markers name no layout, so a rescale keeps the watermark; they are under the query id, so
  another query's markers (after a take-over) are never read.

Cost: one LIST per Python worker process and batch (the tasks of a batch that one process runs
share it), plus one PUT per input whose event time moved the maximum, plus (shard 0, when older
markers exist) one batched DELETE. No per-row work beyond the vectorized maximum
of the event-time column.

Simplification: Spark ignores inputs that have not had data yet and then never lowers the global
value; with one input (every operator today) both rules are implied. For several inputs, the
minimum here is taken over the inputs that have markers, without Spark's "never lower" step.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from silt.plugins import open_store
from silt.store import retrying

#: Folder of the marker objects under the operator root.
PREFIX = "watermark/"
#: Spark's watermark before any event time was seen (and its lower bound), ms.
INITIAL_MS = 0

_STORES: dict[str, Any] = {}
_LOCK = threading.Lock()
#: Per worker process: (root, incarnation, query id) -> (batch, its markers of earlier batches,
#: [pruned]).
#: The markers of batches ``< b`` are final once Spark started ``b`` (see the module
#: docstring), so every task of batch ``b`` this process runs shares one LIST.
_Marker = tuple[str, tuple[int, int, str, int]]
_LISTED: dict[tuple[str, str, str], tuple[int, list[_Marker], list[bool]]] = {}


def _root_store(root: str, storage_options: dict[str, str] | None = None) -> Any:
    """The operator root's store, opened once per Python worker process (and per set of
    storage options)."""
    key = (root, tuple(sorted((storage_options or {}).items())))
    with _LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = open_store(root, storage_options=storage_options)
        return store


def query_prefix(query_id: str) -> str:
    return f"{PREFIX}{query_id or '_'}/"


def marker_key(query_id: str, batch: int, input_index: int, shard: str, max_ms: int) -> str:
    """The object name of a marker (see the module docstring)."""
    return f"{query_prefix(query_id)}{batch:020d}.{input_index}.{shard}.{max_ms}"


def parse_marker(name: str) -> tuple[int, int, str, int] | None:
    """``(batch, input, shard folder, max event ms)`` of a marker's name after the query
    prefix, or ``None`` for a name that is not a marker."""
    parts = name.split(".")
    if len(parts) != 4:
        return None
    try:
        return int(parts[0]), int(parts[1]), parts[2], int(parts[3])
    except ValueError:
        return None


@dataclass(frozen=True)
class Observed:
    """What the query committed before a batch ``b``: the largest event time per input
    (``None`` where an input has none yet), the watermark it gives (Spark's watermark for
    eviction) and the watermark of batch ``b - 1`` (Spark's watermark for late events: rows at
    or before it are dropped)."""

    max_event_ms: tuple[int | None, ...]
    watermark_ms: int
    late_ms: int = INITIAL_MS


def event_us(column: Any) -> Any:
    """A timestamp column (any Arrow unit) as int64 microseconds, Spark's unit, rounded down;
    nulls stay null. Every operator reads event time through this one conversion."""
    import pyarrow as pa
    import pyarrow.compute as pc

    per_us = {"s": -1_000_000, "ms": -1000, "us": 1, "ns": 1000}[column.type.unit]
    raw = column.cast(pa.int64())
    if per_us < 0:
        return pc.multiply(raw, -per_us)
    return raw if per_us == 1 else pc.floor(pc.divide(raw, per_us)).cast(pa.int64())


def watermark_of(max_event_ms: Sequence[int | None], delays_ms: Sequence[int]) -> int:
    """Spark's rule: ``max(0, min over inputs with data of (max event time - delay))``."""
    values = [m - d for m, d in zip(max_event_ms, delays_ms) if m is not None]
    return max(INITIAL_MS, min(values)) if values else INITIAL_MS


def _count(counts: dict[str, int] | None, kind: str) -> None:
    if counts is not None:
        counts[kind] = counts.get(kind, 0) + 1


def observe(
    root: str, query_id: str, batch: int, delays_ms: Sequence[int], prune: bool = False,
    counts: dict[str, int] | None = None, incarnation: str = "",
    storage_options: dict[str, str] | None = None,
) -> Observed:
    """Read the markers of batches ``< batch`` (one LIST, shared by this process's tasks of
    ``batch``) and derive the watermark.

    With ``prune`` (shard 0's task), delete markers that an input's newer marked batch
    supersedes (one batched DELETE, only when there are such markers). ``counts`` (request
    kind -> count) is incremented per request made. ``incarnation`` (the operator descriptor's
    id) keeps a listing of a dropped and re-created root from being reused.
    ``storage_options`` go to the root's tier (_storage.py).
    """
    store = _root_store(root, storage_options)
    prefix = query_prefix(query_id)
    with _LOCK:
        seen = _LISTED.get((root, incarnation, query_id))
    if seen is not None and seen[0] == batch:
        markers = seen[1]
    else:
        infos = retrying(lambda: list(store.list(prefix)))
        _count(counts, "LIST")
        markers = []
        for info in infos:
            m = parse_marker(info.key[len(prefix):])
            if m is not None and m[0] < batch:
                markers.append((info.key, m))
        with _LOCK:
            seen = _LISTED[(root, incarnation, query_id)] = (batch, markers, [False])
    n = len(delays_ms)
    latest: list[int | None] = [None] * n  # newest marked batch < batch - 1, per input
    top: list[int | None] = [None] * n  # largest event time of batches < batch
    top_late: list[int | None] = [None] * n  # ... of batches < batch - 1
    parsed = []
    for key, m in markers:
        if not 0 <= m[1] < n:
            continue
        parsed.append((key, m))
        b, i, _, ms = m
        if top[i] is None or ms > top[i]:
            top[i] = ms
        if b < batch - 1:
            if latest[i] is None or b > latest[i]:
                latest[i] = b
            if top_late[i] is None or ms > top_late[i]:
                top_late[i] = ms
    if prune and not seen[2][0]:
        stale = [key for key, (b, i, _, _) in parsed if latest[i] is not None and b < latest[i]]
        if stale:
            retrying(lambda: store.delete_many(stale))
            _count(counts, "DELETE")
        seen[2][0] = True
    wm = watermark_of(top, delays_ms)
    # Spark's late-events watermark is never above its eviction one; without Spark's "never
    # lower" step (see the simplification above) an input's first data could make it so.
    return Observed(tuple(top), wm, min(wm, watermark_of(top_late, delays_ms)))


def record(
    root: str, query_id: str, batch: int, shard: str, seen: Sequence[int | None],
    observed: Observed, counts: dict[str, int] | None = None,
    storage_options: dict[str, str] | None = None,
) -> int:
    """Write the markers of inputs whose largest event time in ``batch`` (``seen``) exceeds
    what the query had committed before it; returns how many were needed."""
    store = _root_store(root, storage_options)
    wrote = 0
    for i, ms in enumerate(seen):
        old = observed.max_event_ms[i]
        if ms is None or (old is not None and ms <= old):
            continue
        key = marker_key(query_id, batch, i, shard, ms)
        retrying(lambda key=key: store.put_if_absent(key, b""))
        _count(counts, "PUT")
        wrote += 1
    return wrote


def in_task(
    root: str, delays_ms: Sequence[int], incarnation: str = "",
    storage_options: dict[str, str] | None = None, late: bool = False,
) -> int:
    """The watermark of the running Spark task's micro-batch (for a step before an operator's
    shuffle, which has no shard task): the same value the operator's shards see; with
    ``late``, the watermark for late events (:attr:`Observed.late_ms`)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if batch is None:
        return INITIAL_MS
    query_id = ctx.getLocalProperty("sql.streaming.queryId") or ""
    observed = observe(root, query_id, int(batch), delays_ms,
                       incarnation=incarnation, storage_options=storage_options)
    return observed.late_ms if late else observed.watermark_ms


def query_watermarks(store: Any, delays_ms: Sequence[int]) -> dict[str, int]:
    """Each query's watermark from the markers under the root ``store`` is opened at (one
    LIST): the value its next batch runs with (``_tick.py`` compares them between batches)."""
    tops: dict[str, list[int | None]] = {}
    n = len(delays_ms)
    for info in retrying(lambda: list(store.list(PREFIX))):
        query, _, name = info.key[len(PREFIX):].partition("/")
        m = parse_marker(name)
        if m is None or not 0 <= m[1] < n:
            continue
        top = tops.setdefault(query, [None] * n)
        if top[m[1]] is None or m[3] > top[m[1]]:
            top[m[1]] = m[3]
    return {q: watermark_of(top, delays_ms) for q, top in tops.items()}
