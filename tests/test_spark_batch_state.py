"""transform_batches' list and map state (and TTL), without Spark, on a real shard LSM.

The same random calls made through the per-key processor's variables (one key at a time) and
through the batch processor's vectorized ones leave byte-for-byte the same LSM entries (and
the same expiry times, on an injected clock), whichever processor runs which batch; reads
through either processor return what the other wrote; a batch's list and map reads are one
``multi_scan`` and no scan or get per key. Bad arguments are refused, naming the processor,
the variable and what was wrong, before anything is written.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt.errors import InvalidArgumentError
from silt_spark.operators.batch import BatchHandle, BatchStates
from silt_spark.operators.batch._state import BatchKeys
from silt_spark.operators.processor import _handle as _processor
from silt_spark.runtime import _codec, _rowcodec, _schema
from silt_spark.runtime._schema import Declared
from test_spark_processor_api import FakeTask

LIST = (("ts", "bigint", False), ("tag", "string", True))
LIST_ARROW = pa.schema([("ts", pa.int64(), False), ("tag", pa.string())])
MKEY = (("d", "string", False), ("k", "int", True))
MKEY_ARROW = pa.schema([("d", pa.string(), False), ("k", pa.int32())])
MVAL = (("n", "bigint", False), ("x", "double", True))
MVAL_ARROW = pa.schema([("n", pa.int64(), False), ("x", pa.float64())])
KEYS = [("a", 1), ("b", 2), ("a", 2), ("", -5), ("c", None)]
KGS = [3, 3, 200, 17, 255]
COLUMNS = ["user", "region"]


def counted(db) -> FakeTask:
    """A FakeTask that also counts ``put_many`` and ``write`` batches."""
    task = FakeTask(db)
    for name in ("put_many", "write"):
        setattr(db, name, task._counted(name, getattr(db, name)))
    return task


def registry():
    return _schema.evolve({}, {"l": Declared("list", None, LIST, False),
                               "m": Declared("map", MKEY, MVAL, False)})


def key_table(idx: list[int]) -> pa.Table:
    return pa.table({"user": pa.array([KEYS[i][0] for i in idx], pa.string()),
                     "region": pa.array([KEYS[i][1] for i in idx], pa.int64())})


def per_key_handle(task, ttl=None):
    h = _processor.StatefulProcessorHandle(task, "none", registry())
    lst = h.getListState("l", "ts long, tag string", ttl)
    m = h.getMapState("m", "d string, k int", "n long, x double", ttl)
    h._prefetch((kg, _codec.encode(k)) for kg, k in zip(KGS, KEYS))
    return h, lst, m


def batch_handle(task, ttl=None):
    handle = BatchHandle(task, "P", registry(), {"l": LIST_ARROW, "m": MVAL_ARROW},
                         {"m": MKEY_ARROW})
    handle.getListState("l", "ts long, tag string", ttl)
    handle.getMapState("m", "d string, k int", "n long, x double", ttl)
    encoded = _rowcodec.encode_tuples(key_table(list(range(len(KEYS)))).columns).to_list()
    handle._bind(BatchKeys(COLUMNS, encoded, KGS, "P"))
    states = BatchStates(handle)
    return states.list("l"), states.map("m")


ELEMENT = st.tuples(st.integers(-5, 5), st.none() | st.text(max_size=3))
USER_KEY = st.tuples(st.sampled_from(["d1", "d2", "é"]), st.none() | st.integers(0, 2))
VALUE = st.tuples(st.integers(-9, 9), st.none() | st.floats(allow_nan=False, width=32))
KEY = st.integers(0, len(KEYS) - 1)
CALL = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(KEY, ELEMENT), max_size=6)),
    st.tuples(st.just("put"), st.lists(st.tuples(KEY, ELEMENT), max_size=6)),
    st.tuples(st.just("delete"), st.lists(KEY, max_size=3)),
    st.tuples(st.just("map_put"), st.lists(st.tuples(KEY, USER_KEY, VALUE), max_size=6,
                                           unique_by=lambda r: (r[0], r[1]))),
    st.tuples(st.just("map_remove"), st.lists(st.tuples(KEY, USER_KEY), max_size=4)),
    st.tuples(st.just("map_delete"), st.lists(KEY, max_size=3)),
)


def apply_per_key(task, calls, ttl):
    """The calls, one key at a time, through the per-key processor's variables."""
    h, lst, m = per_key_handle(task, ttl)

    def bind(i):
        h._bind(KGS[i], _codec.encode(KEYS[i]))

    for op, rows in calls:
        if op == "append":
            for i, el in rows:
                bind(i)
                lst.appendValue(el)
        elif op == "put":
            for i in dict.fromkeys(i for i, _ in rows):
                bind(i)
                lst.put([el for j, el in rows if j == i])
        elif op in ("delete", "map_delete"):
            for i in rows:
                bind(i)
                (lst if op == "delete" else m).clear()
        elif op == "map_put":
            for i, uk, v in rows:
                bind(i)
                m.updateValue(uk, v)
        else:
            for i, uk in rows:
                bind(i)
                m.removeKey(uk)


