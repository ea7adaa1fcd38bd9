"""Operator metrics: what each shard did in each micro-batch, visible on the driver.

Every task (one shard, one micro-batch) measures:

- ``rows_in`` / ``rows_out``: Arrow rows the shard received and emitted (for ``aggregate`` the
  input rows are the per-partition partial aggregates, one per key and input partition);
- ``state_reads`` (keys looked up: ``get`` plus each key of a ``multi_get``), ``state_scans``
  and ``state_scanned`` (range scans, each range of a ``multi_scan`` one, and the entries they
  returned), ``state_writes`` (``put``,
  ``delete``, each entry of ``put_many`` and of a ``WriteBatch``; a timer is two entries);
- ``open_ms``, ``process_ms``, ``commit_ms`` (the manifest commit, SST uploads included);
- object-store ``requests`` and bytes by kind (``GET``, ``RANGE_GET``, ``PUT``, ``LIST``,
  ``DELETE``) and by purpose, the difference of the shard DB's :meth:`silt.DB.stats` over the
  task (a warm handle's counters are cumulative, so the task keeps the previous task's totals),
  plus the requests the task made at the operator root (purposes ``watermark`` and
  ``lifecycle``: the event-time markers and the lifecycle records, see ``_watermark.py`` and
  ``_lifecycle.py``).

The figures travel in two ways. A committed version's manifest ``meta`` carries the row and
state counts (``spark.rows_in``, ``spark.rows_out``, ``spark.state_reads``,
``spark.state_writes``) beside the timings, so they are on storage with the state. And a
successful task adds its record to a PySpark accumulator (one per SparkContext), whose
driver-side value files records by query and batch id in this module's registry: read them with
:func:`metrics`, or add :class:`MetricsListener` to log one line per operator and micro-batch.

Accumulator updates reach the driver when a task succeeds, before Spark completes the job, so
a batch's records are all there by the time its ``onQueryProgress`` event is posted. Failed
attempts report nothing (Spark drops their accumulator updates); a batch that Spark re-runs
after a restart reports again (``committed`` is false for shards whose version already stood).

Simplifications: the registry lives in the driver process and keeps the latest
:data:`MAX_BATCHES` batches of the latest :data:`MAX_QUERIES` queries; requests made by a
compaction running in the background count toward the task that is running, or toward the
shard's next task on this worker if it ran in between; with Spark Connect (no ``SparkContext``)
only the manifests carry metrics.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

from silt.cost import S3_STANDARD, Prices, summary
from silt.errors import InvalidTypeError

from ._names import META_LATE_ROWS

log = logging.getLogger("silt_spark")

#: Micro-batches kept per query, and queries kept, in the driver's registry.
MAX_BATCHES = 200
MAX_QUERIES = 32

#: Meta entries a committed version gets (besides spark.open_ms / spark.process_ms).
META_COUNTS = ("rows_in", "rows_out", "state_reads", "state_writes")


# -- in the task ------------------------------------------------------------------------------
class CountingDB:
    """A shard DB that counts the state calls made through it; everything else is the DB's.

    Operators use ``task.db`` as a :class:`silt.DB`; while a task runs it is this wrapper.
    Not thread-safe (a task is one thread), like the counters it keeps.
    """

    def __init__(self, db: Any) -> None:
        self.inner = db
        self.reads = 0
        #: ``writes`` = ``puts`` + ``deletes`` (a range delete counts as one delete).
        self.writes = 0
        self.puts = 0
        self.deletes = 0
        self.scans = 0
        self.scanned = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, key: bytes) -> bytes | None:
        self.reads += 1
        return self.inner.get(key)

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self.reads += len(keys)
        return self.inner.multi_get(keys)

    def put(self, key: bytes, value: bytes, *, ttl: float | None = None) -> None:
        self.writes += 1
        self.puts += 1
        if ttl is None:
            self.inner.put(key, value)
        else:
            self.inner.put(key, value, ttl=ttl)

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        self.inner.put_many(keys, values)
        self.writes += len(keys)
        self.puts += len(keys)

    def delete(self, key: bytes) -> None:
        self.writes += 1
        self.deletes += 1
        self.inner.delete(key)

    def write(self, batch: Any) -> None:
        self.inner.write(batch)
        deletes = sum(1 for _, value, _ in batch if value.__class__ is not bytes)
        self.writes += len(batch)
        self.deletes += deletes
        self.puts += len(batch) - deletes

    def scan(self, *args: Any, **kwargs: Any) -> Iterator[tuple[bytes, bytes]]:
        self.scans += 1
        return self._count(self.inner.scan(*args, **kwargs))

    def multi_scan(self, ranges: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """Each range a scan (the same rows as a scan of it), read in one call."""
        got = self.inner.multi_scan(ranges)
        self.scans += len(ranges)
        self.scanned += len(got)
        return got

    def _count(self, it: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        n = 0
        try:
            for item in it:
                n += 1
                yield item
        finally:
            self.scanned += n


#: Per worker process: shard URL -> (cached handle, its request counters when it was cached).
_BASELINES: dict[str, tuple[weakref.ref, dict[str, Any]]] = {}


def _requests(db: Any) -> dict[str, dict[str, dict[str, int]]]:
    return db.stats()["requests"]


class TaskProbe:
    """Measures one task: counts Arrow rows, and wraps the task's DB in a :class:`CountingDB`
    when the task opens it (:meth:`wrap`). A task that never opens its shard (an idle shard,
    see :mod:`silt_spark.runtime._shard`) reports zero state calls and only its root requests."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.db: CountingDB | None = None
        self.base: dict[str, Any] = {}
        self.rows_in = 0
        self.rows_out = 0

    def wrap(self, db: Any) -> CountingDB:
        """The counting wrapper the task uses for ``db`` (called once, when it is opened)."""
        self.db = CountingDB(db)
        base = _BASELINES.pop(self.task.url, None)
        # A warm handle's counters include earlier tasks: start from their totals.
        self.base = base[1] if base is not None and base[0]() is db else {}
        return self.db

    def count_in(self, batches: Iterator[Any]) -> Iterator[Any]:
        for b in batches:
            self.rows_in += b.num_rows
            yield b

    def count_out(self, batches: Iterator[Any]) -> Iterator[Any]:
        for b in batches:
            self.rows_out += b.num_rows
            yield b

    def meta(self) -> dict[str, str]:
        """Counts for the committed manifest's meta (``spark.<name>``)."""
        d = self.db
        counts = {"rows_in": self.rows_in, "rows_out": self.rows_out,
                  "state_reads": 0 if d is None else d.reads,
                  "state_writes": 0 if d is None else d.writes}
        return {f"spark.{k}": str(counts[k]) for k in META_COUNTS}

    def unwrap(self) -> Any:
        """The task's plain DB (``None`` if it never opened one), before it is cached or
        closed: the cache never keeps the counting wrapper."""
        return None if self.db is None else self.db.inner

    def cached(self) -> None:
        """The handle went back to the worker's cache: remember its counters."""
        if self.db is not None:
            db = self.db.inner
            _BASELINES[self.task.url] = (weakref.ref(db), _requests(db))

    def record(self) -> dict[str, Any]:
        """This task's figures (plain data, picklable)."""
        t = self.task
        d = self.db
        now = _requests(d.inner) if d is not None else {}
        by_purpose: dict[str, dict[str, dict[str, int]]] = {}
        by_kind: dict[str, dict[str, int]] = {}
        for purpose, kinds in now.items():
            for kind, c in kinds.items():
                b = self.base.get(purpose, {}).get(kind, {"count": 0, "bytes": 0})
                n, nb = c["count"] - b["count"], c["bytes"] - b["bytes"]
                if n or nb:
                    by_purpose.setdefault(purpose, {})[kind] = {"count": n, "bytes": nb}
                    k = by_kind.setdefault(kind, {"count": 0, "bytes": 0})
                    k["count"] += n
                    k["bytes"] += nb
        # Requests at the operator root: the watermark markers, the lifecycle records.
        for purpose, kinds in getattr(t, "root_requests", {}).items():
            for kind, n in kinds.items():
                if n:
                    by_purpose.setdefault(purpose, {})[kind] = {"count": n, "bytes": 0}
                    k = by_kind.setdefault(kind, {"count": 0, "bytes": 0})
                    k["count"] += n
        return {
            "query_id": t.query_id,
            "batch_id": t.batch_id,
            "operator": t.spec.kind,
            "state_url": t.spec.root,
            "shard": t.shard,
            "num_shards": t.spec.num_shards,
            "attempt": t.attempt,
            "pid": os.getpid(),  # the Python worker process that ran the task
            "committed": bool(t.committed),
            # False: an idle shard that never opened its DB (no request for its state)
            "opened": bool(t.opened),
            "version": t.batch_id if t.committed else t.base_version_seen(),
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "state_reads": d.reads if d is not None else 0,
            "state_writes": d.writes if d is not None else 0,
            "state_puts": d.puts if d is not None else 0,
            "state_deletes": d.deletes if d is not None else 0,
            "state_scans": d.scans if d is not None else 0,
            "state_scanned": d.scanned if d is not None else 0,
            "migrated": t.migrated,
            "referenced_ssts": getattr(t, "referenced", 0),
            "open_ms": round(t.open_ms, 3),
            "process_ms": round(getattr(t, "process_ms", 0.0), 3),
            "commit_ms": round(getattr(t, "commit_ms", 0.0), 3),
            # state maintenance (GC of the shard after its commit; 0 when not due)
            "maintenance_ms": round(getattr(t, "maintenance_ms", 0.0), 3),
            "gc_deleted": getattr(t, "gc_deleted", 0),
            "task_start_ms": t.started_ms,
            "requests": by_kind,
            "requests_by_purpose": by_purpose,
            **state_figures(t),
            # operator-specific figures (a join's buffered and evicted rows per side)
            **getattr(t, "operator_metrics", {}),
        }


