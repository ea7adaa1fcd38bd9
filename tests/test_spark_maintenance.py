"""State maintenance: a shard that commits collects its own garbage every N micro-batches.

Tasks run as Spark would run them in one Python worker (``ShardTask`` per micro-batch, as in
tests/test_spark_warm.py); GC runs for real on the shard's folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import silt
import silt_spark
from silt import paths
from silt.errors import InvalidArgumentError
from silt_spark.runtime import _api, _handles, _shard
from silt_spark.runtime._root import OperatorSpec
from silt_spark.runtime._shard import ShardTask


@pytest.fixture(autouse=True)
def _fresh_cache():
    _handles.drop_cached_handles()
    yield
    _handles.drop_cached_handles()


def _spec(tmp_path: Path, every: int, num_shards: int = 2) -> OperatorSpec:
    # Grace 0: GC may delete anything unreferenced at once (only this test's writer runs).
    settings = silt.Settings(gc_grace_seconds=0, retain_versions=2)
    return OperatorSpec(kind="aggregate", root=(tmp_path / "op").as_uri(),
                        num_shards=num_shards, settings=settings.to_dict(),
                        maintenance_batches=every)


def _batch(spec: OperatorSpec, shard: int, batch: int) -> ShardTask:
    task = ShardTask(spec, shard, batch, "q", 0)
    ok = False
    try:
        task.db.put(b"\x00\x01k", b"v%d" % batch)
        task.db.put(b"\x00\x01k%d" % batch, b"x" * 100)
        task.changed = True
        task.finish()
        ok = True
    finally:
        task.release(ok)
    return task


def _manifests(spec: OperatorSpec, shard: int) -> list[int]:
    folder = Path(spec.shard_url(shard).removeprefix("file://")) / paths.MANIFEST_PREFIX
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def test_a_shard_collects_its_garbage_every_n_batches(tmp_path) -> None:
    spec = _spec(tmp_path, every=3)
    ran = [b for b in range(10) if _batch(spec, 1, b).maintenance_ms > 0]
    # Shard 1's first commit (batch 0) records a virtual pass at batch -1: passes at 2, 5, 8.
    assert ran == [2, 5, 8]
    kept = _manifests(spec, 1)
    assert kept[-1] == 9 and len(kept) <= 2 + 1 + 3  # retained + horizon + since the last pass
    assert 0 not in kept
    with silt.open(spec.shard_url(1)) as db:
        assert db.get(b"\x00\x01k") == b"v9"
        assert all(db.get(b"\x00\x01k%d" % b) == b"x" * 100 for b in range(10))
        assert db.meta[_shard.META_MAINTAINED] == "8"
    assert silt.verify(spec.shard_url(1)).ok


def test_maintenance_is_recorded_in_the_task_metrics(tmp_path) -> None:
    spec = _spec(tmp_path, every=2)
    tasks = [_batch(spec, 0, b) for b in range(5)]
    due = [t for t in tasks if t.maintenance_ms > 0]
    assert [t.batch_id for t in due] == [2, 4]  # shard 0: the virtual pass at batch 0
    assert sum(t.gc_deleted for t in due) > 0


def test_maintenance_off_never_collects(tmp_path) -> None:
    spec = _spec(tmp_path, every=0)
    assert all(_batch(spec, 0, b).maintenance_ms == 0 for b in range(6))
    assert _manifests(spec, 0) == list(range(6))


def test_a_bad_interval_in_the_spark_conf_is_refused_when_the_operator_is_built(spark):
    df = spark.readStream.format("rate").load().selectExpr("value % 5 AS k", "value AS v")
    for bad in ("often", "-1", "1e3"):
        spark.conf.set(_api.MAINTENANCE_CONF, bad)
        try:
            with pytest.raises(InvalidArgumentError, match="intervalBatches"):
                silt_spark.aggregate(df, ["k"], ["count"], "file:///tmp/never-written", 2)
        finally:
            spark.conf.unset(_api.MAINTENANCE_CONF)
    assert not Path("/tmp/never-written").exists()


def test_maintenance_in_a_streaming_query_keeps_the_answers(spark, tmp_path) -> None:
    from test_spark_operator import AGGS, Run, agg_model, assert_frames, batch, shard_versions

    run = Run(spark, tmp_path)
    state = (tmp_path / "state").as_uri()
    spark.conf.set(_api.MAINTENANCE_CONF, "2")
    try:
        df = silt_spark.aggregate(run.stream(), ["user"], AGGS, state, num_shards=2,
                                  settings=silt.Settings(gc_grace_seconds=0, retain_versions=2))
    finally:
        spark.conf.unset(_api.MAINTENANCE_CONF)
    batches = [batch(50 + i) for i in range(6)]
    run.start(df)
    try:
        for rows in batches:
            run.write(rows)
            run.drain()
        query_id = str(run.query.id)
    finally:
        run.stop()
    want = agg_model(batches)
    for b in range(6):
        assert_frames(run.outputs[b], want[b])
    records = silt_spark.metrics(query_id)
    assert sum(r["maintenance_ms"] > 0 for r in records) >= 4
    for versions in shard_versions(state).values():
        assert versions[-1] == 5 and len(versions) < 6
