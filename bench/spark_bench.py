"""silt-spark against Spark's own state store, measured in the same run (not a test).

    python bench/spark_bench.py                      # 200k rows/batch, K = 100k and 2M keys
    python bench/spark_bench.py --quick              # small, for a smoke run

For each K: generated parquet input (one file per micro-batch), 4 shards / shuffle partitions,
local[2]. Runs
  * silt_spark.aggregate  vs  groupBy().agg() on the RocksDB state store with changelog
    checkpointing (update mode), and a stateless query of two Arrow stages around the same
    shuffle (the floor Spark sets; a cold restart's state share is recovery minus the floor's),
  * silt_spark.transform_with_state  vs  transformWithStateInPandas (RocksDB), on fewer rows,
  * silt_spark.window_aggregate  vs  withWatermark + groupBy(window) (RocksDB), append mode,
    tumbling 30 s windows with a 10 s delay, event time moving 60 s per batch,
  * silt_spark.join  vs  Spark's stream-stream join (RocksDB), inner and left outer, of two
    generated streams (orders, and payments 0-50 s after their order, 10% never paid), left
    time between right time - 60 s and right time, 10 s delays, event time moving
    ``--join-span`` seconds per batch (so the orders' buffer holds about 70 s of rows);
    ``--join-buffered N`` sizes the batches instead so that each side buffers about N rows
    (left time within 30 s of right time either way, so both sides keep ~40 s of rows; two
    batches of 20 s fill the buffers, and with ``--batches 6`` whole 60 s buckets expire too):
    ``--cases join --keys 1000000 --join-buffered 1000000 --batches 6`` is the 1M case,
    ``--join-buffered 10000000`` the 10M one (5M rows per side and batch: give the driver
    memory with ``--driver-memory 8g``); ``--join-step-rows R`` keeps the buffers full after
    those two batches with batches of R rows each, so that commit and eviction are compared at
    the same delta per batch whatever the buffer (``--join-buffered 1000000 --join-step-rows
    50000 --batches 8`` against ``--join-buffered 100000 ...``),
then stops each query and restarts it from its checkpoint on one more batch (recovery time:
restart until that batch is done; the new SparkSession gets new, empty local dirs, so the
native store reloads its state from the checkpoint). For the joins it also reports the state's
size on disk (silt's root, Spark's checkpoint ``state/`` folder) and, per batch, the eviction
and commit times (silt: slowest shard; Spark: its state operator's ``allRemovalsTimeMs`` and
``commitTimeMs``), to see whether they stay flat while the buffers grow. Prints a table and the
raw numbers as JSON and writes them to ``bench/results/spark_bench.json`` (``--json``) with,
per case and K, the median, min and max over ``--repeat`` runs and the machine's load
(bench/spark_results.py; ``bench/charts.py`` draws them), with silt's
object-store requests per micro-batch and shard (from silt_spark.metrics; the event-time
watermark's share apart), and what each case's state costs in object-store requests per
micro-batch (all shards) and per 1M input rows at S3 Standard prices: silt's requests as
counted, Spark's store as one PUT per file it wrote under the checkpoint's state/ folder (a
lower bound).

    python bench/spark_bench.py --s3-latency-ms 20 --cases "silt aggregate ("

runs silt aggregate with its state on moto's S3 server behind a proxy that adds 20 ms to every
request (cold restarts with and without the SSD cache, and once without the cache refill after
compaction), next to the same on file://.

    SILT_SRC=/path/to/other/checkout python bench/spark_bench.py --cases window

runs the same cases on another checkout's silt and silt_spark (a before/after comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

_SRC = Path(os.environ.get("SILT_SRC") or Path(__file__).resolve().parents[1])
sys.path[:0] = [str(_SRC / "packages" / p / "src")
                for p in ("core", "spark", "tier-s3", "cache-ssd")]
os.environ["PYTHONPATH"] = os.pathsep.join([*sys.path[:4], os.environ.get("PYTHONPATH", "")])


def compile_checkout() -> None:
    """Write the bytecode of the checkout's packages, as ``pip install`` does for a user's.

    Spark's Python workers import silt from this checkout (``PYTHONPATH`` above). Without
    bytecode beside the sources (a fresh checkout, or ``PYTHONDONTWRITEBYTECODE`` set, as on the
    benchmark machine) every fresh worker compiles each silt module it imports: 150 to 400 ms
    per worker, which a user running installed wheels never pays and the stateless floor (Spark
    and pyarrow, installed) never pays either. ``compileall`` writes it whatever that variable
    says; sources that did not change are skipped."""
    import compileall

    for src in sys.path[:4]:
        compileall.compile_dir(src, quiet=1)

import silt_spark  # noqa: E402
from run_record import RESULTS, machine_load, write_results  # noqa: E402
from spark_results import record  # noqa: E402


def make_input(folder: Path, batches: int, rows: int, keys: int, seed: int,
               fill: bool = False) -> None:
    """``batches`` files of ``rows`` random keys in ``[0, keys)``; with ``fill``, a first file
    holding every key once (in random order), so the state holds ``keys`` keys from the first
    batch on (``--fill``)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    first = 0
    if fill:
        for start in range(0, keys, 5_000_000):  # files of at most 5M rows, the fill batch's
            k = rng.permutation(np.arange(start, min(keys, start + 5_000_000)))
            pq.write_table(pa.table({
                "key": pa.array(k, pa.int64()),
                "amount": pa.array(rng.integers(0, 1000, len(k)), pa.int64()),
            }), folder / f"part-{first:05d}.parquet")
            first += 1
    for b in range(first, first + batches):
        k = rng.integers(0, keys, rows)
        t = pa.table({
            "key": pa.array(k, pa.int64()),
            "amount": pa.array(rng.integers(0, 1000, rows), pa.int64()),
        })
        pq.write_table(t, folder / f"part-{b:05d}.parquet")