def state_figures(task: Any) -> dict[str, int]:
    """What a task knows of its shard's state without a request, after its commit:
    ``state_rows`` (an estimate: entries minus tombstones of the SSTs its version names, so a
    key overwritten since the last compaction, or shared with a sibling after a rescale, counts
    more than once), ``state_bytes`` (those SSTs' bytes on the store), ``memory_bytes`` (silt's
    memory in this worker process: block cache, memtables and pinned SST tails, shared by every
    shard it runs) and ``late_rows`` (rows this batch dropped as late, from the operator's
    ``spark.late_rows`` count). A shard known to this task only by name (idle, its handle not
    cached here) reports no state figures (``state_known`` 0)."""
    import silt

    budget = silt.memory_budget().stats()
    figures = {"memory_bytes": budget["cache_bytes"] + budget["memtable_bytes"]
               + budget["pinned_bytes"],
               "state_known": 0, "state_rows": 0, "state_bytes": 0, "late_rows": 0}
    db = task.db_seen()
    manifest = None if db is None else db.manifest
    if db is not None:
        figures["state_known"] = 1
    if manifest is not None:
        ssts = list(manifest.all_ssts())
        figures["state_rows"] = max(0, sum(s.entries - s.tombstones for s in ssts))
        figures["state_bytes"] = sum(s.size for s in ssts)
    late = task.meta_updates.get(META_LATE_ROWS)
    if late is not None:
        try:
            # The operator read the base meta to add to it, so this makes no request.
            before = int(task.base_meta.get(META_LATE_ROWS, 0))
            figures["late_rows"] = max(0, int(late) - before)
        except (ValueError, TypeError):
            pass
    return figures


