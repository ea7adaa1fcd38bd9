"""transform_batches' timers, without Spark, on a real shard LSM: the batch processor's task
(``operators/batch/_task.py``) against the per-key processor's (``operators/processor/
_runner.py``) on the same micro-batches, in processing time and in event time.

Random sequences of batches (rows registering and deleting timers, batches with no rows, late
rows) run through the per-key processor alone and through a run that switches processor at
random batches on the same state: the outputs are equal (``expired``'s rows in the per-key
processor's firing order), and so are the committed LSM records (timers pending across a
switch fire from either processor), the next-timer bound and the late-row count. Bad timer
calls are refused, naming the processor and the call, before anything is written.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import silt
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pycalls import python_calls
from silt.errors import InvalidArgumentError, InvalidTypeError
from silt_spark.operators.batch import _task as _batch_task
from silt_spark.operators.batch import _timers
from silt_spark.operators.processor import _runner
from silt_spark.runtime import _layout, _names, _schema
from silt_spark.runtime._schema import Declared
from test_spark_state import FakeTask

N = (("n", "bigint", False),)
N_ARROW = pa.schema([("n", pa.int64(), False)])
OUT = pa.schema([("k", pa.string()), ("what", pa.string()), ("ms", pa.int64())])
KEY_SCHEMA = pa.schema([("k", pa.string())])
KEYS = ["a", "b", "c", "é", ""]


def registry():
    return _schema.evolve({}, {"n": Declared("value", None, N, False)})


class PerKey:
    """Per row: ``t >= 0`` registers a timer at ``t``, ``t < 0`` deletes the key's timers;
    counts the key's rows. A fired timer adds 100 to the count, reports it, and registers a
    timer 500 ms later when its time is a multiple of 3000."""

    def init(self, handle):
        self.handle = handle
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = self.n.get()[0] if self.n.exists() else 0
        for df in rows:
            for t in df["t"].to_pylist():
                if t < 0:
                    for old in list(self.handle.listTimers()):
                        self.handle.deleteTimer(old)
                else:
                    self.handle.registerTimer(int(t))
            n += df.num_rows
        self.n.update((n,))
        yield (key[0], f"in:{n}:{len(list(self.handle.listTimers()))}",
               timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        n = (self.n.get()[0] if self.n.exists() else 0) + 100
        self.n.update((n,))
        t = expiredTimerInfo.getExpiryTimeInMs()
        if t % 3000 == 0:
            self.handle.registerTimer(t + 500)
        yield (key[0], f"fired:{n}", t)


class Batch:
    """PerKey's logic for all the keys of a batch at once."""

    def init(self, handle):
        handle.getValueState("n", "n long")

    def process(self, batch, state, timers):
        keys = batch.group_by("k", use_threads=False).aggregate([([], "count_all")])
        keys = keys.select(["k", "count_all"])
        idx = pa.array(np.arange(batch.num_rows))
        rows = batch.append_column("i", idx)
        cut = rows.filter(pc.less(rows["t"], 0)).group_by("k", use_threads=False).aggregate(
            [("i", "max")])
        last = dict(zip(cut["k"].to_pylist(), cut["i_max"].to_pylist()))
        after = pa.array([i > last.get(k, -1) for k, i in
                          zip(rows["k"].to_pylist(), rows["i"].to_pylist())])
        timed = pc.greater_equal(rows["t"], 0)
        # As PerKey's rows: timers registered before a key's last delete row are registered,
        # then deleted with the key's older ones (the shard's next-timer bound, a lower bound
        # that a delete leaves alone, keeps them), then the later rows' timers are registered.
        reg = rows.filter(pc.and_(pc.invert(after), timed))
        timers.register(reg.select(["k"]), reg["t"])
        if cut.num_rows:  # a key with a delete row: its timers so far go
            old = timers.list(cut.select(["k"]))
            timers.delete(old.select(["k"]), old["time"])
        reg = rows.filter(pc.and_(after, timed))
        timers.register(reg.select(["k"]), reg["t"])
        n = state.value("n")
        new = pc.add(pc.fill_null(n.get(keys)["n"], 0), keys["count_all"])
        n.put(keys, pa.table({"n": new}))
        pending = timers.list(keys.select(["k"])).group_by("k").aggregate([([], "count_all")])
        have = dict(zip(pending["k"].to_pylist(), pending["count_all"].to_pylist()))
        what = [f"in:{v}:{have.get(k, 0)}" for k, v in zip(keys["k"].to_pylist(),
                                                              new.to_pylist())]
        wm = timers.getCurrentWatermarkInMs()
        return pa.table({"k": keys["k"], "what": what, "ms": [wm] * keys.num_rows})

    def expired(self, keys, times, state):
        n = state.value("n")
        # a key may fire more than once: add 100 per timer, in firing order
        first = pc.fill_null(n.get(keys)["n"], 0).to_pylist()
        seen: dict[str, int] = {}
        out = []
        for k, base in zip(keys["k"].to_pylist(), first):
            seen[k] = seen.get(k, base) + 100
            out.append(seen[k])
        n.put(pa.table({"k": list(seen)}), pa.table({"n": list(seen.values())}))
        again = pa.array(np.asarray(times) % 3000 == 0)
        state.timers.register(keys.filter(again), pc.add(times.filter(again), 500))
        return pa.table({"k": keys["k"], "what": [f"fired:{v}" for v in out], "ms": times})