def make_window_input(folder: Path, batches: int, rows: int, keys: int, seed: int) -> None:
    """Like :func:`make_input` plus an event time: batch ``b`` covers ``[60 s * b, 60 s * (b +
    1))``, with 1% of the rows 90 s older (late once the watermark has moved)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for b in range(batches):
        ms = 60_000 * b + rng.integers(0, 60_000, rows)
        ms[rng.random(rows) < 0.01] -= 90_000
        t = pa.table({
            "key": pa.array(rng.integers(0, keys, rows), pa.int64()),
            "amount": pa.array(rng.integers(0, 1000, rows), pa.int64()),
            "ts": pa.array(np.maximum(ms, 0) * 1000, pa.timestamp("us", tz="UTC")),
        })
        pq.write_table(t, folder / f"part-{b:05d}.parquet")


#: Seconds of event time each join side keeps buffered with --join-buffered (30 s range + 10 s
#: delay).
JOIN_KEPT_S = 40


def join_batches(args) -> list[tuple[int, int, int]]:
    """``(orders, event-time ms, gap ms before it)`` of each join batch: ``--join-rows`` over
    ``--join-span`` s each; with ``--join-step-rows R`` (and ``--join-buffered N``) the two
    batches that fill the buffers, then batches of R rows at the same event-time rate, so the
    buffers stay at N rows while each batch adds and evicts about R (commit and eviction per
    batch at a fixed delta); with ``--join-evict-rows E`` then one batch of E rows whose event
    time jumps past everything buffered (its watermark expires the whole buffer: the cost of
    evicting N rows, in the batch after the jump)."""
    fill = [(args.join_rows, args.join_span * 1000, 0)]
    if not args.join_step_rows:
        return fill * args.batches
    step_ms = max(1, args.join_step_rows * args.join_span * 1000 // args.join_rows)
    out = fill * 2 + [(args.join_step_rows, step_ms, 0)] * max(0, args.batches - 2)
    if args.join_evict_rows:
        # the jump moves the watermark; the batch after it (Spark applies a batch's watermark
        # from the next batch on) evicts everything buffered before the jump
        out.append((args.join_evict_rows, step_ms, (JOIN_KEPT_S + 120) * 1000))
        out.append((args.join_evict_rows, step_ms, 0))
    return out


def make_join_input(folder: Path, batches: list[tuple[int, int, int]], keys: int,
                    seed: int) -> tuple[Path, Path]:
    """Two folders, one file per batch each: orders ``(key, amount, ot)``, batch ``b`` having
    ``batches[b][0]`` rows over ``batches[b][1]`` ms of event time starting ``batches[b][2]``
    ms after the previous batch's, and payments ``(pkey, paid, pt)`` 0-50 s after 90% of
    them."""
    left, right = folder / "left", folder / "right"
    left.mkdir(parents=True)
    right.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    start = 0
    for b, (rows, span_ms, gap_ms) in enumerate(batches):
        start += gap_ms
        ms = start + rng.integers(0, span_ms, rows)
        start += span_ms
        k = rng.integers(0, keys, rows)
        pq.write_table(pa.table({
            "key": pa.array(k, pa.int64()),
            "amount": pa.array(rng.integers(0, 1000, rows), pa.int64()),
            "ot": pa.array(ms * 1000, pa.timestamp("us", tz="UTC")),
        }), left / f"part-{b:05d}.parquet")
        paid = rng.random(rows) < 0.9
        pq.write_table(pa.table({
            "pkey": pa.array(k[paid], pa.int64()),
            "paid": pa.array(rng.integers(0, 1000, int(paid.sum())), pa.int64()),
            "pt": pa.array((ms[paid] + rng.integers(0, 50_000, int(paid.sum()))) * 1000,
                           pa.timestamp("us", tz="UTC")),
        }), right / f"part-{b:05d}.parquet")
    return left, right


def join_figures(query_id: str) -> dict[str, float]:
    """silt join's buffered rows per side after the last batch (summed over shards) and its
    eviction time per batch (slowest shard, mean over batches), from silt_spark.metrics."""
    records = [r for r in silt_spark.metrics(query_id) if "buffered_left" in r]
    if not records:
        return {}
    last = max(r["batch_id"] for r in records)
    per_batch: dict[int, float] = {}
    for r in records:
        per_batch[r["batch_id"]] = max(per_batch.get(r["batch_id"], 0.0), r.get("evict_ms", 0.0))
    return {
        "buffered_left": sum(r["buffered_left"] for r in records if r["batch_id"] == last),
        "buffered_right": sum(r["buffered_right"] for r in records if r["batch_id"] == last),
        "evicted": sum(r["evicted_left"] + r["evicted_right"] for r in records),
        "evict_ms": float(np.mean(list(per_batch.values()))),
        "evict_ms_by_batch": [round(per_batch[b], 1) for b in sorted(per_batch)],
    }


def silt_request_totals(query_id: str) -> dict[str, int]:
    """Every object-store request silt made for the query's shard tasks, by kind (the shard
    DBs' and the operator root's: watermark markers, lifecycle records)."""
    out: dict[str, int] = {}
    for r in silt_spark.metrics(query_id):
        for kind, c in r["requests"].items():
            out[kind] = out.get(kind, 0) + c["count"]
    return out


def state_files(chk: Path) -> int:
    """Files Spark's own state store wrote under the checkpoint's ``state/`` folder (each is
    at least one PUT on an object store; nothing is deleted this early: its maintenance keeps
    the last 100 versions)."""
    root = chk / "state"
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def cost_per_million(requests: dict[str, int], rows: int) -> dict[str, float]:
    """Class A and B requests and dollars (S3 Standard list prices) per 1M input rows."""
    from silt.cost import S3_STANDARD, request_classes

    classes = request_classes(requests)
    scale = 1e6 / rows if rows else 0.0
    return {"class_a": classes["class_a"] * scale, "class_b": classes["class_b"] * scale,
            "usd": S3_STANDARD.cost(requests) * scale}


def requests_per_task(query_id: str) -> dict[str, dict[str, float]]:
    """silt's object-store requests per task (one shard, one micro-batch), by kind: all of
    them, and the event-time watermark's share (purpose ``watermark``)."""
    records = silt_spark.metrics(query_id)
    out: dict[str, dict[str, float]] = {"all": {}, "watermark": {}}
    if not records:
        return out
    for r in records:
        for kind, c in r["requests"].items():
            out["all"][kind] = out["all"].get(kind, 0) + c["count"]
        for kind, c in r["requests_by_purpose"].get("watermark", {}).items():
            out["watermark"][kind] = out["watermark"].get(kind, 0) + c["count"]
    return {k: {kind: n / len(records) for kind, n in sorted(v.items())}
            for k, v in out.items()}


