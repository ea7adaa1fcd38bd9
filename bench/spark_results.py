"""The Spark benchmark's results file: every run of every case, and their summary.

``bench/spark_bench.py`` measures each case (``silt aggregate``, ``native groupBy (RocksDB)``,
``stateless floor (Arrow)``, ...) once per state size K and per ``--repeat``; :func:`record`
turns those runs into the JSON that ``bench/results/spark_bench.json`` holds and
``bench/charts.py`` draws: per case and K, the median, min and max over the runs of the
throughput (rows/s), the commit time, the cold restart (a new SparkSession, then the query's
first batch done) and silt's object-store requests per micro-batch and shard, next to the
peers' figures from the same run and the machine's load at its start and end.
"""

from __future__ import annotations

import sys
from typing import Any

from run_record import summarize

#: Figures summarized per case and K: name in the summary -> how to read it from one run.
FIGURES = {
    "rows_per_s": lambda r: r.get("rows_per_s"),
    "recovery_s": lambda r: r.get("recovery_s"),
    "commit_ms": lambda r: r.get("commit_ms", r.get("native_commit_ms")),
    # silt's object-store requests per micro-batch and shard, all kinds together
    "requests_per_batch_and_shard": lambda r: (
        sum(r["requests_per_task"]["all"].values())
        if r.get("requests_per_task", {}).get("all") else None),
    "state_bytes": lambda r: r.get("state_bytes"),
}


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case and K (in the order of their first run), each figure of :data:`FIGURES` that the runs
    have as ``{median, min, max, n}``; runs that failed are left out and counted in
    ``failed_runs``."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["case"], int(r["keys"])), []).append(r)
    out = []
    for (case, keys), group in groups.items():
        ok = [r for r in group if "error" not in r]
        row: dict[str, Any] = {"case": case, "keys": keys, "rows_per_batch": group[0]["rows"],
                               "runs": len(ok), "failed_runs": len(group) - len(ok)}
        for name, read in FIGURES.items():
            values = [float(v) for v in map(read, ok) if v is not None]
            if values:
                row[name] = summarize(values)
        out.append(row)
    return out


def record(config: dict[str, Any], runs: list[dict[str, Any]], load: dict[str, Any],
           started: float, elapsed: float) -> dict[str, Any]:
    """The results file's content: the run's configuration, the Python and Spark versions, the
    machine's load at the start and end (``load``), the summary and every run."""
    import pyspark

    return {
        "bench": "spark_bench",
        "config": config,
        "environment": {"python": sys.version.split()[0], "pyspark": pyspark.__version__},
        "started_unix": started,
        "elapsed_s": elapsed,
        "load": load,
        "summary": summary(runs),
        "runs": runs,
    }
