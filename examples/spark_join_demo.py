"""silt-spark join demo: orders and payments, unmatched orders found, stopped and restarted once.

Run it with ``python examples/spark_join_demo.py`` (needs pyspark 4, pyarrow, pandas < 3, Java 17
and silt-core + silt-spark importable). Everything lives in a temporary folder on the embedded
``file://`` tier.

Two generated streams, one parquet file per side per micro-batch (each batch brings ten minutes
of event time): orders ``(user, order_id, amount, ot)`` and payments ``(user, paid, pt)``. Most
orders are paid within 30 minutes; some never are. :func:`silt_spark.join` with ``how="left"``
matches each order with the payments of its user in the 30 minutes after it (``time_range`` =
order time between payment time - 30 minutes and payment time), with a 5-minute watermark delay
on both sides; an order never paid comes out once, with null payment columns, when the
watermark has passed its 30 minutes. Each side's buffer lives in silt, laid out in time buckets
so that expired rows are dropped by whole buckets.

Halfway, the query stops and starts again from its checkpoint with a different shard count (a
rescale: the buffers are taken by reference, nothing is copied); the script prints per-batch
throughput, matched and unmatched rows, each side's buffered rows and evictions (from
:func:`silt_spark.metrics`), and finally reads the buffers back with
:func:`silt_spark.read_state`.
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

from pyspark.sql import SparkSession

BATCH_MS = 10 * 60_000  # event time each micro-batch covers
PAY_WITHIN = "30 minutes"
ORDERS = "user string, order_id long, amount double, ot timestamp"
PAYMENTS = "user string, paid double, pt timestamp"
BASE = pd.Timestamp("2026-01-01T00:00:00Z")


def _ts(ms: np.ndarray) -> pa.Array:
    return pa.array((BASE + pd.to_timedelta(ms, unit="ms")).as_unit("us"),
                    pa.timestamp("us", tz="UTC"))


def _write(folder: Path, batch: int, table: pa.Table) -> None:
    tmp = folder / f".part-{batch:05d}.parquet"
    pq.write_table(table, tmp)
    os.replace(tmp, folder / f"part-{batch:05d}.parquet")


def generate(orders: Path, payments: Path, batch: int, rows: int, users: int) -> None:
    """One file per side: ``rows`` orders in this batch's ten minutes; 90% of them paid (by
    the same user) 0-25 minutes later, those payments spread over this and later files."""
    rng = np.random.default_rng(batch)
    start = batch * BATCH_MS
    ot = start + rng.integers(0, BATCH_MS, rows)
    user = rng.integers(0, users, rows)
    amount = np.round(rng.gamma(2.0, 30.0, rows), 2)
    ids = batch * rows + np.arange(rows)
    _write(orders, batch, pa.table({
        "user": pa.array([f"user-{u:06d}" for u in user]), "order_id": pa.array(ids),
        "amount": pa.array(amount), "ot": _ts(ot),
    }))
    # Payments of earlier batches' orders that fall in this batch's ten minutes.
    pay = []
    for b in range(max(0, batch - 3), batch + 1):
        r = np.random.default_rng(b)
        o_t = b * BATCH_MS + r.integers(0, BATCH_MS, rows)
        o_u = r.integers(0, users, rows)
        o_a = np.round(r.gamma(2.0, 30.0, rows), 2)
        lag = np.random.default_rng(10_000 + b).integers(0, 25 * 60_000, rows)
        paid = np.random.default_rng(20_000 + b).random(rows) < 0.9
        pt = o_t + lag
        here = paid & (pt >= start) & (pt < start + BATCH_MS)
        pay.append((o_u[here], o_a[here], pt[here]))
    u = np.concatenate([p[0] for p in pay])
    _write(payments, batch, pa.table({
        "user": pa.array([f"user-{x:06d}" for x in u], pa.string()),
        "paid": pa.array(np.concatenate([p[1] for p in pay]), pa.float64()),
        "pt": _ts(np.concatenate([p[2] for p in pay]).astype(np.int64)),
    }))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--rows", type=int, default=20_000, help="orders per micro-batch")
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="silt-spark-join-demo-"))
    spark = (
        SparkSession.builder.master("local[2]").appName("silt-spark-join-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    src_o, src_p = work / "orders", work / "payments"
    src_o.mkdir()
    src_p.mkdir()
    state = (work / "state" / "paid").as_uri()
    counts = {"matched": 0, "unpaid": 0}
    query = None

    def start(num_shards: int):
        orders = spark.readStream.schema(ORDERS).option("maxFilesPerTrigger", 1) \
            .parquet(str(src_o))
        payments = spark.readStream.schema(PAYMENTS).option("maxFilesPerTrigger", 1) \
            .parquet(str(src_p))
        paid = silt_spark.join(
            orders, payments, "user", "left", state_url=state, num_shards=num_shards,
            left_time_column="ot", right_time_column="pt",
            left_watermark_delay="5 minutes", right_watermark_delay="5 minutes",
            time_range=(PAY_WITHIN, "0 seconds"),
        )

        def sink(df, batch_id):
            got = df.groupBy(df.pt.isNull().alias("unpaid")).count().collect()
            for r in got:
                counts["unpaid" if r["unpaid"] else "matched"] += r["count"]

        return (paid.writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(work / "chk")).start())

    try:
        print(f"state and checkpoints under {work}\n")
        query = start(4)
        for b in range(args.batches + 1):  # + one empty batch: the last unpaid orders
            if b == args.batches // 2:
                query.stop()
                t0 = time.perf_counter()
                query = start(2)
                print(f"-- restarted from the checkpoint with 2 shards instead of 4 "
                      f"(rescale) in {time.perf_counter() - t0:.2f} s --")
            if b < args.batches:
                generate(src_o, src_p, b, args.rows, args.users)
            else:
                _write(src_o, b, pa.Table.from_pylist([], pa.schema(
                    [("user", pa.string()), ("order_id", pa.int64()), ("amount", pa.float64()),
                     ("ot", pa.timestamp("us", tz="UTC"))])))
                _write(src_p, b, pa.Table.from_pylist([], pa.schema(
                    [("user", pa.string()), ("paid", pa.float64()),
                     ("pt", pa.timestamp("us", tz="UTC"))])))
            before = dict(counts)
            t0 = time.perf_counter()
            query.processAllAvailable()
            dt = time.perf_counter() - t0
            recs = [r for r in silt_spark.metrics(query)
                    if r["batch_id"] == query.lastProgress["batchId"]]
            buf = [sum(r.get(f"buffered_{s}", 0) for r in recs) for s in ("left", "right")]
            ev = [sum(r.get(f"evicted_{s}", 0) for r in recs) for s in ("left", "right")]
            print(f"batch {b}: {dt:5.2f} s; matched +{counts['matched'] - before['matched']:,}"
                  f", unpaid orders +{counts['unpaid'] - before['unpaid']:,}; buffered "
                  f"orders {buf[0]:,} payments {buf[1]:,}; evicted {ev[0]:,} / {ev[1]:,}",
                  flush=True)
        query.stop()
        print(f"\n{counts['matched']:,} order-payment pairs, {counts['unpaid']:,} orders never "
              f"paid within {PAY_WITHIN} (emitted once each, when the watermark passed them)")
        print("buffers read back with silt_spark.read_state (unpaid orders still waiting):")
        orders = silt_spark.read_state(spark, state, state_name="left")
        orders.where("NOT matched").orderBy("event_time").show(5)
    finally:
        if query is not None:
            query.stop()
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