class RemoteState:
    """moto's S3 server behind the test suite's fault proxy, adding ``latency_ms`` to every
    answer (tests/servers.py, tests/faultproxy.py): state that lives in a remote object store.
    Spark's Python workers inherit the credentials from this process's environment."""

    def __init__(self, latency_ms: float) -> None:
        sys.path.insert(0, str(_SRC / "tests"))
        import boto3
        from faultproxy import FaultProxy
        from servers import start_moto

        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        self.server = start_moto()
        self.proxy = FaultProxy(self.server.url).start()
        self.proxy.latency = latency_ms / 1000.0
        self.bucket = "silt-spark-bench"
        client = boto3.client("s3", endpoint_url=self.server.url, region_name="us-east-1")
        client.create_bucket(Bucket=self.bucket)
        client.close()

    def url(self, prefix: str, cache_dir: Path | None = None) -> str:
        url = f"s3://{self.bucket}/{prefix}?endpoint_url={self.proxy.url}"
        if cache_dir is not None:
            url += f"&cache=ssd&cache_dir={cache_dir}"
        return url

    def stop(self) -> None:
        self.proxy.stop()
        self.server.stop()


def _identity(batches):
    yield from batches


class Count(silt_spark.StatefulProcessor):
    def init(self, handle):
        self.state = handle.getValueState("s", "n long, total long")

    def handleInputRows(self, key, rows, timerValues):
        n, total = self.state.get() or (0, 0)
        for df in rows:
            n += len(df)
            total += int(df["amount"].sum())
        self.state.update((n, total))
        yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total]})


class FastCount(silt_spark.StatefulProcessor):
    """The same logic on silt's fast path: Arrow rows in, one tuple out per key."""

    def init(self, handle):
        self.state = handle.getValueState("s", "n long, total long")

    def handleInputRows(self, key, rows, timerValues):
        import pyarrow.compute as pc

        n, total = self.state.get() or (0, 0)
        for t in rows:
            n += t.num_rows
            total += pc.sum(t["amount"]).as_py() or 0
        self.state.update((n, total))
        yield (key[0], n, total)


class BatchCount(silt_spark.BatchProcessor):
    """The same logic as a batch processor: once per shard and micro-batch, over columns.

    Rows are grouped by key with numpy (one stable sort, ``np.add.reduceat``), not with
    ``Table.group_by``: pyarrow's runs through ``pyarrow.acero``, which imports pandas (about
    0.2 s of CPU in each fresh Python worker)."""

    def init(self, handle):
        handle.getValueState("s", "n long, total long")

    def process(self, batch, state, timers):
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = batch["key"].to_numpy()
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        per_key = pa.table({
            "key": sorted_keys[starts],
            "count_all": np.diff(np.r_[starts, len(keys)]),
            "amount_sum": np.add.reduceat(batch["amount"].to_numpy()[order], starts),
        })
        totals = state.value("s")
        old = totals.get(per_key)
        n = pc.add(pc.fill_null(old["n"], 0), per_key["count_all"])
        total = pc.add(pc.fill_null(old["total"], 0), per_key["amount_sum"])
        totals.put(per_key, pa.table({"n": n, "total": total}))
        return pa.table({"key": per_key["key"], "n": n, "total": total})


class SparkCount:
    """The same logic for transformWithStateInPandas."""

    def __new__(cls):
        from pyspark.sql.streaming import StatefulProcessor

        class _P(StatefulProcessor):
            def init(self, handle):
                self.state = handle.getValueState("s", "n long, total long")

            def handleInputRows(self, key, rows, timerValues):
                n, total = self.state.get() if self.state.exists() else (0, 0)
                for df in rows:
                    n += len(df)
                    total += int(df["amount"].sum())
                self.state.update((n, total))
                yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total]})

        return _P()


def pandas_with_state_count(key, pdfs, state):
    """The same logic for applyInPandasWithState."""
    n, total = state.get if state.exists else (0, 0)
    for df in pdfs:
        n += len(df)
        total += int(df["amount"].sum())
    state.update((n, total))
    yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total]})


def silt_commit_ms(state_url: str, skip: int = 1) -> dict[str, float]:
    """silt's per-batch state commit and open times, from the shards' manifests: for each
    micro-batch the slowest shard (shards commit in parallel), then the mean over batches
    after the first ``skip`` (the first batch, or with ``--fill`` the fill batches).
    A commit's duration is its manifest's creation time minus the task's start, open and
    processing time (docs/spark.md, Metrics)."""
    import silt

    root = Path(state_url[len("file://"):])
    commits: dict[int, float] = {}
    opens: dict[int, float] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("kg-")):
        store = silt.open_store(d.as_uri())
        try:
            for v in silt.versions(d.as_uri()):
                m = silt.read_manifest(store, v)
                meta = m.meta
                if "spark.task_start_ms" not in meta or meta.get("spark.batch_id") != str(v):
                    continue
                c = m.created_ms - int(meta["spark.task_start_ms"]) - float(
                    meta["spark.open_ms"]) - float(meta["spark.process_ms"])
                commits[v] = max(commits.get(v, 0.0), c)
                opens[v] = max(opens.get(v, 0.0), float(meta["spark.open_ms"]))
        finally:
            store.close()
    batches = sorted(commits)
    last = batches[-1] if batches else None
    steady = batches[skip:-1] or batches  # the restart's batch is reported on its own
    return {
        "commit_ms_by_batch": [round(commits[b], 1) for b in batches],
        "commit_ms": float(np.mean([commits[b] for b in steady])) if steady else 0.0,
        "open_ms": float(np.mean([opens[b] for b in steady])) if steady else 0.0,
        "restart_open_ms": opens.get(last, 0.0) if last is not None else 0.0,
        "restart_commit_ms": commits.get(last, 0.0) if last is not None else 0.0,
    }


