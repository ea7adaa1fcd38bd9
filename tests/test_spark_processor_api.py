"""The processor API's list state (one entry per element, reading lists stored whole by older
versions) on a real shard LSM without Spark, and read_state's decoding of it."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
import silt
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle
from silt.errors import InvalidArgumentError, InvalidTypeError
from silt_spark.operators import _varkeys
from silt_spark.operators.processor import _builder, _reader, _runner, _user
from silt_spark.operators.processor import _handle as _processor
from silt_spark.runtime import _codec, _schema
from silt_spark.runtime._schema import Declared

# Spark's own operator unpickles the processor in a worker that cannot import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FakeTask:
    """What the state code needs from a ShardTask, counting the writes to its DB."""

    def __init__(self, db):
        self.db = db
        self.changed = False
        self.first_kg, self.last_kg = 0, 255
        self.base_meta = db.meta
        self.meta_updates = {}
        self.writes = []
        for name in ("put", "delete", "delete_range"):
            real = getattr(db, name)
            setattr(db, name, self._counted(name, real))

    def _counted(self, name, real):
        def write(*args, **kwargs):
            self.writes.append((name, args))
            return real(*args, **kwargs)
        return write

    def commit(self, version):
        if self.changed:
            self.db.commit(version, meta=self.meta_updates)
        self.base_meta = self.db.meta
        self.meta_updates = {}
        self.changed = False
        self.writes = []


@pytest.fixture
def task(file_url):
    t = FakeTask(silt.open(file_url))
    yield t
    t.db.close()


LIST_SCHEMA = (("ts", "bigint", False), ("tag", "string", True))


def _handle(task, registry=None, keys=((3, ("alice",)),)):
    """A batch's handle with ``l`` declared (typed when ``registry``), keys prefetched."""
    h = _processor.StatefulProcessorHandle(task, "none", registry)
    lst = h.getListState("l")
    h._prefetch((kg, _codec.encode(k)) for kg, k in keys)
    return h, lst


def _bind(h, kg, key):
    h._bind(kg, _codec.encode(key))


def _typed():
    return _schema.evolve({}, {"l": Declared("list", None, LIST_SCHEMA, False)})


@pytest.mark.parametrize("typed", [False, True])
def test_appending_to_a_long_list_writes_only_the_appended_elements(task, typed):
    reg = _typed() if typed else None
    h, lst = _handle(task, reg)
    _bind(h, 3, ("alice",))
    rows = [(i, f"t{i}") for i in range(1000)]
    lst.put(rows)
    task.commit(1)

    h, lst = _handle(task, reg)
    _bind(h, 3, ("alice",))
    lst.appendValue((1000, "x"))
    assert [w[0] for w in task.writes] == ["put"]
    assert len(task.writes[0][1][1]) < 40  # the element's bytes, not the list's
    task.writes.clear()
    lst.appendList([(1001, None), (1002, "y")])
    assert [w[0] for w in task.writes] == ["put", "put"]
    assert list(lst.get()) == [*rows, (1000, "x"), (1001, None), (1002, "y")]
    task.commit(2)

    # put replaces with one range delete and a write per element; clear is one range delete
    h, lst = _handle(task, reg)
    _bind(h, 3, ("alice",))
    lst.put([(7, "a")])
    assert [w[0] for w in task.writes] == ["delete_range", "put"]
    assert list(lst.get()) == [(7, "a")]
    task.commit(3)
    h, lst = _handle(task, reg)
    _bind(h, 3, ("alice",))
    assert list(lst.get()) == [(7, "a")] and lst.exists()
    task.writes.clear()
    lst.clear()
    assert [w[0] for w in task.writes] == ["delete_range"] and not lst.exists()
    task.writes.clear()
    lst.clear()  # nothing left: nothing written
    assert task.writes == []
    task.commit(4)
    h, lst = _handle(task, reg)
    _bind(h, 3, ("alice",))
    assert list(lst.get()) == []


