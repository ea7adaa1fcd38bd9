"""Operator metrics of silt_spark (silt_spark/_metrics.py) in real streaming queries.

Each query reads a folder of JSON files, one small file (so one input partition) per
micro-batch, and the figures the tasks report are compared with what the input implies: rows in
and out, keys read and written, which shards committed, and the manifests' meta.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import silt
import silt_spark
from pyspark import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "user string, amount long"


class Feed:
    """A folder source, one file per micro-batch, and a query over it with a no-op sink."""

    def __init__(self, spark, tmp_path: Path) -> None:
        self.spark = spark
        self.src = tmp_path / "in"
        self.src.mkdir()
        self.checkpoint = tmp_path / "chk"
        self.files = 0
        self.query = None

    def write(self, rows: list[tuple[str, int]]) -> None:
        tmp = self.src / f".tmp-{self.files}"
        with open(tmp, "w") as f:
            for user, amount in rows:
                f.write(json.dumps({"user": user, "amount": amount}) + "\n")
        os.replace(tmp, self.src / f"part-{self.files:05d}.json")
        self.files += 1

    def stream(self):
        return self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
            str(self.src)
        )

    def start(self, df, name: str) -> None:
        self.query = (
            df.writeStream.queryName(name).foreachBatch(lambda out, batch_id: out.count())
            .option("checkpointLocation", str(self.checkpoint)).start()
        )

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


def rows_of(seed: int, n: int = 60, users: int = 12) -> list[tuple[str, int]]:
    import random

    rng = random.Random(seed)
    return [(f"u{rng.randrange(users)}", rng.randrange(100)) for _ in range(n)]


class Count(silt_spark.StatefulProcessor):
    """One value read and one value written per key and batch."""

    def init(self, handle):
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = (self.n.get() or (0,))[0] + sum(len(df) for df in rows)
        self.n.update((n,))
        yield pd.DataFrame({"user": [key[0]], "n": [n]})


def check_batch(records, rows, num_shards, state, *, rows_in):
    users = {u for u, _ in rows}
    assert sorted(r["shard"] for r in records) == list(range(num_shards))
    assert sum(r["rows_in"] for r in records) == rows_in
    assert sum(r["rows_out"] for r in records) == len(users)
    assert sum(r["state_reads"] for r in records) == len(users)
    assert sum(r["state_writes"] for r in records) == len(users)
    for r in records:
        # A shard with keys commits (and says so in its manifest); one without writes nothing.
        assert r["committed"] == (r["rows_out"] > 0)
        assert r["state_reads"] == r["state_writes"] == r["rows_out"]
        # Only a shard with rows opens its DB (both operators here have no timers).
        assert r["opened"] == (r["rows_in"] > 0)
        assert (r["open_ms"] > 0) == r["opened"] and r["process_ms"] >= 0
        # The shard DB's PUTs (the operator root's lifecycle records are counted apart).
        root_puts = r["requests_by_purpose"].get("lifecycle", {}).get("PUT", {"count": 0})
        assert root_puts["count"] <= 1  # a query's origin record, once per shard at most
        puts = dict(r["requests"].get("PUT", {"count": 0, "bytes": 0}))
        puts["count"] -= root_puts["count"]
        if r["committed"]:
            assert r["commit_ms"] > 0
            assert puts["count"] >= 1 and puts["bytes"] > 0
            assert "commit" in r["requests_by_purpose"]
            url = silt_spark.runtime._layout.shard_url(state, r["shard"], num_shards, 256, 0)
            meta = _meta(url, r["batch_id"])
            assert int(meta["spark.rows_in"]) == r["rows_in"]
            assert int(meta["spark.rows_out"]) == r["rows_out"]
            assert int(meta["spark.state_reads"]) == r["state_reads"]
            assert int(meta["spark.state_writes"]) == r["state_writes"]
        else:
            assert r["commit_ms"] == 0 and puts["count"] == 0


def _meta(url: str, version: int) -> dict[str, str]:
    db = silt.open(url, at_most=version)
    try:
        assert db.version == version
        return dict(db.meta)
    finally:
        db.close()


def test_aggregate_reports_rows_reads_writes_and_commits(spark, tmp_path):
    state = (tmp_path / "state").as_uri()
    feed = Feed(spark, tmp_path)
    batches = [rows_of(i) for i in range(3)] + [[("u1", 5), ("u1", 7)]]
    feed.start(silt_spark.aggregate(feed.stream(), ["user"], ["count", "sum(amount)"],
                                    state_url=state, num_shards=3), "metrics_agg")
    try:
        for rows in batches:
            feed.write(rows)
            feed.query.processAllAvailable()
        query = feed.query
        for b, rows in enumerate(batches):
            records = silt_spark.metrics(query, b)
            # One input partition per batch: the shards receive one partial row per key.
            check_batch(records, rows, 3, state, rows_in=len({u for u, _ in rows}))
            assert {r["operator"] for r in records} == {"aggregate"}
            assert {r["state_url"] for r in records} == {state}
        assert [r["batch_id"] for r in silt_spark.metrics(str(query.id))] == sorted(
            b for b in range(len(batches)) for _ in range(3)
        )
    finally:
        feed.stop()
    # Request counts are per task, not the warm handle's running totals: each committed version
    # is one manifest PUT (purpose "commit") and, at this size, no SST PUT (purpose "flush"):
    # its delta rides inline in the manifest (silt.inline).
    root = Path(state.removeprefix("file://"))
    for shard in range(3):
        mine = [r for r in silt_spark.metrics(query) if r["shard"] == shard]
        url = silt_spark.runtime._layout.shard_url(state, shard, 3, 256, 0)
        manifests = len(list((root / url.rsplit("/", 1)[-1] / "manifest").iterdir()))
        assert manifests == sum(r["committed"] for r in mine) == len(silt.versions(url))
        for purpose, puts in (("commit", manifests), ("flush", 0)):
            assert sum(
                r["requests_by_purpose"].get(purpose, {}).get("PUT", {}).get("count", 0)
                for r in mine
            ) == puts


@pytest.mark.parametrize("operator", ["aggregate", "processor"])
def test_idle_shards_make_no_request(spark, tmp_path, operator):
    """After the first batch, the input reaches one key, so one shard: the other shards' tasks
    neither open their DB nor make any request (the worker's lifecycle check is made once per
    process), for the aggregate and for a processor without timers."""
    state = (tmp_path / "state").as_uri()
    feed = Feed(spark, tmp_path)
    if operator == "aggregate":
        df = silt_spark.aggregate(feed.stream(), ["user"], ["count"], state_url=state,
                                  num_shards=4)
    else:
        df = silt_spark.transform_with_state(
            feed.stream(), Count(), ["user"], "user string, n long", state_url=state,
            num_shards=4,
        )
    feed.start(df, f"metrics_idle_{operator}")
    batches = [rows_of(0, users=40)] + [[("u1", i)] for i in range(4)]
    try:
        for rows in batches:
            feed.write(rows)
            feed.query.processAllAvailable()
        for b in range(1, len(batches)):
            records = silt_spark.metrics(feed.query, b)
            assert len(records) == 4
            busy = [r for r in records if r["rows_in"]]
            assert len(busy) == 1 and busy[0]["committed"] and busy[0]["opened"]
            for r in records:
                if r is busy[0]:
                    continue
                others = {p: k for p, k in r["requests_by_purpose"].items() if p != "lifecycle"}
                assert not r["opened"] and not r["committed"] and others == {}, r
                assert r["state_reads"] == r["state_writes"] == r["open_ms"] == 0
    finally:
        feed.stop()


def test_a_warm_handle_another_worker_passed_makes_no_list(spark, tmp_path):
    """Spark runs a shard's batches in whichever Python worker is free: a process's cached
    handle is often behind the shard (the other worker committed since). The worker that
    committed the batch before left its handle (runtime/_handoff.py), so no task of a batch
    after the first makes a request to open at all, per the metrics records; without it, the
    task advances its handle with GETs (``silt.DB.advance``) and makes no LIST. (Shard 1:
    shard 0 collects its garbage at batch 0, which changes the GC markers, and a handle then
    lists once, as it should.)"""
    state = (tmp_path / "state").as_uri()
    feed = Feed(spark, tmp_path)
    feed.start(silt_spark.aggregate(feed.stream(), ["user"], ["count"], state_url=state,
                                    num_shards=2), "metrics_advance")
    try:
        for i in range(8):
            feed.write(rows_of(i, users=40))
            feed.query.processAllAvailable()
        records = sorted((r for r in silt_spark.metrics(feed.query) if r["shard"] == 1),
                         key=lambda r: r["batch_id"])
    finally:
        feed.stop()
    assert [r["batch_id"] for r in records] == list(range(8))
    last_batch: dict[int, int] = {}  # worker pid -> the last batch it ran shard 1
    behind = moved = 0
    for r in records:
        assert r["committed"], r
        last = last_batch.get(r["pid"])
        if last is not None:  # warm: this process cached the handle at batch `last`
            lists = {p: k["LIST"] for p, k in r["requests_by_purpose"].items()
                     if "LIST" in k and p != "lifecycle"}
            assert lists == {}, r
            behind += last != r["batch_id"] - 1
        if r["batch_id"]:
            # Batch b - 1 committed in a worker of this executor, which left its handle
            # (runtime/_handoff.py): whichever worker runs batch b, its handle behind or none,
            # opens with no request. (Before: a catch-up's 4 GETs, or a cold open's LIST.)
            assert "open" not in r["requests_by_purpose"], r
            moved += r["pid"] != records[r["batch_id"] - 1]["pid"]
        last_batch[r["pid"]] = r["batch_id"]
    print(f"{len(last_batch)} worker processes; {behind} warm tasks on a handle behind; "
          f"{moved} tasks in another worker than the batch before")


def test_figures_reach_sparks_own_progress_and_state_size_is_public(spark, tmp_path):
    """Each micro-batch's progress carries the operator's figures as observed metrics (what a
    StreamingQueryListener or the progress JSON shows), the sink sees exactly the operator's
    output, and silt_spark.state_size reads the state's size from the manifests."""
    state = (tmp_path / "state").as_uri()
    feed = Feed(spark, tmp_path)
    seen: list[int] = []
    agg = silt_spark.aggregate(feed.stream(), ["user"], ["count", "sum(amount)"],
                               state_url=state, num_shards=3)
    assert agg.columns == ["user", "count", "sum(amount)"]
    feed.query = (
        agg.writeStream.queryName("metrics_progress")
        .foreachBatch(lambda out, batch_id: seen.append(out.count()))
        .option("checkpointLocation", str(feed.checkpoint)).start()
    )
    batches = [rows_of(i) for i in range(3)]
    try:
        progress = []
        for rows in batches:
            feed.write(rows)
            feed.query.processAllAvailable()
            progress.append(feed.query.lastProgress)
        name = f"silt aggregate {state}"
        for rows, p in zip(batches, progress):
            figures = silt_spark.progress_metrics(p)
            assert list(figures) == [name], p["observedMetrics"]
            f = figures[name]
            users = len({u for u, _ in rows})
            assert f["shards"] == 3 and f["rows_out"] == users and f["state_writes"] == users
            assert f["shards_committed"] == f["shards_opened"] <= 3
            assert f["requests_class_a"] >= f["shards_committed"] and f["commit_ms"] > 0
            # Spark's StateOperatorProgress names: puts are updates, nothing is removed.
            assert f["numRowsUpdated"] == users and f["numRowsRemoved"] == 0
            assert f["numStateStoreInstances"] == 3 and f["numRowsDroppedByWatermark"] == 0
            assert f["commitTimeMs"] == round(f["commit_ms"])
            assert f["allUpdatesTimeMs"] == round(f["process_ms"])
            assert f["memoryUsedBytes"] > 0
        # numRowsTotal: an estimate from the SSTs (at least the keys, at most every write).
        last = silt_spark.progress_metrics(progress[-1])[name]
        total_keys = len({u for rows in batches for u, _ in rows})
        writes = sum(len({u for u, _ in rows}) for rows in batches)
        assert last["shardsWithUnknownState"] == 0
        assert total_keys <= last["numRowsTotal"] <= writes
        assert last["stateOnStoreBytes"] > 0
        assert seen == [len({u for u, _ in rows}) for rows in batches]  # no metric rows
        records = silt_spark.metrics(feed.query)
        assert sum(r["rows_out"] for r in records) == sum(seen)
    finally:
        feed.stop()
    size = silt_spark.state_size(state)
    assert size.shards == 3 and size.ssts >= 1 and size.bytes > 0
    assert size.entries >= len({u for rows in batches for u, _ in rows})
    first = silt_spark.state_size(state, version=0)
    assert first.entries < size.entries and set(first.versions) == {0, 1, 2}


