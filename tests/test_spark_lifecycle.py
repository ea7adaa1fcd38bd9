"""The life of an operator's state root: a lost root with a kept checkpoint is an error (never
a silent restart from zero), dropping state is explicit (drop_state / python -m silt_spark),
batch DataFrames are refused when the operator is built, and operators work in foreachBatch."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import warnings

import pandas as pd
import pytest
import silt_spark
from pyspark.errors import StreamingQueryException
from silt_spark.errors import NotAnOperatorRootError, NotStreamingError
from test_spark_operator import Run, agg_model, assert_frames, batch


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "silt_spark", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_lost_state_root_fails_and_drop_state_starts_over(spark, tmp_path):
    state_dir = tmp_path / "state"
    state = state_dir.as_uri()
    run = Run(spark, tmp_path)
    batches = [batch(60 + i) for i in range(2)]

    def build():
        return silt_spark.aggregate(run.stream(), ["user"], ["count"], state, num_shards=2)

    try:
        run.start(build())
        run.write(batches[0])
        run.drain()
        run.stop()
        shutil.rmtree(state_dir)  # the state is lost, the checkpoint is kept
        run.write(batches[1])
        run.start(build())
        with pytest.raises(StreamingQueryException) as err:
            run.drain()
        run.stop()
        text = str(err.value)
        assert "has no state of streaming query" in text
        assert "checkpoint is at micro-batch 1" in text
        assert "Restore the state root" in text and "drop-state" in text

        # Without --yes the command only says what it would delete.
        dry = _cli("drop-state", state)
        assert dry.returncode == 2 and "run again with --yes" in dry.stderr
        done = _cli("drop-state", state, "--yes")
        assert done.returncode == 0, done.stderr
        assert "deleted" in done.stdout and "Traceback" not in done.stderr
        run.start(build())  # the state starts over, on purpose, at batch 1
        run.drain()
    finally:
        run.stop()
    assert_frames(run.outputs[0], agg_model(batches[:1])[0][["user", "count"]])
    assert_frames(run.outputs[1], agg_model(batches[1:])[0][["user", "count"]])  # from zero


def test_drop_state_leaves_what_is_not_an_operator_root_alone(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("keep me")
    with pytest.raises(NotAnOperatorRootError, match="not the state root of a silt_spark"):
        silt_spark.drop_state(other.as_uri())
    cli = _cli("drop-state", other.as_uri(), "--yes")
    assert cli.returncode == 1 and cli.stderr.startswith("error: ")
    assert "Traceback" not in cli.stderr
    assert (other / "data.csv").read_text() == "keep me"
    new = (tmp_path / "new").as_uri()
    assert silt_spark.drop_state(new) == 0  # a new, empty root
    assert silt_spark.drop_state(new) == 0  # and again: dropping is idempotent


def test_batch_dataframes_are_refused_when_built_and_foreach_batch_works(spark, tmp_path):
    df = spark.createDataFrame([("a", "d", 1), ("b", "d", 2)], "user string, device string, "
                               "amount long")
    ts = df.selectExpr("*", "timestamp_millis(amount) as ts")
    state = tmp_path / "state"
    builds = {
        "aggregate": lambda: silt_spark.aggregate(df, "user", ["count"], state.as_uri(), 2),
        "dedup": lambda: silt_spark.deduplicate(df, "user", state.as_uri(), 2),
        "window": lambda: silt_spark.window_aggregate(
            ts, "user", "ts", "10 seconds", ["count"], state.as_uri(), 2),
        "processor": lambda: silt_spark.transform_with_state(
            df, silt_spark.StatefulProcessor(), "user", "user string", state.as_uri(), 2),
    }
    for kind, build in builds.items():
        with pytest.raises(NotStreamingError, match=f"{kind} operator needs a streaming"):
            build()
        assert not state.exists(), f"{kind}: something was written"

    # Inside foreachBatch, the micro-batch DataFrame is a batch DataFrame: operators work.
    run = Run(spark, tmp_path)
    totals: dict[int, pd.DataFrame] = {}

    def each(out, batch_id):
        totals[batch_id] = silt_spark.aggregate(
            out, "user", ["count"], state.as_uri(), 2).toPandas()

    batches = [batch(70), batch(71)]
    try:
        run.query = (run.stream().writeStream.foreachBatch(each)
                     .option("checkpointLocation", str(run.checkpoint)).start())
        for rows in batches:
            run.write(rows)
            run.drain()
    finally:
        run.stop()
    for b, want in enumerate(agg_model(batches)):
        assert_frames(totals[b], want[["user", "count"]])


def test_a_spark_watermark_in_front_of_any_operator_is_refused_when_built(spark, tmp_path):
    """silt's operators keep their own watermark: an input that carries Spark's
    (withWatermark) is refused when the operator is built, naming the column, the delay and
    the operator's own arguments, before anything is written."""
    from silt.errors import InvalidArgumentError

    src = tmp_path / "in"
    src.mkdir()
    stream = (spark.readStream.schema("user string, amount long, ts timestamp").json(str(src))
              .withWatermark("ts", "10 seconds"))
    other = spark.readStream.schema("user string, paid timestamp").json(str(src))
    state = tmp_path / "state"
    builds = {
        "aggregate": lambda: silt_spark.aggregate(stream, "user", ["count"], state.as_uri(), 2),
        "dedup": lambda: silt_spark.deduplicate(stream, "user", state.as_uri(), 2,
                                                event_time_column="ts"),
        "window": lambda: silt_spark.window_aggregate(
            stream, "user", "ts", "10 seconds", ["count"], state.as_uri(), 2),
        "processor": lambda: silt_spark.transform_with_state(
            stream, silt_spark.StatefulProcessor(), "user", "user string", state.as_uri(), 2),
        "join": lambda: silt_spark.join(other, stream, "user", state_url=state.as_uri(),
                                        num_shards=2),
    }
    for kind, build in builds.items():
        with pytest.raises(InvalidArgumentError) as info:
            build()
        message = str(info.value)
        assert message.startswith(f"silt_spark's {kind} operator does not read Spark's "
                                  "watermark"), message
        assert "withWatermark('ts', ...), 10000 ms" in message and "time_column='ts'" in message
        assert not state.exists(), f"{kind}: something was written"


