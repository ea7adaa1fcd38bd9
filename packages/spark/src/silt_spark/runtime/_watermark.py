"""The query-wide event-time watermark, as Spark defines it, derived inside the tasks.

Spark's watermark is one value for the whole query. Its driver keeps, per run of the query (a
start from the checkpoint), each input's largest event time minus the input's delay, counting an
input that has had no data in this run as 0; after each micro-batch it takes the minimum over
the inputs (``spark.sql.streaming.multipleWatermarkPolicy=min``, the default) and raises the
global value to it if that is higher: the global value starts at 0, never goes down, and is the
only part kept in the checkpoint. Micro-batch ``b`` runs with the value computed after batch
``b - 1``. A silt operator's Spark plan has no Spark state, so the driver computes nothing for
it: each shard's task derives the same value from small objects the query wrote in earlier
batches, under ``<operator root>/watermark/<query id>/`` (docs/spark.md, "Event time"):

* **Event markers** ``<batch:020d>.<input>.<shard folder>.<max event ms>``. Before it commits
  version ``b``, a shard writes (create-only, empty body) one per input whose largest event time
  in batch ``b`` exceeds the largest its run had before ``b``. Spark's micro-batch inputs are
  fixed by its offset log, so a retried or re-run task writes the same name.
* **Run markers** ``run.<first batch:020d>.<run id>``: the first batch each run of the query
  executed (the run id is Spark's, the tasks' job group). The tasks of a run's first batch write
  it, so batch ``k`` belongs to the run with the largest first batch ``<= k``. Where two runs
  share a first batch (one died in it), both start from the same value and the same input.
* **Fold records** ``base.<batch:020d>.<watermark>.<run first batch>.<max>_<max>...``: the state
  of the computation before a batch (the global value, the run of the batch before and that
  run's largest event time per input, ``n`` for none), so older markers can go.

The task for batch ``b`` LISTs the query's objects (one request, shared by this process's tasks
of ``b``) and folds the newest record at or before ``b - 1`` forward over the markers of the
batches before ``b`` (:func:`fold`): every such batch had finished before Spark started ``b``,
so each attempt of ``b``, and any re-run after a restart, derives the same values. Spark keeps
**two** watermarks per batch (``eventTimeWatermarkForEviction`` and
``eventTimeWatermarkForLateEvents``): batch ``b`` closes windows, forgets keys, expires join rows
and fires timers with the first, the value after ``b - 1`` (:attr:`Observed.watermark_ms`), and
judges its rows late against the value batch ``b - 1`` ran with (:attr:`Observed.late_ms`).
The two differ only when batches run back to back (a backlog).

Pruning: shard 0's task, once enough objects of batches before ``b - 1`` piled up, writes the
fold record of ``b - 1`` and then deletes what it replaces (one batched DELETE), so a re-run of
the last batch still finds both of its values (Spark never re-runs a batch before ``b - 1`` once
``b`` has started). Markers name no layout, so a rescale keeps the watermark; they are under the
query id, so another query's markers (after a take-over) are never read.

Cost: one LIST per Python worker process and batch, plus one PUT per input whose event time
raised its run's maximum, plus one PUT per task of a run's first batch (a task's PUTs go out
at once on a remote store: one round trip), plus (shard 0, every
:data:`PRUNE_AT` stale objects) one PUT and one batched DELETE. No per-row work beyond the
vectorized maximum of the event-time column.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from silt.gather import at_once, serially
from silt.plugins import open_store
from silt.store import retrying

from ._ndarrays import scalar

#: Folder of the marker objects under the operator root.
PREFIX = "watermark/"
#: Spark's watermark before any event time was seen (and its lower bound), ms.
INITIAL_MS = 0
#: Shard 0 prunes once this many objects of batches before ``b - 1`` are listed.
PRUNE_AT = 16
#: Name prefixes of the run markers and the fold records (event markers start with a digit).
RUN, BASE = "run", "base"

_STORES: dict[str, Any] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Fold:
    """The watermark computation's state before batch :attr:`batch`: the global value batch
    ``batch`` runs with, the first batch of the run that ran ``batch - 1`` (-1: no run known,
    as for roots written before run markers existed) and that run's largest event time per
    input (``None``: no data in the run yet)."""

    batch: int
    watermark_ms: int
    run_first: int
    maxima: tuple[int | None, ...]

    @staticmethod
    def start(inputs: int) -> Fold:
        """Before the query's first batch."""
        return Fold(0, INITIAL_MS, -1, (None,) * inputs)


