"""What a stream processor's shard task costs on an object store, in sequential round trips: a
fresh worker's first task after a restart (no cached handle, no root checked) and a warm one.

Tasks run as Spark would run them in a Python worker, without a SparkSession: a ``ShardTask``
per micro-batch on ``slow://`` roots (tests/slowtier.py: each store the task opens, the root's
for the origin check and the shard's, is remote and delayed, and their requests are timed as
one operation), over ``memory://`` and each tier's emulator. Counted structurally, as in
tests/test_round_trips.py (:data:`SETTINGS`: compaction off, whose background requests are not the
task's; every delta an uploaded SST, as a large batch's in the restart benchmark).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import parse_qsl

import pytest
import slowtier
from silt import plugins
from silt_spark.runtime import _handles, _lifecycle
from silt_spark.runtime._root import OperatorSpec
from silt_spark.runtime._shard import ShardTask
from test_engine_on_tiers import PLUGIN_MODULES, TIERS, Tier
from test_round_trips import LONGER, _check

pytestmark = pytest.mark.flaky(reruns=2, only_rerun=[LONGER])

#: Compaction off, every delta uploaded, and a private block cache per handle (a fresh
#: worker's handle starts with nothing cached; the process's shared cache would keep blocks).
SETTINGS = {"compaction": "none", "inline_delta_bytes": 0, "block_cache_bytes": 4 << 20}

#: Keys of the batches: every task reads and writes all of them.
KEYS = [b"k%05d" % i for i in range(0, 3000, 3)]


def _fresh_worker() -> None:
    """What a new Python worker process starts with: no cached handle, no root checked."""
    _handles.drop_cached_handles()
    with _lifecycle._LOCK:
        _lifecycle._CHECKED.clear()


@pytest.fixture(params=["memory", *TIERS])
def spec(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
         ) -> Iterator[OperatorSpec]:
    """An operator on ``slow://`` over ``memory://`` or a fresh bucket of a tier's emulator."""
    extra = [("slow", "slowtier")]
    options = None
    if request.param == "memory":
        inner = f"memory/rt-spark-{uuid.uuid4().hex}/op"
    else:
        servers = {"s3": ("s3_bucket", "moto_server", "moto_admin"),
                   "gs": ("gcs_bucket", "gcs_server", "gcs_admin"),
                   "az": ("az_container", "azurite_server", "azurite_admin")}[request.param]
        tier = Tier(request.param, *(request.getfixturevalue(n) for n in servers))
        url = tier.url()
        inner = url.replace("://", "/", 1).split("?")[0] + "/op"
        query = url.partition("?")[2]
        options = dict(parse_qsl(query)) or None
        extra.append((tier.scheme, PLUGIN_MODULES[tier.scheme]))
    monkeypatch.setattr(plugins, "DEFAULT_PLUGINS", (*plugins.DEFAULT_PLUGINS, *extra))
    plugins.reset_registry()
    _fresh_worker()
    yield OperatorSpec(kind="aggregate", root=f"slow://{inner}", num_shards=1,
                       records_origin=True, settings=SETTINGS,
                       storage_options=options)
    _fresh_worker()
    plugins.reset_registry()


def _batch(spec: OperatorSpec, batch: int) -> ShardTask:
    """One task of ``batch`` as the aggregate's stage runs it: read every key's state (one
    ``multi_get``), write them all, commit, release."""
    task = ShardTask(spec, 0, batch, "q", 0)
    ok = False
    try:
        db = task.db
        db.multi_get(KEYS)
        db.put_many(KEYS, [b"v%d-%d" % (batch, i) for i in range(len(KEYS))])
        task.changed = True
        task.finish()
        ok = True
    finally:
        task.release(ok)
    return task