@pytest.mark.parametrize("typed", [False, True])
def test_a_list_stored_whole_by_older_versions_survives_the_upgrade(task, typed):
    """A root written with one entry per list (before lists had one entry per element) reads
    the same, takes appends after its elements, and is replaced whole by put."""
    reg = _typed() if typed else None
    old = [(1, "a"), (2, None)]
    codec = _schema.codecs(reg).get("l")
    whole = _codec.encode(old) if codec is None else codec.encode_list(old)
    for kg, key in ((3, ("alice",)), (9, ("bob",))):
        task.db.put(_varkeys.key_prefix(kg, _codec.encode(key)) + _varkeys._name_bytes("l"),
                    whole)
    task.changed = True
    task.commit(1)

    keys = ((3, ("alice",)), (9, ("bob",)))
    h, lst = _handle(task, reg, keys)
    _bind(h, 3, ("alice",))
    assert list(lst.get()) == old
    lst.appendValue((3, "c"))
    assert [w[0] for w in task.writes] == ["put"]
    assert list(lst.get()) == [*old, (3, "c")]
    _bind(h, 9, ("bob",))
    lst.put([(9, "z")])
    assert list(lst.get()) == [(9, "z")]
    task.commit(2)

    h, lst = _handle(task, reg, keys)
    _bind(h, 3, ("alice",))
    assert list(lst.get()) == [*old, (3, "c")]
    _bind(h, 9, ("bob",))
    assert list(lst.get()) == [(9, "z")]
    # read_state shows each list as one row, older and newer elements together
    items = [(k, v, None, 2) for k, v in task.db.scan()]
    rows = {(r[0], r[1]): json.loads(r[3]) for r in _reader.decode(iter(items), reg)}
    assert rows == {(("alice",), "l"): [[1, "a"], [2, None], [3, "c"]],
                    (("bob",), "l"): [[9, "z"]]}
    # typed read_state's entries: the older whole list, then the elements
    entries = [(r[0], r[2], r[3]) for r in _reader.decode_typed(iter(items), reg, "l")]
    assert entries == [(("alice",), None, old), (("alice",), True, (3, "c")),
                       (("bob",), True, (9, "z"))]


_ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 99)),
    st.tuples(st.just("extend"), st.lists(st.integers(0, 99), max_size=3)),
    st.tuples(st.just("put"), st.lists(st.integers(0, 99), max_size=3)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("commit")),
), max_size=12)


@settings(max_examples=25, deadline=None)
@given(old=st.lists(st.integers(0, 99), max_size=3), ops=_ops, typed=st.booleans())
def test_list_state_matches_a_python_list(tmp_path_factory, old, ops, typed):
    url = tmp_path_factory.mktemp("lst").as_uri()
    task = FakeTask(silt.open(url))
    try:
        reg = _typed() if typed else None
        model = [(x, None) for x in old]
        if old:
            codec = _schema.codecs(reg).get("l")
            task.db.put(
                _varkeys.key_prefix(3, _codec.encode(("a",))) + _varkeys._name_bytes("l"),
                _codec.encode(model) if codec is None else codec.encode_list(model),
            )
            task.changed = True
        version = 1
        h, lst = _handle(task, reg, ((3, ("a",)),))
        _bind(h, 3, ("a",))
        for op in ops:
            if op[0] == "append":
                lst.appendValue((op[1], None))
                model.append((op[1], None))
            elif op[0] == "extend":
                lst.appendList([(x, None) for x in op[1]])
                model.extend((x, None) for x in op[1])
            elif op[0] == "put":
                lst.put([(x, None) for x in op[1]])
                model = [(x, None) for x in op[1]]
            elif op[0] == "clear":
                lst.clear()
                model = []
            else:
                task.commit(version)
                version += 1
                h, lst = _handle(task, reg, ((3, ("a",)),))
                _bind(h, 3, ("a",))
            assert list(lst.get()) == model
        task.commit(version)
        h, lst = _handle(task, reg, ())  # not prefetched: read from the DB
        _bind(h, 3, ("a",))
        assert list(lst.get()) == model
    finally:
        task.db.close()


# --- handleInitialState on a real SparkSession, against Spark's own ------------------------------

try:
    from pyspark.sql.streaming import StatefulProcessor as SparkProcessor
except ImportError:  # pragma: no cover - PySpark < 4
    SparkProcessor = object


class Seeded(SparkProcessor):
    """A running sum per user, seeded from the initial state (the sum of its ``seed`` rows)."""

    def init(self, handle):
        self.n = handle.getValueState("n", "n long")
        self.amounts = handle.getListState("amounts", "amount long, tag string")
        self.last = handle.getMapState("last", "user string", "amount long")

    def handleInitialState(self, key, initialState, timerValues):
        self.n.update((int(initialState["seed"].sum()) + 1000 * len(initialState),))

    def handleInputRows(self, key, rows, timerValues):
        n = self.n.get()[0] if self.n.exists() else 0
        for df in rows:
            n += int(df["amount"].sum())
            self.amounts.appendList([(int(a), "t") for a in df["amount"]])
            self.last.updateValue((key[0],), (int(df["amount"].iloc[-1]),))
        self.n.update((n,))
        yield pd.DataFrame({"user": [key[0]], "n": [n]})