@dataclass
class Listing:
    """A query's watermark objects as listed: event markers ``(key, (batch, input, shard,
    max ms))``, run markers ``(key, first batch, run id)`` and fold records ``(key, Fold)``."""

    events: list[tuple[str, tuple[int, int, str, int]]]
    runs: list[tuple[str, int, str]]
    bases: list[tuple[str, Fold]]


#: Per worker process: (root, incarnation, query id) -> (batch, its listing, [pruned]).
#: The objects of batches ``< b`` are final once Spark started ``b`` (see the module
#: docstring), so every task of batch ``b`` this process runs shares one LIST.
_LISTED: dict[tuple[str, str, str], tuple[int, Listing, list[bool]]] = {}


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
    """The object name of an event marker (see the module docstring)."""
    return f"{query_prefix(query_id)}{batch:020d}.{input_index}.{shard}.{max_ms}"


def run_key(query_id: str, first_batch: int, run_id: str) -> str:
    """The object name of a run marker."""
    return f"{query_prefix(query_id)}{RUN}.{first_batch:020d}.{run_id}"


def base_key(query_id: str, state: Fold) -> str:
    """The object name of a fold record: the whole state is in the name."""
    maxima = "_".join("n" if m is None else str(m) for m in state.maxima)
    return (f"{query_prefix(query_id)}{BASE}.{state.batch:020d}.{state.watermark_ms}."
            f"{state.run_first}.{maxima}")


def parse_marker(name: str) -> tuple[int, int, str, int] | None:
    """``(batch, input, shard folder, max event ms)`` of an event marker's name after the
    query prefix, or ``None`` for a name that is not one."""
    parts = name.split(".")
    if len(parts) != 4:
        return None
    try:
        return int(parts[0]), int(parts[1]), parts[2], int(parts[3])
    except ValueError:
        return None


def _parse_run(name: str) -> tuple[int, str] | None:
    parts = name.split(".")
    if len(parts) != 3 or parts[0] != RUN or not parts[2]:
        return None
    try:
        return int(parts[1]), parts[2]
    except ValueError:
        return None


def _parse_base(name: str, inputs: int) -> Fold | None:
    parts = name.split(".")
    if len(parts) != 5 or parts[0] != BASE:
        return None
    try:
        maxima = tuple(None if m == "n" else int(m) for m in parts[4].split("_"))
        state = Fold(int(parts[1]), int(parts[2]), int(parts[3]), maxima)
    except ValueError:
        return None
    return state if len(maxima) == inputs else None


def parse_listing(names: Iterable[tuple[str, str]], inputs: int) -> Listing:
    """Sort ``(key, name after the query prefix)`` pairs into a :class:`Listing`; names of
    another shape, and markers of inputs the operator does not have, are left out."""
    listing = Listing([], [], [])
    for key, name in names:
        if (m := parse_marker(name)) is not None:
            if 0 <= m[1] < inputs:
                listing.events.append((key, m))
        elif (r := _parse_run(name)) is not None:
            listing.runs.append((key, *r))
        elif (s := _parse_base(name, inputs)) is not None:
            listing.bases.append((key, s))
    return listing


def newest_base(listing: Listing, upto: int, inputs: int) -> Fold:
    """The newest fold record at or before batch ``upto``, else the query's start."""
    state = Fold.start(inputs)
    for _, base in listing.bases:
        if state.batch < base.batch <= upto:
            state = base
    return state