def test_a_fresh_workers_first_task_after_a_restart(spec: OperatorSpec) -> None:
    """Batch 2 in a fresh worker, its shard holding 2 SSTs: the root's origin LIST beside the
    open's first wave (the versions' LIST, the GC epoch's LIST, the guessed manifest of batch 1);
    the fate record, the LIST of gc/ and the SSTs' tails; the batch's blocks; the SST's upload;
    the manifest PUT; the GC epoch GET: 6 round trips. Before: 8 (the tails' own wave before
    the blocks; the grace marker's PUT before the upload; the LIST of gc/ after the PUT)."""
    _batch(spec, 0)
    _batch(spec, 1)
    _fresh_worker()
    with slowtier.TIMELINE.operation() as op:
        task = _batch(spec, 2)
    assert task.committed and task.db.version == 2
    _check(op, 6, {"list": 4, "get": 3, "get_range": 3, "put_if_absent": 2})
    waves = [[(kind, name.split("/")[0]) for kind, name in wave] for wave in op.waves()]
    assert ("get", "manifest") in waves[0] and ("list", "manifest") in waves[0], op
    assert sorted(waves[1]) == [("get", "manifest"), ("get_range", "sst"), ("get_range", "sst"),
                                ("list", "gc")], op  # fate record, markers, the 2 tails
    assert waves[2:] == [[("get_range", "sst")], [("put_if_absent", "sst")],
                         [("put_if_absent", "manifest")], [("get", "epoch")]], op


def test_a_warm_task_at_the_previous_batch_reads_nothing_before_its_commit(
        spec: OperatorSpec) -> None:
    """The worker's cached handle committed batch 1: batch 2 reads from its cache and commits
    (the upload, the PUT, the epoch GET): 3 round trips."""
    _batch(spec, 0)
    _batch(spec, 1)
    with slowtier.TIMELINE.operation() as op:
        _batch(spec, 2)
    _check(op, 3, {"put_if_absent": 2, "get": 1})


def test_a_task_in_another_worker_takes_the_handle_and_uploads_without_the_grace_marker(
        spec: OperatorSpec, tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 1's task left its handle (runtime/_handoff.py); batch 2 runs in a fresh worker
    of the executor, which resumes it with no request: the root's origin LIST; the tails of
    the shard's 2 SSTs; the batch's blocks; the SST's upload; the manifest PUT; the GC epoch
    GET: 6 round trips. The record says the writer grace is announced, so no grace marker is
    created before the upload. Before: 7 (the grace marker's PUT before the upload), once per
    handle handed over."""
    from silt_spark.runtime import _handoff

    monkeypatch.setattr(_handoff, "override", str(tmp_path))
    _batch(spec, 0)
    _batch(spec, 1)
    _fresh_worker()
    with slowtier.TIMELINE.operation() as op:
        task = _batch(spec, 2)
    assert task.committed and task.db.version == 2 and task.db.stats()["handoffs"] == 1
    kinds = [(kind, name.split("/")[0]) for wave in op.waves() for kind, name in wave]
    assert ("put_if_absent", "gc") not in kinds, op
    assert ("list", "manifest") not in kinds and ("list", "gc") not in kinds, op
    _check(op, 6, {"list": 1, "get": 1, "get_range": 3, "put_if_absent": 2})
    waves = [[(kind, name.split("/")[0]) for kind, name in wave] for wave in op.waves()]
    assert waves[-3:] == [[("put_if_absent", "sst")], [("put_if_absent", "manifest")],
                          [("get", "epoch")]], op


def test_a_state_reader_opens_its_shards_read_only(spec: OperatorSpec) -> None:
    """The state source's shard (runtime/_sources.py: read_state, inspection) is opened
    read-only: the versions' LIST beside the guessed manifest, then its fate record and the
    SSTs' tails; no GC markers listed (before: the GC epoch and gc/, 2 LISTs more)."""
    from silt_spark.runtime import _sources

    _batch(spec, 0)
    _batch(spec, 1)
    with slowtier.TIMELINE.operation() as op:
        sources = _sources.shard_sources(spec, 0, 1)
    assert [db.version for db, _, _ in sources] == [1] and sources[0][0].read_only
    _check(op, 2, {"list": 1, "get": 2, "get_range": 2})
    sources[0][0].close()
