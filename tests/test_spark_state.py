"""silt_spark's state code without Spark: state variables (incl. TTL on a manual clock) and the
vectorized aggregation merge (incl. nulls), each against a plain Python model."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import silt
from pyspark.sql import types as T
from silt_spark.errors import ForeignStateError, StateAheadError
from silt_spark.operators import _aggregation, _varkeys
from silt_spark.operators import aggregate as _aggregate
from silt_spark.operators.processor import _handle as _processor
from silt_spark.operators.processor import _runner
from silt_spark.runtime import _codec, _layout, _names, _root


class FakeTask:
    """What the state code needs from a ShardTask: a DB, a key-group range, a changed flag."""

    def __init__(self, db):
        self.db = db
        self.changed = False
        self.first_kg, self.last_kg = 0, 255
        self.shard = 0
        self.url = db.url
        self.base_meta = db.meta
        self.meta_updates = {}
        #: The query-wide watermark the test gives the batch, and the event times reported.
        self.watermark = None
        self.seen = []
        #: Without silt's tick source: a batch's rows are late against its own watermark.
        self.spec = _root.OperatorSpec(kind="processor", root=db.url, num_shards=1)

    @property
    def late_watermark(self):
        return self.watermark

    def observe_event_time(self, max_ms, input_index=0):
        self.seen.append(max_ms)

    def commit(self, version):
        """Commit like ShardTask.finish, then reopen (as a restarted worker would)."""
        if self.changed:
            self.db.commit(version, meta=self.meta_updates)
        self.db.close()
        self.db = silt.open(self.url)
        self.base_meta = self.db.meta
        self.meta_updates = {}
        self.changed = False


@pytest.fixture
def clock():
    return silt.ManualClock()


@pytest.fixture
def task(file_url, clock):
    t = FakeTask(silt.open(file_url, clock=clock))
    yield t
    t.db.close()


def test_state_variables_are_per_key_and_typed(task):
    h = _processor.StatefulProcessorHandle(task)
    v = h.getValueState("v", "x long")
    lst = h.getListState("l", "x long")
    m = h.getMapState("m", "k string", "x long")
    with pytest.raises(RuntimeError, match="inside handleInputRows"):
        v.get()
    with pytest.raises(ValueError, match="already a ValueState"):
        h.getMapState("v")
    for kg, key in ((3, ("alice",)), (200, ("bob",))):
        h._prefix = _varkeys.key_prefix(kg, _codec.encode(key))
        assert v.get() is None and not v.exists()
        v.update((len(key[0]), key[0]))
        lst.appendValue((1,))
        lst.appendList([(2,), (3,)])
        m.updateValue(("a",), (1,))
        m.updateValue(("b", 2), (2, "x"))
    assert task.changed
    h._prefix = _varkeys.key_prefix(3, _codec.encode(("alice",)))
    assert v.get() == (5, "alice")
    assert list(lst.get()) == [(1,), (2,), (3,)]
    assert sorted(m.keys()) == [("a",), ("b", 2)]
    assert m.getValue(("b", 2)) == (2, "x") and m.containsKey(("a",))
    m.removeKey(("a",))
    assert list(m.iterator()) == [(("b", 2), (2, "x"))]
    m.clear()
    lst.clear()
    v.clear()
    assert not m.exists() and not lst.exists() and not v.exists()
    # Bob's state is untouched, and everything survives a commit and reopen.
    task.db.commit(0)
    db = silt.open(task.db.url)
    task.db.close()
    task.db = db
    h._prefix = _varkeys.key_prefix(200, _codec.encode(("bob",)))
    assert v.get() == (3, "bob") and len(list(m.values())) == 2
    # Every key starts with its key group (rescaling clips SSTs by key-group range).
    assert {k[:2] for k, _ in db.scan()} == {(200).to_bytes(2, "big")}


def test_ttl_expires_and_restarts_on_update(task, clock):
    h = _processor.StatefulProcessorHandle(task)
    v = h.getValueState("v", "x long", ttlDurationMs=1000)
    m = h.getMapState("m", "k string", "x long", ttlDurationMs=1000)
    h._prefix = _varkeys.key_prefix(0, b"k")
    v.update((1,))
    m.updateValue(("a",), (1,))
    clock.advance(600)
    m.updateValue(("b",), (2,))
    v.update((2,))  # restarts v's TTL
    clock.advance(600)
    assert v.get() == (2,)
    assert list(m.keys()) == [("b",)]  # "a" expired, "b" was written later
    clock.advance(600)
    assert v.get() is None and not m.exists()
    with pytest.raises(ValueError, match="ttlDurationMs"):
        h.getValueState("w", None, ttlDurationMs=0)


def _fields(**types):
    return T.StructType([T.StructField(n, t) for n, t in types.items()])


def test_aggregate_merge_matches_pandas_with_nulls(task):
    schema = _fields(k=T.StringType(), i=T.IntegerType(), f=T.DoubleType())
    aggs = _aggregation.parse_aggs(
        ["count", "count(i)", "sum(i)", "min(i)", "max(i)", "avg(i)", "sum(f)", "max(f)",
         "avg(f)"]
    )
    p, _, _ = _aggregation.plan(schema, ["k"], aggs)
    rng = np.random.default_rng(7)
    seen = []
    for b in range(4):
        n = 300
        k = [f"k{x}" for x in rng.integers(0, 25, n)]
        i = [None if x < 15 else int(x) - 50 for x in rng.integers(0, 100, n)]
        f = [None if x < 0.2 else float(x) for x in rng.random(n)]
        if b == 1:  # a key whose values are all null in this batch
            k += ["only-null"] * 3
            i += [None] * 3
            f += [None] * 3
        batch = pa.table({"k": k, "i": pa.array(i, pa.int32()), "f": f})
        seen.append(batch.to_pandas())
        # Two input partitions -> two partial rows per key, as before a real shuffle.
        halves = [batch.slice(0, 150), batch.slice(150)]
        partials = [
            pb for h in halves for pb in _aggregation.partial_aggregate(iter(h.to_batches()), p)
        ]
        pt = pa.Table.from_batches(partials)
        kg = pa.array([zlib.crc32(x.encode()) % 256 for x in pt["k"].to_pylist()], pa.int32())
        pt = pt.append_column(_layout.KG_COLUMN, kg).append_column(_layout.PARTITION_COLUMN, kg)
        table = pa.Table.from_batches(
            list(_aggregate.merge_partition(task, iter(pt.to_batches()), p))
        )
        # Spark's types: count/sum(int) long, avg double, min/max keep the column's type.
        assert [table.schema.field(c).type for c in ("count", "sum(i)", "min(i)", "avg(i)")] == [
            pa.int64(), pa.int64(), pa.int32(), pa.float64()
        ]
        out = table.to_pandas().sort_values("k").reset_index(drop=True)
        task.db.commit(b)

        allrows = pd.concat(seen)
        allrows = allrows[allrows["k"].isin(set(k))]
        g = allrows.groupby("k")
        want = pd.DataFrame({
            "count": g.size(), "count(i)": g["i"].count(), "sum(i)": g["i"].sum(min_count=1),
            "min(i)": g["i"].min(), "max(i)": g["i"].max(), "avg(i)": g["i"].mean(),
            "sum(f)": g["f"].sum(min_count=1), "max(f)": g["f"].max(), "avg(f)": g["f"].mean(),
        }).reset_index()
        pd.testing.assert_frame_equal(out, want, check_dtype=False)


def test_aggregate_plan_rejects_unsupported_columns():
    schema = _fields(k=T.StringType(), s=T.StringType())
    with pytest.raises(TypeError, match="integral and floating"):
        _aggregation.plan(schema, ["k"], _aggregation.parse_aggs(["sum(s)"]))
    with pytest.raises(ValueError, match="not in the DataFrame"):
        _aggregation.plan(schema, ["k"], _aggregation.parse_aggs(["sum(x)"]))


class _Sum:
    """Counts rows and sums ``x`` per key; yields its row as a tuple, dict or DataFrame."""

    def __init__(self, shape):
        self.shape = shape

    def init(self, handle):
        self.state = handle.getValueState("s", "n long, total long")

    def handleInputRows(self, key, rows, timerValues):
        n, total = self.state.get() or (0, 0)
        for part in rows:
            if isinstance(part, pa.Table):
                n += part.num_rows
                total += sum(part["x"].to_pylist())
            else:
                n += len(part)
                total += int(part["x"].sum())
        self.state.update((n, total))
        if self.shape == "tuple":
            yield (key[0], n, total)
        elif self.shape == "dict":
            yield {"total": total, "k": key[0], "n": n}
        else:
            yield pd.DataFrame({"k": [key[0]], "n": [n], "total": [total]})


@pytest.mark.parametrize(
    "rows_format,shape", [("pandas", "frame"), ("arrow", "tuple"), ("arrow", "dict")]
)
def test_process_partition_input_and_output_shapes(task, rows_format, shape):
    out_schema = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])
    keys = ["a", "b", "a", "c", "b", "a"]
    table = pa.table({
        "k": keys, "x": [1, 2, 3, 4, 5, 6],
        _layout.KG_COLUMN: pa.array([ord(k) for k in keys], pa.int32()),
        _layout.PARTITION_COLUMN: pa.array([0] * 6, pa.int32()),
    })
    want = {"a": (3, 10), "b": (2, 7), "c": (1, 4)}
    for round_ in (1, 2):
        out = pa.Table.from_batches(list(_runner.process_partition(
            task, iter(table.to_batches(max_chunksize=4)), _Sum(shape), ["k"], out_schema,
            rows_format,
        )), schema=out_schema)
        got = {r["k"]: (r["n"], r["total"]) for r in out.to_pylist()}
        assert got == {k: (n * round_, t * round_) for k, (n, t) in want.items()}


def test_shard_task_rerun_with_a_warm_handle_reads_the_older_base(tmp_path):
    """A worker that cached the shard at version b must not use that handle (nor its partial
    listing) when batch b runs again: the re-run starts from b - 1 and commits nothing."""
    from silt_spark.runtime import _handles, _shard

    root = tmp_path.as_uri()
    spec = _root.OperatorSpec("processor", root, 1)

    def run(batch_id, value):
        t = _shard.ShardTask(spec, 0, batch_id, "query-1", 0)
        before = t.db.get(b"k")
        t.db.put(b"k", value)
        t.changed = True
        t.finish()
        t.release(True)
        return before, t.replay

    try:
        assert run(0, b"0") == (None, False)
        assert run(0, b"y") == (None, True)  # re-run of the first batch: empty base
        assert run(1, b"1") == (b"0", False)  # warm: the cached handle is at version 0
        assert run(1, b"x") == (b"0", True)  # re-run with the handle cached at version 1
        assert run(2, b"2") == (b"1", False)
        url = _layout.shard_url(root, 0, 1, spec.key_groups)
        assert silt.versions(url) == [0, 1, 2]
        # (a task opens its shard on first use, and fails there)
        with pytest.raises(StateAheadError, match="newer than micro-batch 1"):
            _ = _shard.ShardTask(spec, 0, 1, "query-1", 0).db
        with pytest.raises(ForeignStateError, match="belongs to streaming query query-1"):
            _ = _shard.ShardTask(spec, 0, 3, "query-2", 0).db
    finally:
        _handles.drop_cached_handles()


def test_shard_task_reopens_a_warm_handle_another_worker_moved_past(tmp_path):
    """Two Python workers cache the same shard: a handle cached at version 0 must not be the
    base of batch 2 when the other worker committed batch 1."""
    from silt_spark.runtime import _handles, _shard

    spec = _root.OperatorSpec("processor", tmp_path.as_uri(), 1)

    def run(batch_id):
        t = _shard.ShardTask(spec, 0, batch_id, "query-1", 0)
        n = int(t.db.get(b"k") or b"0") + 1
        t.db.put(b"k", str(n).encode())
        t.changed = True
        t.finish()
        t.release(True)
        return n

    try:
        url = spec.shard_url(0)
        assert run(0) == 1
        worker_a = _handles.CACHE.pop(url)  # worker A keeps its handle at version 0
        assert run(1) == 2  # worker B runs batch 1
        _handles.CACHE.pop(url).db.close()
        _handles.CACHE[url] = worker_a  # batch 2 lands on worker A again
        assert run(2) == 3
    finally:
        _handles.drop_cached_handles()


class _Timers:
    """Registers a timer per input row at its ``t`` (``t < 0``: delete the key's timers)."""

    def init(self, handle):
        self.handle = handle
        self.seen = handle.getValueState("seen")

    def handleInputRows(self, key, rows, timerValues):
        for df in rows:
            for t in df["t"]:
                if t < 0:
                    for old in list(self.handle.listTimers()):
                        self.handle.deleteTimer(old)
                else:
                    self.handle.registerTimer(int(t))
        self.seen.update((True,))
        yield (key[0], "in", timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        assert self.seen.get() == (True,)  # state is bound to the timer's key
        assert expiredTimerInfo.isValid()
        yield (key[0], "fired", expiredTimerInfo.getExpiryTimeInMs())


_TIMER_OUT = pa.schema([("k", pa.string()), ("what", pa.string()), ("ms", pa.int64())])


def _timer_batch(task, rows, mode, now_s=0.0, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(_runner._time, "time", lambda: now_s)
    if rows:
        keys = [k for k, _, _ in rows]
        table = pa.table({
            "k": keys, "t": [t for _, t, _ in rows], "ts": [ts for _, _, ts in rows],
            _layout.KG_COLUMN: pa.array([ord(k) for k in keys], pa.int32()),
            _layout.PARTITION_COLUMN: pa.array([0] * len(rows), pa.int32()),
        })
        batches = iter(table.to_batches())
    else:
        batches = iter(())
    out = pa.Table.from_batches(list(_runner.process_partition(
        task, batches, _Timers(), ["k"], _TIMER_OUT, "pandas", mode,
    )), schema=_TIMER_OUT)
    return [tuple(r.values()) for r in out.to_pylist()]


def test_processing_time_timers_fire_once_in_order_and_survive_restarts(task, monkeypatch):
    mode = _runner.TimeConfig("processingtime")
    scans = []
    real = _runner._due_timers
    monkeypatch.setattr(_runner, "_due_timers", lambda t, th: scans.append(th) or real(t, th))
    got = _timer_batch(task, [("a", 1000, 0), ("a", 5000, 0), ("b", 3000, 0)], mode, 0.0,
                       monkeypatch)
    assert sorted(got) == [("a", "in", -1), ("b", "in", -1)]
    task.commit(0)
    assert task.base_meta[_names.META_NEXT_TIMER] == "1000"
    # No rows for the shard: due timers fire anyway, oldest first, each once.
    assert _timer_batch(task, [], mode, 3.5, monkeypatch) == [
        ("a", "fired", 1000), ("b", "fired", 3000)
    ]
    task.commit(1)
    assert task.base_meta[_names.META_NEXT_TIMER] == "5000"
    scans.clear()
    assert _timer_batch(task, [], mode, 4.0, monkeypatch) == []
    assert scans == []  # the meta's lower bound says nothing is due: no scan
    task.commit(2)
    # a deletes its timers; nothing fires later and the bound is dropped.
    assert _timer_batch(task, [("a", -1, 0)], mode, 4.5, monkeypatch) == [("a", "in", -1)]
    task.commit(3)
    assert _timer_batch(task, [], mode, 100.0, monkeypatch) == []
    task.commit(4)
    assert task.base_meta[_names.META_NEXT_TIMER] == ""
    h = _processor.StatefulProcessorHandle(task)
    with pytest.raises(RuntimeError, match="time_mode"):
        h.registerTimer(5)


def test_event_time_timers_fire_on_the_query_watermark(task):
    """The batch's watermark comes from the query (tests/test_spark_event_time.py checks it
    against Spark): timers at or before it fire, before the batch's rows, also in a shard with
    no rows; late rows never reach the processor; the shard reports its largest event time."""
    mode = _runner.TimeConfig("eventtime", "ts", 1000)
    task.watermark = 0
    got = _timer_batch(task, [("a", 4000, 5000), ("b", 4500, 2000)], mode)
    assert sorted(got) == [("a", "in", 0), ("b", "in", 0)]
    assert task.seen == [5000]
    task.commit(0)
    task.watermark = 4000  # batch 1: no rows for this shard; a's timer fires, b's waits
    assert _timer_batch(task, [], mode) == [("a", "fired", 4000)]
    task.commit(1)
    # Late rows (event time at or before the watermark) never reach the processor.
    assert _timer_batch(task, [("c", 9000, 100), ("d", 9000, 4000)], mode) == []
    assert task.seen == [5000, 4000]
    assert task.meta_updates[_names.META_LATE_ROWS] == "2"
    task.commit(2)
    task.watermark = 4500  # b's timer was due before batch 3: it fires before a's row
    got = _timer_batch(task, [("a", 99_999, 6000)], mode)
    assert got == [("b", "fired", 4500), ("a", "in", 4500)]