def advance(state: Fold, listing: Listing, upto: int, delays_ms: Sequence[int]) -> Fold:
    """Spark's computation carried from ``state`` over the batches ``state.batch .. upto - 1``:
    after each batch, a batch that starts a run forgets the previous run's maxima, the batch's
    markers raise its run's, and the global value rises to the minimum over the inputs (0 for
    an input without data in the run) if that is higher. Only batches with a marker change the
    state, so the cost is in the listing's size, not in batch numbers."""
    n = len(delays_ms)
    firsts = sorted({first for _, first, _ in listing.runs})
    per_batch: dict[int, list[int | None]] = {}
    for _, (b, i, _, ms) in listing.events:
        if state.batch <= b < upto:
            top = per_batch.setdefault(b, [None] * n)
            if top[i] is None or ms > top[i]:
                top[i] = ms
    for k in sorted(set(per_batch) | {f for f in firsts if state.batch <= f < upto}):
        first = max((f for f in firsts if f <= k), default=-1)
        maxima = list(state.maxima) if first == state.run_first else [None] * n
        for i, ms in enumerate(per_batch.get(k, ())):
            if ms is not None and (maxima[i] is None or ms > maxima[i]):
                maxima[i] = ms
        wm = max(state.watermark_ms, watermark_of(maxima, delays_ms))
        state = Fold(k + 1, wm, first, tuple(maxima))
    return Fold(max(upto, state.batch), state.watermark_ms, state.run_first, state.maxima)


@dataclass(frozen=True)
class Observed:
    """What the query committed before a batch ``b``: the largest event time per input in the
    task's run before ``b`` (``None`` where an input has none yet: markers are written above
    it), the watermark batch ``b`` runs with (Spark's watermark for eviction), the one batch
    ``b - 1`` ran with (Spark's watermark for late events: rows at or before it are dropped)
    and whether the task must write its run's marker (``b`` is its run's first batch)."""

    max_event_ms: tuple[int | None, ...]
    watermark_ms: int
    late_ms: int = INITIAL_MS
    new_run: str = ""


def event_us(column: Any) -> Any:
    """A timestamp column (any Arrow unit) as int64 microseconds, Spark's unit, rounded down;
    nulls stay null. Every operator reads event time through this one conversion."""
    import pyarrow as pa
    import pyarrow.compute as pc

    per_us = {"s": -1_000_000, "ms": -1000, "us": 1, "ns": 1000}[column.type.unit]
    raw = column.cast(pa.int64())
    if per_us < 0:
        return pc.multiply(raw, scalar(-per_us))
    if per_us == 1:
        return raw
    return pc.floor(pc.divide(raw, scalar(per_us))).cast(pa.int64())


def watermark_of(max_event_ms: Sequence[int | None], delays_ms: Sequence[int]) -> int:
    """One step of Spark's rule: ``max(0, min over inputs of (max event time - delay))``, an
    input without data counting as 0."""
    values = [INITIAL_MS if m is None else m - d for m, d in zip(max_event_ms, delays_ms)]
    return max(INITIAL_MS, min(values)) if values else INITIAL_MS


def _count(counts: dict[str, int] | None, kind: str) -> None:
    if counts is not None:
        counts[kind] = counts.get(kind, 0) + 1


def _list(store: Any, prefix: str, inputs: int) -> Listing:
    infos = retrying(lambda: list(store.list(prefix)))
    return parse_listing(((info.key, info.key[len(prefix):]) for info in infos), inputs)


def observe(
    root: str, query_id: str, batch: int, delays_ms: Sequence[int], prune: bool = False,
    counts: dict[str, int] | None = None, incarnation: str = "",
    storage_options: dict[str, str] | None = None, run_id: str = "",
) -> Observed:
    """Read the query's watermark objects (one LIST, shared by this process's tasks of
    ``batch``) and derive batch ``batch``'s two watermarks.

    ``run_id`` is Spark's run of the query the task belongs to (``""``: unknown, the markers
    are then read as one run). With ``prune`` (shard 0's task), write the fold record of
    ``batch - 1`` and delete what it replaces, once :data:`PRUNE_AT` such objects are listed.
    ``counts`` (request kind -> count) is incremented per request made. ``incarnation`` (the
    operator descriptor's id) keeps a listing of a dropped and re-created root from being
    reused. ``storage_options`` go to the root's tier (_storage.py).
    """
    store = _root_store(root, storage_options)
    prefix = query_prefix(query_id)
    n = len(delays_ms)
    with _LOCK:
        seen = _LISTED.get((root, incarnation, query_id))
    if seen is None or seen[0] != batch:
        listing = _list(store, prefix, n)
        _count(counts, "LIST")
        with _LOCK:
            seen = _LISTED[(root, incarnation, query_id)] = (batch, listing, [False])
    listing = seen[1]
    late = advance(newest_base(listing, batch - 1, n), listing, batch - 1, delays_ms)
    now = advance(late, listing, batch, delays_ms)
    if batch == 0:
        late = now
    if prune and not seen[2][0]:
        seen[2][0] = True
        _prune(store, query_id, listing, late, counts)
    mine = [f for _, f, r in listing.runs if r == run_id and f <= batch]
    if run_id and not mine:
        return Observed((None,) * n, now.watermark_ms, late.watermark_ms, new_run=run_id)
    if run_id and max(mine) != now.run_first:  # a zombie of a run that is over
        return Observed((None,) * n, now.watermark_ms, late.watermark_ms)
    return Observed(now.maxima, now.watermark_ms, late.watermark_ms)


