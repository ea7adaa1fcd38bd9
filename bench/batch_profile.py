"""The batch processor's shard stage against the aggregate's, without Spark (not a test).

    python bench/batch_profile.py                      # figures: median of --runs runs
    python bench/batch_profile.py --profile batch      # cProfile of the batch processor's stage

What it measures: one shard's work per micro-batch, in this process, on a real shard LSM
(``file://`` under a temporary folder) — what a Spark task of the shard stage runs after the
shuffle, without Spark, the shuffle or the Python worker. Each case gets the same input: a
fill batch holding every one of ``--keys`` keys once (not timed), then ``--batches`` batches of
``--rows`` random keys in ``[0, keys)`` with an amount, the running count and sum per key:

* ``batch``: ``transform_batches``' task code (``operators/batch/_task.process_partition``)
  running ``spark_bench.BatchCount``, the benchmark's batch processor, on the batch's rows;
* ``aggregate``: ``silt_spark.aggregate``'s shard stage (``operators/aggregate.merge_partition``)
  on the partials of the same rows (the partial aggregation before the shuffle, done here per
  quarter of the batch as four input partitions would, is not timed).

Each timed batch is the stage's call (output consumed) plus the shard's commit. A run prints
each case's median ms per batch and rows/s, and the batch processor's speed relative to the
aggregate's in the same run; the last line, the median of the runs' figures and of their
ratios. The machine may be shared: compare ratios, not absolute figures (the load is printed).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

# This checkout's packages and bench/ first (not an installed silt).
_SRC = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_SRC / "bench")] + [str(_SRC / "packages" / p / "src")
                                        for p in ("core", "spark", "tier-s3", "cache-ssd")]
# isort: split
import silt  # noqa: E402
from silt_spark.operators import _aggregation  # noqa: E402
from silt_spark.operators import aggregate as _aggregate  # noqa: E402
from silt_spark.operators.batch._task import process_partition  # noqa: E402
from silt_spark.runtime import _schema  # noqa: E402
from silt_spark.runtime._layout import KG_COLUMN, PARTITION_COLUMN  # noqa: E402
from spark_bench import BatchCount  # noqa: E402

#: The key groups of the one shard (all of them).
KEY_GROUPS = 256
VALUE = (("n", "bigint", True), ("total", "bigint", True))
VALUE_ARROW = pa.schema([("n", pa.int64()), ("total", pa.int64())])
OUTPUT = pa.schema([("key", pa.int64()), ("n", pa.int64()), ("total", pa.int64())])


class Task:
    """What the shard stages use of a ``ShardTask``: the shard's DB and the batch's identity."""

    def __init__(self, db: Any, url: str, batch_id: int) -> None:
        self.db = db
        self.url = url
        self.batch_id = batch_id
        self.shard = 0
        self.spec = None
        self.first_kg, self.last_kg = 0, KEY_GROUPS - 1
        self.base_meta = db.meta
        self.meta_updates: dict[str, str] = {}
        self.changed = False
        self.watermark = self.late_watermark = None

    def commit(self) -> None:
        if self.changed:
            self.db.commit(self.batch_id, meta=self.meta_updates)


def with_layout(t: pa.Table) -> pa.Table:
    """``t`` with the routing columns the shard stage gets (key group: the key's low byte)."""
    kg = pa.array(t["key"].to_numpy() % KEY_GROUPS, pa.int32())
    return t.append_column(KG_COLUMN, kg).append_column(
        PARTITION_COLUMN, pa.array(np.zeros(t.num_rows, np.int32)))


def inputs(keys: int, rows: int, batches: int, seed: int) -> list[pa.Table]:
    """The fill batch, then ``batches`` batches of ``rows`` random keys (as ``make_input``)."""
    rng = np.random.default_rng(seed)
    k = rng.permutation(keys)
    out = [pa.table({"key": pa.array(k, pa.int64()),
                     "amount": pa.array(rng.integers(0, 1000, keys), pa.int64())})]
    for _ in range(batches):
        out.append(pa.table({"key": pa.array(rng.integers(0, keys, rows), pa.int64()),
                             "amount": pa.array(rng.integers(0, 1000, rows), pa.int64())}))
    return out


def batch_stage() -> Any:
    """``(prepare, run)`` of the batch processor's shard stage."""
    registry = _schema.evolve({}, {"s": _schema.Declared("value", None, VALUE, False)})

    def prepare(t: pa.Table) -> list[Any]:
        return with_layout(t).to_batches()

    def run(task: Task, batches: list[Any]) -> int:
        out = process_partition(task, iter(batches), BatchCount(), ["key"], OUTPUT, registry,
                                {"s": VALUE_ARROW}, {})
        return sum(b.num_rows for b in out)

    return prepare, run


def aggregate_stage() -> Any:
    """``(prepare, run)`` of the aggregate's shard stage (count, sum(amount))."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("key", T.LongType()),
                           T.StructField("amount", T.LongType())])
    plan, _, _ = _aggregation.plan(schema, ["key"], _aggregation.parse_aggs(
        ["count", "sum(amount)"]))

    def prepare(t: pa.Table) -> list[Any]:
        quarter = -(-t.num_rows // 4)
        parts = [b for i in range(0, t.num_rows, quarter)
                 for b in _aggregation.partial_aggregate(iter(t.slice(i, quarter).to_batches()),
                                                         plan)]
        return with_layout(pa.Table.from_batches(parts)).to_batches()

    def run(task: Task, batches: list[Any]) -> int:
        return sum(b.num_rows for b in _aggregate.merge_partition(task, iter(batches), plan))

    return prepare, run


STAGES = {"aggregate": aggregate_stage, "batch": batch_stage}


def run_case(name: str, data: list[pa.Table], root: Path, profile: bool) -> list[float]:
    """Seconds of each timed batch of one case (a fresh shard LSM under ``root``)."""
    prepare, run = STAGES[name]()
    url = (root / name).as_uri()
    db = silt.open(url)
    seconds = []
    prof = cProfile.Profile() if profile else None
    try:
        for b, t in enumerate(data):
            batches = prepare(t)
            task = Task(db, url, b)
            start = time.perf_counter()
            if prof is not None and b:
                prof.enable()
            run(task, batches)
            task.commit()
            if prof is not None:
                prof.disable()
            if b:  # the fill batch is not timed
                seconds.append(time.perf_counter() - start)
    finally:
        db.close()
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof).sort_stats("cumtime").print_stats(30)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=500_000)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=3, help="timed batches per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", choices=sorted(STAGES), help="cProfile one case, one run")
    args = ap.parse_args()
    data = inputs(args.keys, args.rows, args.batches, seed=7)
    if args.profile:
        with tempfile.TemporaryDirectory() as d:
            run_case(args.profile, data, Path(d), True)
        return
    print(f"{args.keys} keys, {args.rows} rows per batch, {args.batches} timed batches; "
          f"load {os.getloadavg()[0]:.2f}")
    medians: dict[str, list[float]] = {n: [] for n in STAGES}
    for r in range(args.runs):
        for name in STAGES:
            with tempfile.TemporaryDirectory() as d:
                s = run_case(name, data, Path(d), False)
            medians[name].append(statistics.median(s))
            print(f"run {r + 1} {name:9s}: median {1000 * medians[name][-1]:7.1f} ms per batch "
                  f"({args.rows / medians[name][-1] / 1000:6.1f}k rows/s)")
        a, b = medians["aggregate"][-1], medians["batch"][-1]
        print(f"run {r + 1} batch / aggregate speed: {a / b:.2f}x "
              f"(load {os.getloadavg()[0]:.2f})")
    a, b = statistics.median(medians["aggregate"]), statistics.median(medians["batch"])
    ratio = statistics.median(x / y for x, y in zip(medians["aggregate"], medians["batch"]))
    print(f"median of {args.runs} runs: aggregate {1000 * a:.1f} ms, batch {1000 * b:.1f} ms "
          f"per batch; batch / aggregate speed {ratio:.2f}x (median of the runs' ratios)")


if __name__ == "__main__":
    main()
