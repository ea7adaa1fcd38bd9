"""Sessionization three ways, measured in the same run (not a test).

    python bench/session_bench.py                    # 200k rows/batch, K = 100k and 2M users
    python bench/session_bench.py --quick            # small, for a smoke run

Event-time gap sessions (a user's row within ``GAP`` ms after the session's last row extends
it, a later one closes it, and so does the watermark passing ``last + GAP``: one event-time
timer per open session), the logic of docs/spark.md's sessionization example, run on the same
generated input (``spark_inputs.make_window_input``: each batch covers the next 60 s of event
time, 1% of the rows 90 s late) three ways:

* ``silt batch processor``: the docs' :class:`Sessions` through ``silt_spark.transform_batches``
  (once per shard and micro-batch, over columns);
* ``silt StatefulProcessor``: the same logic one user at a time (:class:`SessionsLogic`) through
  ``silt_spark.transform_with_state`` (pandas rows);
* ``transformWithStateInPandas``: the very same per-key class through Spark's own operator on
  its RocksDB state store (changelog checkpointing), ``withWatermark`` with the same delay;
* with ``--floor`` also ``silt no-op batch processor``: the batch processor's query with a
  processor that declares the same state and does nothing else (:class:`Nothing`), the query's
  cost without the sessions' logic, state writes or timers.

Each runs ``--batches`` micro-batches (the first, which starts the Python workers, is not
counted in rows/s), then a cold restart on one more batch (``spark_bench.run_query``). The output
goes to the ``noop`` sink: the tests compare the answers (tests/test_spark_batch_time.py, the
batch processor against the per-key one, which is compared with Spark's operator for timers and
state in the same file's neighbours); here only speed is measured. ``--repeat R`` runs every case
R times; the table gives the median and min-max of rows/s and of the ratios, per run, and the
machine's load; the results go to ``bench/results/session_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

# spark_bench puts this checkout's packages first on sys.path (not an installed silt).
from spark_bench import compile_checkout, run_query

# isort: split
from spark_inputs import make_window_input
from spark_session import session_factory

# isort: split
import silt_spark
from run_record import RESULTS, machine_load, write_results

GAP = 5_000
DELAY = "3 seconds"
OUT = "key long, start long, end long, n long"


def _ms(t: Any) -> int:
    return int(pd.Timestamp(t).value // 1_000_000)


class SessionsLogic:
    """Gap sessions one user at a time, written for PySpark's ``StatefulProcessor`` API (the
    same class body runs on silt's per-key processor and on Spark's; see :func:`per_key`)."""

    def init(self, handle):
        self.handle = handle
        self.session = handle.getValueState("session", "start long, last long, n long")

    def handleInputRows(self, key, rows, timerValues):
        ts = sorted(_ms(t) for df in rows for t in df["ts"])
        start, last, n = self.session.get() if self.session.exists() else (None, None, 0)
        closed = []
        for t in ts:
            if last is not None and t > last + GAP:
                closed.append((key[0], start, last, n))
                start, last, n = None, None, 0
            start = t if start is None else min(start, t)
            last = t if last is None else max(last, t)
            n += 1
        for old in list(self.handle.listTimers()):
            self.handle.deleteTimer(old)
        self.handle.registerTimer(last + GAP)
        self.session.update((start, last, n))
        if closed:
            yield pd.DataFrame(closed, columns=["key", "start", "end", "n"])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        start, last, n = self.session.get()
        self.session.clear()
        yield pd.DataFrame({"key": [key[0]], "start": [start], "end": [last], "n": [n]})


def per_key(spark_api: bool) -> Any:
    """A :class:`SessionsLogic` processor on Spark's ``StatefulProcessor`` or on silt's."""
    if spark_api:
        from pyspark.sql.streaming import StatefulProcessor as Base
    else:
        Base = silt_spark.StatefulProcessor
    return type("SessionsPerKey", (SessionsLogic, Base), {})()


class Sessions(silt_spark.BatchProcessor):
    """The same logic for a whole micro-batch at once (docs/spark.md's example, keyed by
    ``key``)."""

    def init(self, handle):
        handle.getValueState("session", "start long, last long, n long")

    def process(self, batch, state, timers):
        session = state.value("session")
        users = batch.group_by("key").aggregate([])
        old = session.get(users)
        held = pc.is_valid(old["n"])
        ms = pc.divide(batch["ts"].cast(pa.timestamp("us")).cast(pa.int64()), 1000)
        rows = pa.concat_tables([
            pa.table({"key": batch["key"], "start": ms, "last": ms,
                      "n": pa.array(np.ones(batch.num_rows, np.int64))}),
            pa.table({"key": users["key"], "start": old["start"], "last": old["last"],
                      "n": old["n"]}).filter(held),
        ]).sort_by([("key", "ascending"), ("last", "ascending")])
        u, last = rows["key"].to_numpy(), rows["last"].to_numpy()
        new = np.ones(len(u), bool)
        new[1:] = (u[1:] != u[:-1]) | (last[1:] > last[:-1] + GAP)
        rows = rows.append_column("sid", pa.array(np.cumsum(new)))
        per = rows.group_by(["key", "sid"]).aggregate(
            [("start", "min"), ("last", "max"), ("n", "sum")]).sort_by("sid")
        pu = per["key"].to_numpy()
        is_open = pa.array(np.append(pu[1:] != pu[:-1], True))
        now, done = per.filter(is_open), per.filter(pc.invert(is_open))
        timers.delete(users.filter(held), pc.add(old["last"].filter(held), GAP))
        timers.register(now.select(["key"]), pc.add(now["last_max"], GAP))
        session.put(now, pa.table({"start": now["start_min"], "last": now["last_max"],
                                   "n": now["n_sum"]}))
        return pa.table({"key": done["key"], "start": done["start_min"],
                         "end": done["last_max"], "n": done["n_sum"]})

    def expired(self, keys, times, state):
        session = state.value("session")
        s = session.get(keys)
        session.delete(keys)
        return pa.table({"key": keys["key"], "start": s["start"], "end": s["last"],
                         "n": s["n"]})


class Nothing(silt_spark.BatchProcessor):
    """The batch processor's query without its work: the same state declared (and so read
    ahead for the batch's keys), nothing written, no timer, no output."""

    def init(self, handle):
        handle.getValueState("session", "start long, last long, n long")

    def process(self, batch, state, timers):
        return None