KGS = {"a": 3, "b": 3, "c": 200, "é": 17, "": 255}


def run(task, which, rows, mode, now_ms, monkeypatch):
    """One micro-batch of ``rows`` (``(key, t, ts)``) through the per-key (``"perkey"``) or
    the batch processor's task, at processing time ``now_ms``; its output as tuples."""
    monkeypatch.setattr(_runner._time, "time", lambda: now_ms / 1000)
    monkeypatch.setattr(_batch_task._time, "time", lambda: now_ms / 1000)
    batches = iter(())
    if rows:
        table = pa.table({
            "k": [k for k, _, _ in rows], "t": pa.array([t for _, t, _ in rows], pa.int64()),
            "ts": pa.array([ts for _, _, ts in rows], pa.int64()),
            _layout.KG_COLUMN: pa.array([KGS[k] for k, _, _ in rows], pa.int32()),
            _layout.PARTITION_COLUMN: pa.array([0] * len(rows), pa.int32()),
        })
        batches = iter(table.to_batches())
    if which == "perkey":
        out = _runner.process_partition(task, batches, PerKey(), ["k"], OUT, "arrow", mode,
                                        registry())
    else:
        out = _batch_task.process_partition(task, batches, Batch(), ["k"], OUT, registry(),
                                            {"n": N_ARROW}, {}, None, mode, KEY_SCHEMA)
    return [tuple(r.values()) for r in pa.Table.from_batches(list(out), schema=OUT).to_pylist()]


def state_of(task):
    """The shard's live committed records (a delete's tombstone aside: a timer registered
    and deleted in one batch leaves one only in the per-key processor) and the meta the
    timers keep."""
    meta = {k: task.base_meta.get(k) for k in (_names.META_NEXT_TIMER, _names.META_LATE_ROWS)}
    return [r for r in task.db.committed_records() if r[1] is not None], meta


ROWS = st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from([-1, *range(0, 15_000, 500)]),
                          st.integers(0, 15_000)), max_size=8)
BATCHES = st.lists(st.tuples(ROWS, st.integers(0, 4000), st.booleans()), min_size=1,
                   max_size=6)


@pytest.mark.parametrize("mode", ["processingtime", "eventtime"])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=BATCHES)
# a timer registered and then deleted by a later row of the same batch: the bound keeps it
@example(batches=[([("a", 10500, 0), ("a", -1, 0)], 0, True)])
def test_batch_timers_equal_the_per_key_processors_across_switches(
        tmp_path_factory, monkeypatch, mode, batches):
    """The same micro-batches through the per-key processor alone and through a run that
    switches to the batch processor (and back) at random batches, on one state: equal output
    (fired timers in the same order), equal committed records and timer meta after every
    batch (also with timers pending across each switch), and a restart (reopen) per batch."""
    cfg = _runner.TimeConfig(mode, "ts" if mode == "eventtime" else None, 0)
    root = tmp_path_factory.mktemp("timers")
    tasks = {name: FakeTask(silt.open((root / name).as_uri())) for name in ("ref", "mix")}
    now = 10_000
    watermark = 0
    try:
        for b, (rows, step, use_batch) in enumerate(batches):
            now += step
            watermark += step
            outs = {}
            for name, t in tasks.items():
                t.batch_id = b
                t.watermark = watermark if mode == "eventtime" else None
                which = "batch" if name == "mix" and use_batch else "perkey"
                outs[name] = run(t, which, rows, cfg, now, monkeypatch)
                t.commit(b)
            fires = {n: [r for r in o if r[1].startswith("fired")] for n, o in outs.items()}
            assert fires["mix"] == fires["ref"], (b, outs)  # in the same order
            assert sorted(outs["mix"]) == sorted(outs["ref"]), (b, outs)
            assert state_of(tasks["mix"]) == state_of(tasks["ref"]), b
        # and drain what is pending: far ahead, each processor fires the same
        for t in tasks.values():
            t.batch_id = len(batches)
            t.watermark = 10**9 if mode == "eventtime" else None
        last = [run(t, "batch" if name == "mix" else "perkey", [], cfg, 10**9, monkeypatch)
                for name, t in tasks.items()]
        assert last[0] == last[1]
        for t in tasks.values():
            t.commit(len(batches))
        assert state_of(tasks["mix"]) == state_of(tasks["ref"])
    finally:
        for t in tasks.values():
            t.db.close()