def apply_batch(task, calls, ttl):
    """The same calls, each one vectorized call of the batch processor's variables."""
    lst, m = batch_handle(task, ttl)
    for op, rows in calls:
        if op in ("append", "put"):
            elements = pa.Table.from_pylist([dict(zip(LIST_ARROW.names, el)) for _, el in rows],
                                            LIST_ARROW)
            getattr(lst, op)(key_table([i for i, _ in rows]), elements)
        elif op in ("delete", "map_delete"):
            (lst if op == "delete" else m).delete(key_table(rows))
        elif op == "map_put":
            m.put(key_table([r[0] for r in rows]),
                  pa.Table.from_pylist([dict(zip(MKEY_ARROW.names, r[1])) for r in rows],
                                       MKEY_ARROW),
                  pa.Table.from_pylist([dict(zip(MVAL_ARROW.names, r[2])) for r in rows],
                                       MVAL_ARROW))
        else:
            m.remove(key_table([r[0] for r in rows]),
                     pa.Table.from_pylist([dict(zip(MKEY_ARROW.names, r[1])) for r in rows],
                                          MKEY_ARROW))


def contents(db):
    """Every committed record (values with their expiry times) of the shard."""
    return list(db.committed_records())


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(CALL, max_size=5), min_size=1, max_size=4),
       batch_runs=st.lists(st.booleans(), min_size=4, max_size=4),
       ttl=st.sampled_from([None, 2_500]))
def test_lists_and_maps_write_what_the_per_key_processor_writes(tmp_path_factory, batches,
                                                                batch_runs, ttl):
    """Random calls over random batches (a second apart, on injected clocks): one shard runs
    every batch with the per-key processor, the other runs each batch with either processor;
    their committed records (values and expiry times) are equal, and what either reads is
    equal. With a 2.5 s TTL, entries written three batches back have expired."""
    clock_a, clock_b = silt.ManualClock(), silt.ManualClock()
    dbs = [silt.open(tmp_path_factory.mktemp("a").as_uri(), clock=clock_a),
           silt.open(tmp_path_factory.mktemp("b").as_uri(), clock=clock_b)]
    a, b = FakeTask(dbs[0]), FakeTask(dbs[1])
    try:
        for v, calls in enumerate(batches, start=1):
            apply_per_key(a, calls, ttl)
            (apply_batch if batch_runs[v - 1] else apply_per_key)(b, calls, ttl)
            a.changed = b.changed = True
            a.commit(v)
            b.commit(v)
            assert contents(dbs[0]) == contents(dbs[1]), f"after batch {v}"
            clock_a.advance(1000)
            clock_b.advance(1000)
        # reads: the batch processor's get is the per-key processor's, key by key
        lst, m = batch_handle(b, ttl)
        h, plst, pm = per_key_handle(a, ttl)
        every = key_table(list(range(len(KEYS))))
        got_list, got_map = lst.get(every).to_pylist(), m.get(every).to_pylist()
        want_list, want_map = [], []
        for i, key in enumerate(KEYS):
            h._bind(KGS[i], _codec.encode(key))
            k = dict(zip(COLUMNS, key))
            want_list += [{**k, **dict(zip(LIST_ARROW.names, el))} for el in plst.get()]
            want_map += [{**k, **dict(zip(MKEY_ARROW.names, uk)), **dict(zip(MVAL_ARROW.names, v))}
                         for uk, v in pm.iterator()]
        assert got_list == want_list
        assert got_map == [{**r, "x": r["x"]} for r in want_map]
        assert lst.exists(every).to_pylist() == [
            any(r["user"] == u and r["region"] == g for r in want_list) for u, g in KEYS]
    finally:
        for db in dbs:
            db.close()