def cases(shards: int, state: str, floor: bool = False) -> dict[str, Any]:
    """Name -> a function building the case's query from the input stream (``floor``: with
    the no-op batch processor)."""
    silt_opts = {"time_mode": "EventTime", "event_time_column": "ts",
                 "watermark_delay": DELAY}
    extra = {"silt no-op batch processor": lambda df: silt_spark.transform_batches(
        df, Nothing(), ["key"], OUT, state_url=state + "-noop", num_shards=shards,
        **silt_opts)} if floor else {}
    return {**extra,
        "silt batch processor": lambda df: silt_spark.transform_batches(
            df, Sessions(), ["key"], OUT, state_url=state + "-batch", num_shards=shards,
            **silt_opts),
        "silt StatefulProcessor": lambda df: silt_spark.transform_with_state(
            df, per_key(False), ["key"], OUT, state_url=state + "-perkey", num_shards=shards,
            **silt_opts),
        "transformWithStateInPandas": lambda df: df.withWatermark("ts", DELAY)
        .groupBy("key").transformWithStateInPandas(per_key(True), OUT, "Append", "EventTime"),
    }


def rows_per_s(batches: list[dict[str, Any]]) -> float:
    """Input rows per second over the data batches after the first (which starts the Python
    workers). Spark's no-data batches, where its timers fire, are not among ``batches`` (they
    have no input rows); silt's are its tick batches, whose one input row is the tick: they are
    left out alike, so each side's rate counts its data batches only."""
    steady = [b for b in batches[1:] if b["rows"] > 1]
    ms = sum(b["ms"] for b in steady)
    return sum(b["rows"] for b in steady) / (ms / 1000) if ms else 0.0


def summary(values: list[float]) -> str:
    return (f"{statistics.median(values):,.2f} [{min(values):,.2f}-{max(values):,.2f}]"
            if values else "-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--keys", type=int, nargs="+", default=[100_000, 2_000_000])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names")
    ap.add_argument("--floor", action="store_true",
                    help="also the no-op batch processor (the query's floor)")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--json", default=str(RESULTS / "session_bench.json"))
    args = ap.parse_args()
    compile_checkout()
    if args.quick:
        args.rows, args.batches, args.keys = 20_000, 3, [10_000]
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    work = root = Path(tempfile.mkdtemp(prefix="silt-session-bench-"))
    make = session_factory(args.shards, args.driver_memory, 100, {}, lambda: work)
    started, load_at_start = time.time(), machine_load()
    session = {"make": make, "spark": make()}
    results: list[dict[str, Any]] = []
    try:
        for rep, keys in [(r, k) for r in range(args.repeat) for k in args.keys]:
            work = root / f"run-{rep}"
            work.mkdir(exist_ok=True)
            src = work / f"sessions-{keys}"
            make_window_input(src, args.batches, args.rows, keys, seed=keys + 5)
            for name, build in cases(args.shards, (work / f"state-{keys}").as_uri(),
                                     args.floor).items():
                if wanted and not any(c in name for c in wanted):
                    continue
                r = run_query(session, build, src, work / f"chk-{name}-{keys}", args.batches,
                              schema="key long, amount long, ts timestamp", mode="append")
                rate = rows_per_s(r["batches"])
                print(f"{name:28s} K={keys:>9,d} rep {rep}: {rate:>10,.0f} rows/s, "
                      f"cold restart {r['recovery_s']:.1f} s", flush=True)
                results.append({"case": name, "keys": keys, "rep": rep, "rows": args.rows,
                                "rows_per_s": rate, "recovery_s": r["recovery_s"],
                                "batches": r["batches"]})
    finally:
        session["spark"].stop()
        shutil.rmtree(root, ignore_errors=True)
    load = {"start": load_at_start, "end": machine_load()}
    print(f"\nload average {load}; median [min-max] of {args.repeat} run(s)")
    print(f"{'case':28s} {'K':>10s} {'rows/s':>28s} {'restart s':>20s}")
    names = list(dict.fromkeys(r["case"] for r in results))
    for keys in args.keys:
        for name in names:
            runs = [r for r in results if r["case"] == name and r["keys"] == keys]
            print(f"{name:28s} {keys:>10,d} {summary([r['rows_per_s'] for r in runs]):>28s} "
                  f"{summary([r['recovery_s'] for r in runs]):>20s}")
        for peer in ("silt StatefulProcessor", "transformWithStateInPandas",
                     "silt no-op batch processor"):
            ratios = [b["rows_per_s"] / p["rows_per_s"]
                      for b in results for p in results
                      if b["case"] == "silt batch processor" and p["case"] == peer
                      and b["keys"] == p["keys"] == keys and b["rep"] == p["rep"]
                      and p["rows_per_s"]]
            if ratios:
                print(f"K={keys:,d}: silt batch processor / {peer}: {summary(ratios)}x rows/s")
    print(json.dumps(results, default=float))
    out = write_results(args.json, {"args": vars(args), "results": results, "load": load,
                                    "started": started, "seconds": time.time() - started})
    print(f"results written to {out}")


if __name__ == "__main__":
    main()
