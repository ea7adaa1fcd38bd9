"""One shard of a left outer stream-stream join, without Spark: the cost of a step batch and of
its eviction as the buffer grows, with the outer side's time index and without it.

Not a test: it prints a table (and writes JSON) and fails only when the two layouts give
different output. The shard's task code (``silt_spark.operators.join._probe.merge_partition``) runs in this
process on a ``file://`` DB, as a Spark task would run it, on the workload of
``spark_bench.py --cases join --join-buffered N --join-step-rows R``: orders with uniformly
random keys (as many distinct keys as buffered rows), payments 0-50 s after 90% of them, left
time within 30 s of right time, 10 s delays; two batches fill each side to about ``N`` rows,
then step batches of ``R`` orders at the same event-time rate, each adding and evicting about
``R`` rows per side. Layouts, run one after the other on the same input (``--repeat`` rounds):

* ``index``: the outer side's rows have time index entries (roots made since it exists):
  eviction reads exactly the rows that expire;
* ``scan``: no index (roots made before it): eviction reads the outer side's boundary bucket
  (the one the watermark is inside) whole.

Reported per layout and buffer size: a step batch's time (commit included) and its
eviction's time (the batches that evicted rows), median [min-max] over the step batches of all
rounds, and the machine's load. Spark's own join, the
peer, is measured by ``spark_bench.py`` (its per-batch state removal time). Run from the
repository root::

    PYTHONPATH=packages/core/src:packages/spark/src python bench/join_evict_bench.py \\
        --buffered 250000 2500000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import silt
from silt import _ext
from silt_spark.operators.join import _buffers
from silt_spark.operators.join import _probe as _join
from silt_spark.runtime import _layout, _watermark

KEY_GROUPS = 64  # one shard of four at 256 key groups
TS = pa.timestamp("us", tz="UTC")
RANGE_US = (30_000_000, 30_000_000)
DELAY_MS = (10_000, 10_000)
FILL_SPAN_MS = 20_000  # each fill batch: 20 s of event time (the buffers keep ~40 s)


def plan(indexed: bool) -> _buffers.JoinPlan:
    left = pa.schema([("__l0", pa.int64()), ("__l1", pa.int64()), ("__l2", TS)])
    right = pa.schema([("__r0", pa.int64()), ("__r1", pa.int64()), ("__r2", TS)])
    out = pa.schema([("key", pa.int64()), ("amount", pa.int64()), ("ot", TS),
                     ("pkey", pa.int64()), ("paid", pa.int64()), ("pt", TS)])
    return _buffers.JoinPlan(
        how="left", nkeys=1, columns=(("key", "amount", "ot"), ("pkey", "paid", "pt")),
        time_index=(2, 2), time_range=RANGE_US, bucket_us=sum(RANGE_US),
        output=tuple([("L", i) for i in range(3)] + [("R", i) for i in range(3)]),
        side_schemas=(left, right), output_schema=out, time_indexed=indexed)


def tagged(side: int, keys: np.ndarray, amounts: np.ndarray, ms: np.ndarray) -> pa.Table:
    """Rows of one side as the operator's shuffle hands them to a task."""
    n = len(keys)
    null, null_ts = pa.nulls(n, pa.int64()), pa.nulls(n, TS)
    own = [pa.array(keys, pa.int64()), pa.array(amounts, pa.int64()), pa.array(ms * 1000, TS)]
    other = [null, null, null_ts]
    cols = {"__k0": pa.array(keys, pa.int64()),
            "__side": pa.array(np.full(n, side, np.int32)),
            _layout.KG_COLUMN: pa.array((keys * 2654435761) % KEY_GROUPS, pa.int32())}
    lcols, rcols = (own, other) if side == 0 else (other, own)
    cols.update({f"__l{i}": c for i, c in enumerate(lcols)})
    cols.update({f"__r{i}": c for i, c in enumerate(rcols)})
    return pa.table(cols)


def batch(rng: np.random.Generator, rows: int, start_ms: int, span_ms: int,
          keys: int) -> pa.Table:
    ms = start_ms + rng.integers(0, span_ms, rows)
    k = rng.integers(0, keys, rows)
    paid = rng.random(rows) < 0.9
    pt = ms[paid] + rng.integers(0, 50_000, int(paid.sum()))
    return pa.concat_tables([
        tagged(0, k, rng.integers(0, 1000, rows), ms),
        tagged(1, k[paid], rng.integers(0, 1000, int(paid.sum())), pt),
    ])