# -- on the driver ----------------------------------------------------------------------------
class _Registry:
    """query id -> batch id -> the records of its tasks (driver process, thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queries: OrderedDict[str, OrderedDict[int, list[dict[str, Any]]]] = OrderedDict()

    def add(self, records: list[dict[str, Any]]) -> None:
        with self.lock:
            for r in records:
                q = self.queries.pop(r["query_id"], None)
                if q is None:
                    q = OrderedDict()
                self.queries[r["query_id"]] = q  # most recently used last
                q.setdefault(r["batch_id"], []).append(r)
                while len(q) > MAX_BATCHES:
                    q.popitem(last=False)
            while len(self.queries) > MAX_QUERIES:
                self.queries.popitem(last=False)

    def get(self, query_id: str, batch_id: int | None) -> list[dict[str, Any]]:
        with self.lock:
            q = self.queries.get(query_id, {})
            if batch_id is None:
                return [r for rs in q.values() for r in rs]
            return list(q.get(batch_id, ()))


_REGISTRY = _Registry()


class _Sink:
    """The accumulator's value on the driver: every update is filed in the registry."""


class _RecordsParam:
    """AccumulatorParam: lists of records on the workers, :class:`_Sink` on the driver."""

    def zero(self, value: Any) -> list[dict[str, Any]]:
        return []

    def addInPlace(self, value1: Any, value2: Any) -> Any:
        if isinstance(value1, _Sink):
            if isinstance(value2, list):
                _REGISTRY.add(value2)
            return value1
        value1.extend(value2)
        return value1