class _Stream:
    """A JSON source folder (one file per micro-batch), a checkpoint, and the outputs."""

    def __init__(self, spark, tmp_path, name):
        self.spark, self.src, self.chk = spark, tmp_path / "in", tmp_path / f"chk-{name}"
        self.src.mkdir(exist_ok=True)
        self.outputs = {}

    def write(self, index, rows):
        # written under a hidden name and renamed: a running query never reads half a file
        tmp = self.src / f".tmp-{index:05d}"
        tmp.write_text("".join(json.dumps({"user": u, "amount": a}) + "\n" for u, a in rows))
        tmp.rename(self.src / f"part-{index:05d}.json")

    def df(self):
        return self.spark.readStream.schema("user string, amount long").option(
            "maxFilesPerTrigger", 1).json(str(self.src))

    def run(self, frame):
        outputs = self.outputs
        query = frame.writeStream.foreachBatch(
            lambda df, b: outputs.__setitem__(b, sorted(map(tuple, df.collect())))
        ).option("checkpointLocation", str(self.chk)).start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()


BATCHES = [[("alice", 1), ("bob", 2)], [("carol", 1), ("alice", 1)]]
INITIAL = [("alice", 10), ("alice", 5), ("carol", 100)]


def test_initial_state_applies_once_as_in_spark(spark, tmp_path):
    import silt_spark
    from silt_spark.errors import VersionNotFoundError

    initial = spark.createDataFrame(INITIAL, "user string, seed long")
    out = "user string, n long"
    # Spark's own operator, with the same processor and initial state
    ref = _Stream(spark, tmp_path, "spark")
    provider = "spark.sql.streaming.stateStore.providerClass"
    old = spark.conf.get(provider, None)
    spark.conf.set(provider, "org.apache.spark.sql.execution.streaming.state."
                             "RocksDBStateStoreProvider")
    try:
        for i, rows in enumerate(BATCHES):
            ref.write(i, rows)
        ref.run(ref.df().groupBy("user").transformWithStateInPandas(
            Seeded(), out, "Append", "None", initialState=initial.groupBy("user")))
    finally:
        if old is None:
            spark.conf.unset(provider)
        else:
            spark.conf.set(provider, old)
    assert ref.outputs == {0: [("alice", 2016), ("bob", 2)], 1: [("alice", 2017), ("carol", 1101)]}

    q = _Stream(spark, tmp_path, "silt")
    state = (tmp_path / "state").as_uri()

    def build(init):
        return silt_spark.transform_with_state(
            q.df(), Seeded(), ["user"], out, state_url=state, num_shards=2, initial_state=init)

    with pytest.raises(InvalidTypeError, match="key column 'user' is bigint, the stream's is "
                                               "string"):
        build(spark.createDataFrame([(1, 2)], "user long, seed long"))
    q.run(build(initial.groupBy("user")))
    assert q.outputs == ref.outputs

    # restarted (the same initial state given again): never applied again
    q.write(2, [("alice", 1), ("dave", 1)])
    q.run(build(initial))
    assert q.outputs[2] == [("alice", 2018), ("dave", 1)]
    assert not list((tmp_path / "state" / "initial").rglob("*.arrow"))

    # read_state: any committed version; another one is refused, naming those there are
    before = silt_spark.read_state(spark, state, version=0).filter("state = 'n'").collect()
    assert sorted((r.user, r.value) for r in before) == [
        ("alice", "[2016]"), ("bob", "[2]"), ("carol", "[1100]")]
    with pytest.raises(VersionNotFoundError, match=r"no state version 99 .* there are: 0-2"):
        silt_spark.read_state(spark, state, version=99)

    # typed columns per variable: key columns, (map key fields,) value fields
    n = silt_spark.read_state(spark, state, state_name="n")
    assert n.columns == ["user", "n", "expires_at_ms", "shard_version"]
    assert dict(n.dtypes)["n"] == "bigint"
    assert sorted((r.user, r.n) for r in n.collect()) == [
        ("alice", 2018), ("bob", 2), ("carol", 1101), ("dave", 1)]
    amounts = silt_spark.read_state(spark, state, state_name="amounts")
    assert amounts.columns[:3] == ["user", "amount", "tag"]
    assert sorted((r.user, r.amount, r.tag) for r in amounts.collect()) == [
        ("alice", 1, "t"), ("alice", 1, "t"), ("alice", 1, "t"), ("bob", 2, "t"),
        ("carol", 1, "t"), ("dave", 1, "t")]
    last = silt_spark.read_state(spark, state, version=1, state_name="last")
    assert last.columns[:3] == ["user", "map_key_user", "amount"]
    assert sorted(tuple(r)[:3] for r in last.collect()) == [
        ("alice", "alice", 1), ("bob", "bob", 2), ("carol", "carol", 1)]
    with pytest.raises(InvalidArgumentError, match=r"no state variable 'nope'; its variables "
                                                   r"are \['amounts', 'last', 'n'\]"):
        silt_spark.read_state(spark, state, state_name="nope")
    # the change feed of one variable: its rows only (JSON); an unknown one is refused
    changes = silt_spark.read_changes(spark, state, 1, 2, state_name="n").collect()
    assert sorted((r.user, r.state, r.change_type, r.old_value, r.new_value)
                  for r in changes) == [("alice", "n", "update", "[2017]", "[2018]"),
                                        ("dave", "n", "insert", None, "[1]")]
    with pytest.raises(InvalidArgumentError, match=r"no state variable 'nope'"):
        silt_spark.read_changes(spark, state, 1, 2, state_name="nope")


