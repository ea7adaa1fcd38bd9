"""A shard task on a warm handle (cached by its worker process) finds its base without a LIST.

Tasks run here as Spark would run them in one Python worker, without a SparkSession: a
``ShardTask`` per micro-batch, released to the worker's handle cache when it succeeds. Another
process committing the same shard is a second handle on the same root.
"""

from __future__ import annotations

import pytest
import roundtrips
import silt
from silt_spark.errors import StateAheadError
from silt_spark.runtime import _handles, _shard
from silt_spark.runtime._root import OperatorSpec
from silt_spark.runtime._shard import ShardTask


def _requests(db: silt.DB) -> dict[str, int]:
    return roundtrips.foreground_requests(db)


@pytest.fixture
def spec(tmp_path):
    _handles.drop_cached_handles()
    yield OperatorSpec(kind="aggregate", root=(tmp_path / "op").as_uri(), num_shards=1)
    _handles.drop_cached_handles()


def _run(spec: OperatorSpec, batch: int, key: bytes | None) -> tuple[ShardTask, dict[str, int]]:
    """One task of ``batch``: write ``key`` (nothing when ``None``), commit, release. Returns
    the task and the requests its opening made."""
    cached = _handles.CACHE.get(spec.shard_url(0))
    before = _requests(cached.db) if cached is not None else None
    task = ShardTask(spec, 0, batch, "q", 0)
    opened = ({k: n - before[k] for k, n in _requests(task.db).items() if n != before[k]}
              if before is not None and task.db is cached.db else {"cold": 1})
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
    # Batch 2 changes nothing (no commit) here: every attempt of it sees the same rows and base,
    # so none committed anywhere, and batch 3's handle (version 1) is still its base: no request.
    _run(spec, 2, None)
    task, opened = _run(spec, 3, b"c")
    assert opened == {} and task.db.version == 3 and task.db.get(b"a") == b"v0"
    # Batch 4 ran in another worker process (and changed nothing): this process cannot know
    # that, so batch 5 checks that no other process committed 4 with two GETs of missing
    # objects, not a LIST.
    task, opened = _run(spec, 5, b"e")
    assert "LIST" not in opened and sum(opened.values()) == 2, opened
    assert task.db.version == 5 and task.db.get(b"c") == b"v3"


def test_a_warm_handle_another_process_passed_reopens(spec) -> None:
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    _other_process_commits(spec, 2, b"x", b"other")  # batch 2 (3 changes nothing) elsewhere
    _run(spec, 3, None)  # the cached handle (version 1) sees version 2 and reopens
    assert _handles.CACHE[spec.shard_url(0)].db.version == 2
    task, _ = _run(spec, 4, b"d")
    assert task.db.version == 4 and task.db.get(b"x") == b"other"


def test_a_handle_another_process_passed_advances_without_a_list(spec) -> None:
    """Spark alternates a shard's tasks between worker processes: the handle cached here is
    behind. It moves to the batch's base with GETs (silt.DB.advance), keeps its SST readers,
    and the task, its commit included, makes no LIST."""
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    handle = _handles.CACHE[spec.shard_url(0)].db
    readers = dict(handle._readers.by_id)
    _other_process_commits(spec, 2, b"x", b"other")
    before = _requests(handle)
    with roundtrips.timed(handle) as reads:
        task = ShardTask(spec, 0, 3, "q", 0)
        assert task.db is handle
    opened = {k: n - before[k] for k, n in _requests(handle).items() if n != before[k]}
    # DB.catch_up: manifest/2 (found: another process committed); its fate record and
    # manifest/3 at once; the GC epoch. 4 GETs in 3 round trips (before: 6 in 6).
    assert opened == {"GET": 3, "RANGE_GET": 1}, opened
    assert reads.round_trips() == 3, reads.spans
    ok = False
    try:
        task.db.put(b"c", b"v3")
        task.changed = True
        task.finish()
        ok = True
    finally:
        task.release(ok)
    assert task._db is handle and handle.version == 3 and task.committed
    assert "LIST" not in {k for k, n in _requests(handle).items() if n != before[k]}
    assert handle.stats()["advances"] == 1 and "advances_listed" not in handle.stats()
    assert all(handle._readers.by_id[i] is r for i, r in readers.items())
    assert handle.get(b"x") == b"other" and handle.get(b"a") == b"v0"
    # two batches elsewhere, one of them idle (a gap): still GETs, and the task's metrics
    # record (what Spark's listener shows) says so
    _run_probed(spec, 4, b"d")  # (at batch 3: no request; the probe notes the counters)
    _other_process_commits(spec, 6, b"y", b"six")
    record = _run_probed(spec, 8, b"e")
    assert "LIST" not in record["requests"], record["requests"]
    assert record["requests_by_purpose"]["open"]["GET"]["count"] >= 3
    assert handle.version == 8 and handle.get(b"y") == b"six" and handle.get(b"d") == b"v4"
    assert _handles.CACHE[spec.shard_url(0)].db is handle


