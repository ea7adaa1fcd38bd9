"""A fresh worker's first task on a remote root checks the root's origin while it opens its shard
(``_lifecycle.start_origin_check``), and still refuses a lost root before it uses the shard.

Tasks run as Spark would run them in a fresh Python worker, without a SparkSession: a
``ShardTask`` per micro-batch, its state on the S3 emulator behind a proxy that adds latency.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from faultproxy import FaultProxy
from silt import plugins
from silt_spark.errors import StateLostError
from silt_spark.runtime import _handles, _lifecycle
from silt_spark.runtime._root import OperatorSpec
from silt_spark.runtime._shard import ShardTask
from test_spark_warm import _finish

pytest.importorskip("boto3")

#: Every request through the proxy waits this long; the origin LIST waits HELD more.
LATENCY = 0.5
HELD = 2.0


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server) as p:
        yield p


def _fresh_worker() -> None:
    """What a new Python worker process starts with: no cached handle, no root checked."""
    _handles.drop_cached_handles()
    with _lifecycle._LOCK:
        _lifecycle._CHECKED.clear()


@pytest.fixture
def spec(
    aws_env: None, s3_bucket: str, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch,
) -> Iterator[OperatorSpec]:
    # silt-tier-s3 registered as its entry point would (the tests run with autoload off)
    monkeypatch.setattr(
        plugins, "DEFAULT_PLUGINS", (*plugins.DEFAULT_PLUGINS, ("s3", "silt_s3.plugin"))
    )
    plugins.reset_registry()
    _fresh_worker()
    yield OperatorSpec(kind="aggregate", root=f"s3://{s3_bucket}/op", num_shards=1,
                       records_origin=True, storage_options={"endpoint_url": proxy.url})
    _fresh_worker()
    plugins.reset_registry()


def _commit(spec: OperatorSpec, batch: int, key: bytes) -> None:
    _finish(ShardTask(spec, 0, batch, "q", 0), key)


def test_a_fresh_workers_first_task_lists_origins_while_it_opens(
    spec: OperatorSpec, proxy: FaultProxy,
) -> None:
    """The origin LIST (2.5 s) and the shard's open (its LIST, then its manifest: 1 s) run at
    once: the task has its shard after about 2.5 s, not 3.5 s as when the check ran first; the
    check's request is counted, and the shard holds what was committed."""
    _commit(spec, 0, b"a")
    _fresh_worker()
    proxy.latency = LATENCY
    proxy.fault("delay", match="lifecycle", seconds=HELD, times=None)
    t0 = time.monotonic()
    task = ShardTask(spec, 0, 1, "q", 0)
    try:
        db = task.db
        elapsed = time.monotonic() - t0
        assert db.get(b"a") == b"v0"
    finally:
        task.release(False)
    assert task.root_requests["lifecycle"] == {"LIST": 1}
    sequential = (LATENCY + HELD) + 2 * LATENCY
    assert LATENCY + HELD <= elapsed < sequential - 0.3, elapsed


def test_a_lost_root_is_refused_before_the_shard_is_used(
    spec: OperatorSpec, proxy: FaultProxy,
) -> None:
    """A remote root without this query's origin (its state deleted, the checkpoint kept) is
    refused by the task's first use of its shard, and by its finish when it never opens it;
    nothing is committed."""
    _commit(spec, 0, b"a")
    _fresh_worker()
    root = plugins.open_store(spec.root, storage_options=spec.storage_options)
    try:
        root.delete_many([i.key for i in root.list("lifecycle/")])
        task = ShardTask(spec, 0, 3, "q", 0)
        with pytest.raises(StateLostError):
            _ = task.db
        task.release(False)
        idle = ShardTask(spec, 0, 3, "q", 0)
        with pytest.raises(StateLostError):
            idle.finish()
        idle.release(False)
        assert not [i.key for i in root.list("shards/") if "manifest" in i.key
                    and i.key.rstrip("/").endswith("3")]
    finally:
        root.close()
