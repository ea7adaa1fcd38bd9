"""Event time as Spark defines it: silt's event-time operators against Spark's own operators.

The same input files go through Spark's operator (``withWatermark`` plus ``groupBy(window)`` in
append mode, ``transformWithStateInPandas`` in event time) and through silt at 1, 2, 7 and 16
shards, with keys and shards that go quiet, a task that fails after its shard committed, a
restart mid-stream and a rescale between shard counts; the final results must be equal.

Spark runs a no-data micro-batch after each batch that moves the watermark (it closes windows
and fires timers there); a silt query has no Spark state, so silt closes them in its next batch.
Each run therefore ends with one empty input file (``tick``), and every batch is drained before
the next file arrives, so Spark's batches see the watermark of all earlier data, as silt's do.
"""

from __future__ import annotations

import os
import random
import sys

import pandas as pd
import silt_spark
from pyspark import cloudpickle
from pyspark.sql import functions as F
from test_spark_window import AGGS, OUT_COLUMNS, norm
from test_spark_window import Run as WindowRun

cloudpickle.register_pickle_by_value(sys.modules[__name__])

USERS = [f"u{i}" for i in range(12)]
#: Users with rows in the first two batches only: their windows and timers must still close.
QUIET = USERS[8:]
BASE_MS = 100_000  # event times stay well after the epoch (Spark's watermark starts at 0)


class Run(WindowRun):
    def tick(self) -> None:
        """An input file without rows: one more micro-batch, as Spark's no-data batch."""
        self.write([])


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


def fail_once(df, batch_id: int, partition: int, marker_dir: str):
    """``df`` followed by a step that fails the first attempt of one task of micro-batch
    ``batch_id`` after it consumed all its input, so after the silt shard committed."""
    from pyspark import TaskContext

    def fn(batches):
        yield from batches
        ctx = TaskContext.get()
        if (int(ctx.getLocalProperty("streaming.sql.batchId")) == batch_id
                and ctx.partitionId() == partition and ctx.attemptNumber() == 0):
            open(os.path.join(marker_dir, f"failed-{batch_id}-{partition}"), "w").close()
            raise RuntimeError("injected task failure after the shard's commit")

    return df.mapInArrow(fn, df.schema)