def run_query(session: dict, build, data: Path | tuple[Path, ...], chk: Path, batches: int,
              schema: str | tuple[str, ...] = "key long, amount long",
              mode: str = "update", restart_file: int = 0, steady_from: int = 1) -> dict:
    """Run until ``batches`` micro-batches are done, stop, add one file (a copy of input file
    ``restart_file``: the first, or with ``--join-step-rows`` the last, a step batch of the
    same size whatever the buffer), restart, time it.
    ``data`` and ``schema`` may name several inputs (a join): ``build`` gets one stream each.

    The restart is cold: the SparkSession is stopped and a new one made (executors, Python
    workers and every store loaded in them are gone, as after a driver failure), then the query
    restarts from its checkpoint. ``recovery_s`` runs from the new query's start to its first
    batch done; making the new session is reported apart (``new_session_s``).
    """
    spark = session["spark"]
    datas = data if isinstance(data, tuple) else (data,)  # a join has two inputs
    schemas = schema if isinstance(schema, tuple) else (schema,)
    srcs = [chk.with_name(f"{chk.name}-in{i}") for i in range(len(datas))]
    for d, src in zip(datas, srcs):
        shutil.copytree(d, src)

    def streams(spark):
        return [spark.readStream.schema(sc).option("maxFilesPerTrigger", 1).parquet(str(src))
                for sc, src in zip(schemas, srcs)]

    q = (build(*streams(spark)).writeStream.format("noop").outputMode(mode)
         .option("checkpointLocation", str(chk)).trigger(processingTime="0 seconds").start())
    q.processAllAvailable()
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    requests = requests_per_task(str(q.id))
    # What the first run's state cost in requests, per 1M input rows: silt's own requests,
    # or (Spark's store) one PUT per file it wrote under the checkpoint's state/ folder, a lower
    # bound (an object store's checkpoint manager also renames and lists). The checkpoint's
    # offsets and commits logs are the same for both and left out.
    input_rows = sum(p["numInputRows"] for p in q.recentProgress)
    state_reqs = silt_request_totals(str(q.id)) or {"PUT": state_files(chk)}
    state_cost = cost_per_million(state_reqs, input_rows)
    from silt.cost import request_classes

    state_cost.update({f"{k}_per_batch": n / max(1, len(progress))
                       for k, n in request_classes(state_reqs).items()})
    joined = join_figures(str(q.id))
    last_steady = task_times(str(q.id), progress[-1]["batchId"]) if progress else {}
    q.stop()
    for src in srcs:
        shutil.copy(sorted(src.glob("*.parquet"))[restart_file], src / "part-99999.parquet")
    t_session = time.perf_counter()
    spark.stop()
    spark = session["spark"] = session["make"]()
    new_session_s = time.perf_counter() - t_session
    t0 = time.perf_counter()
    built = build(*streams(spark))
    t_built = time.perf_counter()
    q = (built.writeStream.format("noop").outputMode(mode)
         .option("checkpointLocation", str(chk)).trigger(processingTime="0 seconds").start())
    t_started = time.perf_counter()
    q.processAllAvailable()
    recovery = time.perf_counter() - t0
    restarted = [p for p in q.recentProgress if p["numInputRows"] > 0]
    q.stop()
    first = restarted[0] if restarted else {}
    restart_tasks = task_times(str(q.id), first["batchId"]) if first else {}
    # The restarted query's first batch: for the native store this is where it loads its
    # state (snapshot plus changelog replay); the rest of `recovery` is Spark starting a query.
    first_batch_ms = first.get("durationMs", {}).get("triggerExecution", 0) if first else 0
    load_metrics = {
        k: v for op in first.get("stateOperators", []) for k, v in op.get("customMetrics",
                                                                           {}).items()
        if "load" in k.lower() or "replay" in k.lower() or "snapshot" in k.lower()
    } if first else {}
    per_batch = [
        {"rows": p["numInputRows"], "ms": p["durationMs"].get("triggerExecution", 0),
         "commit_ms": sum(s.get("commitTimeMs", 0) for s in p.get("stateOperators", [])),
         "removal_ms": sum(s.get("allRemovalsTimeMs", 0) for s in p.get("stateOperators", [])),
         "state_rows": sum(s.get("numRowsTotal", 0) for s in p.get("stateOperators", []))}
        for p in progress
    ]
    # the first batch pays Python worker start-up (and with --fill, the fill batches come first)
    steady = per_batch[steady_from:] or per_batch
    rows = sum(b["rows"] for b in steady)
    ms = sum(b["ms"] for b in steady)
    return {
        "batches": per_batch,
        "rows_per_s": rows / (ms / 1000) if ms else 0.0,
        "native_commit_ms": np.mean([b["commit_ms"] for b in steady]) if steady else 0.0,
        "recovery_s": recovery,
        "new_session_s": new_session_s,
        # the restart's driver-side phases: building the query (an operator's checks of its
        # root), then start() (which returns after the query-start listeners ran)
        "restart_build_s": t_built - t0,
        "restart_start_s": t_started - t_built,
        "restart_first_batch_ms": first_batch_ms,
        # Spark's phases of that batch (queryPlanning, addBatch, walCommit, ...)
        "restart_duration_ms": dict(first.get("durationMs", {})) if first else {},
        "restart_state_metrics": load_metrics,
        "requests_per_task": requests,
        "state_cost": state_cost,
        # silt's shard tasks (slowest of each figure) in the last batch before the restart and
        # in the restart's first batch: where a cold restart's extra time goes
        **({"tasks_last_batch": last_steady, "tasks_restart_batch": restart_tasks}
           if restart_tasks else {}),
        **({"join": joined} if joined else {}),
    }