def _run_probed(spec: OperatorSpec, batch: int, key: bytes) -> dict:
    """One task of ``batch`` measured as run_shard measures it; returns its metrics record."""
    from silt_spark.runtime import _metrics

    task = ShardTask(spec, 0, batch, "q", 0)
    probe = task.probe = _metrics.TaskProbe(task)
    ok = False
    try:
        task.db.put(key, b"v%d" % batch)
        task.changed = True
        task.finish()
        ok = True
    finally:
        record = probe.record()
        task.release(ok)
    return record


def test_a_cold_task_lists_the_versions_once(spec) -> None:
    """A new worker process opens the shard with one LIST, which also tells it the versions
    after its base (a replay here)."""
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    _other_process_commits(spec, 2, b"c", b"v2")
    for batch, replay in ((2, True), (3, False)):
        _handles.drop_cached_handles()  # a new worker process
        task = ShardTask(spec, 0, batch, "q", 0)
        try:
            db = task.db
            assert _requests(db)["LIST"] == 1, _requests(db)
            assert db.version == batch - 1 and task.replay == replay
        finally:
            task.release(False)


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


def _idle(spec: OperatorSpec, batch: int) -> ShardTask:
    """A task of ``batch`` with no rows that reads only its base's meta, as every operator's
    no-input path does (its time bounds), then finishes and is released."""
    task = ShardTask(spec, 0, batch, "q", 0)
    ok = False
    try:
        task.meta_seen = dict(task.base_meta)
        task.finish()
        ok = True
    finally:
        task.release(ok)
    return task


def test_an_idle_task_on_a_current_handle_makes_no_request(spec) -> None:
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    handle = _handles.CACHE[spec.shard_url(0)].db
    before = _requests(handle)
    for batch in (2, 3, 4):
        task = _idle(spec, batch)
        assert not task.opened and task.meta_seen["spark.batch_id"] == "1"
    assert _requests(handle) == before  # three idle batches: not one request
    assert _handles.CACHE[spec.shard_url(0)].current_through == 4
    task, opened = _run(spec, 5, b"f")  # the handle is still batch 5's base: no request
    assert opened == {} and task.committed and task.db.get(b"b") == b"v1"
    assert silt.versions(spec.shard_url(0))[-1] == 5  # (2: the reservation of the skip)


def test_an_idle_task_opens_when_its_handle_may_be_stale(spec) -> None:
    """Without a handle known current through b - 1 (a new process, or a batch that ran
    elsewhere), an idle task opens its shard to read the base's meta, and so sees another
    process's commit."""
    _idle(spec, 0)  # a new process: opens (cold) an empty root
    _run(spec, 1, b"a")
    _other_process_commits(spec, 3, b"x", b"other")  # batch 2 ran here? no: 2 and 3 elsewhere
    task = _idle(spec, 4)
    assert task.opened and task.meta_seen["spark.batch_id"] == "3"
    _handles.drop_cached_handles()
    task = _idle(spec, 5)
    assert task.opened and task.meta_seen["spark.batch_id"] == "3"
    assert _handles.CACHE[spec.shard_url(0)].current_through == 5


def test_a_failed_idle_task_does_not_extend_the_handle(spec) -> None:
    _run(spec, 0, b"a")
    task = ShardTask(spec, 0, 1, "q", 0)
    assert task.base_meta["spark.batch_id"] == "0" and not task.opened
    task.release(False)
    assert _handles.CACHE[spec.shard_url(0)].current_through == 0


