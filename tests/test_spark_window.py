"""silt_spark.window_aggregate in real streaming queries, compared with a plain-Python model.

The input is a folder of parquet files, one per micro-batch (``maxFilesPerTrigger=1``); each
batch's output is collected by batch id with ``foreachBatch``. The model replays the same rows
with the operator's documented semantics: windows start at multiples of the slide; batch ``b``
runs with the query-wide watermark of the batches before it (the largest event time minus the
delay, at least 0); a (row, window) pair is late when the window ends at or before it;
``append`` emits a window once, in the first batch whose watermark is at or past its end;
``update`` emits every window that received rows in the batch. The shard of each user (for the
late-row counts) comes from Spark's own ``xxhash64``. The model is of a query without silt's
tick source (``spark.silt.tick=false``: closings come with the next batch);
tests/test_spark_event_time.py compares the default, with the tick source, with Spark's own
operator micro-batch by micro-batch.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import silt
import silt_spark
from pyspark.sql import functions as F
from silt_spark.operators import window as _window
from silt_spark.runtime import _layout, _root
from test_spark_operator import Run as OperatorRun
from test_spark_operator import fail_after_commit, shard_versions

SCHEMA = "user string, amount long, ts timestamp"
USERS = [f"u{i}" for i in range(8)]
AGGS = ["count", "sum(amount)", "min(amount)", "max(amount)", "avg(amount)"]
OUT_COLUMNS = ["user", "window_start", "window_end", *AGGS]


class Run(OperatorRun):
    """Parquet files of (user, amount, event time), one per micro-batch."""

    schema = SCHEMA
    source_format = "parquet"

    def write(self, rows: list[tuple[str, int, int]]) -> None:
        """``rows``: (user, amount, event time in ms)."""
        table = pa.table({
            "user": pa.array([r[0] for r in rows], pa.string()),
            "amount": pa.array([r[1] for r in rows], pa.int64()),
            "ts": pa.array([r[2] * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
        })
        tmp = self.src / f".tmp-{self.files:05d}"
        pq.write_table(table, tmp)
        os.replace(tmp, self.src / f"part-{self.files:05d}.parquet")
        self.files += 1


@pytest.fixture(scope="module")
def shard_of_user(spark):
    """user -> shard for 2 shards and 256 key groups, from Spark's own xxhash64."""
    rows = (spark.createDataFrame([(u,) for u in USERS], "user string")
            .select("user", F.pmod(F.xxhash64("user"), F.lit(256)).alias("kg")).collect())
    out = {r.user: _layout.shard_of(r.kg, 2, 256) for r in rows}
    assert len(set(out.values())) == 2
    return out


