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
compaction), next to the same on file://; ``--cases "StatefulProcessor (arrow) ("`` the per-key
Arrow processor (``FastCount``) on S3 and on file:// the same way (its rows/s on S3 against
file://'s is the other ratio the object-storage targets name); ``--cases "silt join inner (,silt
join left (" --keys 1000000 --join-buffered 1000000 --join-step-rows 100000 --batches 8`` the
stream-stream join the same way (rows/s of the step batches, after the two that fill the
buffers).

    SILT_SRC=/path/to/other/checkout python bench/spark_bench.py --cases window

runs the same cases on another checkout's silt and silt_spark (a before/after comparison).

Each case (and each of its ``--repeat`` runs) runs in a driver process of its own, a fresh
JVM, in the listed order on even repeats and reversed on odd ones (bench/spark_drivers.py);
``--same-driver`` runs them all in this process, one after the other, as before.
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
import spark_counts  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from run_record import RESULTS, machine_load, write_results  # noqa: E402
from spark_counts import (  # noqa: E402
    BatchCount,
    Count,
    FastCount,
    SparkCount,
    identity,
    pandas_with_state_count,
)
from spark_drivers import Runner, add_arguments, generated, once, run_in_drivers  # noqa: E402
from spark_figures import (  # noqa: E402
    cost_per_million,
    du,
    join_figures,
    per_kind,
    requests_per_task,
    silt_commit_ms,
    silt_request_totals,
    state_files,
    task_times,
)
from spark_inputs import JOIN_KEPT_S, join_batches, make_input, make_join_input, make_window_input  # noqa: E402
from spark_remote import RemoteCases  # noqa: E402
from spark_report import print_report  # noqa: E402
from spark_results import record  # noqa: E402
from spark_session import session_factory  # noqa: E402

# Spark's Python workers cannot import bench/: the processors travel by value.
cloudpickle.register_pickle_by_value(spark_counts)


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
    if "spark" not in session:  # made when the first case runs (none in the listing parent)
        session["spark"] = session["make"]()
    spark = session["spark"]
    if callable(data):  # an input generated on first use (spark_drivers.once)
        data = data()
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


def measure(session, name, build, src, work, keys, rows, args, state: str | None = None,
            **query: Any) -> dict | None:
    """One case, when this process runs it (``session["runner"]``, bench/spark_drivers.py);
    a peer that cannot run here (say, transformWithStateInPandas without protobuf installed)
    is reported with its error instead of stopping the benchmark."""
    if not session["runner"].wants(session["rep"], keys, name):
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
        print(f"{'':32s} requests per batch and shard: {per_kind(req['all'])}; of which the "
              f"watermark: {per_kind(req.get('watermark', {})) or 'none'}; by purpose: "
              f"{per_kind(req.get('purposes', {}))}", flush=True)
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
                    help="also run silt aggregate (with and without the SSD cache) and the "
                    "Arrow processor with their state on moto's S3 server behind a proxy adding "
                    "this latency to every request, next to file:// (needs moto[server] and "
                    "boto3)")
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
    add_arguments(ap)
    args = ap.parse_args()
    runner = Runner(args)
    if not runner.child:
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
    work = root = Path(args.work_root or tempfile.mkdtemp(prefix="silt-spark-bench-"))
    started, load_at_start = time.time(), machine_load()
    remote = (RemoteCases(args, runner, measure) if args.s3_latency_ms is not None
              else None)
    session: dict[str, Any] = {"make": make, "runner": runner}
    results = []

    try:
        for rep, keys in runner.repeats():
            session["rep"] = rep
            work = root / f"run-{rep}"  # each repeat's inputs, states and sessions apart
            work.mkdir(exist_ok=True)
            if remote is not None:
                results.extend(remote.run(session, work, rep, keys, join_range))
            src = generated(work / f"agg-{keys}", lambda src=work / f"agg-{keys}", keys=keys:
                            make_input(src, args.batches, args.rows, keys, seed=keys,
                                       fill=args.fill))
            fill_files = -(-keys // 5_000_000) if args.fill else 0
            state = (work / f"state-agg-{keys}").as_uri()
            cases = {
                "silt aggregate": lambda df, state=state: silt_spark.aggregate(
                    df, ["key"], ["count", "sum(amount)"], state_url=state,
                    num_shards=args.shards, settings=silt_settings),
                "native groupBy (RocksDB)": lambda df: df.groupBy("key").agg(
                    F.count("*").alias("count"), F.sum("amount").alias("sum")),
                # The floor Spark sets: two Arrow stages around the same shuffle, no state.
                "stateless floor (Arrow)": lambda df: df.mapInArrow(identity, df.schema)
                .repartition(args.shards, "key").mapInArrow(identity, df.schema),
            }
            for name, build in cases.items():
                results.append(measure(session, name, build, src, work, keys, args.rows, args,
                                       state if name.startswith("silt") else None,
                                       restart_file=fill_files, steady_from=fill_files or 1))
            psrc = generated(work / f"proc-{keys}", lambda p=work / f"proc-{keys}", keys=keys:
                             make_input(p, args.batches, args.processor_rows, keys,
                                        seed=keys + 1))
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
            wsrc = generated(work / f"win-{keys}", lambda w=work / f"win-{keys}", keys=keys:
                             make_window_input(w, args.batches, args.rows, keys,
                                               seed=keys + 2))
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
            jfolder = work / f"join-{keys}"
            made = generated(jfolder, lambda j=jfolder, keys=keys: make_join_input(
                j, join_batches(args), keys, seed=keys + 3))
            jsrc = once(lambda made=made, j=jfolder: (made(), (j / "left", j / "right"))[1])
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
        if runner.listing:  # each case listed above, now in a driver of its own
            results = run_in_drivers(runner.listed, args.repeat, root, sys.argv[1:])
    finally:
        if "spark" in session:
            session["spark"].stop()
        if remote is not None:
            remote.stop()
        if not runner.child:
            shutil.rmtree(root, ignore_errors=True)
    results = [r for r in results if r is not None]
    if runner.child:  # the parent prints the table and writes the results file
        Path(args.one_out).write_text(json.dumps(results, default=float))
        return
    print_report(results, args.keys)
    print(json.dumps(results, default=float))
    out = write_results(args.json, record(
        dict(vars(args)), results,
        {"start": load_at_start, "end": machine_load()}, started, time.time() - started))
    print(f"results written to {out}")


if __name__ == "__main__":
    main()