def test_builder_mistakes_raise_silts_own_errors(spark, tmp_path):
    """Mistakes in a builder's arguments raise silt's InvalidArgumentError / InvalidTypeError
    (still a ValueError / TypeError), whichever builder or helper takes them: the builders,
    drop_state, read_state, a processor's state handle and the metrics listener."""
    import silt
    from silt.errors import InvalidArgumentError, InvalidTypeError, SiltError
    from silt_spark.operators.processor import _handle as _processor
    from test_spark_state import FakeTask

    src = tmp_path / "in"
    src.mkdir()
    stream = spark.readStream.schema("user string, amount long, note string").json(str(src))
    url = (tmp_path / "state").as_uri()
    root = (tmp_path / "root").as_uri()
    cases = [
        (lambda: silt_spark.aggregate(stream, "user", [], url, 2), InvalidArgumentError),
        (lambda: silt_spark.aggregate(stream, "user", [3], url, 2), InvalidTypeError),
        (lambda: silt_spark.aggregate(stream, "user", ["sum("], url, 2), InvalidArgumentError),
        (lambda: silt_spark.aggregate(stream, "user", ["median(amount)"], url, 2),
         InvalidArgumentError),
        (lambda: silt_spark.aggregate(stream, "user", ["count", "count"], url, 2),
         InvalidArgumentError),
        (lambda: silt_spark.aggregate(stream, "user", ["sum(missing)"], url, 2),
         InvalidArgumentError),
        (lambda: silt_spark.aggregate(stream, "user", ["sum(note)"], url, 2), InvalidTypeError),
        # a processor without the methods its operator calls
        (lambda: silt_spark.transform_with_state(stream, object(), "user", "user string", url, 2),
         InvalidTypeError),
        (lambda: silt_spark.transform_batches(stream, object(), "user", "user string", url, 2),
         InvalidTypeError),
        (lambda: silt_spark.drop_state("not a url"), InvalidArgumentError),
        # read_state: a root that is not one, a version that is not a micro-batch id
        (lambda: silt_spark.read_state(spark, url), NotAnOperatorRootError),
        (lambda: silt_spark.read_state(spark, root, version=-1), InvalidArgumentError),
        (lambda: silt_spark.read_state(spark, root, version="3"), InvalidTypeError),
        (lambda: silt_spark.read_state(spark, root, version=True), InvalidTypeError),
        (lambda: silt_spark.read_state(spark, root, state_name=3), InvalidTypeError),
        # a processor's state names and kinds (the handle's own checks)
        (lambda: handle.getValueState("", "x long"), InvalidArgumentError),
        (lambda: handle.getValueState(3, "x long"), InvalidTypeError),
        (lambda: handle.getValueState("n" * 256, "x long"), InvalidArgumentError),
        (lambda: handle.getMapState("v", "k string", "x long"), InvalidArgumentError),
        (lambda: silt_spark.MetricsListener(prices="s3"), InvalidTypeError),
    ]
    silt_spark.aggregate(stream, "user", ["count"], root, 2)  # a root, for read_state
    handle = _processor.StatefulProcessorHandle(FakeTask(silt.open(
        (tmp_path / "handle").as_uri(), clock=silt.ManualClock())))
    handle.getValueState("v", "x long")
    try:
        for build, error in cases:
            with pytest.raises(error) as info:
                build()
            # one family for every argument mistake: silt's own errors, still builtin ones
            assert isinstance(info.value, SiltError), (info.value, type(info.value))
            assert isinstance(info.value, (ValueError, TypeError)), type(info.value)
    finally:
        handle._task.db.close()
    assert not (tmp_path / "state").exists()