def _prune(store: Any, query_id: str, listing: Listing, state: Fold,
           counts: dict[str, int] | None) -> None:
    """Replace the objects of batches before ``state.batch`` by its fold record: written
    first, then the others deleted, so every reader finds one or the other."""
    stale = [key for key, (b, *_) in listing.events if b < state.batch]
    stale += [key for key, base in listing.bases if base.batch < state.batch]
    stale += [key for key, first, _ in listing.runs if first < state.run_first]
    if len(stale) < PRUNE_AT:
        return
    retrying(lambda: store.put_if_absent(base_key(query_id, state), b""))
    _count(counts, "PUT")
    retrying(lambda: store.delete_many(stale))
    _count(counts, "DELETE")


def record(
    root: str, query_id: str, batch: int, shard: str, seen: Sequence[int | None],
    observed: Observed, counts: dict[str, int] | None = None,
    storage_options: dict[str, str] | None = None,
) -> int:
    """Write the markers of inputs whose largest event time in ``batch`` (``seen``) exceeds
    what the task's run had before it, and the run's marker when ``batch`` is its first;
    returns how many objects were written."""
    store = _root_store(root, storage_options)
    keys = []
    if observed.new_run:
        keys.append(run_key(query_id, batch, observed.new_run))
    for i, ms in enumerate(seen):
        old = observed.max_event_ms[i]
        if ms is not None and (old is None or ms > old):
            keys.append(marker_key(query_id, batch, i, shard, ms))
    # The markers do not depend on each other (each is create-only and names its batch): on a
    # remote store they go out at once, one round trip for all.
    run = serially if store.local else at_once
    run([lambda key=key: retrying(lambda: store.put_if_absent(key, b"")) for key in keys])
    for _ in keys:
        _count(counts, "PUT")
    return len(keys)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def run_of_task(ctx: Any) -> str:
    """The Spark run of the query a task belongs to: the job group Spark's stream execution
    sets to its run id, else the ``runId = ...`` line of the job's description (``""`` when
    neither holds a run id, as outside a streaming query)."""
    if ctx is None:
        return ""
    group = str(ctx.getLocalProperty("spark.jobGroup.id") or "")
    if _UUID.fullmatch(group):
        return group
    found = re.search(r"runId = (" + _UUID.pattern + ")",
                      str(ctx.getLocalProperty("spark.job.description") or ""))
    return found.group(1) if found else ""


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
    """Each query's watermark from the objects under the root ``store`` is opened at (one
    LIST): the value its next batch runs with (``_tick.py`` compares them between batches)."""
    names: dict[str, list[tuple[str, str]]] = {}
    for info in retrying(lambda: list(store.list(PREFIX))):
        query, _, name = info.key[len(PREFIX):].partition("/")
        names.setdefault(query, []).append((info.key, name))
    n = len(delays_ms)
    out = {}
    for query, pairs in names.items():
        listing = parse_listing(pairs, n)
        last = max([b for _, (b, *_) in listing.events] + [f for _, f, _ in listing.runs]
                   + [s.batch - 1 for _, s in listing.bases] + [-1])
        state = advance(newest_base(listing, last + 1, n), listing, last + 1, delays_ms)
        out[query] = state.watermark_ms
    return out