# --- the model -----------------------------------------------------------------------------------
def windows_of(t: int, window: int, slide: int) -> list[int]:
    """Starts of the windows containing event time ``t`` (ms), latest first (Spark's rule)."""
    last = (t // slide) * slide
    return [last - i * slide for i in range(math.ceil(window / slide))
            if t < last - i * slide + window]


def _row(user: str, start: int, window: int, amounts: list[int]) -> dict:
    return {
        "user": user, "window_start": pd.Timestamp(start, unit="ms"),
        "window_end": pd.Timestamp(start + window, unit="ms"), "count": len(amounts),
        "sum(amount)": sum(amounts), "min(amount)": min(amounts), "max(amount)": max(amounts),
        "avg(amount)": sum(amounts) / len(amounts),
    }


def model(batches, shard_of, window, slide, delay, output):
    """Per batch the expected output frame, plus the late rows per shard and the windows left
    open. Batch ``b`` runs with the query-wide watermark of the batches before it (Spark's
    rule: ``max(0, largest event time - delay)``): windows whose end is ``<=`` it are emitted
    (append) and evicted, then the batch's (row, window) pairs are merged, except late ones."""
    state: dict[tuple[str, int], list[int]] = {}
    top: int | None = None
    late_rows: dict[int, int] = defaultdict(int)
    outs = []
    for rows in batches:
        wm = 0 if top is None else max(0, top - delay)
        emitted = []
        for (u, s) in sorted(state):
            if s + window <= wm:
                amounts = state.pop((u, s))
                if output == "append":
                    emitted.append(_row(u, s, window, amounts))
        touched: set[tuple[str, int]] = set()
        for user, amount, t in rows:
            starts = windows_of(t, window, slide)
            if starts[0] + window <= wm:
                late_rows[shard_of[user]] += 1
            for s in starts:
                if s + window <= wm:
                    continue
                state.setdefault((user, s), []).append(amount)
                touched.add((user, s))
        if rows:
            m = max(r[2] for r in rows)
            top = m if top is None else max(top, m)
        if output == "update":
            emitted += [_row(u, s, window, state[(u, s)]) for (u, s) in sorted(touched)]
        outs.append(pd.DataFrame(emitted, columns=OUT_COLUMNS))
    return outs, dict(late_rows), state


def norm(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for c in ("window_start", "window_end"):
        df[c] = pd.to_datetime(df[c]).dt.tz_localize(None).astype("datetime64[us]")
    return df.sort_values(["user", "window_start"]).reset_index(drop=True)


def assert_batches(got: dict[int, pd.DataFrame], want: list[pd.DataFrame]) -> None:
    for b, w in enumerate(want):
        g = got.get(b, pd.DataFrame(columns=OUT_COLUMNS))
        assert list(g.columns) == OUT_COLUMNS
        pd.testing.assert_frame_equal(norm(g), norm(w), check_dtype=False, obj=f"batch {b}")


def late_rows_in_meta(state_url: str) -> dict[str, int]:
    out = {}
    for name, versions in shard_versions(state_url).items():
        db = silt.open(f"{state_url}/{name}")
        out[name] = int(db.meta.get(_window.META_LATE_ROWS) or 0)
        db.close()
        assert versions
    return out


def stream_rows(seed: int, n_batches: int, per_batch: int = 24) -> list[list[tuple]]:
    """Batch ``b`` has event times in ``[10 s * b - 7 s, 10 s * b + 3 s]`` (whole seconds) and a
    row per user at exactly ``10 s * b + 3 s``, so with a 3 s delay the watermark lands
    exactly on a window end (``10 s * b``), closing that window (end ``<=`` watermark). Batches
    after the first also bring rows whose window ended exactly at the previous watermark (late),
    rows just after it (not late), and rows from far back (late)."""
    import random

    rng = random.Random(seed)
    out = []
    for b in range(n_batches):
        base = 10_000 * b
        rows = [(USERS[rng.randrange(len(USERS))], rng.randrange(-20, 50),
                 base - 7000 + 1000 * rng.randrange(0, 10)) for _ in range(per_batch)]
        rows += [(u, rng.randrange(0, 9), base + 3000) for u in USERS]
        if b:
            for i, t in enumerate((base - 10_001, base - 10_000, base - 25_000)):
                rows.append((USERS[rng.randrange(len(USERS))], 100 + i, t))
        rng.shuffle(rows)
        out.append(rows)
    return out


@pytest.fixture
def no_tick(spark):
    """The query without silt's tick source (``spark.silt.tick=false``): no batch runs after
    the one that moved the watermark, so batch ``b`` closes what the model closes at ``b`` (the
    tick source, on by default, is compared with Spark in tests/test_spark_event_time.py)."""
    spark.conf.set("spark.silt.tick", "false")
    yield
    spark.conf.unset("spark.silt.tick")


# --- tests ---------------------------------------------------------------------------------------
def test_tumbling_append_matches_model_with_late_rows_restart_and_failed_task(
    spark, tmp_path, shard_of_user, no_tick
):
    """Tumbling 10 s windows, 3 s delay, append mode: windows are emitted once, when the
    query's watermark passes their end; late rows are dropped and counted; a restart from the
    checkpoint mid-stream and a task failing after its commit change nothing."""
    state = (tmp_path / "state").as_uri()
    markers = tmp_path / "markers"
    markers.mkdir()
    batches = stream_rows(1, 6)
    run = Run(spark, tmp_path)

    def build():
        return fail_after_commit(silt_spark.window_aggregate(
            run.stream(), ["user"], "ts", "10 seconds", AGGS, state, 2,
            watermark_delay="3 seconds",
        ), 2, str(markers))

    try:
        run.start(build())
        for rows in batches[:3]:
            run.write(rows)
            run.drain()
        run.stop()
        run.start(build())  # watermarks and open windows come back from the manifests
        for rows in batches[3:]:
            run.write(rows)
            run.drain()
    finally:
        run.stop()

    want, late, left = model(batches, shard_of_user, 10_000, 10_000, 3000, "append")
    assert_batches(run.outputs, want)
    assert sum(len(w) for w in want[1:]) > 0 and sum(late.values()) > 0  # the data exercises both
    emitted = pd.concat([run.outputs[b] for b in sorted(run.outputs)])
    assert not emitted.duplicated(["user", "window_start"]).any()  # each window at most once
    assert sorted(late_rows_in_meta(state).values()) == sorted(late.get(s, 0) for s in (0, 1))
    failed = sorted(p.name for p in markers.iterdir())
    assert failed and all(name.startswith("failed-2-") for name in failed)
    # Windows still open are in the state (read_state shows them); closed ones were evicted.
    got = {
        (r.user, int(r.map_key)): json.loads(r.value)
        for r in silt_spark.read_state(spark, state, raw=True).collect()
    }
    assert len(left) > 0
    assert {k: (v["rows"], v["amount"]["sum"]) for k, v in got.items()} == {
        k: (len(a), sum(a)) for k, a in left.items()
    }
    # Typed: each open window with its bounds and its aggregates so far, as emitted on close.
    typed = silt_spark.read_state(spark, state, state_name="window")
    assert [(f.name, f.dataType.simpleString()) for f in typed.schema.fields] == [
        ("user", "string"), ("window_start", "timestamp"), ("window_end", "timestamp"),
        ("count", "bigint"), ("sum(amount)", "bigint"), ("min(amount)", "bigint"),
        ("max(amount)", "bigint"), ("avg(amount)", "double"), ("shard_version", "bigint"),
    ]

    def windows(rows):
        """``{(user, start ms): (length ms, count, sum, min, max, avg)}`` of typed rows."""
        return {(r.user, r.ws): (r.we - r.ws, r["count"], r["sum(amount)"], r["min(amount)"],
                                 r["max(amount)"], r["avg(amount)"]) for r in rows}

    def expected(open_windows):
        return {k: (10_000, len(a), sum(a), min(a), max(a), pytest.approx(sum(a) / len(a)))
                for k, a in open_windows.items()}

    bounds = ("unix_millis(window_start) AS ws", "unix_millis(window_end) AS we")
    assert windows(typed.selectExpr("*", *bounds).collect()) == expected(left)
    # Without state_name the window root's one state reads typed too (raw=True: the JSON).
    default = silt_spark.read_state(spark, state)
    assert default.schema == typed.schema
    assert windows(default.selectExpr("*", *bounds).collect()) == expected(left)
    # At an earlier version (state version == micro-batch id): the windows open after batch 3.
    _, _, left3 = model(batches[:4], shard_of_user, 10_000, 10_000, 3000, "append")
    at3 = silt_spark.read_state(spark, state, version=3, state_name="window")
    assert windows(at3.selectExpr("*", *bounds).collect()) == expected(left3)
    assert left3 != left
    # The typed change feed from 3 to 5: closed windows deleted, new ones inserted, the rest
    # updated where their aggregates moved; old and new values as read_state types them.
    feed = silt_spark.read_changes(spark, state, 3, 5, state_name="window")
    assert [f.name for f in feed.schema.fields] == [
        "user", "change_type", "old_value", "new_value", "shard"]
    assert [(f.name, f.dataType.simpleString()) for f in
            feed.schema["new_value"].dataType.fields] == [
        (f.name, f.dataType.simpleString()) for f in typed.schema.fields[1:-1]]
    changes = {}
    for r in feed.collect():
        side = r.new_value or r.old_value
        ws = int(side.window_start.timestamp() * 1000)
        assert side.window_end.timestamp() * 1000 - ws == 10_000
        changes[(r.user, ws)] = (r.change_type,
                                 None if r.old_value is None else r.old_value["count"],
                                 None if r.new_value is None else r.new_value["count"])
    want_changes = {
        k: ("insert" if k not in left3 else "delete" if k not in left else "update",
            len(left3[k]) if k in left3 else None, len(left[k]) if k in left else None)
        for k in left3.keys() | left.keys() if left3.get(k) != left.get(k)
    }
    assert changes == want_changes
    assert {c[0] for c in changes.values()} >= {"insert", "delete"}  # the data has both


def test_restart_with_more_shards_keeps_open_windows_and_watermarks(
    spark, tmp_path, shard_of_user, no_tick
):
    """Restarting with 3 shards instead of 2 (a rescale): the new shards start from the old
    shards' windows, and the query's watermark carries over (it names no layout)."""
    state = (tmp_path / "state").as_uri()
    batches = stream_rows(3, 5)
    run = Run(spark, tmp_path)

    def build(n):
        return silt_spark.window_aggregate(
            run.stream(), ["user"], "ts", "10 seconds", AGGS, state, n,
            watermark_delay="3 seconds",
        )

    try:
        run.start(build(2))
        for rows in batches[:3]:
            run.write(rows)
            run.drain()
        run.stop()
        run.start(build(3))
        for rows in batches[3:]:
            run.write(rows)
            run.drain()
    finally:
        run.stop()
    want, _, left = model(batches, shard_of_user, 10_000, 10_000, 3000, "append")
    assert sum(len(w) for w in want[3:]) > 0
    assert_batches(run.outputs, want)
    desc = _root.read_descriptor(state)
    assert [x["num_shards"] for x in desc["layouts"]] == [2, 3]
    got = {(r.user, int(r.map_key))
           for r in silt_spark.read_state(spark, state, raw=True).collect()}
    assert got == set(left)


def test_sliding_windows_append_and_update_match_model_and_spark(
    spark, tmp_path, shard_of_user, no_tick
):
    """Sliding 6 s windows every 2 s, in both output modes on one input (two queries); without
    late rows, the append output over the whole stream equals Spark's own batch
    ``groupBy(window(...))`` of the closed windows."""
    import random

    rng = random.Random(5)
    batches = [
        [(u, rng.randrange(1, 40), 5000 * b + rng.randrange(0, 5000))
         for u in USERS for _ in range(3)]
        for b in range(5)
    ]
    append = Run(spark, tmp_path, "append")
    update_outputs: dict[int, pd.DataFrame] = {}

    def sink(df, batch_id):
        update_outputs[batch_id] = df.toPandas()

    stream = append.stream()
    common = dict(slide_duration=2000, watermark_delay=1000)
    update_query = None
    try:
        append.start(silt_spark.window_aggregate(
            stream, "user", "ts", 6000, AGGS, (tmp_path / "s-append").as_uri(), 2, **common,
        ))
        update_query = (
            silt_spark.window_aggregate(
                stream, "user", "ts", 6000, AGGS, (tmp_path / "s-update").as_uri(), 2,
                output="update", **common,
            ).writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "update-chk")).start()
        )
        for rows in batches:
            append.write(rows)
            append.drain()
            update_query.processAllAvailable()
    finally:
        append.stop()
        if update_query is not None:
            update_query.stop()

    want_append, late, _ = model(batches, shard_of_user, 6000, 2000, 1000, "append")
    want_update, _, _ = model(batches, shard_of_user, 6000, 2000, 1000, "update")
    assert not late
    assert_batches(append.outputs, want_append)
    assert_batches(update_outputs, want_update)

    rows = [r for b in batches for r in b]
    df = spark.createDataFrame(
        [(u, a, pd.Timestamp(t, unit="ms", tz="UTC").to_pydatetime()) for u, a, t in rows],
        SCHEMA,
    )
    spark_out = (df.groupBy("user", F.window("ts", "6 seconds", "2 seconds"))
                 .agg(F.count("*").alias("count"), F.sum("amount").alias("sum(amount)"),
                      F.min("amount").alias("min(amount)"), F.max("amount").alias("max(amount)"),
                      F.avg("amount").alias("avg(amount)"))
                 .select("user", F.col("window.start").alias("window_start"),
                         F.col("window.end").alias("window_end"), *AGGS)
                 .toPandas())
    got = norm(pd.concat(append.outputs.values()))
    keys = set(zip(got["user"], got["window_start"]))
    spark_out = norm(spark_out)
    spark_out = spark_out[[k in keys for k in zip(spark_out["user"],
                                                   spark_out["window_start"])]]
    assert len(got) == len(keys) > 10
    pd.testing.assert_frame_equal(got, spark_out.reset_index(drop=True), check_dtype=False)