def test_a_batch_reads_its_lists_and_maps_with_one_multi_scan(tmp_path):
    """However many keys and variables: one multi_scan, no scan, no get; writes read back
    in the same batch (appends after the committed elements, a put replacing a list)."""
    task = FakeTask(silt.open(tmp_path.as_uri()))
    try:
        apply_per_key(task, [("append", [(i, (i, "x")) for i in range(len(KEYS))]),
                             ("map_put", [(i, ("d1", 1), (i, 0.5)) for i in range(len(KEYS))])],
                      None)
        task.commit(1)
        db = task.db
        calls = []
        for name in ("multi_scan", "scan", "get", "multi_get"):
            real = getattr(db, name)
            setattr(db, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
        lst, m = batch_handle(task)
        assert calls == ["multi_scan"]
        every = key_table(list(range(len(KEYS))))
        assert lst.get(every).column("ts").to_pylist() == list(range(len(KEYS)))
        lst.append(key_table([1, 1, 0]), pa.table({"ts": [7, 8, 9], "tag": [None, "y", "z"]}))
        lst.put(key_table([2]), pa.table({"ts": [5], "tag": ["p"]}))
        m.remove(key_table([0]), pa.table({"d": ["d1"], "k": [1]}))
        got = lst.get(key_table([0, 1, 2]))
        assert got.select(["user", "region", "ts"]).to_pylist() == [
            {"user": "a", "region": 1, "ts": 0}, {"user": "a", "region": 1, "ts": 9},
            {"user": "b", "region": 2, "ts": 1}, {"user": "b", "region": 2, "ts": 7},
            {"user": "b", "region": 2, "ts": 8}, {"user": "a", "region": 2, "ts": 5}]
        assert m.get(key_table([0, 1])).column("n").to_pylist() == [1]
        assert m.exists(key_table([0, 1])).to_pylist() == [False, True]
        assert calls == ["multi_scan"]
    finally:
        task.db.close()


def test_list_and_map_calls_refuse_bad_arguments_before_writing(tmp_path):
    """Each refusal names the processor, the variable and the call; nothing is written."""
    task = counted(silt.open(tmp_path.as_uri()))
    try:
        lst, m = batch_handle(task)
        keys = key_table([0, 1])
        el = pa.table({"ts": [1, 2], "tag": ["x", None]})
        uk = pa.table({"d": ["d1", "d2"], "k": [1, None]})
        val = pa.table({"n": [1, 2], "x": [0.5, None]})
        cases = [
            (lambda: lst.append(keys, el.slice(0, 1)),
             "P state 'l'.append: got 2 keys but 1 element rows"),
            (lambda: lst.put(keys, el.drop_columns(["tag"])),
             "P state 'l'.put: elements have the columns ['ts']"),
            (lambda: lst.append(keys, pa.table({"ts": [1, None], "tag": ["x", "y"]})),
             "P state 'l'.append"),
            (lambda: lst.get(pa.table({"user": ["zz"], "region": [1]})),
             "P state 'l'.get: row 0 ('zz', 1) is not a key of this batch"),
            (lambda: lst.delete(pa.table({"user": pa.array([None], pa.string()),
                                          "region": [1]})), "hold a null in row 0"),
            (lambda: m.put(keys, uk.slice(0, 1), val),
             "P state 'm'.put: got 2 keys but 1 user key rows"),
            (lambda: m.put(keys, uk, val.slice(0, 1)),
             "P state 'm'.put: got 2 keys but 1 value rows"),
            (lambda: m.put(key_table([0, 0]), pa.table({"d": ["d1", "d1"], "k": [1, 1]}), val),
             "the same user key is given more than once"),
            (lambda: m.put(keys, pa.table({"d": ["d1", None], "k": [1, 1]}), val),
             "P state 'm'.put: user keys do not fit the variable's schema"),
            (lambda: m.remove(keys, pa.table({"device": ["d1", "d2"]})),
             "P state 'm'.remove: user keys have the columns ['device']"),
            (lambda: m.put(keys, uk, pa.table({"n": ["a", "b"], "x": [1.0, 2.0]})),
             "P state 'm'.put: values do not fit"),
            (lambda: BatchStates(lst._handle).list("m"), "P has no list state 'm' (it is a map"),
        ]
        for call, words in cases:
            with pytest.raises(InvalidArgumentError) as e:
                call()
            assert words in str(e.value), str(e.value)
        assert task.writes == [] and not task.changed
    finally:
        task.db.close()


def test_value_ttl_is_the_per_key_processors(tmp_path):
    """A value put with a TTL has the per-key processor's expiry (one clock, the same ms);
    a later put restarts it; the value reads as absent once it expired, in both processors."""
    clock = silt.ManualClock()
    task = counted(silt.open(tmp_path.as_uri(), clock=clock))
    reg = _schema.evolve({}, {"v": Declared("value", None, MVAL, False)})
    keys = key_table([0, 1])
    try:
        h = _processor.StatefulProcessorHandle(task, "none", reg)
        per_key = h.getValueState("v", "n long, x double", 10_000)
        h._prefetch((kg, _codec.encode(k)) for kg, k in zip(KGS[:2], KEYS[:2]))
        h._bind(KGS[0], _codec.encode(KEYS[0]))
        per_key.update((1, None))
        handle = BatchHandle(task, "P", reg, {"v": MVAL_ARROW})
        var = handle.getValueState("v", "n long, x double", 10_000)
        encoded = _rowcodec.encode_tuples(keys.columns).to_list()
        handle._bind(BatchKeys(COLUMNS, encoded, KGS[:2], "P"))
        var.put(key_table([1]), pa.table({"n": [2], "x": [0.5]}))
        assert [w[0] for w in task.writes] == ["put", "write"]  # a TTL: one write batch
        task.commit(1)
        expiry = {k: r[1] for k, r in task.db.committed_records()}
        assert sorted(expiry.values()) == [clock.now_ms() + 10_000] * 2

        clock.advance(6_000)
        handle = BatchHandle(task, "P", reg, {"v": MVAL_ARROW})
        var = handle.getValueState("v", "n long, x double", 10_000)
        handle._bind(BatchKeys(COLUMNS, encoded, KGS[:2], "P"))
        assert var.get(keys).column("n").to_pylist() == [1, 2]
        var.put(key_table([0]), pa.table({"n": [3], "x": [None]}))  # restarts key 0's TTL
        task.commit(2)

        clock.advance(6_000)  # key 1 (12 s old) expired, key 0 (6 s) not
        handle = BatchHandle(task, "P", reg, {"v": MVAL_ARROW})
        var = handle.getValueState("v", "n long, x double", 10_000)
        handle._bind(BatchKeys(COLUMNS, encoded, KGS[:2], "P"))
        assert var.get(keys).column("n").to_pylist() == [3, None]
        assert var.exists(keys).to_pylist() == [True, False]
        h = _processor.StatefulProcessorHandle(task, "none", reg)
        per_key = h.getValueState("v", "n long, x double", 10_000)
        h._prefetch((kg, _codec.encode(k)) for kg, k in zip(KGS[:2], KEYS[:2]))
        got = []
        for kg, k in zip(KGS[:2], KEYS[:2]):
            h._bind(kg, _codec.encode(k))
            got.append(per_key.get())
        assert got == [(3, None), None]
    finally:
        task.db.close()