@pytest.fixture
def shard(file_url):
    t = FakeTask(silt.open(file_url))
    yield t
    t.db.close()


def _timers_of(task, mode="processingtime", names=("a", "b"), kgs=None):
    from silt_spark.operators.batch import BatchHandle
    from silt_spark.operators.batch._state import BatchKeys
    from silt_spark.runtime import _rowcodec

    handle = BatchHandle(task, "P", registry(), {"n": N_ARROW})
    handle.getValueState("n", "n long")
    keys = pa.table({"k": list(names)})
    encoded = _rowcodec.encode_tuples([keys["k"]]).to_list()
    handle._bind(BatchKeys(["k"], encoded, kgs or [KGS[k] for k in names], "P"))
    return _timers.BatchTimers(handle, mode, 0, -1)


NAMES = [f"u{i}" for i in range(12)]
TIMES = st.sampled_from([-(1 << 63), -5_000, -1, 0, 1, 7, 1 << 40, (1 << 63) - 1])
TIMER_CALLS = st.lists(st.tuples(
    st.sampled_from(["register", "delete", "list"]),
    st.lists(st.tuples(st.sampled_from(NAMES), TIMES), max_size=10)), max_size=10)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=TIMER_CALLS)
def test_timer_calls_over_many_keys_agree_with_a_model(tmp_path_factory, calls):
    """Random ``register``, ``delete`` and ``list`` calls over 12 keys in 12 key groups (a key
    any number of times in a call, times from the smallest to the largest int64): ``list``
    gives each key row's timers in the rows' order, then by time, as a set per key says; the
    calls before it in the batch are seen, a delete of a timer that is not there is nothing."""
    task = FakeTask(silt.open(tmp_path_factory.mktemp("many").as_uri()))
    try:
        t = _timers_of(task, names=NAMES, kgs=[i * 37 % 256 for i in range(len(NAMES))])
        model: dict[str, set[int]] = {k: set() for k in NAMES}
        for call, rows in calls:
            keys = pa.table({"k": pa.array([k for k, _ in rows], pa.string())})
            times = pa.array([ms for _, ms in rows], pa.int64())
            if call == "list":
                want = [{"k": k, "time": ms} for k, _ in rows for ms in sorted(model[k])]
                assert t.list(keys).to_pylist() == want
                continue
            getattr(t, call)(keys, times)
            for k, ms in rows:
                (model[k].add if call == "register" else model[k].discard)(ms)
        # and the shard-wide index holds exactly the same timers
        index = [k for k, _ in task.db.scan() if k[2:3] == b"T"]
        assert len(index) == sum(len(v) for v in model.values())
    finally:
        task.db.close()


@pytest.mark.parametrize("call, keys, times, error, message", [
    ("register", ["a", "b"], [1, None], InvalidArgumentError,
     r"P timers\.register: times hold a null \(row 1\)"),
    ("register", ["a", "b"], [1], InvalidArgumentError,
     r"P timers\.register: got 2 keys but 1 times"),
    ("delete", ["a"], [1, 2], InvalidArgumentError, r"P timers\.delete: got 1 keys but 2"),
    ("register", ["a", "zz"], [1, 2], InvalidArgumentError,
     r"P timers\.register: row 1 \('zz',\) is not a key of this batch"),
    ("list", ["q"], None, InvalidArgumentError, r"P timers\.list: row 0 \('q',\) is not a key"),
    ("register", ["a"], ["soon"], InvalidTypeError, r"P timers\.register: times must be int64"),
    ("register", ["a"], [1.5], InvalidArgumentError, r"P timers\.register: times do not fit"),
    ("register", [None], [1], InvalidArgumentError, r"P timers\.register: the key columns"),
])
def test_bad_timer_calls_are_refused_before_anything_is_written(shard, call, keys, times, error,
                                                                message):
    """Null or misshapen times, keys outside the batch: refused, naming the processor and the
    call, with nothing written."""
    task = shard
    t = _timers_of(task)
    t.register(pa.table({"k": ["a"]}), pa.array([500], pa.int64()))
    before = list(task.db.scan())
    task.changed = False
    args = (pa.table({"k": pa.array(keys, pa.string())}),) + (() if times is None else (times,))
    with pytest.raises(error, match=message):
        getattr(t, call)(*args)
    assert list(task.db.scan()) == before and not task.changed


