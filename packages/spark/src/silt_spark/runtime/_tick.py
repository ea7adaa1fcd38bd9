"""silt's tick source: the micro-batch Spark runs after a batch that moved the watermark.

After a micro-batch whose rows moved the watermark, Spark runs one more batch even when no
source has new data (a *no-data batch*, ``MicroBatchExecution``'s ``shouldRunAnotherBatch``): its
stateful operators close windows, fire timers, forget deduplicated keys and emit unmatched
outer-join rows there, including at the end of an ``availableNow`` run. A silt operator is a
``mapInArrow`` stage, not Spark state, so Spark would run no such batch for it. Each event-time
operator therefore unions this small streaming source (PySpark's Python data source API) into
its routed input. Its offset is the watermark the operator's query has reached (derived, as the
tasks derive it, from the marker objects of ``_watermark.py``); when it has moved since the
previous batch, the source offers one row, so Spark constructs exactly the batch it would have
run as a no-data batch (or, when other input waits, the tick row rides along with that data
batch, where Spark runs no extra batch either). The row carries key group ``-1``: the shard
tasks drop it, it only makes the batch happen, and Spark then runs every shard.

Only a move made by a batch of the query's current run ticks, as Spark runs a no-data batch
only after a batch of the same run (whether another batch is due is not in its checkpoint): a
``Trigger.Once`` run, which runs one batch and never its no-data batch, or a query stopped
right after a data batch, closes those windows with the next run's first data batch, as
Spark does.

Offsets: ``{"w": {<query id>: <watermark ms>, ...}}``, one entry per query whose markers the
root holds (the reader cannot know which query it serves; a stopped query's watermark never
moves, so it never ticks). ``availableNow``: the source supports it (it never reads data that
arrives later, it only follows the query's own progress), so such a run ends with every due
closing emitted, after the same number of batches as Spark's.

The reader is a *simple* one (PySpark's ``SimpleDataSourceStreamReader``): the source's
Python process on the driver, which Spark starts once per run of the query and asks for the
offsets, returns the tick row together with the batch's end offset, and Spark keeps it in the
driver's block manager, where the batch's task reads it. So no Python worker runs for the tick
on an executor; with a reader that plans partitions, each batch with a tick ran one Python read
task (30-90 ms of a core per batch on a loaded 2-core machine, and a Python worker to start
when none was idle). Only a batch re-run from the offset log after a restart, whose row went
with the previous run's process, reads it in a Python task (``readBetweenOffsets``). A new
query's first batch runs whatever its sources offer (each source is new to Spark); the reader
ends it past its initial offset (marked :data:`NEW`) so that its empty read is served the same
way.

Cost per micro-batch, all on the driver: one LIST of the root's ``watermark/`` folder each time
Spark asks for the offset after a micro-batch ran (once per trigger), and three calls into the
source's process (offset and row, partitions, commit). An idle query polls its sources in a
tight loop (every ``spark.sql.streaming.pollingDelay``, 10 ms, with the default trigger); calls
that come that quickly after the previous one follow no micro-batch (one takes far longer than
:data:`POLL_GAP_S` to plan and run), so they reuse the last listing, which is refreshed at most
every :data:`IDLE_LIST_S` while the polling lasts. The tick's own cost is small against the
batch it makes: that batch runs every shard's task (silt's closings need them), as Spark's
no-data batch runs its stateful operators.

Turn it off with the Spark conf ``spark.silt.tick=false`` (for example for a query whose
checkpoint was written before the source existed: Spark refuses a changed set of sources);
windows then close with the next batch that has data (or ``heartbeat=True``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

from silt.errors import InvalidArgumentError

from . import _watermark

#: The Spark conf that turns the tick source off (``"false"``); on by default.
TICK_CONF = "spark.silt.tick"
#: The source's one column.
SCHEMA = "tick long"
#: The key that marks a new query's initial offset (never an offset a batch ends at).
NEW = "new"
#: A call this soon after the previous one is Spark polling an idle query (no batch between).
POLL_GAP_S = 0.05
#: While Spark polls an idle query, the root's markers are listed at most this often (s).
IDLE_LIST_S = 2.0


def enabled(session: Any) -> bool:
    """Whether event-time operators union the tick source (``spark.silt.tick``, checked on the
    driver: a value other than true/false fails the query before any task runs)."""
    text = None if session is None else session.conf.get(TICK_CONF, None)
    if text is None:
        return True
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"{TICK_CONF} must be 'true' or 'false', got {text!r:.80}")
    return value == "true"


def due_offset(
    root: str, delays_ms: Sequence[int], storage_options: dict[str, str] | None = None
) -> dict[str, Any]:
    """The tick offset now: each query's watermark from the root's markers (one LIST)."""
    store = _watermark._root_store(root, storage_options)
    return {"w": _watermark.query_watermarks(store, delays_ms)}


def moved(start: dict[str, Any], now: dict[str, Any],
          baseline: dict[str, Any] | None = None) -> bool:
    """Whether a query's watermark in ``now`` passed the one in ``start`` (a tick is due), and
    the one in ``baseline`` (the run's first offset: see :func:`_classes`)."""
    before = start.get("w", {})
    base = (baseline or {}).get("w", {})
    low = _watermark.INITIAL_MS
    return any(w > max(before.get(q, low), base.get(q, low))
               for q, w in now.get("w", {}).items())


def _classes() -> tuple[type, type]:
    from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    class TickReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
        """Offers one row exactly when the query's watermark moved since the last batch.

        A simple reader (PySpark's ``SimpleDataSourceStreamReader``): the driver's source
        process returns the row with the batch's end offset (:meth:`read`), and Spark keeps it
        in the driver's block manager, so the batch's task reads it there, with no Python worker
        on the executor. Only a batch re-run from the offset log after a restart (whose row was
        never prefetched in this run) reads it on an executor (:meth:`readBetweenOffsets`)."""

        def __init__(self, root: str, delays: tuple[int, ...],
                     storage_options: dict[str, str] | None) -> None:
            self.root, self.delays, self.storage_options = root, delays, storage_options
            self.called = self.listed = float("-inf")
            self.last: dict[str, Any] | None = None
            #: The offset when this run of the query started (Spark makes one reader per
            #: run). Spark runs a no-data batch only after a batch of the same run moved the
            #: watermark (``lastExecutionRequiresAnotherBatch`` is not in the checkpoint): a
            #: move made by the previous run's last batch, whose no-data batch never ran (a
            #: ``Trigger.Once`` run, a query stopped right after a data batch), gets none
            #: after a restart, and its closings come with the next data batch.
            self.baseline: dict[str, Any] | None = None
            self.initial: dict[str, Any] | None = None

        def _now(self) -> dict[str, Any]:
            """The offset now: listed again unless Spark is polling an idle query (see the
            module docstring)."""
            t = time.monotonic()
            polling = t - self.called < POLL_GAP_S and t - self.listed < IDLE_LIST_S
            self.called = t
            if self.last is None or not polling:
                self.last = due_offset(self.root, self.delays, self.storage_options)
                self.listed = t
            if self.baseline is None:
                self.baseline = self.last
            return self.last

        def initialOffset(self) -> dict[str, Any]:
            """A new query's start: the offset now, marked :data:`NEW` (no batch ends there,
            see :meth:`read`); the same value each time Spark asks in this run."""
            if self.initial is None:
                self.initial = {**self._now(), NEW: True}
            return self.initial

        def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[int]], dict[str, Any]]:
            """The next batch's tick row and end offset from ``start`` (the previous batch's
            end): one row and the offset now if a watermark moved, else nothing and ``start``
            (Spark then runs no batch for this source). From a new query's start, the offset
            now even without a move: that first batch runs anyway (every source is new to
            Spark), and ending it past its start lets Spark serve its (empty) read from the
            driver like every other batch's."""
            now = self._now()
            if moved(start, now, self.baseline):
                return iter([(1,)]), now
            return iter(()), now if start.get(NEW) else start

        def readBetweenOffsets(self, start: dict[str, Any],
                               end: dict[str, Any]) -> Iterator[tuple[int]]:
            """The row of the batch from ``start`` to ``end`` again (a batch re-run from the
            offset log after a restart): one row if the offset moved."""
            return iter([(1,)] if start != end else ())

        def prepareForTriggerAvailableNow(self) -> None:
            """Nothing to pin: ticks follow the query's own progress, never later input."""

    class TickSource(DataSource):
        """The tick source of one operator root (subclassed per root by :func:`stream`, whose
        class attributes carry the root, the delays and the storage options: never options
        of the query plan, which Spark may print)."""

        root = ""
        delays: tuple[int, ...] = ()
        storage_options: dict[str, str] | None = None

        def schema(self) -> str:
            return SCHEMA

        def simpleStreamReader(self, schema: Any) -> TickReader:
            return TickReader(self.root, self.delays, self.storage_options)

    return TickSource, TickReader


def stream(session: Any, spec: Any) -> Any:
    """A streaming DataFrame (column ``tick``) of the tick source of ``spec``'s operator root."""
    source, _ = _classes()
    digest = hashlib.sha256(repr((spec.root, spec.event_time_delays)).encode()).hexdigest()
    name = f"silt_tick_{digest[:16]}"
    cls = type(name, (source,), {
        "root": spec.root, "delays": tuple(spec.event_time_delays),
        "storage_options": spec.storage_options, "__module__": __name__,
        "__qualname__": name,
    })
    session.dataSource.register(cls)
    return session.readStream.format(name).load()