def test_reset_is_the_deprecated_name_of_take_over(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    stream = spark.readStream.schema("user string").json(str(src))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        silt_spark.aggregate(stream, "user", ["count"], (tmp_path / "s").as_uri(), 2, reset=True)
    assert any(issubclass(w.category, DeprecationWarning) and "take_over" in str(w.message)
               for w in caught)


def _objects(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_a_second_query_and_a_lost_root_are_refused_when_the_query_starts(
        spark, tmp_path, caplog):
    """Both mistakes are found on the driver when the query starts (runtime/_guard.py),
    before its first micro-batch: the root is left exactly as it was (no version, no origin
    record of the refused query), silt's message is the first thing logged for the query, and the
    query dies with silt's error (its class and message), raised by the tasks before any request.
    The query that owns the root restarts unrefused."""
    state_dir = tmp_path / "state"
    state = state_dir.as_uri()
    first, second = Run(spark, tmp_path, "first"), Run(spark, tmp_path, "second")

    def build(run):
        return silt_spark.aggregate(run.stream(), ["user"], ["count"], state, num_shards=2)

    def refused(run, error_class: str, message: str) -> str:
        caplog.clear()
        with caplog.at_level("ERROR", logger="silt_spark"):
            run.start(build(run))
            with pytest.raises(StreamingQueryException) as err:
                run.drain()
            run.stop()
        logged = [r.getMessage() for r in caplog.records if r.name == "silt_spark"]
        assert logged and logged[0].startswith(f"silt_spark: {error_class}: {message}"), logged
        text = str(err.value)
        assert f"silt_spark.errors.{error_class}: {message}" in text, text[:2000]
        # raised by the guard's check, the task's first act (no shard opened, no origin read)
        worker = text[text.rindex("Traceback (most recent call last)"):]
        assert "in check_task" in worker and "in check_origin" not in worker, worker
        assert "in _open" not in worker, worker
        return text

    try:
        first.write(batch(80))
        first.start(build(first))
        first.drain()
        first.stop()
        before = _objects(state_dir)
        assert any("manifest" in o for o in before)

        # A second query (its own checkpoint) on the same state_url.
        second.write(batch(81))
        text = refused(second, "ForeignStateError", "the state at ")
        assert "two queries cannot share a state_url" in text
        assert _objects(state_dir) == before  # nothing written, not even an origin record

        # The query that owns the root restarts from its checkpoint: not refused.
        first.write(batch(82))
        first.start(build(first))
        first.drain()
        first.stop()
        assert set(first.outputs) == {0, 1}

        # The first query's root deleted, its checkpoint kept: refused at micro-batch 1.
        shutil.rmtree(state_dir)
        first.write(batch(83))
        text = refused(first, "StateLostError", f"the state root {state!r} has no state")
        assert "checkpoint is at micro-batch 2" in text
        # the builder's descriptor only: no version, no origin of the query
        assert _objects(state_dir) == {"silt-spark.json"}, _objects(state_dir)

    finally:
        first.stop()
        second.stop()


def test_the_guard_starts_where_spark_will():
    """The micro-batch a query runs first, from its checkpoint's commit and offset logs: a
    planned batch that was not committed runs again."""
    from silt_spark.runtime import _guard

    assert _guard.start_batch(None, None) == 0
    assert _guard.start_batch(None, 0) == 0 and _guard.start_batch(0, 0) == 1
    assert _guard.start_batch(4, 5) == 5 and _guard.start_batch(5, 5) == 6


def test_the_guard_hears_starts_and_converts_no_progress_event(spark, tmp_path, monkeypatch):
    """The guard needs a query's start only: the progress events of a silt query's
    micro-batches reach it unconverted. Through PySpark's own listener proxy each progress
    event is first turned into Python objects, which looks up a class by its short name per
    observed metric and makes the driver search every jar of Spark's classpath: about 15% of
    the driver JVM's CPU in a test of five queries in lockstep. The guard still checks the
    query when it starts."""
    from pyspark.sql.streaming import StreamingQueryListener
    from pyspark.sql.streaming import listener as pyspark_listener
    from silt_spark.runtime import _guard

    converted: list[str] = []
    real_progress = pyspark_listener.JStreamingQueryListener.onQueryProgress

    def counting(self, jevent):
        converted.append(type(self.pylistener).__name__)
        return real_progress(self, jevent)

    monkeypatch.setattr(pyspark_listener.JStreamingQueryListener, "onQueryProgress", counting)
    checked: list[str] = []
    real_refusals = _guard.refusals

    def refusals(plan, query_id, batch_id):
        checked.append(query_id)
        return real_refusals(plan, query_id, batch_id)

    monkeypatch.setattr(_guard, "refusals", refusals)

    class Progress(StreamingQueryListener):
        """Registered after the guard: Spark's listener bus hands each event to the listeners
        of a queue in the order they were added, so once this one has the last progress
        event, the guard has had it too."""

        def __init__(self):
            super().__init__()
            self.batches: set[int] = set()

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            self.batches.add(event.progress.batchId)

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    run = Run(spark, tmp_path, "guarded")
    state = (tmp_path / "state").as_uri()
    out = silt_spark.aggregate(run.stream(), ["user"], ["count"], state, num_shards=2)
    listener = Progress()
    spark.streams.addListener(listener)
    try:
        run.start(out)
        for b in range(3):
            run.write(batch(90 + b))
            run.drain()
        query_id = str(run.query.id)
        deadline = time.monotonic() + 120
        while not {0, 1, 2} <= listener.batches and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {0, 1, 2} <= listener.batches, listener.batches
    finally:
        run.stop()
        spark.streams.removeListener(listener)
    assert checked == [query_id]
    assert "Progress" in converted
    assert "Guard" not in converted, converted