def test_bad_input_is_refused_with_clear_errors(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    stream = spark.readStream.schema(SCHEMA + ", ms long").parquet(str(src))
    state = (tmp_path / "state").as_uri()

    def build(**kw):
        args = dict(key_columns=["user"], time_column="ts", window_duration="10 seconds",
                    aggs=["count"], state_url=state, num_shards=2)
        args.update(kw)
        return silt_spark.window_aggregate(stream, **args)

    with pytest.raises(TypeError, match="needs a timestamp column"):
        build(time_column="ms")
    with pytest.raises(TypeError, match="needs a timestamp column"):
        build(time_column="user")
    with pytest.raises(ValueError, match="not in the DataFrame"):
        build(time_column="nope")
    with pytest.raises(ValueError, match="must not be longer than window_duration"):
        build(slide_duration="20 seconds")
    with pytest.raises(ValueError, match="window_duration must be positive"):
        build(window_duration=0)
    with pytest.raises(ValueError, match="slide_duration must be positive"):
        build(slide_duration="0 seconds")
    with pytest.raises(ValueError, match=r"window_duration: .*cannot parse"):
        build(window_duration="ten seconds")
    with pytest.raises(ValueError, match="watermark_delay must not be negative"):
        build(watermark_delay=-5)
    with pytest.raises(ValueError, match="output must be one of"):
        build(output="complete")
    with pytest.raises(TypeError, match="integral and floating-point"):
        build(aggs=["sum(user)"])
    spark.conf.set("spark.silt.tick", "maybe")
    try:
        with pytest.raises(ValueError, match=r"spark\.silt\.tick must be 'true' or 'false'"):
            build()
    finally:
        spark.conf.unset("spark.silt.tick")
    # Inside foreachBatch (a batch DataFrame; the micro-batch id is set) the plan takes no
    # tick source: a batch DataFrame cannot be unioned with a streaming one.
    spark.sparkContext.setLocalProperty("streaming.sql.batchId", "0")
    try:
        rows = spark.createDataFrame([("u0", 1, pd.Timestamp(0, unit="ms").to_pydatetime())],
                                     SCHEMA)
        assert not silt_spark.window_aggregate(
            rows, ["user"], "ts", "10 seconds", ["count"], (tmp_path / "fb").as_uri(), 2,
        ).isStreaming
    finally:
        spark.sparkContext.setLocalProperty("streaming.sql.batchId", None)
    build(slide_duration="5 seconds")  # a valid plan: pins the window in the descriptor
    with pytest.raises(silt_spark.errors.LayoutMismatchError, match="window"):
        build(slide_duration="2 seconds")


def test_heartbeat_closes_the_windows_of_an_idle_stream(spark, tmp_path, no_tick):
    """The input's only file moves the watermark past u0's window; with ``heartbeat=True``
    the rate source's batches (which reach no window) close it without more input."""
    import time

    state = (tmp_path / "state").as_uri()
    run = Run(spark, tmp_path)
    run.write([("u0", 5, 1000), ("u1", 7, 25_000)])
    try:
        run.start(silt_spark.window_aggregate(
            run.stream(), "user", "ts", "10 seconds", ["count", "sum(amount)"], state, 2,
            heartbeat=True,
        ))
        deadline = time.monotonic() + 60
        emitted = pd.DataFrame()
        while time.monotonic() < deadline and emitted.empty:
            time.sleep(0.5)
            frames = [df for df in list(run.outputs.values()) if len(df)]
            emitted = pd.concat(frames) if frames else pd.DataFrame()
    finally:
        run.stop()
    assert len(emitted) == 1, "the heartbeat did not close the window"
    row = emitted.iloc[0]
    assert (row["user"], row["count"], row["sum(amount)"]) == ("u0", 1, 5)
    assert pd.Timestamp(row["window_end"]).timestamp() == 10.0