def test_a_rescaled_shard_without_a_version_is_never_idle(tmp_path) -> None:
    """A shard of a new layout must first take its state from the old layout's shards: its
    cached handle (no version yet) is never a base to skip opening with."""
    _handles.drop_cached_handles()
    spec = OperatorSpec(kind="aggregate", root=(tmp_path / "op").as_uri(), num_shards=1,
                        generation=1)
    url = spec.shard_url(0)
    _handles.CACHE[url] = _handles.Cached("q/", silt.open(url), 0)
    try:
        task = ShardTask(spec, 0, 1, "q", 0)
        assert task._current_handle() is None
    finally:
        _handles.drop_cached_handles()


def test_a_rescaled_shard_opens_at_its_first_batch_even_when_idle(tmp_path) -> None:
    _handles.drop_cached_handles()
    spec = OperatorSpec(kind="aggregate", root=(tmp_path / "op").as_uri(), num_shards=1,
                        generation=1, layouts=((0, 2), (1, 1)))
    try:
        task = ShardTask(spec, 0, 3, "q", 0)
        assert task.may_need_migration()
        _ = task.db
        assert not task.may_need_migration()
        plain = ShardTask(OperatorSpec(kind="aggregate", root=spec.root, num_shards=1), 0, 3,
                          "q", 0)
        assert not plain.may_need_migration()
    finally:
        _handles.drop_cached_handles()


def test_the_tasks_of_a_batch_in_one_process_share_one_watermark_listing(tmp_path) -> None:
    from silt_spark.runtime import _watermark

    root = (tmp_path / "op").as_uri()
    _watermark.record(root, "q", 0, "kg-a", [5_000], _watermark.Observed((None,), 0))
    _watermark.record(root, "q", 1, "kg-b", [9_000], _watermark.Observed((5_000,), 0))
    counts: dict[str, int] = {}
    for shard in range(4):  # batch 2's tasks in this process: one LIST (batch 0's marker
        # stays: it gives batch 2's watermark for late events)
        seen = _watermark.observe(root, "q", 2, [1_000], prune=shard == 0, counts=counts)
        assert (seen.watermark_ms, seen.late_ms) == (8_000, 4_000)
    assert counts == {"LIST": 1}
    # Batch 2's own markers never count for batch 2, even after the listing was cached.
    _watermark.record(root, "q", 2, "kg-c", [20_000], _watermark.Observed((9_000,), 0))
    assert _watermark.observe(root, "q", 2, [1_000], counts=counts).watermark_ms == 8_000
    assert counts == {"LIST": 1}
    # The next batch lists again and sees them; so does another incarnation of the root.
    assert _watermark.observe(root, "q", 3, [1_000], prune=True, counts=counts
                              ).watermark_ms == 19_000
    assert counts == {"LIST": 2}  # (too few objects to prune)
    assert _watermark.observe(root, "q", 3, [1_000], counts=counts, incarnation="x"
                              ).watermark_ms == 19_000
    assert counts["LIST"] == 3


# --- a handle handed between the worker processes of an executor (runtime/_handoff.py) ---------


@pytest.fixture
def handoff_dir(tmp_path):
    """The executor's handoff directory (Spark's working directory of the application in a
    worker; here a test's)."""
    from silt_spark.runtime import _handoff

    _handoff.override = str(tmp_path / "executor")
    yield tmp_path / "executor"
    _handoff.override = None


def _switch(worker: dict) -> dict:
    """Become the worker process whose cached handles are ``worker`` (this one's are
    returned): each Python worker of an executor has a cache of its own."""
    mine = dict(_handles.CACHE)
    _handles.CACHE.clear()
    _handles.CACHE.update(worker)
    return mine


def _opening(spec: OperatorSpec, batch: int) -> tuple[ShardTask, dict[str, int]]:
    """A task of ``batch`` that opens its shard, and the requests its handle made so far
    (a handle resumed from a record starts at none)."""
    cached = _handles.CACHE.get(spec.shard_url(0))
    before = _requests(cached.db) if cached is not None else None
    task = ShardTask(spec, 0, batch, "q", 0)
    after = _requests(task.db)
    if before is not None and task.db is cached.db:
        after = {k: n - before[k] for k, n in after.items()}
    return task, {k: n for k, n in after.items() if n}


def _finish(task: ShardTask, key: bytes) -> None:
    ok = False
    try:
        task.db.put(key, b"v%d" % task.batch_id)
        task.changed = True
        task.finish()
        ok = True
    finally:
        task.release(ok)


