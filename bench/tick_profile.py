"""What silt's tick source costs per micro-batch, with the tick on and off (not a test).

    python bench/tick_profile.py                     # about a minute on a quiet machine
    python bench/tick_profile.py --rows 200000 --batches 3
    SILT_SRC=/path/to/other/checkout python bench/tick_profile.py   # another checkout's silt

The query is the event-time floor of bench/session_bench.py (``--floor``): a no-op batch
processor (``transform_batches`` in event time, one value state declared, nothing written, no
output) over generated parquet input (one file per micro-batch, each covering the next 60 s of
event time, so every data batch moves the watermark), 4 shards, local[2], ``noop`` sink. In
one SparkSession, after a warm-up run (JIT, Python workers), it runs the query ``--runs``
times with silt's tick source (``spark.silt.tick`` unset) and as often without it
(``spark.silt.tick=false``), alternating ABBA, each run on a fresh checkpoint and state root.

Per run: the machine's load (1 min) when it ended (other engineers share the cores: compare
runs next to each other), the data batches' rows/s and median ms per batch (batches after the
first, which starts the Python workers; tick-only batches left out, as in session_bench), the
median per batch of each phase of ``StreamingQueryProgress.durationMs`` (``latestOffset``: the
sources' offsets, the tick's LIST among them; ``queryPlanning``: planning, which asks the
Python source for its partitions; ``addBatch``: the batch's jobs), and from Spark's event log
the run's jobs and tasks, the median executor time of a batch's tasks and of its tick task (the
input task that read one row: run plus deserialize time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

# spark_bench puts this checkout's packages first on sys.path (not an installed silt).
from spark_bench import compile_checkout, make_window_input, session_factory

# isort: split
import silt_spark

PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets",
          "getBatch", "triggerExecution")


class Nothing(silt_spark.BatchProcessor):
    """Declares one value state and does nothing (session_bench's floor)."""

    def init(self, handle):
        handle.getValueState("session", "start long, last long, n long")

    def process(self, batch, state, timers):
        return None


def event_log(folder: Path) -> list[dict[str, Any]]:
    """The events of the session's (uncompressed) event log in ``folder``."""
    return [json.loads(line) for f in sorted(folder.rglob("events_*")) for line in f.open()]


def executor_work(events: list[dict[str, Any]], run_id: str) -> dict[str, float]:
    """What the query run ``run_id`` (its jobs' group) ran on executors: jobs, tasks, and the
    median per batch of the input stages' task run time that read one row (the tick's task:
    the generated input has 100k rows per file) and of all the batch's tasks."""
    stages: dict[int, int] = {}
    jobs = set()
    for e in events:
        if (e["Event"] == "SparkListenerJobStart"
                and e.get("Properties", {}).get("spark.jobGroup.id") == run_id):
            batch = int(e["Properties"]["streaming.sql.batchId"])
            jobs.add(e["Job ID"])
            stages.update({s: batch for s in e["Stage IDs"]})
    tick: dict[int, int] = {}
    every: dict[int, int] = {}
    shards: dict[int, int] = {}
    tasks = 0
    for e in events:
        if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in stages:
            batch, m = stages[e["Stage ID"]], e.get("Task Metrics") or {}
            run_ms = m.get("Executor Run Time", 0) + m.get("Executor Deserialize Time", 0)
            tasks += 1
            every[batch] = every.get(batch, 0) + run_ms
            read = m.get("Shuffle Read Metrics", {})
            if read.get("Local Blocks Fetched", 0) + read.get("Remote Blocks Fetched", 0):
                shards[batch] = shards.get(batch, 0) + run_ms
            if m.get("Input Metrics", {}).get("Records Read") == 1:
                tick[batch] = tick.get(batch, 0) + run_ms
    return {"jobs": len(jobs), "tasks": tasks,
            "tick_task_ms": statistics.median([tick.get(b, 0) for b in every] or [0]),
            "task_ms": statistics.median(every.values() or [0]),
            "shard_ms": statistics.median([shards.get(b, 0) for b in every] or [0])}


def run(spark: Any, src: Path, work: Path, name: str, shards: int, tick: bool) -> dict:
    if tick:
        spark.conf.unset("spark.silt.tick")
    else:
        spark.conf.set("spark.silt.tick", "false")
    df = (spark.readStream.schema("key long, amount long, ts timestamp")
          .option("maxFilesPerTrigger", 1).parquet(str(src)))
    out = silt_spark.transform_batches(
        df, Nothing(), ["key"], "key long", state_url=(work / f"state-{name}").as_uri(),
        num_shards=shards, time_mode="EventTime", event_time_column="ts",
        watermark_delay="3 seconds")
    q = (out.writeStream.format("noop").outputMode("append")
         .option("checkpointLocation", str(work / f"chk-{name}"))
         .trigger(processingTime="0 seconds").start())
    q.processAllAvailable()
    progress = list(q.recentProgress)
    run_id = str(q.runId)
    q.stop()
    data = [p for p in progress[1:] if p["numInputRows"] > 1]
    ms = sum(p["durationMs"]["triggerExecution"] for p in data)
    return {
        "batches": len(progress), "rows_per_s": sum(p["numInputRows"] for p in data) / ms * 1000,
        "batch_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in data),
        "phases": {k: statistics.median(p["durationMs"].get(k, 0) for p in data)
                   for k in PHASES},
        "run_id": run_id,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000, help="rows per batch")
    ap.add_argument("--batches", type=int, default=4, help="data batches per run")
    ap.add_argument("--runs", type=int, default=2,
                    help="runs of each side after a warm-up run, alternating (ABBA)")
    ap.add_argument("--shards", type=int, default=4)
    args = ap.parse_args()
    compile_checkout()
    root = Path(tempfile.mkdtemp(prefix="silt-tick-profile-"))
    (root / "events").mkdir()
    extra = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(root / "events"),
             "spark.eventLog.compress": "false"}
    spark = session_factory(args.shards, "2g", 100, extra, lambda: root)()
    results = []
    try:
        src = root / "in"
        make_window_input(src, args.batches, args.rows, 10_000, seed=1)
        run(spark, src, root, "warm-up", args.shards, True)  # JIT, Python workers
        for rep in range(args.runs):
            for tick in ((True, False) if rep % 2 == 0 else (False, True)):
                name = f"{'tick' if tick else 'off'}-{rep}"
                r = run(spark, src, root, name, args.shards, tick)
                results.append({"name": name, "load": os.getloadavg()[0], **r})
    finally:
        spark.stop()
        events = event_log(root / "events")
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'run':7s} {'load':>4s} {'rows/s':>8s} {'batch':>6s} "
          + " ".join(f"{k[:8]:>8s}" for k in PHASES)
          + f" {'batches':>7s} {'jobs':>4s} {'tasks':>5s} {'task ms':>7s} {'shards':>7s}"
          f" {'tick ms':>7s}")
    for r in results:
        w = executor_work(events, r["run_id"])
        print(f"{r['name']:7s} {r['load']:4.1f} {r['rows_per_s']:8,.0f} {r['batch_ms']:6,.0f} "
              + " ".join(f"{r['phases'][k]:8,.0f}" for k in PHASES)
              + f" {r['batches']:7d} {w['jobs']:4d} {w['tasks']:5d} {w['task_ms']:7,.0f}"
              f" {w['shard_ms']:7,.0f} {w['tick_task_ms']:7,.0f}")
    print("rows/s and ms: data batches after the first (medians per batch); task ms: the "
          "batch's executor task time (run + deserialize), shards: its shuffled stage's, "
          "tick ms: the tick's task's")


if __name__ == "__main__":
    sys.exit(main())