_ACCUMULATOR: tuple[Any, Any] | None = None
_ACC_LOCK = threading.Lock()


def accumulator(df: Any) -> Any:
    """The driver's records accumulator for ``df``'s SparkContext, or ``None`` without one
    (Spark Connect). Built once per SparkContext; captured by each operator's task function."""
    global _ACCUMULATOR
    try:
        sc = df.sparkSession.sparkContext
    except Exception:  # Spark Connect has no SparkContext (and no accumulators)
        return None
    with _ACC_LOCK:
        if _ACCUMULATOR is None or _ACCUMULATOR[0] is not sc:
            _ACCUMULATOR = (sc, sc.accumulator(_Sink(), _RecordsParam()))
        return _ACCUMULATOR[1]


def report(acc: Any, record: dict[str, Any]) -> None:
    """Add a task's record to the accumulator (in the task; a no-op without one)."""
    if acc is not None:
        acc.add([record])


def metrics(query: Any, batch_id: int | None = None) -> list[dict[str, Any]]:
    """Per-shard metrics of a streaming query's silt_spark operators, by micro-batch.

    One record per task that succeeded: the shard, what it read, wrote and emitted, how long it
    took to open, process and commit, and the object-store requests it made. Records come from
    the tasks through an accumulator as they finish; the driver keeps those of the latest
    micro-batches (200 per query) in memory. The counts of committed versions are also in their
    manifests' ``meta`` (``spark.rows_in``, ``spark.state_writes``, ...).

    Parameters
    ----------
    query : pyspark.sql.streaming.StreamingQuery or str
        The query, or its id (``str(query.id)``: stable across restarts from a checkpoint).
    batch_id : int, optional
        One micro-batch; all batches kept when omitted.

    Returns
    -------
    list of dict
        Sorted by batch id, state URL and shard. Keys: ``query_id``, ``batch_id``,
        ``operator``, ``state_url``, ``shard``, ``num_shards``, ``attempt``, ``committed``
        (false when nothing changed or the version already stood: a re-run), ``version``,
        ``rows_in``, ``rows_out`` (Arrow rows; ``aggregate``'s input rows are partial
        aggregates), ``state_reads`` (keys looked up), ``state_writes`` (puts and deletes),
        ``state_scans``, ``state_scanned`` (range scans, entries they returned), ``migrated``
        (entries copied by a rescale), ``referenced_ssts`` (old shards' SSTs a rescale
        referenced), ``open_ms``, ``process_ms``, ``commit_ms``,
        ``task_start_ms``, ``requests`` (``{kind: {"count", "bytes"}}``) and
        ``requests_by_purpose`` (``{purpose: {kind: {"count", "bytes"}}}``).

    Examples
    --------
    >>> import pandas as pd
    >>> import silt_spark
    >>> query = totals.writeStream.format("console").start()
    >>> query.processAllAvailable()
    >>> per_shard = pd.DataFrame(silt_spark.metrics(query, query.lastProgress["batchId"]))
    >>> per_shard[["shard", "rows_in", "state_reads", "state_writes", "commit_ms"]]
    """
    query_id = query if isinstance(query, str) else str(query.id)
    got = _REGISTRY.get(query_id, None if batch_id is None else int(batch_id))
    return sorted(got, key=lambda r: (r["batch_id"], r["state_url"], r["shard"], r["attempt"]))