def task_times(query_id: str, batch_id: int) -> dict[str, float]:
    """The slowest ``open_ms``, ``process_ms`` and ``commit_ms`` of silt's shard tasks in one
    micro-batch, and ``span_ms`` from the first task's start to the last one's end (empty
    for a query without silt operators)."""
    records = silt_spark.metrics(query_id, batch_id)
    if not records:
        return {}
    out = {k: max(r[k] for r in records) for k in ("open_ms", "process_ms", "commit_ms")}
    ends = [r["task_start_ms"] + r["open_ms"] + r["process_ms"] + r["commit_ms"]
            for r in records]
    out["span_ms"] = max(ends) - min(r["task_start_ms"] for r in records)
    return out


def measure(session, name, build, src, work, keys, rows, args, state: str | None = None,
            **query: Any) -> dict | None:
    """One case; a peer that cannot run here (say, transformWithStateInPandas without
    protobuf installed) is reported with its error instead of stopping the benchmark."""
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    if wanted and not any(c in name for c in wanted):
        return None
    try:
        r = run_query(session, build, src, work / f"chk-{name}-{keys}", args.batches, **query)
    except Exception as exc:  # reported in the table
        msg = str(exc).strip().splitlines()[0][:120]
        print(f"{name:32s} K={keys:>9,d} failed: {msg}", flush=True)
        return {"case": name, "keys": keys, "rows": rows, "error": msg,
                "rows_per_s": 0.0, "recovery_s": 0.0}
    if state is not None:
        r.update(silt_commit_ms(state, query.get("steady_from", 1)))
        r["state_bytes"] = du(Path(state[len("file://"):]))
        # Space amplification: everything under the root against the latest version's SSTs.
        r["live_bytes"] = silt_spark.state_size(state).bytes
    else:
        r["state_bytes"] = du(work / f"chk-{name}-{keys}" / "state")
    commit = r.get("commit_ms", r.get("native_commit_ms", 0.0))
    print(f"{name:32s} K={keys:>9,d} {r['rows_per_s']:>10,.0f} rows/s "
          f"commit {commit:.0f} ms recovery {r['recovery_s']:.1f}s (first batch "
          f"{r['restart_first_batch_ms'] / 1000:.1f}s; build "
          f"{r.get('restart_build_s', 0):.2f}s, start {r.get('restart_start_s', 0):.2f}s)",
          flush=True)
    if r.get("tasks_restart_batch"):
        print(f"{'':32s} shard tasks (slowest, ms), last batch {r['tasks_last_batch']}; "
              f"restart batch {r['tasks_restart_batch']}", flush=True)
    req = r.get("requests_per_task", {})
    if req.get("all"):
        print(f"{'':32s} requests per batch and shard: {_fmt(req['all'])}; of which the "
              f"watermark: {_fmt(req.get('watermark', {})) or 'none'}", flush=True)
    if r.get("join"):
        j = r["join"]
        print(f"{'':32s} buffered rows left {j['buffered_left']:,} right "
              f"{j['buffered_right']:,}; evicted {j['evicted']:,}; eviction "
              f"{j['evict_ms']:.1f} ms per batch (slowest shard)", flush=True)
        print(f"{'':32s} per batch: eviction ms {j['evict_ms_by_batch']}, commit ms "
              f"{r.get('commit_ms_by_batch')}", flush=True)
    elif "join" in name:
        print(f"{'':32s} per batch: state rows (both sides) "
              f"{[b['state_rows'] for b in r['batches']]}, removal ms "
              f"{[b['removal_ms'] for b in r['batches']]}, commit ms "
              f"{[b['commit_ms'] for b in r['batches']]}", flush=True)
    live = r.get("live_bytes")
    amp = (f" ({r['state_bytes'] / live:.2f}x the latest version's "
           f"{live / 2**20:,.1f} MiB)" if live else "")
    print(f"{'':32s} state on disk {r['state_bytes'] / 2**20:,.1f} MiB{amp}", flush=True)
    return {"case": name, "keys": keys, "rows": rows, **r}