def test_read_state_refuses_a_version_no_shard_committed(tmp_path):
    """Before any Spark job: batch 99 was never committed (it used to read the latest)."""
    import silt_spark
    from silt_spark.errors import VersionNotFoundError
    from silt_spark.runtime import _root

    root = (tmp_path / "state").as_uri()
    spec = _root.ensure_descriptor(_root.OperatorSpec(kind="processor", root=root,
                                                      num_shards=2, key_groups=16))
    for shard, versions in ((0, (0, 1, 2, 5)), (1, (2, 3))):
        with silt.open(spec.shard_url(shard)) as db:
            for v in versions:
                db.put(b"k", b"%d" % v)
                db.commit(v)
    for version in (4, 6, 99):
        with pytest.raises(VersionNotFoundError, match=rf"no state version {version} .*; the "
                                                       r"versions there are: 0-3, 5$"):
            silt_spark.read_state(None, root, version=version)


def test_delete_if_exists_removes_every_element_of_a_list(task):
    h, lst = _handle(task, None, ((3, ("alice",)),))
    _bind(h, 3, ("alice",))
    lst.put([(1,), (2,)])
    lst.appendValue((3,))
    task.commit(1)
    h = _processor.StatefulProcessorHandle(task, "none", None)
    h.deleteIfExists("l")
    lst = h.getListState("l")
    h._prefetch([(3, _codec.encode(("alice",)))])
    _bind(h, 3, ("alice",))
    assert list(lst.get()) == []
    lst.appendValue((4,))
    assert list(lst.get()) == [(4,)]
    task.commit(2)
    assert [v for _, v in task.db.scan()] == [_codec.encode((4,))]


class _Calls:
    """Records the order of the processor's calls per key (Arrow rows)."""

    def __init__(self):
        self.calls = []

    def init(self, handle):
        self.n = handle.getValueState("n")

    def handleInitialState(self, key, initialState, timerValues):
        self.calls.append(("initial", key[0], initialState.column("seed").to_pylist()))
        self.n.update((sum(initialState.column("seed").to_pylist()),))

    def handleInputRows(self, key, rows, timerValues):
        n = (self.n.get() or (0,))[0] + sum(t.num_rows for t in rows)
        self.calls.append(("rows", key[0], n))
        self.n.update((n,))
        yield (key[0], n)


@pytest.mark.parametrize("batch_id", [0, 1])
def test_initial_rows_go_to_handle_initial_state_first_in_batch_0_only(tmp_path, batch_id):
    import pyarrow as pa
    from silt_spark.operators import _initial
    from silt_spark.runtime import _layout, _root

    def table(cols):
        kgs = [sum(k.encode()) % 256 for k in cols["k"]]
        return pa.table({**cols, _layout.KG_COLUMN: pa.array(kgs, pa.int32())})

    root = (tmp_path / "root").as_uri()
    store = silt.open_store(root)
    sink = pa.BufferOutputStream()
    init = table({"k": ["a", "c", "a"], "seed": [10, 100, 5]})
    with pa.ipc.new_stream(sink, init.schema) as w:
        w.write_table(init)
    store.put(_initial.object_name("s1", 0), sink.getvalue().to_pybytes())
    store.close()

    task = FakeTask(silt.open((tmp_path / "shard").as_uri()))
    task.batch_id, task.shard = batch_id, 0
    task.spec = _root.OperatorSpec(kind="processor", root=root, num_shards=1)
    rows = table({"k": ["a", "b"], "x": [1, 1]}).append_column(
        _layout.PARTITION_COLUMN, pa.array([0, 0], pa.int32()))
    p = _Calls()
    out = pa.schema([("k", pa.string()), ("n", pa.int64())])
    try:
        got = pa.Table.from_batches(list(_runner.process_partition(
            task, iter(rows.to_batches()), p, ["k"], out, "arrow", initial="s1")), schema=out)
    finally:
        task.db.close()
    if batch_id == 0:
        assert p.calls == [("initial", "a", [10, 5]), ("initial", "c", [100]),
                           ("rows", "a", 16), ("rows", "b", 1)]
        assert sorted(got.to_pylist(), key=lambda r: r["k"]) == [
            {"k": "a", "n": 16}, {"k": "b", "n": 1}]
    else:
        assert p.calls == [("rows", "a", 1), ("rows", "b", 1)]


