"""A shard task on a warm handle (cached by its worker process) finds its base without a LIST.

Tasks run here as Spark would run them in one Python worker, without a SparkSession: a
``ShardTask`` per micro-batch, released to the worker's handle cache when it succeeds. Another
process committing the same shard is a second handle on the same root.
"""

from __future__ import annotations

import pytest
import silt
from silt_spark import _shard
from silt_spark._shard import OperatorSpec, ShardTask
from silt_spark.errors import StateAheadError


def _requests(db: silt.DB) -> dict[str, int]:
    return db.stats()["requests_by_kind"]


@pytest.fixture
def spec(tmp_path):
    _shard.drop_cached_handles()
    yield OperatorSpec(kind="aggregate", root=(tmp_path / "op").as_uri(), num_shards=1)
    _shard.drop_cached_handles()


def _run(spec: OperatorSpec, batch: int, key: bytes | None) -> tuple[ShardTask, dict[str, int]]:
    """One task of ``batch``: write ``key`` (nothing when ``None``), commit, release. Returns
    the task and the requests its opening made."""
    cached = _shard._CACHE.get(spec.shard_url(0))
    before = _requests(cached[1]) if cached is not None else None
    task = ShardTask(spec, 0, batch, "q", 0)
    opened = ({k: n - before[k] for k, n in _requests(task.db).items() if n != before[k]}
              if before is not None and task.db is cached[1] else {"cold": 1})
    ok = False
    try:
        if key is not None:
            task.db.put(key, b"v%d" % batch)
            task.changed = True
        task.finish()
        ok = True
    finally:
        task.release(ok)
    return task, opened


def _other_process_commits(spec: OperatorSpec, batch: int, key: bytes, value: bytes) -> None:
    """Another worker process commits ``batch`` of shard 0 (the handle cached here has not
    seen it)."""
    with silt.open(spec.shard_url(0)) as other:
        other.put(key, value)
        other.commit(batch, meta={_shard.META_QUERY_ID: "q", _shard.META_BATCH_ID: str(batch)})


def test_a_warm_handle_at_the_previous_batch_opens_with_no_request(spec) -> None:
    _run(spec, 0, b"a")
    task, opened = _run(spec, 1, b"b")
    assert opened == {} and task.db.version == 1 and task.committed
    # Batch 2 changes nothing (no commit): batch 3's handle is at version 1, so it checks that
    # no other process committed 2 with two GETs of missing objects, not a LIST.
    _run(spec, 2, None)
    task, opened = _run(spec, 3, b"c")
    assert "LIST" not in opened and sum(opened.values()) == 2, opened
    assert task.db.version == 3 and task.db.get(b"a") == b"v0"


def test_a_warm_handle_another_process_passed_reopens(spec) -> None:
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    _other_process_commits(spec, 2, b"x", b"other")  # batch 2 (3 changes nothing) elsewhere
    _run(spec, 3, None)  # the cached handle (version 1) sees version 2 and reopens
    task, _ = _run(spec, 4, b"d")
    assert task.db.version == 4 and task.db.get(b"x") == b"other"


def test_a_replay_on_a_warm_handle_emits_and_does_not_commit(spec) -> None:
    """Another attempt of batch 2 committed first: ours conflicts and is a replay."""
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    _other_process_commits(spec, 2, b"c", b"v2")
    task, opened = _run(spec, 2, b"c")  # warm at version 1 = batch 2's base: no request
    assert opened == {} and task.replay and not task.committed


def test_state_ahead_of_the_checkpoint_is_refused_on_a_warm_handle(spec) -> None:
    """Versions after this batch exist (the checkpoint is older than the state): a warm handle
    at b - 1 skips the check at open and finds them at its commit."""
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    _other_process_commits(spec, 5, b"z", b"later")
    with pytest.raises(StateAheadError, match="newer than micro-batch 2"):
        _run(spec, 2, b"c")
