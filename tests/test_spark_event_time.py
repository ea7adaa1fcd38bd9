"""Event time as Spark defines it: silt's event-time operators against Spark's own operators.

The same input files go through Spark's operator (``withWatermark`` plus ``groupBy(window)`` in
append mode, ``transformWithStateInPandas`` in event time) and through silt at 1, 2, 7 and 16
shards, with keys and shards that go quiet, a task that fails after its shard committed, a
restart mid-stream and a rescale between shard counts; the final results must be equal.

Spark runs a no-data micro-batch after each batch that moves the watermark (it closes windows
and fires timers there); silt's tick source gives a silt query the same batch, so the outputs
must be equal micro-batch by micro-batch, with the same batch ids. The first tests drain every
batch before the next file arrives; the backlog tests at the end write many files first and read
them back to back with ``availableNow`` runs (no no-data batch between them, where Spark judges
late rows against the previous batch's watermark).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import silt_spark
from pyspark import cloudpickle
from pyspark.sql import functions as F
from sparkconf import lockstep_polling, session_conf
from test_spark_operator import fail_after_commit
from test_spark_window import AGGS, OUT_COLUMNS, norm
from test_spark_window import Run as WindowRun

cloudpickle.register_pickle_by_value(sys.modules[__name__])

USERS = [f"u{i}" for i in range(12)]
#: Users with rows in the first two batches only: their windows and timers must still close.
QUIET = USERS[8:]
BASE_MS = 100_000  # event times stay well after the epoch (Spark's watermark starts at 0)


Run = WindowRun


def event_rows(seed: int, n_batches: int) -> list[list[tuple[str, int, int]]]:
    """``(user, amount, event ms)`` per batch: batch ``b`` is around ``BASE + 10 s * b``, with
    rows exactly at the watermark of the batches before (late), just after it, and far back."""
    rng = random.Random(seed)
    out = []
    top = None
    for b in range(n_batches):
        users = USERS if b < 2 else USERS[:8]
        base = BASE_MS + 10_000 * b
        rows = [(rng.choice(users), rng.randrange(-20, 50), base - 7000 + 500 * rng.randrange(20))
                for _ in range(20)]
        if top is not None:
            wm = top - 3000
            rows += [(rng.choice(users), 100 + i, t)
                     for i, t in enumerate((wm, wm + 1, wm - 15_000, wm - 1))]
        rng.shuffle(rows)
        top = max([r[2] for r in rows] + ([top] if top is not None else []))
        out.append(rows)
    return out


@dataclass
class Variant:
    """One query of a comparison: ``build(run, n)`` makes its output for the ``n``-th (re)start;
    it restarts before the batch indexes in ``restarts``; ``fail``: ``(batch, shard)`` whose
    first attempt fails after the commit. ``batches``: its output per micro-batch id."""

    build: Callable[[Run, int], Any]
    restarts: tuple[int, ...] = ()
    fail: tuple[int, int] | None = None
    output: pd.DataFrame | None = None
    batches: dict[int, pd.DataFrame] | None = None
    query_id: str = ""
    marker_dir: str = ""


def run_all(spark, tmp_path, batches, variants: dict[str, Variant]) -> None:
    """Drive every variant's query over ``batches`` at once, in lockstep: each batch's file
    goes to every source, then each query is drained (they run concurrently, so the module's
    many small queries take about the time of the slowest). Fills ``output`` and ``query_id``."""
    runs = {name: Run(spark, tmp_path, name) for name in variants}
    starts = dict.fromkeys(variants, 0)
    for name, v in variants.items():
        marker = tmp_path / f"{name}-failed"
        marker.mkdir()
        v.marker_dir = str(marker)

    def start(name):
        v = variants[name]
        out = v.build(runs[name], starts[name])
        if v.fail is not None:
            out = fail_after_commit(out, v.fail[0], v.marker_dir, v.fail[1])
        runs[name].query = start_query(lambda: (runs[name].start(out), runs[name].query)[1])
        v.query_id = str(runs[name].query.id)

    with lockstep_polling(spark):
        try:
            for i, rows in enumerate(batches):
                for name, v in variants.items():
                    if i in v.restarts:
                        runs[name].stop()
                        starts[name] += 1
                        start(name)
                    runs[name].write(rows)
                    if i == 0:  # the first file waits when a query starts (else silt's tick
                        start(name)  # source's first offset would make an empty first batch)
                for name in variants:
                    runs[name].drain()
        finally:
            for run in runs.values():
                run.stop()
    for name, v in variants.items():
        v.batches = runs[name].outputs
        frames = [df for _, df in sorted(runs[name].outputs.items()) if len(df)]
        v.output = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        want = [f"failed-{v.fail[0]}-{v.fail[1]}"] if v.fail else []
        assert os.listdir(v.marker_dir) == want, f"{name}: the injected failure"


def check_watermark_requests(v: Variant, batch_ids: set[int]) -> None:
    """The watermark costs each worker process one LIST per batch (shared by the tasks it
    runs), each task at most two PUTs (its marker; its run's marker in a run's first batch)
    and, in shard 0 only, one more PUT and at most one DELETE (pruning), whatever the shard
    count; the query ran the micro-batches ``batch_ids``."""
    records = silt_spark.metrics(v.query_id)
    assert {r["batch_id"] for r in records} == batch_ids
    lists: dict[tuple[int, int], int] = {}
    for r in records:
        wm = r["requests_by_purpose"].get("watermark", {})
        key = (r["batch_id"], r["pid"])
        lists[key] = lists.get(key, 0) + wm.get("LIST", {"count": 0})["count"]
        assert wm.get("PUT", {"count": 0})["count"] <= (3 if r["shard"] == 0 else 2), r
        assert wm.get("DELETE", {"count": 0})["count"] <= (1 if r["shard"] == 0 else 0), r
    # 0: the process had listed before (another operator step of the batch, e.g. dedup's)
    assert set(lists.values()) <= {0, 1}, lists


# --- windows ---------------------------------------------------------------------------------
def spark_windows(window: str, slide: str | None, delay: str) -> Variant:
    def build(run, _):
        w = F.window("ts", window, slide) if slide else F.window("ts", window)
        return (
            run.stream().withWatermark("ts", delay).groupBy("user", w.alias("w"))
            .agg(F.count("*").alias("count"), F.sum("amount").alias("sum(amount)"),
                 F.min("amount").alias("min(amount)"), F.max("amount").alias("max(amount)"),
                 F.avg("amount").alias("avg(amount)"))
            .select("user", F.col("w.start").alias("window_start"),
                    F.col("w.end").alias("window_end"), *AGGS)
        )

    return Variant(build)


def silt_windows(tmp_path, name, layouts, window, slide, delay, fail=None) -> Variant:
    """``layouts``: ``[(num_shards, first batch index), ...]``."""
    state = (tmp_path / f"{name}-state").as_uri()

    def build(run, n):
        return silt_spark.window_aggregate(
            run.stream(), ["user"], "ts", window, AGGS, state, layouts[n][0],
            slide_duration=slide, watermark_delay=delay,
        )

    return Variant(build, tuple(i for _, i in layouts[1:]), fail=fail)


def assert_same_windows(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert list(got.columns) == OUT_COLUMNS, what
    assert not got.duplicated(["user", "window_start"]).any(), f"{what}: a window emitted twice"
    pd.testing.assert_frame_equal(norm(got), norm(want), check_dtype=False, obj=what)


def test_tumbling_windows_equal_spark_at_1_2_7_16_shards(spark, tmp_path):
    batches = event_rows(1, 4)
    kw = dict(window="10 seconds", slide=None, delay="3 seconds")
    variants = {
        "spark": spark_windows("10 seconds", None, "3 seconds"),
        # restarts before batch 2 with another shard count (a rescale); in the second, a task
        # fails after its commit in batch 1
        "s1to16": silt_windows(tmp_path, "s1to16", [(1, 0), (16, 2)], **kw),
        "s7to2": silt_windows(tmp_path, "s7to2", [(7, 0), (2, 2)], fail=(1, 3), **kw),
    }
    run_all(spark, tmp_path, batches, variants)
    spark_run = variants.pop("spark")
    want = spark_run.output
    assert set(QUIET) <= set(want["user"]) and len(want) > 20
    assert len(spark_run.batches) > len(batches)  # no-data batches
    for name, v in variants.items():
        assert_same_windows(v.output, want, name)
        assert_same_batches(v.batches, spark_run.batches, norm, name)
        check_watermark_requests(v, set(spark_run.batches))


def test_sliding_windows_equal_spark_across_a_rescale(spark, tmp_path):
    batches = event_rows(2, 4)
    variants = {
        "spark": spark_windows("10 seconds", "5 seconds", "3 seconds"),
        "s2to16": silt_windows(tmp_path, "s2to16", [(2, 0), (16, 2)],
                               "10 seconds", "5 seconds", "3 seconds"),
    }
    run_all(spark, tmp_path, batches, variants)
    want = variants["spark"].output
    assert set(QUIET) <= set(want["user"])
    assert_same_windows(variants["s2to16"].output, want, "2 -> 16 shards")
    assert_same_batches(variants["s2to16"].batches, variants["spark"].batches, norm, "sliding")


# --- event-time timers -----------------------------------------------------------------------
try:
    from pyspark.sql.streaming import StatefulProcessor as SparkProcessor
except ImportError:  # pragma: no cover - pyspark < 4
    SparkProcessor = object

TIMER_OUT = "user string, what string, ms long"


def _ms(value) -> int:
    return int(pd.Timestamp(value).timestamp() * 1000)


class Idle(SparkProcessor):
    """One processor for PySpark's ``transformWithStateInPandas`` and for silt: counts a key's
    rows and sets an event-time timer 2 s after each; a timer reports the count so far."""

    def init(self, handle):
        self.handle = handle
        self.rows = handle.getValueState("rows", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = self.rows.get()[0] if self.rows.exists() else 0
        for df in rows:
            n += len(df)
            for t in df["ts"]:
                self.handle.registerTimer(_ms(t) + 2000)
        self.rows.update((n,))
        yield pd.DataFrame({"user": [key[0]], "what": [f"in:{n}"],
                            "ms": [timerValues.getCurrentWatermarkInMs()]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        n = self.rows.get()[0] if self.rows.exists() else 0
        yield pd.DataFrame({"user": [key[0]], "what": [f"fired:{n}"],
                            "ms": [expiredTimerInfo.getExpiryTimeInMs()]})


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["user", "what", "ms"]).reset_index(drop=True)


def test_event_time_timers_equal_spark_transform_with_state(spark, tmp_path):
    batches = event_rows(3, 4)

    def silt_timers(name, layouts):
        state = (tmp_path / f"{name}-state").as_uri()
        return lambda run, n: silt_spark.transform_with_state(
            run.stream(), Idle(), ["user"], TIMER_OUT, state, layouts[n][0],
            time_mode="EventTime", event_time_column="ts", watermark_delay="3 seconds",
        )

    variants = {
        "spark": Variant(lambda run, _: (
            run.stream().withWatermark("ts", "3 seconds").groupBy("user")
            .transformWithStateInPandas(Idle(), TIMER_OUT, "Append", "EventTime")
        )),
        "t1to7": Variant(silt_timers("t1to7", [(1, 0), (7, 2)]), (2,)),
        "t16to2": Variant(silt_timers("t16to2", [(16, 0), (2, 2)]), (2,), fail=(1, 5)),
    }
    provider = "spark.sql.streaming.stateStore.providerClass"
    old = spark.conf.get(provider, None)
    spark.conf.set(provider, "org.apache.spark.sql.execution.streaming.state."
                             "RocksDBStateStoreProvider")
    try:
        run_all(spark, tmp_path, batches, variants)
    finally:
        if old is None:
            spark.conf.unset(provider)
        else:
            spark.conf.set(provider, old)
    spark_run = variants.pop("spark")
    want = spark_run.output
    fired = want[want["what"].str.startswith("fired")]
    assert set(QUIET) <= set(fired["user"]) and len(fired) > 15
    for name, v in variants.items():
        pd.testing.assert_frame_equal(_sorted(v.output), _sorted(want), check_dtype=False,
                                      obj=name)
        assert_same_batches(v.batches, spark_run.batches, _sorted, name)


# --- deduplication within the watermark ------------------------------------------------------
def dedup_rows(seed: int, n_batches: int) -> list[list[tuple[str, int, int]]]:
    """``(id, amount, event ms)``: ids from a small pool recur within a batch (same event time
    and amount: which copy is first does not matter) and across batches, before and after the
    watermark forgets them; some rows are late (at or before the watermark)."""
    rng = random.Random(seed)
    out = []
    top = None
    for b in range(n_batches):
        base = BASE_MS + 10_000 * b
        rows = []
        for k in rng.sample(range(30), 14):
            t = base - 8000 + 500 * rng.randrange(23)
            rows += [(f"e{k}", rng.randrange(1000), t)] * rng.randrange(1, 4)
        if top is not None:
            wm = top - 5000
            rows += [(f"e{rng.randrange(30)}", 7, t) for t in (wm, wm - 1, wm - 9000)]
        rng.shuffle(rows)
        top = max([r[2] for r in rows] + ([top] if top is not None else []))
        out.append(rows)
    return out


def test_event_time_dedup_equals_spark_drop_duplicates_within_watermark(spark, tmp_path):
    batches = dedup_rows(4, 4)

    def silt_dedup(name, layouts):
        state = (tmp_path / f"{name}-state").as_uri()
        return lambda run, n: silt_spark.deduplicate(
            run.stream(), ["user"], state, layouts[n][0], event_time_column="ts",
            watermark_delay="5 seconds",
        )

    variants = {
        "spark": Variant(lambda run, _: run.stream().withWatermark("ts", "5 seconds")
                         .dropDuplicatesWithinWatermark(["user"])),
        "d1to16": Variant(silt_dedup("d1to16", [(1, 0), (16, 2)]), (2,)),
        "d7to2": Variant(silt_dedup("d7to2", [(7, 0), (2, 2)]), (2,), fail=(1, 4)),
    }
    run_all(spark, tmp_path, batches, variants)
    spark_run = variants.pop("spark")
    want = spark_run.output
    n_rows = sum(len(b) for b in batches)
    # Keys are forgotten and emitted again, and duplicates and late rows are dropped.
    assert want["user"].duplicated().any() and 15 < len(want) < n_rows / 2

    def key(df):
        return df.sort_values(["user", "ts"]).reset_index(drop=True)

    for name, v in variants.items():
        pd.testing.assert_frame_equal(key(v.output), key(want), check_dtype=False, obj=name)
        assert_same_batches(v.batches, spark_run.batches, key, name)


# --- back-to-back batches: a backlog read by availableNow runs -------------------------------
def start_query(start: Callable[[], Any]) -> Any:
    """``start()``'s streaming query once its sources are initialized, one query at a time.

    Spark gives the driver-side process of a Python data source (silt's tick source) a fixed
    10 s to connect back when the query starts; on a busy 2-core host that can run out, and the
    query fails before it read anything. Such a start is retried; any other failure raises."""
    for attempt in range(4):
        query = start()
        while query.isActive and query.status["message"].startswith("Initializing"):
            time.sleep(0.2)
        error = query.exception() if not query.isActive else None
        if error is None:
            return query
        if "failed to connect back" not in str(error) or attempt == 3:
            raise error
    raise AssertionError("unreachable")


def run_backlog(spark, tmp_path, rounds: list[list[list[tuple]]], builds: dict[str, Callable],
                run_class: type = Run, trigger: dict[str, Any] | None = None,
                ) -> dict[str, dict[int, pd.DataFrame]]:
    """Each query of ``builds`` (name -> ``build(run)``) over a backlog, in rounds: the files
    of a round are all written first, then one ``availableNow`` run reads them back to back
    (one file per micro-batch, so no no-data batch comes between them) and ends; the next round
    restarts the query from its checkpoint. Returns each query's output per micro-batch id
    (every batch included: ``foreachBatch`` also sees Spark's no-data batches and silt's
    ticks). ``trigger``: another trigger that ends, e.g. ``{"once": True}``."""
    runs = {name: run_class(spark, tmp_path, name) for name in builds}
    for rows_of_round in rounds:
        for run in runs.values():
            for rows in rows_of_round:  # (left, right) for a JoinRun
                run.write(*rows) if isinstance(rows, tuple) else run.write(rows)
            # Spark's file source reads files in modification-time order (ties in listing
            # order): one second apart, every query reads them in the order written.
            for i, path in enumerate(sorted(run.src.glob("part-*"))):
                os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
        for name, run in runs.items():
            outputs = run.outputs

            def sink(df, batch_id, outputs=outputs):
                outputs[batch_id] = df.toPandas()

            run.query = start_query(lambda name=name, run=run, sink=sink: (
                builds[name](run).writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(run.checkpoint))
                .trigger(**(trigger or {"availableNow": True})).start()))
        for run in runs.values():
            run.query.awaitTermination(300)
            assert not run.query.isActive
            run.query = None
    return {name: run.outputs for name, run in runs.items()}


def assert_same_batches(got: dict[int, pd.DataFrame], want: dict[int, pd.DataFrame],
                        order: Callable[[pd.DataFrame], pd.DataFrame], what: str) -> None:
    """The same micro-batches (Spark's count, no-data batches included) with the same rows."""
    assert sorted(got) == sorted(want), f"{what}: micro-batches {sorted(got)} != {sorted(want)}"
    for b in sorted(want):
        if len(want[b]) or len(got[b]):
            pd.testing.assert_frame_equal(order(got[b]), order(want[b]), check_dtype=False,
                                          obj=f"{what}, micro-batch {b}")


def test_windows_equal_spark_batch_by_batch_over_a_backlog(spark, tmp_path):
    """Back-to-back batches (a backlog read by availableNow): rows between the watermark of
    the previous batch and this batch's are not late (Spark judges lateness against the
    previous batch's watermark) and their windows close in the same batch; each run ends with
    Spark's no-data batch (silt's tick), which emits the windows the last file closed."""
    batches = event_rows(5, 7)

    def spark_q(run):
        return spark_windows("10 seconds", None, "3 seconds").build(run, 0)

    def silt_q(name, n, slide=None):
        state = (tmp_path / f"{name}-state").as_uri()
        return lambda run: silt_spark.window_aggregate(
            run.stream(), ["user"], "ts", "10 seconds", AGGS, state, n, slide_duration=slide,
            watermark_delay="3 seconds")

    out = run_backlog(spark, tmp_path, [batches[:4], batches[4:]], {
        "spark": spark_q, "s1": silt_q("s1", 1), "s7": silt_q("s7", 7),
        "spark_slide": lambda run: spark_windows("10 seconds", "5 seconds", "3 seconds")
        .build(run, 0),
        "s3_slide": silt_q("s3_slide", 3, "5 seconds"),
    })
    want = out["spark"]
    assert len(want) == len(batches) + 2  # one no-data batch after each run
    assert sum(len(df) for df in want.values()) > 30 and len(want[max(want)]) > 0
    for name in ("s1", "s7"):
        assert_same_batches(out[name], want, norm, name)
    assert_same_batches(out["s3_slide"], out["spark_slide"], norm, "sliding")


def test_windows_equal_spark_with_trigger_once(spark, tmp_path):
    """Trigger.Once runs, each reading a round of files in one micro-batch, one of them with no
    new file: the batches Spark runs (a Once run with no new data still runs the batch that
    the previous run's watermark made due) and their rows, silt at 1 and 4 shards."""
    batches = event_rows(11, 6)
    state = {n: (tmp_path / f"once{n}-state").as_uri() for n in (1, 4)}

    def silt_q(n):
        return lambda run: silt_spark.window_aggregate(
            run.stream(), ["user"], "ts", "10 seconds", AGGS, state[n], n,
            watermark_delay="3 seconds")

    out = run_backlog(spark, tmp_path, [batches[:2], batches[2:5], [], batches[5:], []], {
        "spark": lambda run: spark_windows("10 seconds", None, "3 seconds").build(run, 0),
        "once1": silt_q(1), "once4": silt_q(4),
    }, trigger={"once": True})
    want = out["spark"]
    assert sum(len(df) for df in want.values()) > 20
    for name in ("once1", "once4"):
        assert_same_batches(out[name], want, norm, name)


def rocksdb_state_store(spark):
    """Spark's transformWithState needs the RocksDB state store provider (a context manager)."""
    return session_conf(spark, "spark.sql.streaming.stateStore.providerClass",
                        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")


def test_dedup_and_timers_equal_spark_batch_by_batch_over_a_backlog(spark, tmp_path):
    """Back-to-back batches: dropDuplicatesWithinWatermark drops rows late against the previous
    batch's watermark, meets a batch's rows with the keys as the previous batch left them and
    forgets keys after them; transformWithState handles a batch's rows, then fires the timers
    this batch's watermark passed. Each availableNow run ends with Spark's no-data batch."""
    rounds = [dedup_rows(6, 4), dedup_rows(7, 3)]

    def silt_dedup(name, n):
        state = (tmp_path / f"{name}-state").as_uri()
        return lambda run: silt_spark.deduplicate(
            run.stream(), ["user"], state, n, event_time_column="ts", watermark_delay="5 seconds")

    def silt_timers(name, n):
        state = (tmp_path / f"{name}-state").as_uri()
        return lambda run: silt_spark.transform_with_state(
            run.stream(), Idle(), ["user"], TIMER_OUT, state, n, time_mode="EventTime",
            event_time_column="ts", watermark_delay="3 seconds")

    # the second round's event times continue after the first's
    rounds[1] = [[(u, a, t + 40_000) for u, a, t in rows] for rows in rounds[1]]
    with rocksdb_state_store(spark):
        out = run_backlog(spark, tmp_path, rounds, {
            "spark_dedup": lambda run: run.stream().withWatermark("ts", "5 seconds")
            .dropDuplicatesWithinWatermark(["user"]),
            "d1": silt_dedup("d1", 1), "d5": silt_dedup("d5", 5),
            "spark_timers": lambda run: run.stream().withWatermark("ts", "3 seconds")
            .groupBy("user").transformWithStateInPandas(Idle(), TIMER_OUT, "Append", "EventTime"),
            "t3": silt_timers("t3", 3),
        })

    def by_key(df):
        return df.sort_values(list(df.columns)).reset_index(drop=True)

    want = out["spark_dedup"]
    n_rows = sum(len(r) for rows in rounds for r in rows)
    emitted = pd.concat(want.values())
    assert emitted["user"].duplicated().any() and 20 < len(emitted) < n_rows / 2
    assert len(want) == 7 + 2  # a no-data batch after each run
    for name in ("d1", "d5"):
        assert_same_batches(out[name], want, by_key, name)
    want = out["spark_timers"]
    fired = pd.concat(want.values())
    assert fired["what"].str.startswith("fired").sum() > 15
    assert len(want[max(want)]) and want[max(want)]["what"].str.startswith("fired").all()
    assert_same_batches(out["t3"], want, by_key, "timers")