def test_timers_need_a_time_mode_and_list_by_key_then_time(shard):
    """Without a time mode every timer call is refused; timestamps are taken as whole ms;
    ``list`` gives the key columns and ``time``, by key row then time."""
    task = shard
    off = _timers_of(task, "none")
    with pytest.raises(InvalidArgumentError, match=r"P timers\.register: timers need time_mode"):
        off.register(pa.table({"k": ["a"]}), [1])
    t = _timers_of(task)
    t.register(pa.table({"k": ["b", "a", "b"]}),
               pa.array([7_000_999, 5_000, 2_000], pa.timestamp("us")))
    t.register(pa.table({"k": ["a"]}), np.array([5]))
    got = t.list(pa.table({"k": ["b", "a", "b"]}))
    assert got.column_names == ["k", "time"] and got.schema.field("time").type == pa.int64()
    assert got.to_pylist() == [
        {"k": "b", "time": 2}, {"k": "b", "time": 7000}, {"k": "a", "time": 5},
        {"k": "b", "time": 2}, {"k": "b", "time": 7000}]
    t.delete(pa.table({"k": ["b", "a"]}), [7000, 4])  # a has no timer at 4: nothing happens
    assert t.list(pa.table({"k": ["a", "b"]}))["time"].to_pylist() == [5, 2]
    assert t.registered_min == 2


class Moved:
    """Each key row (one per key) moves its key's timer: the timers listed and deleted, one
    registered at the row's ``t``; a fired timer's time goes to the key's ``n``."""

    def init(self, handle):
        handle.getValueState("n", "n long")

    def process(self, batch, state, timers):
        keys = batch.select(["k"])
        old = timers.list(keys)
        timers.delete(old.select(["k"]), old["time"])
        timers.register(keys, batch["t"])

    def expired(self, keys, times, state):
        state.value("n").put(keys, pa.table({"n": times}))
        return pa.table({"k": keys["k"], "what": pa.array(["fired"] * len(keys)), "ms": times})


def test_timer_calls_and_firing_make_no_python_call_per_timer(tmp_path, monkeypatch):
    """Registering, listing, deleting and firing the timers of 40 and of 400 keys runs the
    same number of silt_spark Python functions (the timers' entries are built, read and
    taken apart with numpy and Arrow), with the right timers listed, moved and fired."""
    cfg = _runner.TimeConfig("processingtime", None, 0)
    counts = []
    for n in (4, 40, 400):  # the first, uncounted, imports what the stage imports lazily
        task = FakeTask(silt.open((tmp_path / str(n)).as_uri()))
        keys = [f"k{i}" for i in range(n)]
        calls, outs = [], []
        try:
            for b, (now, base) in enumerate([(1_000, 2_000), (1_500, 5_000), (10_000, None)]):
                monkeypatch.setattr(_batch_task._time, "time", lambda now=now: now / 1000)
                rows = [] if base is None else [pa.table({
                    "k": keys, "t": pa.array([base + i for i in range(n)], pa.int64()),
                    _layout.KG_COLUMN: pa.array([i % 256 for i in range(n)], pa.int32()),
                    _layout.PARTITION_COLUMN: pa.array([0] * n, pa.int32())}).to_batches()[0]]
                task.batch_id = b

                def batch(rows=rows, task=task, outs=outs):
                    outs.append(list(_batch_task.process_partition(
                        task, iter(rows), Moved(), ["k"], OUT, registry(), {"n": N_ARROW}, {},
                        None, cfg, KEY_SCHEMA)))

                calls.append(sum(python_calls(batch, "silt_spark").values()))
                task.commit(b)
            # batch 1 moved every timer from 2000 + i to 5000 + i; batch 2 fired them in order
            fired = pa.Table.from_batches(outs[2], schema=OUT).to_pylist()
            assert fired == [{"k": k, "what": "fired", "ms": 5_000 + i}
                             for i, k in enumerate(keys)]
            assert not outs[0] and not outs[1]
            live = [r for r in task.db.committed_records() if r[1] is not None]
            assert len(live) == n  # the n values; no timer entry left
            assert task.base_meta.get(_names.META_NEXT_TIMER) == ""
        finally:
            task.db.close()
        counts.append(calls)
    assert counts[1] == counts[2], counts