def du(path: Path) -> int:
    """Bytes of the files under ``path`` (0 if it is missing)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def _fmt(kinds: dict[str, float]) -> str:
    return ", ".join(f"{k} {n:.2f}" for k, n in kinds.items())


def session_factory(shards: int, driver_memory: str, maintenance: int,
                    extra: dict[str, str], local_root) -> Any:
    """A function making the benchmark's SparkSession: local[2], ``shards`` shuffle partitions,
    Spark's RocksDB state store with changelog checkpointing (the native peers' store), silt's
    GC pass every ``maintenance`` batches, ``extra`` settings first. Each session it makes gets
    new, empty local dirs under ``local_root()`` (the native store's working copies among
    them), so a session made after ``stop()`` restarts cold."""
    from pyspark.sql import SparkSession

    def make() -> Any:
        builder = SparkSession.builder
        for k, v in extra.items():
            builder = builder.config(k, v)
        made = (
            builder.master("local[2]").appName("silt-spark-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(shards))
            .config("spark.sql.streaming.stateStore.providerClass",
                    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
            .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
            .config("spark.driver.memory", driver_memory)
            .config("spark.silt.maintenance.intervalBatches", str(maintenance))
            .config("spark.local.dir", str(Path(tempfile.mkdtemp(dir=local_root(),
                                                                 prefix="local-"))))
            .getOrCreate()
        )
        made.sparkContext.setLogLevel("ERROR")
        return made

    return make


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--keys", type=int, nargs="+", default=[100_000, 2_000_000])
    ap.add_argument("--processor-rows", type=int, default=20_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--join-rows", type=int, default=200_000,
                    help="join: orders per batch (payments: 90%% of them)")
    ap.add_argument("--join-span", type=int, default=6,
                    help="join: event-time seconds per batch (buffers hold ~60 s of rows)")
    ap.add_argument("--join-buffered", type=int, default=0,
                    help="join: size batches so each side buffers about this many rows "
                    "(1000000, 10000000); overrides --join-rows and --join-span")
    ap.add_argument("--maintenance", type=int, default=100,
                    help="spark.silt.maintenance.intervalBatches (a GC pass per shard every N "
                    "batches; 0: never)")
    ap.add_argument("--gc-grace", type=float, default=None,
                    help="silt aggregate: Settings.gc_grace_seconds (default one hour: a short "
                    "run deletes nothing younger); with --batches 40 --maintenance 10 "
                    "--gc-grace 20 the space used after a longer run")
    ap.add_argument("--join-step-rows", type=int, default=0,
                    help="with --join-buffered: after the two batches that fill the buffers, "
                    "batches of this many orders at the same event-time rate (buffers stay "
                    "full; commit and eviction measured at a fixed delta)")
    ap.add_argument("--join-evict-rows", type=int, default=0,
                    help="with --join-step-rows: a last batch of this many orders whose event "
                    "time jumps past the buffers, so its watermark evicts every buffered row "
                    "(eviction cost at the full buffer, per batch in the output; the restart "
                    "then runs on what that batch left buffered: measure recovery without it)")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--fill", action="store_true",
                    help="aggregate cases: first batches hold every key once (files of at most "
                    "5M rows), so the state holds K keys before the measured batches (rows/s "
                    "and the restart count only the batches after them)")
    ap.add_argument("--s3-latency-ms", type=float, default=None,
                    help="also run silt aggregate with its state on moto's S3 server behind a "
                    "proxy adding this latency to every request, with and without the SSD "
                    "cache, next to file:// (needs moto[server] and boto3)")
    ap.add_argument("--cases", default="",
                    help="comma-separated substrings: run only the cases whose name has one")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of every case at each K (the results file gives median, min "
                    "and max)")
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra Spark setting for every session (repeatable), e.g. "
                    "spark.eventLog.enabled=true with spark.eventLog.dir=DIR for the task "
                    "timeline bench/restart_profile.py reads")
    ap.add_argument("--json", default=str(RESULTS / "spark_bench.json"),
                    help="where to write the results (bench/charts.py draws them)")
    args = ap.parse_args()
    compile_checkout()
    if args.quick:
        args.rows, args.batches, args.keys, args.processor_rows = 20_000, 3, [10_000], 5_000
        args.join_rows, args.join_span = 20_000, 90  # (90 s per batch: evictions by batch 2)
    for kv in args.spark_conf:
        if "=" not in kv or not kv.split("=", 1)[0]:
            ap.error(f"--spark-conf {kv!r}: give KEY=VALUE, e.g. spark.eventLog.enabled=true")
    if args.join_step_rows and not args.join_buffered:
        ap.error("--join-step-rows needs --join-buffered (the buffer it keeps full)")
    if args.join_evict_rows and not args.join_step_rows:
        ap.error("--join-evict-rows needs --join-step-rows")
    join_range = ("60 seconds", "0 seconds")
    if args.join_buffered:
        # both sides keep ~40 s (30 s range + 10 s delay); two batches fill the buffers
        args.join_span = JOIN_KEPT_S // 2
        args.join_rows = args.join_buffered * args.join_span // JOIN_KEPT_S
        join_range = ("30 seconds", "30 seconds")
    join_sql = ("key = pkey AND ot >= pt - interval 60 seconds AND ot <= pt" if not
                args.join_buffered else "key = pkey AND ot >= pt - interval 30 seconds AND "
                "ot <= pt + interval 30 seconds")

    from pyspark.sql import functions as F

    extra = dict(kv.split("=", 1) for kv in args.spark_conf)
    make = session_factory(args.shards, args.driver_memory, args.maintenance, extra,
                           lambda: work)

    import silt

    silt_settings = (silt.Settings(gc_grace_seconds=args.gc_grace)
                     if args.gc_grace is not None else None)
    work = root = Path(tempfile.mkdtemp(prefix="silt-spark-bench-"))
    started, load_at_start = time.time(), machine_load()
    remote = RemoteState(args.s3_latency_ms) if args.s3_latency_ms is not None else None
    session = {"make": make, "spark": make()}
    results = []
    try:
        for rep, keys in [(r, k) for r in range(args.repeat) for k in args.keys]:
            work = root / f"run-{rep}"  # each repeat's inputs, states and sessions apart
            work.mkdir(exist_ok=True)
            if remote is not None:
                src = work / f"remote-{keys}"
                make_input(src, args.batches, args.rows, keys, seed=keys)
                where = {
                    "file://": (work / f"state-remote-{keys}").as_uri(),
                    f"s3 +{args.s3_latency_ms:g} ms": remote.url(f"agg-{keys}-{rep}"),
                    f"s3 +{args.s3_latency_ms:g} ms, ssd cache": remote.url(
                        f"agg-ssd-{keys}-{rep}", cache_dir=work / f"ssd-{keys}"),
                    # the cache refill after compactions off (silt.refill): what it saves
                    f"s3 +{args.s3_latency_ms:g} ms, no refill": remote.url(
                        f"agg-norefill-{keys}-{rep}"),
                }
                for label, url in where.items():
                    name = f"silt aggregate ({label})"
                    opts = (silt.Settings(refill_after_compaction=False)
                            if label.endswith("no refill") else None)

                    def build(df, url=url, opts=opts):
                        return silt_spark.aggregate(df, ["key"], ["count", "sum(amount)"],
                                                    state_url=url, num_shards=args.shards,
                                                    settings=opts)

                    remote.proxy.counts.clear()
                    r = measure(session, name, build, src, work, keys, args.rows, args,
                                url if url.startswith("file:") else None)
                    if r is not None:
                        r["proxied_requests"] = remote.proxy.counts.get("requests", 0)
                        results.append(r)
            src = work / f"agg-{keys}"
            make_input(src, args.batches, args.rows, keys, seed=keys, fill=args.fill)
            fill_files = -(-keys // 5_000_000) if args.fill else 0
            state = (work / f"state-agg-{keys}").as_uri()
            cases = {
                "silt aggregate": lambda df, state=state: silt_spark.aggregate(
                    df, ["key"], ["count", "sum(amount)"], state_url=state,
                    num_shards=args.shards, settings=silt_settings),
                "native groupBy (RocksDB)": lambda df: df.groupBy("key").agg(
                    F.count("*").alias("count"), F.sum("amount").alias("sum")),
                # The floor Spark sets: two Arrow stages around the same shuffle, no state.
                "stateless floor (Arrow)": lambda df: df.mapInArrow(_identity, df.schema)
                .repartition(args.shards, "key").mapInArrow(_identity, df.schema),
            }
            for name, build in cases.items():
                results.append(measure(session, name, build, src, work, keys, args.rows, args,
                                       state if name.startswith("silt") else None,
                                       restart_file=fill_files, steady_from=fill_files or 1))
            psrc = work / f"proc-{keys}"
            make_input(psrc, args.batches, args.processor_rows, keys, seed=keys + 1)
            pstate = (work / f"state-proc-{keys}").as_uri()
            cases = {
                "silt StatefulProcessor (pandas)": lambda df, pstate=pstate: (
                    silt_spark.transform_with_state(
                        df, Count(), ["key"], "key long, n long, total long",
                        state_url=pstate + "-pandas", num_shards=args.shards)),
                "silt StatefulProcessor (arrow)": lambda df, pstate=pstate: (
                    silt_spark.transform_with_state(
                        df, FastCount(), ["key"], "key long, n long, total long",
                        state_url=pstate + "-arrow", num_shards=args.shards,
                        rows_format="arrow")),
                "silt batch processor": lambda df, pstate=pstate: (
                    silt_spark.transform_batches(
                        df, BatchCount(), ["key"], "key long, n long, total long",
                        state_url=pstate + "-batch", num_shards=args.shards)),
                "transformWithStateInPandas": lambda df: df.groupBy("key")
                .transformWithStateInPandas(
                    SparkCount(), "key long, n long, total long", "Update", "None"),
                "applyInPandasWithState": lambda df: df.groupBy("key")
                .applyInPandasWithState(
                    pandas_with_state_count, "key long, n long, total long",
                    "n long, total long", "Update", "NoTimeout"),
            }
            for name, build in cases.items():
                st = {"silt StatefulProcessor (pandas)": pstate + "-pandas",
                      "silt StatefulProcessor (arrow)": pstate + "-arrow",
                      "silt batch processor": pstate + "-batch"}.get(name)
                # silt's Arrow fast path and its batch processor run on the aggregation's
                # input (rows per batch as given); the pandas shapes, silt's included, on fewer
                # rows: they are slow.
                fast = name in ("silt StatefulProcessor (arrow)", "silt batch processor")
                # On the aggregation's input, the restart runs on a batch after the fill, as
                # the aggregation's does (not on the fill batch, which holds every key).
                results.append(measure(
                    session, name, build, src if fast else psrc, work, keys,
                    args.rows if fast else args.processor_rows, args, st,
                    restart_file=fill_files if fast else 0,
                    steady_from=(fill_files or 1) if fast else 1,
                ))
            wsrc = work / f"win-{keys}"
            make_window_input(wsrc, args.batches, args.rows, keys, seed=keys + 2)
            wstate = (work / f"state-win-{keys}").as_uri()
            cases = {
                "silt window_aggregate": lambda df, wstate=wstate: silt_spark.window_aggregate(
                    df, ["key"], "ts", "30 seconds", ["count", "sum(amount)"],
                    state_url=wstate, num_shards=args.shards, watermark_delay="10 seconds"),
                "native window (RocksDB)": lambda df: df.withWatermark("ts", "10 seconds")
                .groupBy(F.window("ts", "30 seconds"), "key").agg(
                    F.count("*").alias("count"), F.sum("amount").alias("sum")),
            }
            for name, build in cases.items():
                results.append(measure(
                    session, name, build, wsrc, work, keys, args.rows, args,
                    wstate if name.startswith("silt") else None,
                    schema="key long, amount long, ts timestamp", mode="append",
                ))
            jsrc = make_join_input(work / f"join-{keys}", join_batches(args), keys,
                                   seed=keys + 3)
            for how, spark_how in (("inner", "inner"), ("left", "left_outer")):
                jstate = (work / f"state-join-{how}-{keys}").as_uri()
                cases = {
                    f"silt join {how}": lambda lt, rt, how=how, jstate=jstate: silt_spark.join(
                        lt, rt, [("key", "pkey")], how, state_url=jstate,
                        num_shards=args.shards, left_time_column="ot", right_time_column="pt",
                        left_watermark_delay="10 seconds", right_watermark_delay="10 seconds",
                        time_range=join_range),
                    f"native join {how} (RocksDB)": lambda lt, rt, spark_how=spark_how: (
                        lt.withWatermark("ot", "10 seconds").join(
                            rt.withWatermark("pt", "10 seconds"),
                            F.expr(join_sql),
                            spark_how)),
                }
                for name, build in cases.items():
                    results.append(measure(
                        session, name, build, jsrc, work, keys, args.join_rows, args,
                        jstate if name.startswith("silt") else None,
                        schema=("key long, amount long, ot timestamp",
                                "pkey long, paid long, pt timestamp"), mode="append",
                        # the last step batch (with --join-evict-rows the evict batch: the
                        # restart then measures the buffer that batch left, not a full one)
                        restart_file=-1 if args.join_step_rows else 0,
                    ))
    finally:
        session["spark"].stop()
        if remote is not None:
            remote.stop()
        shutil.rmtree(root, ignore_errors=True)
    results = [r for r in results if r is not None]
    print()
    print(f"{'case':32s} {'K':>10s} {'rows/batch':>10s} {'rows/s':>10s} {'commit ms':>10s} "
          f"{'recovery s':>10s} {'1st batch s':>11s}")
    for r in results:
        tail = f"  ({r['error']})" if "error" in r else ""
        commit = r.get("commit_ms", r.get("native_commit_ms", 0.0))
        print(f"{r['case']:32s} {r['keys']:>10,d} {r['rows']:>10,d} {r['rows_per_s']:>10,.0f} "
              f"{commit:>10.0f} {r['recovery_s']:>10.1f} "
              f"{r.get('restart_first_batch_ms', 0) / 1000:>11.2f}{tail}")
    for r in results:
        req = r.get("requests_per_task", {})
        if req.get("all"):
            print(f"{r['case']:32s} requests per batch and shard: {_fmt(req['all'])}; "
                  f"watermark: {_fmt(req.get('watermark', {})) or 'none'}")
    print()
    print(f"{'state requests (S3 Standard)':32s} {'K':>10s} {'A/batch':>8s} {'B/batch':>8s} "
          f"{'A per 1M':>9s} {'B per 1M':>9s} {'$ per 1M rows':>13s}")
    for r in results:
        c = r.get("state_cost")
        if not c:
            continue
        print(f"{r['case']:32s} {r['keys']:>10,d} {c['class_a_per_batch']:>8.1f} "
              f"{c['class_b_per_batch']:>8.1f} "
              f"{c['class_a']:>9.0f} {c['class_b']:>9.0f} {c['usd']:>13.4f}")
    for keys in args.keys:
        by = {r["case"]: r for r in results if r["keys"] == keys and "error" not in r}
        win, nwin = by.get("silt window_aggregate"), by.get("native window (RocksDB)")
        if win and nwin and nwin["rows_per_s"]:
            print(f"K={keys:,d}: silt window_aggregate / native: "
                  f"{win['rows_per_s'] / nwin['rows_per_s']:.2f}x rows/s")
        for how in ("inner", "left"):
            sj, nj = by.get(f"silt join {how}"), by.get(f"native join {how} (RocksDB)")
            if sj and nj and nj["rows_per_s"]:
                print(f"K={keys:,d}: silt join {how} / native: "
                      f"{sj['rows_per_s'] / nj['rows_per_s']:.2f}x rows/s, recovery "
                      f"{nj['recovery_s'] / max(1e-9, sj['recovery_s']):.2f}x faster, state "
                      f"{sj['state_bytes'] / 2**20:,.0f} MiB vs {nj['state_bytes'] / 2**20:,.0f}"
                      " MiB")
        local = by.get("silt aggregate (file://)")
        if local and local["rows_per_s"]:
            for c, r in by.items():
                if c.startswith("silt aggregate (s3"):
                    print(f"K={keys:,d}: {c}: {r['rows_per_s'] / local['rows_per_s']:.2f}x "
                          f"file://'s rows/s; cold restart {r['recovery_s']:.1f} s (first batch "
                          f"{r['restart_first_batch_ms'] / 1000:.1f} s) against "
                          f"{local['recovery_s']:.1f} s; {r.get('proxied_requests', 0):,} "
                          "requests through the proxy")
        floor = by.get("stateless floor (Arrow)")
        if floor:
            shares = ", ".join(
                f"{c} {by[c]['recovery_s'] - floor['recovery_s']:+.1f} s"
                for c in ("silt aggregate", "native groupBy (RocksDB)") if c in by)
            print(f"K={keys:,d}: state's share of a cold restart (recovery minus the stateless "
                  f"floor's {floor['recovery_s']:.1f} s): {shares}")
        agg, nat = by.get("silt aggregate"), by.get("native groupBy (RocksDB)")
        if agg and nat and nat["rows_per_s"] and agg["recovery_s"]:
            print(f"K={keys:,d}: silt aggregate / native: {agg['rows_per_s'] / nat['rows_per_s']:.2f}x"
                  f" rows/s, recovery {nat['recovery_s'] / agg['recovery_s']:.2f}x faster, first "
                  f"batch after restart {nat['restart_first_batch_ms'] / max(1, agg['restart_first_batch_ms']):.2f}x faster")
        best = max((by[c]["rows_per_s"] for c in ("transformWithStateInPandas",
                                                  "applyInPandasWithState") if c in by),
                   default=0.0)
        for c in ("silt StatefulProcessor (pandas)", "silt StatefulProcessor (arrow)",
                  "silt batch processor"):
            if c in by and best:
                print(f"K={keys:,d}: {c} / best Python peer: {by[c]['rows_per_s'] / best:.1f}x")
        bp = by.get("silt batch processor")
        if bp and bp["rows_per_s"]:
            for c in ("silt aggregate", "silt StatefulProcessor (arrow)",
                      "native groupBy (RocksDB)"):
                if c in by and by[c]["rows_per_s"]:
                    print(f"K={keys:,d}: silt batch processor / {c}: "
                          f"{bp['rows_per_s'] / by[c]['rows_per_s']:.2f}x rows/s")
    print(json.dumps(results, default=float))
    out = write_results(args.json, record(
        dict(vars(args)), results,
        {"start": load_at_start, "end": machine_load()}, started, time.time() - started))
    print(f"results written to {out}")


if __name__ == "__main__":
    main()