def test_processor_metrics_reach_a_listener_and_the_log(spark, tmp_path, caplog):
    state = (tmp_path / "state").as_uri()
    feed = Feed(spark, tmp_path)
    batches = [rows_of(10 + i, n=40, users=8) for i in range(3)]
    listener = silt_spark.MetricsListener()
    spark.streams.addListener(listener)
    caplog.set_level(logging.INFO, logger="silt_spark")
    try:
        feed.start(silt_spark.transform_with_state(
            feed.stream(), Count(), ["user"], "user string, n long", state_url=state,
            num_shards=2,
        ), "metrics_tws")
        for rows in batches:
            feed.write(rows)
            feed.query.processAllAvailable()
        query_id = str(feed.query.id)
        for b, rows in enumerate(batches):
            check_batch(silt_spark.metrics(query_id, b), rows, 2, state, rows_in=len(rows))
        # Listener callbacks are asynchronous: wait for the summaries of every batch.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            mine = [s for s in listener.summaries if s["query_id"] == query_id]
            if {s["batch_id"] for s in mine} >= set(range(len(batches))):
                break
            time.sleep(0.2)
    finally:
        feed.stop()
        spark.streams.removeListener(listener)
    by_batch = {s["batch_id"]: s for s in mine}
    assert set(by_batch) >= set(range(len(batches)))
    for b, rows in enumerate(batches):
        s = by_batch[b]
        users = len({u for u, _ in rows})
        assert (s["operator"], s["state_url"], s["shards"]) == ("processor", state, 2)
        assert (s["rows_in"], s["rows_out"]) == (len(rows), users)
        assert (s["state_reads"], s["state_writes"]) == (users, users)
        assert s["committed"] >= 1 and s["max_commit_ms"] > 0
        assert s["requests"]["PUT"]["count"] >= s["committed"]
        # Requests by price class, and their cost at S3 Standard's list prices.
        c = s["cost"]
        n = {k: v["count"] for k, v in s["requests"].items()}
        assert c["class_a"] == n.get("PUT", 0) + n.get("LIST", 0)
        assert c["class_b"] == n.get("GET", 0) + n.get("RANGE_GET", 0)
        assert c["usd"] == pytest.approx(
            (c["class_a"] * 0.005 + c["class_b"] * 0.0004) / 1000) and c["usd"] > 0
    lines = [r.getMessage() for r in caplog.records if r.name == "silt_spark"]
    for b, rows in enumerate(batches):
        want = f"silt_spark query metrics_tws batch {b}: processor {state} 2 shards"
        line = next((x for x in lines if x.startswith(want)), None)
        assert line is not None, (want, lines)
        assert f"rows in {len(rows)} out {len({u for u, _ in rows})}" in line
        assert "requests" in line and "PUT" in line
        assert "class A " in line and "est. $" in line and "(S3 Standard)" in line