def test_the_next_worker_of_the_executor_takes_the_handle_with_no_request(
        spec, handoff_dir) -> None:
    """Worker A commits batches 0 and 1 and leaves its handle; batch 2 runs in worker B, which
    has none: it resumes A's, with no request before its commit (before: a cold open, 1 LIST
    and 2 GETs). Batch 3 runs in A again, whose handle is at 1: it moves to B's version 2, with
    no request (before: a catch-up, 4 GETs in 3 round trips), keeping its readers."""
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    assert len(list(handoff_dir.iterdir())) == 1  # one file per shard and query
    worker_a = _switch({})
    task, opened = _opening(spec, 2)
    assert opened == {} and task.db.version == 1 and task.db.warm
    assert task.db.get(b"a") == b"v0"
    _finish(task, b"c")
    assert task.committed and task.db.version == 2
    worker_b = _switch(worker_a)
    handle = _handles.CACHE[spec.shard_url(0)].db
    readers = dict(handle._readers.by_id)
    task, opened = _opening(spec, 3)
    assert task.db is handle and opened == {} and handle.version == 2
    assert handle.stats()["handoffs"] == 1 and "advances" not in handle.stats()
    assert all(handle._readers.by_id[i] is r for i, r in readers.items())
    before = _requests(handle)
    _finish(task, b"d")
    commit = {k: n - before[k] for k, n in _requests(handle).items() if n != before[k]}
    assert task.committed and commit == {"PUT": 1, "GET": 1}, commit  # a warm commit
    assert handle.get(b"c") == b"v2" and handle.get(b"d") == b"v3"
    _switch(worker_b)
    task, opened = _opening(spec, 4)  # B at 2, the record at 3: taken
    assert opened == {} and task.db.version == 3
    _finish(task, b"e")
    with silt.open(spec.shard_url(0)) as fresh:
        assert [fresh.get(k) for k in (b"a", b"c", b"d", b"e")] == [b"v0", b"v2", b"v3", b"v4"]


def test_a_record_of_another_version_or_query_is_not_taken(spec, handoff_dir) -> None:
    """The record names batch 1, but another executor committed batch 2 (no record here):
    batch 3's task catches up remotely, as before. A record of another query is never
    taken. A damaged one is refused and the task opens cold."""
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    _other_process_commits(spec, 2, b"x", b"other")  # in another executor: no record here
    _switch({})  # batch 3 in worker B
    task, opened = _opening(spec, 3)
    assert opened.get("LIST") == 1 and task.db.version == 2  # cold: the record is of 1
    assert task.db.get(b"x") == b"other"
    task.release(False)
    _handles.drop_cached_handles()
    other = ShardTask(spec, 0, 2, "another query", 0)
    assert _handoff_take(other) is None
    other.release(False)
    (record,) = handoff_dir.iterdir()
    handoff_dir.chmod(0o777)  # a folder others may write: nothing in it is taken
    assert _handoff_take(ShardTask(spec, 0, 2, "q", 0)) is None
    handoff_dir.chmod(0o700)
    record.write_bytes(record.read_bytes()[:-1])
    task, opened = _opening(spec, 2)
    assert opened.get("LIST") == 1 and task.replay  # refused: cold, and 2 exists
    task.release(False)


def _handoff_take(task: ShardTask):
    from silt_spark.runtime import _handoff

    return _handoff.take(task, None)


def test_a_handed_handle_whose_batch_committed_elsewhere_replays(spec, handoff_dir) -> None:
    """Another attempt of batch 2 committed first (in another executor): the handle taken at
    1 learns it at its commit, as a warm handle at 1 does, and the task is a replay."""
    _run(spec, 0, b"a")
    _run(spec, 1, b"b")
    _switch({})
    _other_process_commits(spec, 2, b"c", b"v2")
    task, opened = _opening(spec, 2)
    assert opened == {} and task.db.version == 1
    _finish(task, b"c")
    assert task.replay and not task.committed
    _other_process_commits(spec, 6, b"z", b"later")
    _switch({})
    with pytest.raises(StateAheadError, match="newer than micro-batch 2"):
        task, opened = _opening(spec, 2)
        assert opened == {}
        _finish(task, b"c")
