"""silt-spark demo: card-failure monitoring with state in silt, stopped and restarted once.

Run it with ``python examples/spark_demo.py`` (needs pyspark 4, pyarrow, pandas < 3, Java 17 and
silt-core + silt-spark importable). Everything lives in a temporary folder on the embedded
``file://`` tier; nothing else is needed.

Two streaming queries read the same generated card transactions (parquet files, one per
micro-batch; each batch brings six hours of event time):

* ``failures``: :func:`silt_spark.window_aggregate` counts each user's failed transactions (and
  their total and largest amount) over a sliding 24-hour event-time window that moves every six
  hours, with a one-hour watermark delay; each window is emitted once, when the watermark passes
  its end (vectorized: no Python per row);
* ``spikes``: a :class:`silt_spark.StatefulProcessor` counts each user's failures over the last
  12 hours of event time with a timer per failure, and flags a user whose failures jump to a
  threshold (and clears the flag when they fall back).

After a few batches both queries stop and start again from their checkpoints; the script prints
per-batch throughput, state size and commit time, and how long recovery took.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

try:
    import silt_spark
except ImportError:  # running from a checkout without installing the packages
    root = Path(__file__).resolve().parents[1]
    sys.path[:0] = [str(root / "packages/core/src"), str(root / "packages/spark/src")]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(root / "packages/core/src"), str(root / "packages/spark/src"),
         os.environ.get("PYTHONPATH", "")]
    )
    import silt_spark

from pyspark import cloudpickle
from pyspark.sql import SparkSession

cloudpickle.register_pickle_by_value(sys.modules[__name__])

BATCH_HOURS = 6  # event time each micro-batch covers
RECENT_MS = 12 * 3_600_000  # spikes: failures counted over the last 12 hours of event time
THRESHOLD = 3  # ... and a user is flagged when they reach this many
SCHEMA = "user string, card string, ok boolean, amount double, ts timestamp"


class FailureSpikes(silt_spark.StatefulProcessor):
    """Per user: failures in the last ``RECENT_MS`` of event time; flag when >= THRESHOLD.

    Each failure adds one to ``recent`` and registers an event-time timer at its time plus the
    window; when the query's watermark passes the timer, the failure leaves the window.
    """

    def init(self, handle):
        self.handle = handle
        self.recent = handle.getValueState("recent", "n long")
        self.flagged = handle.getValueState("flagged", "at long")

    def handleInputRows(self, key, rows, timerValues):
        t = pa.concat_tables(list(rows))  # rows_format="arrow": pyarrow tables, no pandas
        failed = t.filter(pc.invert(t["ok"]))
        if failed.num_rows == 0:
            return
        n = (self.recent.get() or (0,))[0] + failed.num_rows
        self.recent.update((n,))
        for ts in failed["ts"].cast(pa.int64()).to_pylist():  # microseconds
            self.handle.registerTimer(ts // 1000 + RECENT_MS)
        if n >= THRESHOLD and self.flagged.get() is None:
            self.flagged.update((int(failed["ts"].cast(pa.int64())[-1].as_py() // 1000),))
            yield (key[0], n, "flagged")

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        n = max(0, (self.recent.get() or (0,))[0] - 1)
        if n:
            self.recent.update((n,))
        else:
            self.recent.clear()
        if n < THRESHOLD and self.flagged.get() is not None:
            self.flagged.clear()
            yield (key[0], n, "cleared")


def generate(folder: Path, batch: int, rows: int, users: int, seed: int) -> None:
    """One parquet file of transactions: event time advances BATCH_HOURS per batch; a few
    'bad' users fail much more often than the rest."""
    rng = np.random.default_rng(seed + batch)
    user = rng.integers(0, users, rows)
    bad = user % 97 == 0
    ok = rng.random(rows) > np.where(bad, 0.6, 0.02)
    span = BATCH_HOURS * 3_600_000
    base = pd.Timestamp("2026-01-01T00:00:00Z") + pd.Timedelta(milliseconds=span * batch)
    ts = base + pd.to_timedelta(rng.integers(0, span, rows), unit="ms")
    table = pa.table({
        "user": pa.array([f"user-{u:06d}" for u in user]),
        "card": pa.array([f"card-{u % 5}" for u in user]),
        "ok": pa.array(ok),
        "amount": pa.array(np.round(rng.gamma(2.0, 30.0, rows), 2)),
        "ts": pa.array(ts.as_unit("us"), pa.timestamp("us", tz="UTC")),
    })
    tmp = folder / f".part-{batch:05d}.parquet"
    pq.write_table(table, tmp)
    os.replace(tmp, folder / f"part-{batch:05d}.parquet")


def shard_report(query_id: str, state_url: str, batch_id: int) -> tuple[int, float, int]:
    """(shards that committed ``batch_id``, their largest commit time in ms, state bytes), from
    silt_spark's public API: the batch's task records (``silt_spark.metrics``) and the state's
    size (``silt_spark.state_size``, read from the shards' manifests)."""
    records = [r for r in silt_spark.metrics(query_id) if r["batch_id"] == batch_id]
    committed = sum(1 for r in records if r["committed"])
    worst = max((r["commit_ms"] for r in records if r["committed"]), default=0.0)
    return committed, worst, silt_spark.state_size(state_url).bytes


class Demo:
    def __init__(self, spark: SparkSession, work: Path) -> None:
        self.spark = spark
        self.work = work
        self.src = work / "in"
        self.src.mkdir()
        self.flags: list[tuple] = []
        self.closed = 0  # (user, window) results emitted in the last batch
        self.top: list[tuple] = []  # the largest closed windows so far
        self.queries: dict[str, object] = {}

    def start(self) -> None:
        stream = (self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                  .parquet(str(self.src)))
        failures = silt_spark.window_aggregate(
            stream.where("not ok"), ["user"], "ts", "24 hours",
            {"failures": "count", "failed_amount": "sum(amount)", "largest": "max(amount)"},
            state_url=(self.work / "state" / "failures").as_uri(), num_shards=4,
            slide_duration=f"{BATCH_HOURS} hours", watermark_delay="1 hour",
        )
        spikes = silt_spark.transform_with_state(
            stream, FailureSpikes(), ["user"], "user string, failures long, event string",
            state_url=(self.work / "state" / "spikes").as_uri(), num_shards=4,
            rows_format="arrow", time_mode="eventtime", event_time_column="ts",
            watermark_delay="10 seconds",
        )

        def keep_windows(df, batch_id):
            rows = df.collect()
            self.closed = len(rows)
            self.top = sorted(self.top + [tuple(r) for r in rows],
                              key=lambda r: (-r[3], r[0], r[1]))[:5]

        def keep_flags(df, batch_id):
            self.flags += [(batch_id, *r) for r in df.collect()]

        for name, df, sink in (("failures", failures, keep_windows),
                               ("spikes", spikes, keep_flags)):
            self.queries[name] = (
                df.writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(self.work / "chk" / name))
                .queryName(name).start()
            )

    def drain(self) -> None:
        for q in self.queries.values():
            q.processAllAvailable()

    def stop(self) -> None:
        for q in self.queries.values():
            q.stop()
        self.queries = {}

    def report(self, batch_id: int, rows: int, seconds: float) -> None:
        parts = []
        for name in ("failures", "spikes"):
            shards, commit_ms, size = shard_report(
                str(self.queries[name].id), (self.work / "state" / name).as_uri(), batch_id
            )
            parts.append(f"{name}: {shards} shard commits, max {commit_ms:5.0f} ms, "
                         f"state {size / 1e6:5.2f} MB")
        new_flags = [f for f in self.flags if f[0] == batch_id]
        print(f"batch {batch_id}: {rows:,} rows in {seconds:5.2f} s "
              f"({rows / seconds:8,.0f} rows/s); {self.closed:,} user windows closed, "
              f"{len(new_flags)} flag events | " + " | ".join(parts), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--rows", type=int, default=50_000, help="rows per micro-batch")
    ap.add_argument("--users", type=int, default=20_000)
    ap.add_argument("--keep", action="store_true",
                    help="keep the state and checkpoints, to look at with the silt command")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="silt-spark-demo-"))
    spark = (
        SparkSession.builder.master("local[2]").appName("silt-spark-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    demo = Demo(spark, work)
    restart_at = args.batches // 2
    try:
        print(f"state and checkpoints under {work}\n")
        demo.start()
        for b in range(args.batches):
            if b == restart_at:
                demo.stop()
                print("\n-- stopped both queries; restarting from their checkpoints --")
                generate(demo.src, b, args.rows, args.users, seed=7)
                t0 = time.perf_counter()
                demo.start()
                demo.drain()
                recovery = time.perf_counter() - t0
                print(f"recovery: restart to first batch done in {recovery:.2f} s "
                      "(state is opened from manifests, not replayed)\n")
                demo.report(b, args.rows, recovery)
                continue
            generate(demo.src, b, args.rows, args.users, seed=7)
            t0 = time.perf_counter()
            demo.drain()
            demo.report(b, args.rows, time.perf_counter() - t0)
        demo.stop()

        flagged = sorted({f[1] for f in demo.flags if f[3] == "flagged"})
        print(f"\n{len(flagged)} users were flagged, e.g. {flagged[:5]}")
        print("most failures in a closed 24-hour window (emitted once each, at the watermark):")
        print(pd.DataFrame(demo.top, columns=["user", "window_start", "window_end", "failures",
                                              "failed_amount", "largest"]).to_string(index=False))
        state = silt_spark.read_state(spark, (work / "state" / "failures").as_uri())
        print("most failures in a window still open, read back with silt_spark.read_state:")
        top = (state.select("user", "window_start", "failures", "failed_amount")
               .orderBy(["failures", "user"], ascending=[False, True]).limit(5).toPandas())
        print(top.to_string(index=False))
    finally:
        demo.stop()
        spark.stop()
        urls = [(work / "state" / name).as_uri() for name in ("failures", "spikes")]
        if args.keep:
            print("\nthe state stays; look at it with the silt command, for example:")
            for url in urls:
                print(f"  silt ls {url}\n  silt verify {url}")
            print(f"  (remove {work} when done)")
        else:
            shutil.rmtree(work, ignore_errors=True)
            print(f"\nremoved {work}; run with --keep (nox -s demo -- --keep) to keep the "
                  f"state and look at it with `silt ls {urls[0]}`")


if __name__ == "__main__":
    main()