def summarize(records: list[dict[str, Any]],
              prices: Prices = S3_STANDARD) -> list[dict[str, Any]]:
    """Per operator (state URL) and batch: sums of the counts, maxima of the timings, and
    ``cost``: the requests by class and their estimated dollars at ``prices``
    (:func:`silt.cost.summary`; default S3 Standard's list prices)."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["batch_id"], r["state_url"]), []).append(r)
    out = []
    for (batch, url), rs in sorted(groups.items()):
        s: dict[str, Any] = {
            "query_id": rs[0]["query_id"], "batch_id": batch, "operator": rs[0]["operator"],
            "state_url": url, "shards": len(rs),
            "committed": sum(1 for r in rs if r["committed"]),
        }
        for k in ("rows_in", "rows_out", "state_reads", "state_writes", "state_scans",
                  "state_scanned", "migrated"):
            s[k] = sum(r[k] for r in rs)
        for k in ("open_ms", "process_ms", "commit_ms"):
            s[f"max_{k}"] = max(r[k] for r in rs)
        req: dict[str, dict[str, int]] = {}
        for r in rs:
            for kind, c in r["requests"].items():
                t = req.setdefault(kind, {"count": 0, "bytes": 0})
                t["count"] += c["count"]
                t["bytes"] += c["bytes"]
        s["requests"] = dict(sorted(req.items()))
        s["cost"] = summary(s["requests"], prices)
        out.append(s)
    return out


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_summary(s: dict[str, Any], name: str | None = None) -> str:
    """One log line for :func:`summarize`'s record."""
    req = ", ".join(
        f"{kind} {c['count']}" + (f" ({_size(c['bytes'])})" if c["bytes"] else "")
        for kind, c in s["requests"].items()
    ) or "none"
    c = s.get("cost")
    cost = (f"; class A {c['class_a']}, class B {c['class_b']}, est. ${c['usd']:.6f} "
            f"({c['prices']})") if c else ""
    return (
        f"silt_spark query {name or s['query_id']} batch {s['batch_id']}: {s['operator']} "
        f"{s['state_url']} {s['shards']} shards ({s['committed']} committed): rows in "
        f"{s['rows_in']} out {s['rows_out']}; state reads {s['state_reads']} writes "
        f"{s['state_writes']} scans {s['state_scans']}; max open {s['max_open_ms']:.1f} ms, "
        f"process {s['max_process_ms']:.1f} ms, commit {s['max_commit_ms']:.1f} ms; "
        f"requests {req}{cost}"
    )


def _listener_base() -> type:
    from pyspark.sql.streaming import StreamingQueryListener

    return StreamingQueryListener


class MetricsListener(_listener_base()):  # type: ignore[misc]
    """A ``StreamingQueryListener`` that logs silt_spark's metrics of every micro-batch.

    After each micro-batch of any query, it logs one INFO line per silt_spark operator of the
    batch on the ``silt_spark`` logger (shards and how many committed, rows in and out, state
    reads and writes, the slowest open, process and commit, requests by kind and by price class
    with their estimated cost) and keeps the
    latest summaries in :attr:`summaries`. Listener callbacks run on the driver, after the
    batch's tasks reported (see :func:`metrics`).

    Parameters
    ----------
    keep : int, default 1000
        How many summaries :attr:`summaries` keeps (oldest dropped first).
    prices : silt.cost.Prices, optional
        The request price table for the estimated cost (default: S3 Standard's list prices;
        ``silt.cost.Prices.parse("PUT=0.0065,LIST=0.0065,GET=0.0005")`` for your own).

    Examples
    --------
    >>> import logging
    >>> import silt_spark
    >>> logging.basicConfig(level=logging.INFO)
    >>> listener = silt_spark.MetricsListener()
    >>> spark.streams.addListener(listener)
    >>> query = totals.writeStream.format("console").start()
    >>> query.processAllAvailable()   # logs: silt_spark query ... batch 0: aggregate ...
    >>> listener.summaries[-1]["state_writes"]
    """

    def __init__(self, keep: int = 1000, prices: Prices = S3_STANDARD) -> None:
        super().__init__()
        if not isinstance(prices, Prices):
            raise InvalidTypeError(
                f"prices must be a silt.cost.Prices, got {type(prices).__name__}")
        self.prices = prices
        from collections import deque

        #: Summaries (dicts, see :func:`summarize`), oldest first.
        self.summaries: Any = deque(maxlen=keep)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        try:
            for s in summarize(metrics(str(p.id), p.batchId), self.prices):
                s["progress_timestamp"] = p.timestamp
                self.summaries.append(s)
                log.info(format_summary(s, p.name))
        except Exception:  # a listener must never break the query
            log.exception("silt_spark: could not summarize the metrics of batch %s", p.batchId)


