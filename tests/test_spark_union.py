"""An operator whose output shares a Spark stage with other partitions (a ``union``).

Spark numbers the partitions of a union one input after the other, so the tasks of an operator
that is not the union's first input run as partitions ``k..k + num_shards - 1``, and a task
cannot tell which shard it is from its partition number. The operator refuses to run there
(``ShardPlacementError``) instead of acting as another shard; a stage boundary
(``.repartition``) before the union makes it work. A batch replayed with other input than its
committed attempt (the plan changed in between) is refused (``ReplayInputError``).
"""

from __future__ import annotations

import pytest
import silt_spark
from pyspark.errors import StreamingQueryException
from silt_spark.errors import ReplayInputError
from silt_spark.runtime import _handles, _shard
from silt_spark.runtime._root import OperatorSpec
from silt_spark.runtime._shard import ShardTask
from test_spark_operator import Run, agg_model, assert_frames, batch, shard_versions


@pytest.fixture
def run(spark, tmp_path):
    r = Run(spark, tmp_path)
    yield r
    r.stop()


def _two_counts(run: Run, tmp_path, boundary: bool):
    df = run.stream()
    a = silt_spark.aggregate(df, ["user"], ["count"], (tmp_path / "a").as_uri(), num_shards=2)
    b = silt_spark.aggregate(df, ["user"], ["count"], (tmp_path / "b").as_uri(), num_shards=3)
    a = a.withColumn("op", a["count"] * 0)
    b = b.withColumn("op", b["count"] * 0 + 1)
    if boundary:
        a, b = a.repartition(2), b.repartition(2)
    return a.union(b)


def test_an_operator_behind_another_union_input_is_refused(run, tmp_path) -> None:
    run.start(_two_counts(run, tmp_path, boundary=False))
    run.write(batch(1))
    with pytest.raises(StreamingQueryException) as info:
        run.drain()
    message = str(info.value)
    assert "ShardPlacementError" in message and ".repartition(n)" in message
    # No shard of the second operator took a version as another shard.
    assert all(not vs for vs in shard_versions((tmp_path / "b").as_uri()).values())


def test_a_stage_boundary_before_the_union_gives_each_operator_its_shards(run, tmp_path):
    run.start(_two_counts(run, tmp_path, boundary=True))
    batches = [batch(i) for i in range(3)]
    for rows in batches:
        run.write(rows)
        run.drain()
    want = agg_model(batches)
    for i in range(len(batches)):
        got = run.outputs[i]
        for op in (0, 1):
            mine = got[got["op"] == op][["user", "count"]]
            assert_frames(mine, want[i][["user", "count"]])
    # Every shard of both operators committed each batch it had rows for, as itself.
    for name in ("a", "b"):
        versions = shard_versions((tmp_path / name).as_uri())
        assert len(versions) == (2 if name == "a" else 3)
        assert set().union(*versions.values()) == {0, 1, 2}


@pytest.fixture
def spec(tmp_path):
    _handles.drop_cached_handles()
    yield OperatorSpec(kind="aggregate", root=(tmp_path / "op").as_uri(), num_shards=1)
    _handles.drop_cached_handles()


def _attempt(spec: OperatorSpec, batch_id: int, rows_in: int, key: bytes | None) -> ShardTask:
    task = ShardTask(spec, 0, batch_id, "q", 0)
    ok = False
    try:
        if key is not None:
            task.db.put(key, b"v")
            task.changed = True
        task.meta_updates[_shard.META_ROWS_IN] = str(rows_in)
        task.finish()
        ok = True
    finally:
        task.release(ok)
    return task


@pytest.mark.parametrize("first,again", [(0, 5), (5, 0)])
def test_a_replay_with_other_input_than_the_committed_attempt_is_refused(spec, first, again):
    _attempt(spec, 0, 3, b"a")
    assert _attempt(spec, 1, first, b"b").committed
    _handles.drop_cached_handles()
    with pytest.raises(ReplayInputError, match="micro-batch 1 is committed from"):
        _attempt(spec, 1, again, b"c")


def test_a_replay_with_the_same_kind_of_input_emits_again(spec) -> None:
    _attempt(spec, 0, 3, b"a")
    _attempt(spec, 1, 4, b"b")
    _handles.drop_cached_handles()
    again = _attempt(spec, 1, 4, b"b")
    assert again.replay and not again.committed