def test_sparks_state_operator_figures_from_a_task(tmp_path):
    """The figures published under Spark's StateOperatorProgress names, from one task's
    counting DB: puts are updates, deletes (alone or in a WriteBatch) removals, late rows the
    growth of the operator's running count, and the state rows the version's SSTs hold."""
    from silt_spark.runtime import _metrics, _progress

    class Task:  # what state_figures reads of a ShardTask
        committed = True

        def __init__(self, db):
            self.db, self.base_meta = db, {"spark.late_rows": "5"}
            self.meta_updates = {"spark.late_rows": "12"}

        def db_seen(self):
            return self.db

    url = (tmp_path / "s").as_uri()
    with silt.open(url) as db:
        counting = _metrics.CountingDB(db)
        counting.put_many([b"a", b"b", b"c"], [b"1", b"2", b"3"])
        counting.put(b"d", b"4")
        batch = silt.WriteBatch().put(b"e", b"5").delete(b"a").delete_range(b"x", b"z")
        counting.write(batch)
        counting.delete(b"b")
        db.commit()
        assert (counting.puts, counting.deletes, counting.writes) == (5, 3, 8)
        figures = _metrics.state_figures(Task(db))
        assert figures["state_known"] == 1 and figures["late_rows"] == 7
        # 5 puts, 2 point deletes: the SSTs hold 7 entries, 2 of them tombstones.
        assert figures["state_rows"] == 3 and figures["state_bytes"] > 0
        assert figures["memory_bytes"] >= 0
    record = {"state_puts": 5, "state_deletes": 3, "commit_ms": 2.6, "process_ms": 7.4,
              **figures}
    from pyspark.sql.types import StringType, StructField, StructType

    schema = _progress.arrow_schema(StructType([StructField("k", StringType())]))
    row = _progress.metrics_batch(record, schema).column(_progress.METRICS_COLUMN)[0].as_py()
    assert (row["numRowsUpdated"], row["numRowsRemoved"], row["numRowsTotal"]) == (5, 3, 3)
    assert (row["commitTimeMs"], row["allUpdatesTimeMs"]) == (3, 7)
    assert row["numRowsDroppedByWatermark"] == 7 and row["numStateStoreInstances"] == 1
    assert row["shardsWithUnknownState"] == 0