# --- PySpark's semantics of deleteIfExists, listTimers and state timestamps (no Spark job) -----

class _Temp:
    """Spark's basic test processor's init: a variable declared, then deleted."""

    def init(self, handle):
        from pyspark.sql.types import LongType, StructField, StructType, TimestampType

        self.n = handle.getValueState("n", StructType([StructField("ts", TimestampType())]))
        self.temp = handle.getValueState("tempState", StructType([StructField("x", LongType())]))
        handle.deleteIfExists("tempState")


def test_a_variable_deleted_after_its_declaration_keeps_it_and_is_unusable(task):
    import datetime as dt

    declared = _builder.declared_states(_Temp())
    d = declared["tempState"]
    assert (d.kind, d.key, d.value, d.reset) == ("value", None, (("x", "bigint", True),), True)
    registry = _schema.evolve({}, declared)
    for version in (1, 2):  # every batch's init runs the same calls, and the state works
        h = _processor.StatefulProcessorHandle(task, "none", registry,
                                               timezone="America/Los_Angeles")
        p = _Temp()
        p.init(h)  # used to raise StateSchemaError: "init did not declare it"
        h._prefetch([(3, _codec.encode(("alice",)))])
        _bind(h, 3, ("alice",))
        with pytest.raises(RuntimeError, match=r"'tempState' was deleted by handle\.deleteIf"):
            p.temp.get()
        # state timestamps read back as PySpark's worker gets them: naive, the session time
        # zone's wall clock (UTC-7 in May)
        when = dt.datetime(2024, 5, 6, 7, 8, 9, 123, tzinfo=dt.UTC)
        p.n.update((when,))
        assert p.n.get() == (dt.datetime(2024, 5, 6, 0, 8, 9, 123),)
        task.changed = True
        task.commit(version)


class _Timers:
    def __init__(self):
        self.seen = []

    def init(self, handle):
        self.handle = handle

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        self.seen.append((key[0], expiry, list(self.handle.listTimers())))
        self.handle.registerTimer(expiry)  # Spark deletes it after the call all the same
        return iter(())


@pytest.mark.parametrize("seed", range(4))
def test_list_timers_in_a_firing_timer_lists_it_as_in_spark(task, seed):
    import random

    rng = random.Random(seed)
    timers = {f"k{i}": sorted(rng.sample(range(1, 60), rng.randint(1, 4))) for i in range(6)}
    keys = [(rng.randrange(256), (k,)) for k in timers]
    h = _processor.StatefulProcessorHandle(task, "processingtime", None)
    h._prefetch((kg, _codec.encode(k)) for kg, k in keys)
    for kg, k in keys:
        _bind(h, kg, k)
        for t in timers[k[0]]:
            h.registerTimer(t)
    task.commit(1)

    p = _Timers()
    h = _processor.StatefulProcessorHandle(task, "processingtime", None)
    p.init(h)
    now = 30
    bound = _runner._fire_timers(task, h, p, _user.TimerValues(now, -1), now, 0,
                                    lambda r: list(r or ()))
    # each due timer fires once, oldest first, and lists itself with the key's later timers
    want = sorted((t, k, [x for x in ts if x >= t]) for k, ts in timers.items() for t in ts
                  if t <= now)
    assert sorted((e, k, listed) for k, e, listed in p.seen) == want
    assert [e for _, e, _ in p.seen] == sorted(e for _, e, _ in p.seen)
    left = {k: [t for t in ts if t > now] for k, ts in timers.items()}
    # the shard's next-timer bound stays a lower bound of what is left
    assert bound is not None and bound <= min((t for ts in left.values() for t in ts),
                                              default=bound)
    h._prefetch((kg, _codec.encode(k)) for kg, k in keys)
    for kg, k in keys:
        _bind(h, kg, k)
        assert list(h.listTimers()) == left[k[0]]  # the fired ones are gone, re-registered too
