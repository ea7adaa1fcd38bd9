"""silt_spark operators in real streaming queries (local SparkSession, file source).

Every test drives a query over a folder of JSON files, one file per micro-batch
(``maxFilesPerTrigger=1``), collects each batch's output by batch id with ``foreachBatch``, and
compares it with a pandas model. Restarts reuse the checkpoint, as a production restart would.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import silt
import silt_spark
from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException
from silt import paths
from silt_spark.errors import LayoutMismatchError, NotStreamingError
from silt_spark.runtime import _shard

# The processors below are defined here, and the Python workers cannot import this file.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: The operators' core paths (restart, task retry, rescale) also run against the pure-Python core.
pytestmark = pytest.mark.pure_python_smoke

SCHEMA = "user string, device string, amount long"


class Run:
    """A source folder, a checkpoint and the outputs of the query's micro-batches.

    Subclasses for other inputs set ``schema`` and ``source_format`` and override ``write``.
    """

    schema = SCHEMA
    source_format = "json"

    def __init__(self, spark, tmp_path: Path, name: str = "q") -> None:
        self.spark = spark
        self.src = tmp_path / f"{name}-in"
        self.src.mkdir()
        self.checkpoint = tmp_path / f"{name}-chk"
        self.outputs: dict[int, pd.DataFrame] = {}
        self.files = 0
        self.query = None

    def write(self, rows: list[tuple]) -> None:
        name = self.src / f"part-{self.files:05d}.json"
        tmp = self.src / f".tmp-{self.files:05d}"
        with open(tmp, "w") as f:
            for user, device, amount in rows:
                f.write(json.dumps({"user": user, "device": device, "amount": amount}) + "\n")
        os.replace(tmp, name)
        self.files += 1

    def stream(self):
        return (
            self.spark.readStream.schema(self.schema).option("maxFilesPerTrigger", 1)
            .format(self.source_format).load(str(self.src))
        )

    def start(self, out_df) -> None:
        outputs = self.outputs

        def sink(df, batch_id):
            outputs[batch_id] = df.toPandas()

        self.query = (
            out_df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(processingTime="0 seconds")
            .start()
        )

    def drain(self) -> None:
        self.query.processAllAvailable()

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


def fail_after_commit(df, batch_id: int, marker_dir: str, partition: int | None = None):
    """``df`` followed by a step that fails the first attempt of micro-batch ``batch_id``'s
    tasks (or of one partition's) once they consumed all their input, that is after the silt
    shard of that task committed; each failure leaves ``failed-<batch>-<partition>`` in
    ``marker_dir``. Failures are injected from the tests: the production code has no hook."""
    from pyspark import TaskContext

    def fn(batches):
        yield from batches
        ctx = TaskContext.get()
        part = ctx.partitionId()
        if (int(ctx.getLocalProperty("streaming.sql.batchId")) == batch_id
                and partition in (None, part) and ctx.attemptNumber() == 0):
            open(os.path.join(marker_dir, f"failed-{batch_id}-{part}"), "w").close()
            raise RuntimeError(f"injected failure after committing batch {batch_id}")

    return df.mapInArrow(fn, df.schema)


@pytest.fixture
def run(spark, tmp_path):
    r = Run(spark, tmp_path)
    yield r
    r.stop()


def batch(seed: int, n: int = 40, users: int = 9) -> list[tuple]:
    import random

    rng = random.Random(seed)
    return [
        (f"u{rng.randrange(users)}", f"d{rng.randrange(3)}", rng.randrange(-50, 100))
        for _ in range(n)
    ]


# --- models --------------------------------------------------------------------------------------
AGGS = ["count", "sum(amount)", "min(amount)", "max(amount)", "avg(amount)"]


def agg_model(batches: list[list[tuple]]) -> list[pd.DataFrame]:
    """Per batch: for each user in the batch, the aggregates over all rows so far."""
    seen = pd.DataFrame(columns=["user", "device", "amount"])
    out = []
    for rows in batches:
        now = pd.DataFrame(rows, columns=["user", "device", "amount"])
        seen = pd.concat([seen, now], ignore_index=True)
        seen["amount"] = seen["amount"].astype("int64")
        g = seen[seen["user"].isin(now["user"])].groupby("user")["amount"]
        df = pd.DataFrame({
            "count": g.size(), "sum(amount)": g.sum(), "min(amount)": g.min(),
            "max(amount)": g.max(), "avg(amount)": g.mean(),
        }).reset_index()
        out.append(df)
    return out


def norm(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(df.columns[:1])).reset_index(drop=True)


def assert_frames(got: pd.DataFrame, want: pd.DataFrame) -> None:
    got, want = norm(got), norm(want)
    assert list(got.columns) == list(want.columns)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


class Profile(silt_spark.StatefulProcessor):
    """Uses every kind of state: a value (count, total), a list (batch sizes), a map (devices)."""

    def init(self, handle):
        self.stats = handle.getValueState("stats", "count long, total long")
        self.sizes = handle.getListState("sizes", "n long")
        self.devices = handle.getMapState("devices", "device string", "n long")

    def handleInputRows(self, key, rows, timerValues):
        df = pd.concat(list(rows))
        count, total = self.stats.get() or (0, 0)
        count += len(df)
        total += int(df["amount"].sum())
        self.stats.update((count, total))
        self.sizes.appendValue((len(df),))
        for device, n in df.groupby("device").size().items():
            old = self.devices.getValue((device,))
            self.devices.updateValue((device,), ((old[0] if old else 0) + int(n),))
        top = max(v[0] for v in self.devices.values())
        yield pd.DataFrame({
            "user": [key[0]], "count": [count], "total": [total],
            "calls": [len(list(self.sizes.get()))],
            "devices": [len(list(self.devices.keys()))], "top_device": [top],
        })


PROFILE_SCHEMA = "user string, count long, total long, calls long, devices long, top_device long"


def profile_model(batches: list[list[tuple]]) -> list[pd.DataFrame]:
    seen = pd.DataFrame(columns=["user", "device", "amount", "batch"])
    out = []
    for i, rows in enumerate(batches):
        now = pd.DataFrame(rows, columns=["user", "device", "amount"]).assign(batch=i)
        seen = pd.concat([seen, now], ignore_index=True)
        recs = []
        for user in sorted(set(now["user"])):
            mine = seen[seen["user"] == user]
            recs.append({
                "user": user, "count": len(mine), "total": int(mine["amount"].sum()),
                "calls": mine["batch"].nunique(), "devices": mine["device"].nunique(),
                "top_device": int(mine.groupby("device").size().max()),
            })
        out.append(pd.DataFrame(recs))
    return out


def shard_versions(state_url: str) -> dict[str, list[int]]:
    root = Path(state_url.removeprefix("file://"))
    return {
        d.name: silt.versions((root / d.name).as_uri())
        for d in sorted(root.iterdir()) if d.name.startswith("kg-")
    }


# --- tests ---------------------------------------------------------------------------------------
def test_aggregate_matches_model_across_batches_and_restart(run, tmp_path):
    state = (tmp_path / "state").as_uri()
    batches = [batch(i) for i in range(5)]

    def build():
        return silt_spark.aggregate(run.stream(), ["user"], AGGS, state_url=state, num_shards=3)

    run.start(build())
    for rows in batches[:3]:
        run.write(rows)
        run.drain()
    query_id = str(run.query.id)
    run.stop()
    # Restart from the checkpoint: state comes back from silt.
    run.start(build())
    for rows in batches[3:]:
        run.write(rows)
        run.drain()
    assert str(run.query.id) == query_id
    run.stop()

    want = agg_model(batches)
    assert sorted(run.outputs) == list(range(5))
    for b in range(5):
        assert_frames(run.outputs[b], want[b])
    versions = shard_versions(state)
    assert len(versions) == 3
    assert set().union(*versions.values()) <= set(range(5))
    for name, vs in versions.items():
        db = silt.open(f"{state}/{name}")
        assert db.meta[_shard.META_QUERY_ID] == query_id
        assert db.meta[_shard.META_BATCH_ID] == str(vs[-1])
        db.close()


def test_processor_matches_model_with_value_list_and_map_state(run, tmp_path):
    state = (tmp_path / "state").as_uri()
    batches = [batch(10 + i, n=30, users=6) for i in range(4)]

    def build():
        return silt_spark.transform_with_state(
            run.stream(), Profile(), ["user"], PROFILE_SCHEMA, state_url=state, num_shards=2,
        )

    run.start(build())
    for rows in batches[:2]:
        run.write(rows)
        run.drain()
    run.stop()
    run.start(build())
    for rows in batches[2:]:
        run.write(rows)
        run.drain()
    run.stop()
    want = profile_model(batches)
    for b in range(4):
        assert_frames(run.outputs[b], want[b])


def test_batch_rerun_after_restart_is_not_applied_twice(run, tmp_path):
    """The query stops after a batch's state was committed but before Spark recorded the batch
    as done (its commit log entry is lost): the restart re-runs the batch with the same id.
    The re-run must emit the same output and leave the state as if the batch ran once."""
    state = (tmp_path / "state").as_uri()
    batches = [batch(20 + i) for i in range(3)]

    def build():
        return silt_spark.aggregate(run.stream(), ["user"], AGGS, state_url=state, num_shards=2)

    run.start(build())
    for rows in batches[:2]:
        run.write(rows)
        run.drain()
    run.stop()
    first_output = run.outputs.pop(1)
    versions_before = shard_versions(state)
    (run.checkpoint / "commits" / "1").unlink()
    for crc in (run.checkpoint / "commits").glob(".1.crc"):
        crc.unlink()
    run.start(build())
    run.drain()
    assert 1 in run.outputs, "Spark did not re-run batch 1"
    assert shard_versions(state) == versions_before  # nothing re-committed
    run.write(batches[2])
    run.drain()
    run.stop()
    want = agg_model(batches)
    assert_frames(run.outputs[1], first_output)
    assert_frames(run.outputs[1], want[1])
    assert_frames(run.outputs[2], want[2])


def test_task_failing_after_commit_is_retried_without_double_counting(run, tmp_path):
    state = (tmp_path / "state").as_uri()
    batches = [batch(30 + i, n=30, users=6) for i in range(3)]
    markers = tmp_path / "markers"
    markers.mkdir()
    df = fail_after_commit(silt_spark.transform_with_state(
        run.stream(), Profile(), ["user"], PROFILE_SCHEMA, state_url=state, num_shards=2,
    ), 1, str(markers))
    run.start(df)
    for rows in batches:
        run.write(rows)
        run.drain()
    run.stop()
    failed = sorted(p.name for p in markers.iterdir())
    assert failed and all(name.startswith("failed-1-") for name in failed)
    want = profile_model(batches)
    for b in range(3):
        assert_frames(run.outputs[b], want[b])


def test_state_of_another_query_is_refused_unless_taken_over(spark, tmp_path):
    state = (tmp_path / "state").as_uri()
    first = Run(spark, tmp_path, "first")
    first.start(silt_spark.aggregate(first.stream(), ["user"], ["count"], state, num_shards=2))
    first.write(batch(40))
    first.drain()
    first.stop()

    second = Run(spark, tmp_path, "second")  # new checkpoint: a new query id
    second.write(batch(41))
    second.start(silt_spark.aggregate(second.stream(), ["user"], ["count"], state, num_shards=2))
    with pytest.raises(StreamingQueryException, match="belongs to streaming query"):
        second.drain()
    second.stop()

    third = Run(spark, tmp_path, "third")
    rows = batch(42)
    third.write(rows)
    third.start(silt_spark.aggregate(
        third.stream(), ["user"], ["count"], state, num_shards=2, take_over=True,
    ))
    third.drain()
    third.stop()
    want = agg_model([rows])[0][["user", "count"]]
    assert_frames(third.outputs[0], want)


def test_layout_is_fixed_per_root(spark, tmp_path):
    state = (tmp_path / "state").as_uri()
    src = tmp_path / "in"
    src.mkdir()
    stream = spark.readStream.schema(SCHEMA).json(str(src))
    silt_spark.aggregate(stream, ["user"], ["count", "sum(amount)"], state, num_shards=2)
    # The state records depend on the aggregated columns and the key groups on the key types.
    with pytest.raises(LayoutMismatchError, match="column 'amount' changed type"):
        silt_spark.aggregate(
            stream.selectExpr("user", "cast(amount as double) as amount"),
            ["user"], ["count", "sum(amount)"], state, num_shards=2,
        )
    with pytest.raises(LayoutMismatchError, match="key_columns"):
        silt_spark.aggregate(
            stream.selectExpr("cast(length(user) as int) as user", "amount"),
            ["user"], ["count", "sum(amount)"], state, num_shards=2,
        )
    with pytest.raises(LayoutMismatchError, match="key_groups"):
        silt_spark.aggregate(
            stream, ["user"], ["sum(amount)"], state, num_shards=2, key_groups=128
        )
    with pytest.raises(LayoutMismatchError, match="aggregate"):
        silt_spark.transform_with_state(stream, Profile(), ["user"], PROFILE_SCHEMA, state, 2)
    with pytest.raises(ValueError, match="memory://"):
        silt_spark.aggregate(stream, ["user"], ["count"], "memory://x", num_shards=2)
    with pytest.raises(ValueError, match="not in the DataFrame"):
        silt_spark.aggregate(stream, ["nope"], ["count"], state, num_shards=2)
    shutil.rmtree(src)


def test_batch_dataframes_are_refused_when_the_operator_is_built(spark, tmp_path):
    df = spark.createDataFrame([("u1", "d1", 1)], SCHEMA)
    with pytest.raises(NotStreamingError, match="needs a streaming DataFrame"):
        silt_spark.aggregate(df, ["user"], ["count"], (tmp_path / "s").as_uri(), num_shards=1)
    assert not (tmp_path / "s").exists()  # nothing left behind (see test_spark_lifecycle.py)


class FirstSeen(silt_spark.StatefulProcessor):
    """Emits, per user, a timestamp (the output schema has a timestamp column)."""

    def init(self, handle):
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = (self.n.get() or (0,))[0] + sum(len(df) for df in rows)
        self.n.update((n,))
        yield pd.DataFrame({"user": [key[0]], "n": [n],
                            "at": [pd.Timestamp(1_700_000_000_000 + n, unit="ms")]})


def test_timestamp_columns_in_outputs_and_keys(run, tmp_path):
    """Timestamps in a processor's output schema and among aggregate keys (Arrow schemas with
    the session's UTC time zone)."""
    from pyspark.sql import functions as F

    run.start(silt_spark.transform_with_state(
        run.stream(), FirstSeen(), ["user"], "user string, n long, at timestamp",
        state_url=(tmp_path / "ts-state").as_uri(), num_shards=2,
    ))
    run.write([("u1", "d0", 1), ("u1", "d1", 2), ("u2", "d0", 3)])
    run.drain()
    run.stop()
    out = run.outputs[0].sort_values("user").reset_index(drop=True)
    assert list(out["n"]) == [2, 1]
    assert list(out["at"]) == [pd.Timestamp(1_700_000_000_002, unit="ms"),
                               pd.Timestamp(1_700_000_000_001, unit="ms")]

    agg = Run(run.spark, tmp_path, name="agg")
    try:
        keyed = agg.stream().withColumn("day", F.timestamp_millis(F.lit(86_400_000)))
        agg.start(silt_spark.aggregate(
            keyed, ["day"], ["count", "sum(amount)"],
            state_url=(tmp_path / "ts-agg").as_uri(), num_shards=2,
        ))
        agg.write([("u1", "d0", 5), ("u2", "d0", 7)])
        agg.drain()
    finally:
        agg.stop()
    got = agg.outputs[0]
    assert list(got["count"]) == [2] and list(got["sum(amount)"]) == [12]
    assert list(got["day"]) == [pd.Timestamp("1970-01-02")]


def test_a_batch_whose_version_number_was_withdrawn_fails_instead_of_losing_state(run, tmp_path):
    """A shard's version number for batch ``b`` can be taken by a withdrawn commit (a writer
    that stalled past the GC grace period): that number is never committed again. The retry of
    ``b`` must not treat the conflict as "another attempt committed it" (nothing of ``b`` would
    be stored): the task fails, saying so."""
    from silt.manifest import Manifest
    from silt.versions import WITHDRAWN, Fate

    state = (tmp_path / "state").as_uri()
    batches = [batch(40 + i) for i in range(3)]

    def build():
        return silt_spark.aggregate(run.stream(), ["user"], AGGS, state_url=state, num_shards=1)

    run.start(build())
    for rows in batches[:2]:
        run.write(rows)
        run.drain()
    run.stop()
    (shard,) = shard_versions(state)
    store = silt.open_store(f"{state}/{shard}")
    base = Manifest.decode(store.get(paths.manifest_key(1)), "m1")
    withdrawn = replace(base, version=2, parent=1, token="stalled-writer")
    store.put_if_absent(paths.manifest_key(2), withdrawn.encode())
    store.put_if_absent(paths.fate_key(2), Fate(2, WITHDRAWN, "stalled", "stalled-writer").encode())
    run.start(build())
    run.write(batches[2])
    with pytest.raises(StreamingQueryException, match="micro-batch 2 could not be committed"):
        run.drain()
    run.stop()
    assert silt.versions(f"{state}/{shard}") == [0, 1]  # nothing of batch 2 pretends to exist
