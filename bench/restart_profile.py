"""Where a cold restart's first batch goes, from Spark's event log (not a test).

    python bench/spark_bench.py --keys 2000000 --fill --cases "silt aggregate,stateless floor" \\
        --spark-conf spark.eventLog.enabled=true --spark-conf spark.eventLog.compress=false \\
        --spark-conf spark.eventLog.dir=file:///tmp/ev
    python bench/restart_profile.py /tmp/ev

Every session of ``spark_bench.py`` writes one event log; a restart's session holds the
restarted query first. For each session, the first query's span is printed from its start
event to its first progress event, as a timeline (ms from the query's start): each Spark job
and stage, and per stage its tasks' slowest launch delay, deserialization, run time, CPU and
GC time. Comparing a stateful case's restart with the stateless floor's shows what the state
adds, stage by stage; the Python workers' own phases (imports, shard open, reads, commit)
come from the task records (``silt_spark.metrics``) and ``PYTHONPROFILEIMPORTTIME``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

_QS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent"
_QP = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
_SQL_START = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"
_SQL_END = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd"


def events(path: Path) -> list[dict[str, Any]]:
    """The events of one session's log (an uncompressed ``events_*`` file or its folder)."""
    files = sorted(path.glob("events_*")) if path.is_dir() else [path]
    if any(f.suffix in (".zstd", ".lz4", ".snappy", ".lzf") for f in files):
        raise SystemExit(f"{path}: compressed event log; run with "
                         "--spark-conf spark.eventLog.compress=false")
    return [json.loads(line) for f in files for line in f.open()]


def first_query(evs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first query's timeline: start, first progress, and its jobs, stages and tasks in
    between."""
    start = next(e for e in evs if e["Event"] == _QS)
    t0 = _ms(start["timestamp"])
    progress = next((e for e in evs if e["Event"] == _QP), None)
    if progress is None:
        raise SystemExit("no query progress in this log: did the query run a batch?")
    p = json.loads(progress["progress"]) if isinstance(progress["progress"], str) else \
        progress["progress"]
    end = _ms(p["timestamp"]) + p["durationMs"].get("triggerExecution", 0)
    rows: list[tuple[float, str]] = []
    stages: dict[int, dict[str, Any]] = {}
    for e in evs:
        kind = e["Event"]
        if kind == "SparkListenerJobStart" and e["Submission Time"] <= end:
            rows.append((e["Submission Time"] - t0, f"job {e['Job ID']} start (stages "
                         f"{e['Stage IDs']})"))
        elif kind == "SparkListenerJobEnd" and e["Completion Time"] <= end + 1000:
            rows.append((e["Completion Time"] - t0, f"job {e['Job ID']} end"))
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            if info.get("Submission Time", 0) > end:
                continue
            stages[info["Stage ID"]] = s = {
                "name": info["Stage Name"].split(" at ")[0][:40],
                "submitted": info["Submission Time"] - t0,
                "completed": info["Completion Time"] - t0, "tasks": []}
            rows.append((s["submitted"], f"stage {info['Stage ID']} submitted: {s['name']} "
                         f"({info['Number of Tasks']} tasks)"))
            rows.append((s["completed"], f"stage {info['Stage ID']} completed"))
        elif kind == _SQL_START and e["time"] <= end:
            rows.append((e["time"] - t0, f"sql {e['executionId']} start"))
        elif kind == _SQL_END and e["time"] <= end + 1000:
            rows.append((e["time"] - t0, f"sql {e['executionId']} end"))
    for e in evs:
        if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in stages:
            info, m = e["Task Info"], e.get("Task Metrics") or {}
            stages[e["Stage ID"]]["tasks"].append({
                "launch": info["Launch Time"] - t0, "finish": info["Finish Time"] - t0,
                "deserialize": m.get("Executor Deserialize Time", 0),
                "run": m.get("Executor Run Time", 0),
                "cpu": m.get("Executor CPU Time", 0) / 1e6,
                "gc": m.get("JVM GC Time", 0)})
    return {"start": t0, "batch_ms": end - t0, "duration": p["durationMs"], "rows": rows,
            "stages": stages}


def _ms(ts: Any) -> float:
    if isinstance(ts, (int, float)):
        return float(ts)
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000


def show(name: str, q: dict[str, Any]) -> None:
    print(f"== {name}: first batch done {q['batch_ms'] / 1000:.2f} s after the query started; "
          f"Spark's phases {q['duration']}")
    for t, what in sorted(q["rows"]):
        print(f"  {t:8.0f} ms  {what}")
    for sid, s in sorted(q["stages"].items()):
        ts = s["tasks"]
        if not ts:
            continue
        print(f"  stage {sid} {s['name']}: {s['completed'] - s['submitted']:.0f} ms, "
              f"{len(ts)} tasks; run ms {[t['run'] for t in ts]}, cpu ms "
              f"{[round(t['cpu']) for t in ts]}, deserialize ms {[t['deserialize'] for t in ts]}"
              f", gc ms {[t['gc'] for t in ts]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", type=Path, help="the spark.eventLog.dir of a spark_bench.py run")
    args = ap.parse_args()
    for d in sorted(p for p in args.logs.iterdir() if not p.name.startswith(".")):
        show(d.name, first_query(events(d)))


if __name__ == "__main__":
    main()