class Task:
    """What ``merge_partition`` uses of a shard task."""

    def __init__(self, db: Any, url: str, batch_id: int, meta: dict, seen: list) -> None:
        self.db, self.url, self.batch_id = db, url, batch_id
        self.base_meta, self.base_version, self.changed = dict(meta), db.version, batch_id > 0
        self.meta_updates: dict[str, str] = {}
        self.operator_metrics: dict[str, Any] = {}
        self.first_kg, self.last_kg, self.shard = 0, KEY_GROUPS - 1, 0
        self.watermark = _watermark.watermark_of(seen, DELAY_MS)
        # rows are judged late against batch b - 1's watermark (no tick source here)
        self.late_watermark = self.watermark
        self._seen = seen

    def observe_event_time(self, ms: int, side: int = 0) -> None:
        self._seen[side] = max(self._seen[side] or ms, ms)


def run(indexed: bool, buffered: int, step: int, batches: int, folder: Path
        ) -> tuple[list[float], list[float], list[int]]:
    """Step batches' seconds, eviction ms and output rows of one layout."""
    url = (folder / f"{'index' if indexed else 'scan'}-{buffered}").as_uri()
    db = silt.open(url)
    rng = np.random.default_rng(buffered)
    jp = plan(indexed)
    seen: list = [None, None]
    meta: dict[str, str] = {}
    fill = buffered // 2
    step_ms = max(1, step * FILL_SPAN_MS // fill)
    plan_ = [(fill, FILL_SPAN_MS)] * 2 + [(step, step_ms)] * batches
    start = 0
    secs, evict, out = [], [], []
    try:
        for b, (rows, span) in enumerate(plan_):
            t = batch(rng, rows, start, span, buffered)
            start += span
            task = Task(db, url, b, meta, seen)
            t0 = time.perf_counter()
            n = sum(x.num_rows for x in _join.merge_partition(task, iter(t.to_batches()), jp))
            db.commit(meta={**meta, **task.meta_updates})
            dt = time.perf_counter() - t0
            meta.update(task.meta_updates)
            if b >= 2:
                secs.append(dt)
                out.append(n)
                if task.operator_metrics.get("evicted_left"):  # batches that evicted rows
                    evict.append(float(task.operator_metrics["evict_ms"]))
    finally:
        db.close()
    return secs, evict, out


def spread(values: list[float], fmt: str) -> str:
    return (f"{format(statistics.median(values), fmt)} "
            f"[{format(min(values), fmt)}-{format(max(values), fmt)}]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--buffered", type=int, nargs="+", default=[250_000, 2_500_000],
                    help="rows buffered per side in the shard (a quarter of spark_bench's N)")
    ap.add_argument("--step", type=int, default=25_000, help="orders per step batch")
    ap.add_argument("--batches", type=int, default=8, help="step batches per run")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default="join_evict_bench.json")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="silt-join-evict-"))
    results: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    try:
        for buffered in args.buffered:
            runs: dict[str, dict[str, list]] = {}
            for _ in range(args.repeat):
                for indexed in (True, False):
                    name = "index" if indexed else "scan"
                    secs, ev, out = run(indexed, buffered, args.step, args.batches, folder)
                    r = runs.setdefault(name, {"secs": [], "evict": [], "out": []})
                    r["secs"] += secs
                    r["evict"] += ev
                    r["out"].append(out)
                    load.append(os.getloadavg()[0])
                    shutil.rmtree(folder / f"{name}-{buffered}", ignore_errors=True)
            if runs["index"]["out"] != runs["scan"]["out"]:
                print(f"the layouts gave different output at {buffered:,}: "
                      f"{runs['index']['out']} vs {runs['scan']['out']}", file=sys.stderr)
                return 1
            for name, r in runs.items():
                results.append({"layout": name, "buffered": buffered, "step": args.step,
                                "step_s": r["secs"], "evict_ms": r["evict"]})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\n{'layout':8s} {'buffered/side':>13s} {'step batch s':>22s} {'eviction ms':>22s}")
    for r in results:
        print(f"{r['layout']:8s} {r['buffered']:>13,d} {spread(r['step_s'], '.3f'):>22s} "
              f"{spread(r['evict_ms'], '.0f'):>22s}")
    print(f"load (1 min): {min(load):.2f}-{max(load):.2f}; {platform.processor() or 'cpu'}, "
          f"{os.cpu_count()} cores; silt hot path "
          f"{'compiled' if _ext.load() is not None else 'pure Python'}")
    Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