def run_stream(spark, tmp_path, name, batches, build, restarts=(), tick=True):
    """Drive one query over ``batches``: ``build(run, n)`` makes the output for the ``n``-th
    (re)start; ``restarts`` are the batch indexes before which the query restarts. Returns the
    concatenated output of every micro-batch."""
    run = Run(spark, tmp_path, name)
    starts = 0
    try:
        run.start(build(run, starts))
        for i, rows in enumerate(batches):
            if i in restarts:
                run.stop()
                starts += 1
                run.start(build(run, starts))
            run.write(rows)
            run.drain()
        if tick:
            run.tick()
            run.drain()
    finally:
        run.stop()
    frames = [df for _, df in sorted(run.outputs.items()) if len(df)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# --- windows ---------------------------------------------------------------------------------
def spark_windows(spark, tmp_path, batches, window: str, slide: str | None, delay: str):
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

    return run_stream(spark, tmp_path, "spark", batches, build, tick=False)


def silt_windows(spark, tmp_path, name, batches, layouts, window, slide, delay, fail=None):
    """``layouts``: ``[(num_shards, first batch index), ...]``; ``fail``: ``(batch, shard)``."""
    state = (tmp_path / f"{name}-state").as_uri()
    marker_dir = tmp_path / f"{name}-failed"
    marker_dir.mkdir()

    def build(run, n):
        out = silt_spark.window_aggregate(
            run.stream(), ["user"], "ts", window, AGGS, state, layouts[n][0],
            slide_duration=slide, watermark_delay=delay,
        )
        return fail_once(out, *fail, str(marker_dir)) if fail else out

    got = run_stream(spark, tmp_path, name, batches, build, [i for _, i in layouts[1:]])
    if fail:
        assert os.listdir(marker_dir) == [f"failed-{fail[0]}-{fail[1]}"]
    return got


def assert_same_windows(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert list(got.columns) == OUT_COLUMNS, what
    assert not got.duplicated(["user", "window_start"]).any(), f"{what}: a window emitted twice"
    pd.testing.assert_frame_equal(norm(got), norm(want), check_dtype=False, obj=what)


def test_tumbling_windows_equal_spark_at_1_2_7_16_shards(spark, tmp_path):
    batches = event_rows(1, 5)
    want = spark_windows(spark, tmp_path, batches, "10 seconds", None, "3 seconds")
    assert set(QUIET) <= set(want["user"]) and len(want) > 30
    args = (batches,)
    kw = dict(window="10 seconds", slide=None, delay="3 seconds")
    for name, layouts, fail in (
        ("s1", [(1, 0)], None),
        ("s16", [(16, 0)], None),
        ("s7to2", [(7, 0), (2, 3)], (2, 3)),  # a task fails in batch 2; restart with 2 shards
    ):
        got = silt_windows(spark, tmp_path, name, *args, layouts, fail=fail, **kw)
        assert_same_windows(got, want, name)


def test_sliding_windows_equal_spark_across_a_rescale(spark, tmp_path):
    batches = event_rows(2, 5)
    want = spark_windows(spark, tmp_path, batches, "10 seconds", "5 seconds", "3 seconds")
    assert set(QUIET) <= set(want["user"])
    got = silt_windows(spark, tmp_path, "s2to16", batches, [(2, 0), (16, 2)],
                       "10 seconds", "5 seconds", "3 seconds")
    assert_same_windows(got, want, "2 -> 16 shards")


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
    batches = event_rows(3, 5)
    provider = "spark.sql.streaming.stateStore.providerClass"
    old = spark.conf.get(provider, None)
    spark.conf.set(provider, "org.apache.spark.sql.execution.streaming.state."
                             "RocksDBStateStoreProvider")
    try:
        want = run_stream(spark, tmp_path, "spark", batches, lambda run, _: (
            run.stream().withWatermark("ts", "3 seconds").groupBy("user")
            .transformWithStateInPandas(Idle(), TIMER_OUT, "Append", "EventTime")
        ), tick=False)
    finally:
        if old is None:
            spark.conf.unset(provider)
        else:
            spark.conf.set(provider, old)
    fired = want[want["what"].str.startswith("fired")]
    assert set(QUIET) <= set(fired["user"]) and len(fired) > 20

    for name, layouts, fail in (("t16", [(16, 0)], None), ("t7to2", [(7, 0), (2, 3)], (2, 1))):
        state = (tmp_path / f"{name}-state").as_uri()
        marker_dir = tmp_path / f"{name}-failed"
        marker_dir.mkdir()

        def build(run, n, state=state, layouts=layouts, fail=fail, marker_dir=marker_dir):
            out = silt_spark.transform_with_state(
                run.stream(), Idle(), ["user"], TIMER_OUT, state, layouts[n][0],
                time_mode="EventTime", event_time_column="ts", watermark_delay="3 seconds",
            )
            return fail_once(out, *fail, str(marker_dir)) if fail else out

        got = run_stream(spark, tmp_path, name, batches, build, [i for _, i in layouts[1:]])
        pd.testing.assert_frame_equal(_sorted(got), _sorted(want), check_dtype=False, obj=name)
        assert os.listdir(marker_dir) == ([f"failed-{fail[0]}-{fail[1]}"] if fail else [])


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
    batches = dedup_rows(4, 5)
    want = run_stream(spark, tmp_path, "spark", batches, lambda run, _: (
        run.stream().withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark(["user"])
    ), tick=False)
    n_rows = sum(len(b) for b in batches)
    # Keys are forgotten and emitted again, and duplicates and late rows are dropped.
    assert want["user"].duplicated().any() and 20 < len(want) < n_rows / 2

    def key(df):
        return df.sort_values(["user", "ts"]).reset_index(drop=True)

    for name, layouts, fail in (
        ("d1", [(1, 0)], None), ("d16", [(16, 0)], None), ("d7to2", [(7, 0), (2, 3)], (1, 4)),
    ):
        state = (tmp_path / f"{name}-state").as_uri()
        marker_dir = tmp_path / f"{name}-failed"
        marker_dir.mkdir()

        def build(run, n, state=state, layouts=layouts, fail=fail, marker_dir=marker_dir):
            out = silt_spark.deduplicate(
                run.stream(), ["user"], state, layouts[n][0], event_time_column="ts",
                watermark_delay="5 seconds",
            )
            return fail_once(out, *fail, str(marker_dir)) if fail else out

        got = run_stream(spark, tmp_path, name, batches, build, [i for _, i in layouts[1:]],
                         tick=False)
        pd.testing.assert_frame_equal(key(got), key(want), check_dtype=False, obj=name)
        assert os.listdir(marker_dir) == ([f"failed-{fail[0]}-{fail[1]}"] if fail else [])
