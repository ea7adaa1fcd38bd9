"""Typed processor state without Spark: the evolution rules (silt_spark.runtime._schema.evolve), the
schema-driven encoding (round trips, against the declared types), and typed state variables
and deleteIfExists on a real shard LSM."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest
import silt
from hypothesis import given, settings
from hypothesis import strategies as st
from silt.errors import InvalidArgumentError, InvalidTypeError
from silt_spark.errors import StateSchemaError
from silt_spark.operators.processor import _handle as _processor
from silt_spark.runtime import _codec, _schema
from silt_spark.runtime._schema import Declared

V1 = (("n", "int", True), ("name", "string", True), ("x", "double", False))


def registry(*schemas, kind="value", key=None, base=0):
    return {"v": {"kind": kind, "key": key, "versions": [[list(f) for f in s] for s in schemas],
                  "base": base}}


def evolve(old, new, kind="value", key=None, reset=False, old_key=None, old_kind="value"):
    have = registry(old, kind=old_kind, key=old_key) if old is not None else {}
    return _schema.evolve(have, {"v": Declared(kind, key, new, reset)})


# --- evolution rules ---------------------------------------------------------------------------

@pytest.mark.parametrize("new, decoded", [
    # added (nullable) field: null in older values
    ((*V1, ("extra", "string", True)), (7, "a", 1.5, None)),
    # removed field
    ((("x", "double", False), ("n", "int", True)), (1.5, 7)),
    # reordered
    ((("x", "double", False), ("name", "string", True), ("n", "int", True)), (1.5, "a", 7)),
    # widened int -> bigint, int -> double; NOT NULL -> nullable
    ((("n", "bigint", True), ("name", "string", True), ("x", "double", True)), (7, "a", 1.5)),
    ((("n", "double", True),), (7.0,)),
    # a rename is a removal plus an addition (as in Spark): the value is not carried over
    ((("count", "int", True), ("name", "string", True), ("x", "double", False)),
     (None, "a", 1.5)),
])
def test_accepted_evolution_converts_older_values(new, decoded):
    old = _schema.codecs(registry(V1))["v"].encode((7, "a", 1.5))
    reg = evolve(V1, new)
    assert reg["v"]["versions"][-1] == [list(f) for f in new] and len(reg["v"]["versions"]) == 2
    codec = _schema.codecs(reg)["v"]
    got = codec.decode(old)
    assert got == decoded and [type(x) for x in got] == [type(x) for x in decoded]
    # new values are written in the latest schema and read back as given
    assert codec.decode(codec.encode(decoded)) == decoded


def test_same_schema_adds_no_version():
    assert evolve(V1, V1) == registry(V1)


@pytest.mark.parametrize("new, message", [
    ((("n", "smallint", True),), r"'n' changed type from int to smallint \(narrowing\)"),
    ((("x", "float", False),), r"'x' changed type from double to float \(narrowing\)"),
    ((("n", "string", True),), r"'n' changed type from int to string; allowed widenings of int"),
    ((("name", "bigint", True),), r"'name' changed type from string to bigint"),
    ((("n", "int", False),), r"'n' became NOT NULL"),
    ((*V1, ("z", "int", False)), r"added field 'z' is NOT NULL"),
])
def test_refused_evolution_names_the_variable_and_the_change(new, message):
    with pytest.raises(StateSchemaError, match=r"state 'v': .*" + message):
        evolve(V1, new)


def test_kind_and_map_key_changes_are_refused_unless_deleted_first():
    key = (("k", "string", True),)
    with pytest.raises(StateSchemaError, match=r"state 'v' was a value state and is now .* list"):
        evolve(V1, V1, kind="list")
    have = registry(V1, kind="map", key=[list(f) for f in key])
    with pytest.raises(StateSchemaError, match=r"state 'v': the map key schema changed from "
                                               r"\(k string\) to \(k bigint\)"):
        _schema.evolve(have, {"v": Declared("map", (("k", "bigint", True),), V1, False)})
    # deleteIfExists then a new declaration starts a new generation: older values read as
    # absent, ids are never reused
    reg = _schema.evolve(have, {"v": Declared("map", (("k", "bigint", True),), V1, True)})
    assert reg["v"]["base"] == 1 and len(reg["v"]["versions"]) == 2
    old = _schema.codecs(have)["v"].encode((1, "a", 2.0))
    assert _schema.codecs(reg)["v"].decode(old) is None
    # the same declaration after the reset keeps its generation (init runs every batch)
    assert _schema.evolve(reg, {"v": Declared("map", (("k", "bigint", True),), V1, True)}) == reg


def test_variables_without_a_schema_and_dropped_variables_keep_their_entries():
    reg = evolve(V1, None)
    assert reg == registry(V1)  # declared again without a schema: keeps its schema
    reg = _schema.evolve(registry(V1), {"w": Declared("list", None, None, False)})
    assert set(reg) == {"v", "w"} and reg["w"]["versions"] == []
    assert "w" not in _schema.codecs(reg)  # untyped: self-describing values, as before


def test_untagged_values_are_rows_of_the_first_schema_and_evolve_with_it():
    """State written before schemas were enforced, by code that declared ``V1`` all along:
    its untagged tuples evolve like values of ``V1``."""
    reg = evolve(None, V1)
    assert reg["v"]["untagged"] == 0
    reg = _schema.evolve(reg, {"v": Declared("value", None, (("x", "double", False),
                                                             ("n", "bigint", True)), False)})
    codec = _schema.codecs(reg)["v"]
    assert codec.decode(_codec.encode((1, "a", 2.0))) == (2.0, 1)
    assert codec.decode(_codec.encode((1, "a"))) == (1, "a")  # not V1's shape: as stored
    lst = _schema.codecs({"v": {**reg["v"], "kind": "list"}})["v"]
    assert lst.decode_list(_codec.encode([(1, "a", 2.0)])) == [(2.0, 1)]


def test_deleted_and_not_declared_again_starts_over():
    reg = _schema.evolve(registry(V1), {"v": Declared(None, None, None, True)})
    assert reg["v"]["base"] == 1 and reg["v"]["kind"] is None
    old = _schema.codecs(registry(V1))["v"].encode((1, "a", 2.0))
    assert _schema.codecs(reg)["v"].decode(old) is None
    # a later run declares it with any schema and kind, untyped or typed
    reg2 = _schema.evolve(reg, {"v": Declared("list", None, (("n", "string", True),), False)})
    codec = _schema.codecs(reg2)["v"]
    assert codec.decode_list(old) is None
    assert codec.decode_list(codec.encode_list([("x",)])) == [("x",)]
    reg3 = _schema.evolve(reg, {"v": Declared("value", None, None, False)})
    untyped = _schema.codecs(reg3)["v"]
    assert untyped.decode(untyped.encode((5, "y"))) == (5, "y") and untyped.decode(old) is None


# --- the encoding ------------------------------------------------------------------------------

TYPES = {
    "tinyint": st.integers(-128, 127),
    "smallint": st.integers(-(1 << 15), (1 << 15) - 1),
    "int": st.integers(-(1 << 31), (1 << 31) - 1),
    "bigint": st.integers(-(1 << 63), (1 << 63) - 1),
    "double": st.floats(allow_nan=False),
    "float": st.floats(width=32, allow_nan=False),
    "boolean": st.booleans(),
    "string": st.text(max_size=20),
    "binary": st.binary(max_size=20),
    "date": st.dates(),
    "timestamp": st.datetimes(timezones=st.just(dt.UTC)),
    "timestamp_ntz": st.datetimes(),
    "decimal(10,2)": st.decimals(places=2, allow_nan=False, allow_infinity=False,
                                 min_value=-10**7, max_value=10**7),
    "array<int>": st.lists(st.integers(-5, 5), max_size=3),
}


@st.composite
def schema_and_rows(draw):
    types = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=9))
    fields = tuple((f"f{i}", t, draw(st.booleans())) for i, t in enumerate(types))
    row = st.tuples(*[
        (st.none() | TYPES[t]) if nullable else TYPES[t] for _, t, nullable in fields
    ])
    return fields, draw(st.lists(row, min_size=1, max_size=4))


@settings(max_examples=150, deadline=None)
@given(schema_and_rows())
def test_typed_encoding_round_trips(data):
    fields, rows = data
    codec = _schema.codecs(registry(fields))["v"]
    for row in rows:
        assert codec.decode(codec.encode(row)) == row
    assert codec.decode_list(codec.encode_list(rows)) == rows


def test_wrong_values_are_refused_at_write_naming_the_field():
    codec = _schema.codecs(registry(V1))["v"]
    cases = [
        ((1, "a"), InvalidArgumentError, r"state 'v': the value has 2 field\(s\), the schema 3"),
        ((1.5, "a", 1.0), InvalidTypeError, r"state 'v': field 'n' expects int .* float"),
        ((1, 2, 1.0), InvalidTypeError, r"state 'v': field 'name' expects string .* int"),
        ((1, "a", None), InvalidArgumentError, r"state 'v': field 'x' is NOT NULL"),
        ((1 << 40, "a", 1.0), InvalidArgumentError, r"field 'n': 1099511627776 is out of range"),
        ("abc", InvalidTypeError, r"state 'v': a value is a tuple of 3 field"),
        ({"n", "name", "x"}, InvalidTypeError, r"state 'v': a value is a tuple of 3 field"),
        ({"n": 1, "nme": "a", "x": 1.0}, InvalidArgumentError,
         r"state 'v': the value has fields \['nme'\] not in the schema"),
    ]
    for value, error, message in cases:
        with pytest.raises(error, match=message):
            codec.encode(value)
    # a dict by field name and numpy scalars are accepted
    np = pytest.importorskip("numpy")
    assert codec.decode(codec.encode({"n": np.int32(3), "x": np.float64(0.5)})) == (3, None, 0.5)
    from pyspark.sql import Row

    assert codec.decode(codec.encode(Row(n=1, name="b", x=2.0))) == (1, "b", 2.0)
    assert codec.decode(codec.encode([1, "b", 2.0])) == (1, "b", 2.0)


def test_untagged_values_still_read():
    """State written before schemas were enforced (self-describing _codec values) reads as
    it did, next to typed values of the same variable."""
    codec = _schema.codecs(registry(V1))["v"]
    assert codec.decode(_codec.encode((1, "a", 2.0))) == (1, "a", 2.0)
    assert codec.decode_list(_codec.encode([(1, "a", 2.0)])) == [(1, "a", 2.0)]


def test_decimal_and_timestamp_fields():
    fields = (("d", "decimal(10,2)", True), ("t", "timestamp", True), ("day", "date", True))
    codec = _schema.codecs(registry(fields))["v"]
    row = (decimal.Decimal("1.25"), dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC),
           dt.date(2024, 5, 1))
    assert codec.decode(codec.encode(row)) == row


# --- typed state variables and deleteIfExists on a shard LSM ---------------------------------

class FakeTask:
    def __init__(self, db):
        self.db = db
        self.changed = False
        self.first_kg, self.last_kg = 0, 255
        self.base_meta = db.meta
        self.meta_updates = {}

    def commit(self, version):
        if self.changed:
            self.db.commit(version, meta=self.meta_updates)
        self.base_meta = self.db.meta
        self.meta_updates = {}
        self.changed = False


@pytest.fixture
def task(file_url):
    t = FakeTask(silt.open(file_url))
    yield t
    t.db.close()


def _bind(h, kg, key):
    h._bind(kg, _codec.encode(key))


def test_typed_state_variables_evolve_on_a_shard(task):
    reg = _schema.evolve({}, {
        "v": Declared("value", None, V1, False),
        "l": Declared("list", None, (("ts", "bigint", False),), False),
        "m": Declared("map", (("k", "double", True),), (("n", "int", True),), False),
    })
    h = _processor.StatefulProcessorHandle(task, "none", reg)
    v, lst, m = h.getValueState("v", "ignored"), h.getListState("l"), h.getMapState("m")
    _bind(h, 3, ("alice",))
    v.update((1, "a", 2.0))
    lst.appendValue((5,))
    lst.appendList([(6,)])
    m.updateValue((1,), (10,))  # an int key of a double field is the same key as 1.0
    assert m.getValue((1.0,)) == (10,) and list(m.iterator()) == [((1.0,), (10,))]
    with pytest.raises(InvalidTypeError, match="state 'l': field 'ts' expects bigint"):
        lst.appendValue(("x",))
    with pytest.raises(InvalidTypeError, match="state 'm' map key: field 'k' expects double"):
        m.updateValue(("x",), (1,))
    task.commit(1)
    # the next run widens and adds fields: stored values read converted
    reg2 = _schema.evolve(reg, {
        "v": Declared("value", None, (("x", "double", False), ("n", "bigint", True),
                                      ("added", "string", True)), False),
        "l": Declared("list", None, (("ts", "double", False),), False),
    })
    h = _processor.StatefulProcessorHandle(task, "none", reg2)
    v, lst, m = h.getValueState("v"), h.getListState("l"), h.getMapState("m")
    _bind(h, 3, ("alice",))
    assert v.get() == (2.0, 1, None) and list(lst.get()) == [(5.0,), (6.0,)]
    assert m.getValue((1.0,)) == (10,)


def test_delete_if_exists_removes_the_variable_for_every_key_once(task):
    h = _processor.StatefulProcessorHandle(task)
    v, keep = h.getValueState("v"), h.getMapState("keep")
    for kg, key in ((3, ("alice",)), (200, ("bob",))):
        _bind(h, kg, key)
        v.update((1,))
        keep.updateValue((1,), (2,))
    task.commit(1)
    h = _processor.StatefulProcessorHandle(task)
    h.deleteIfExists("v")
    h.deleteIfExists("missing")
    assert task.changed
    v, keep = h.getValueState("v"), h.getMapState("keep")
    for kg, key in ((3, ("alice",)), (200, ("bob",))):
        _bind(h, kg, key)
        assert v.get() is None and keep.getValue((1,)) == (2,)
    task.commit(2)
    assert json.loads(task.base_meta[_processor.META_DELETED_STATES]) == ["missing", "v"]
    # called again in the next batch (as from init): nothing to scan, nothing changes
    h = _processor.StatefulProcessorHandle(task)
    reads = []
    task.db.scan, real = (lambda *a, **k: reads.append(a) or iter(())), task.db.scan
    try:
        h.deleteIfExists("v")
    finally:
        task.db.scan = real
    assert reads == [] and not task.changed
    # written again: the next deleteIfExists deletes it again
    v = h.getValueState("v")
    _bind(h, 3, ("alice",))
    v.update((9,))
    task.commit(3)
    h = _processor.StatefulProcessorHandle(task)
    h.deleteIfExists("v")
    v = h.getValueState("v")
    _bind(h, 3, ("alice",))
    assert v.get() is None


# --- evolution across restarts of a real streaming query ---------------------------------------

class _Query:
    """A JSON source folder, a checkpoint, and each micro-batch's output (foreachBatch)."""

    def __init__(self, spark, tmp_path):
        self.spark, self.src, self.chk = spark, tmp_path / "in", tmp_path / "chk"
        self.state = (tmp_path / "state").as_uri()
        self.src.mkdir()
        self.files = 0
        self.outputs = {}

    def write(self, rows):
        # written under a hidden name and renamed: a running query never reads half a file
        tmp = self.src / f".tmp-{self.files:05d}"
        tmp.write_text("".join(json.dumps({"user": u, "amount": a}) + "\n" for u, a in rows))
        tmp.rename(self.src / f"part-{self.files:05d}.json")
        self.files += 1

    def build(self, processor):
        import silt_spark

        df = self.spark.readStream.schema("user string, amount long").option(
            "maxFilesPerTrigger", 1).json(str(self.src))
        return silt_spark.transform_with_state(
            df, processor, ["user"], "user string, seen string", state_url=self.state,
            num_shards=2, rows_format="arrow")

    def run(self, processor):
        outputs = self.outputs
        query = self.build(processor).writeStream.foreachBatch(
            lambda df, b: outputs.__setitem__(b, sorted(map(tuple, df.collect())))
        ).option("checkpointLocation", str(self.chk)).start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    def descriptor(self):
        from silt_spark.runtime import _root

        return _root.read_descriptor(self.state)


class _V1:
    def init(self, handle):
        self.s = handle.getValueState("s", "n int, name string, total double NOT NULL")
        self.m = handle.getMapState("m", "k string", "c int")
        self.old = handle.getValueState("old", "x int")

    def handleInputRows(self, key, rows, timerValues):
        n = sum(t.num_rows for t in rows)
        self.s.update((n, key[0], 1.5))
        self.m.updateValue(("a",), (n,))
        self.old.update((n,))
        return [(key[0], "v1")]


class _V2:
    """Reordered, widened (int -> bigint, NOT NULL -> nullable), one field added, one removed;
    the map value widened; ``old`` deleted and declared again."""

    def init(self, handle):
        self.s = handle.getValueState("s", "total double, n bigint, added string")
        self.m = handle.getMapState("m", "k string", "c bigint")
        handle.deleteIfExists("old")
        self.old = handle.getValueState("old", "x int")

    def handleInputRows(self, key, rows, timerValues):
        seen = json.dumps([self.s.get(), self.m.getValue(("a",)), self.old.exists()])
        self.s.update((2.5, 7, "z"))
        return [(key[0], seen)]


class _Declares:
    def __init__(self, value_schema="n int, name string, total double NOT NULL",
                 key_schema="k string", kind="value"):
        self.value_schema, self.key_schema, self.kind = value_schema, key_schema, kind

    def init(self, handle):
        if self.kind == "list":
            handle.getListState("s", self.value_schema)
        else:
            handle.getValueState("s", self.value_schema)
        handle.getMapState("m", self.key_schema, "c bigint")

    def handleInputRows(self, key, rows, timerValues):
        return []


class _WrongShape(_V2):
    def handleInputRows(self, key, rows, timerValues):
        self.s.update((1.0, 2))  # one field short
        return []


def test_schema_evolution_across_restarts(spark, tmp_path):
    import sys

    from pyspark import cloudpickle
    from pyspark.errors import StreamingQueryException

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    q = _Query(spark, tmp_path)
    q.write([("alice", 1), ("alice", 2), ("bob", 3)])
    q.run(_V1())
    assert q.outputs[0] == [("alice", "v1"), ("bob", "v1")]

    # Refused when the query is built, before anything is written: narrowing, another type,
    # a changed map key schema, another kind of variable.
    before = q.descriptor()
    refused = [
        (_Declares("n tinyint"), r"state 's': .* field 'n' changed type from int to tinyint "
                                 r"\(narrowing\)"),
        (_Declares("n string"), r"state 's': .* field 'n' changed type from int to string"),
        (_Declares(key_schema="k bigint"),
         r"state 'm': the map key schema changed from \(k string\) to \(k bigint\)"),
        (_Declares(kind="list"), r"state 's' was a value state and is now declared a list"),
    ]
    for processor, message in refused:
        with pytest.raises(StateSchemaError, match=message):
            q.build(processor)
    assert q.descriptor() == before

    # Restart with the evolved schemas: older values read converted, by field name.
    q.write([("alice", 4), ("carol", 5)])
    q.run(_V2())
    assert q.outputs[1] == [
        ("alice", json.dumps([[1.5, 2, None], [2], False])),
        ("carol", json.dumps([None, None, False])),
    ]
    versions = q.descriptor()["state_schemas"]["s"]["versions"]
    assert versions[-1] == [["total", "double", True], ["n", "bigint", True],
                            ["added", "string", True]]

    # read_state decodes typed values (in the latest schema)
    import silt_spark

    rows = silt_spark.read_state(spark, q.state).filter("state = 's'").collect()
    assert sorted((r.user, r.value) for r in rows) == [
        ("alice", '[2.5,7,"z"]'), ("bob", "[1.5,1,null]"), ("carol", '[2.5,7,"z"]'),
    ]

    # A wrong-shaped value fails the batch with a message naming the variable.
    q.write([("dave", 1)])
    with pytest.raises(StreamingQueryException, match=r"state 's': the value has 2 field"):
        q.run(_WrongShape())


# --- compaction brings older values to the latest schema (runtime/_rewrite.py) ---------------

def test_compaction_rewrites_older_schema_values_in_the_latest_schema(file_url):
    """Values of an older live schema id are re-encoded by compaction (in the compaction
    subprocess here) and read the same; values already current, untagged values, timers and a
    deleted generation's values keep their bytes."""
    from silt_spark.runtime import _rewrite

    reg = _schema.evolve({}, {
        "v": Declared("value", None, V1, False),
        "l": Declared("list", None, (("ts", "int", False),), False),
        "m": Declared("map", (("k", "string", True),), (("n", "int", True),), False),
        "gone": Declared("value", None, (("x", "int", True),), False),
    })
    assert _rewrite.settings_for(None, reg) is None  # one schema each: nothing to rewrite
    small = silt.Settings(memtable_bytes=1 << 20, inline_delta_bytes=0,
                          l0_compaction_trigger=2, compaction_mode="background")
    with silt.open(file_url, settings=small) as db:
        t = FakeTask(db)
        h = _processor.StatefulProcessorHandle(t, "processingtime", reg)
        v, lst, m, gone = (h.getValueState("v"), h.getListState("l"), h.getMapState("m"),
                           h.getValueState("gone"))
        plain = h.getValueState("plain")  # no schema: untagged values
        for i in range(40):
            _bind(h, i % 7, (f"user{i}",))
            v.update((i, f"n{i}", i / 2))
            lst.appendList([(i,), (i + 1,)])
            m.updateValue((f"k{i}",), (i,))
            gone.update((i,))
            plain.update((i, "p"))
            h.registerTimer(1_000 + i)
        t.changed = True
        t.commit(1)
    reg2 = _schema.evolve(reg, {
        "v": Declared("value", None, (("x", "double", False), ("n", "bigint", True),
                                      ("added", "string", True)), False),
        "l": Declared("list", None, (("ts", "bigint", False),), False),
        "m": Declared("map", (("k", "string", True),), (("n", "bigint", True),), False),
        "gone": Declared("value", None, (("y", "int", True),), True),  # deleted, started over
    })
    conf = _rewrite.settings_for(small.to_dict(), reg2)
    assert conf is not None and conf["value_rewriter"] == _rewrite.NAME
    with silt.open(file_url, settings=silt.Settings.from_dict(conf)) as db:
        before = dict(db.scan())
        t = FakeTask(db)
        h = _processor.StatefulProcessorHandle(t, "none", reg2)
        v, lst, m, gone = (h.getValueState("v"), h.getListState("l"), h.getMapState("m"),
                           h.getValueState("gone"))

        def rows():
            out = {}
            for i in range(40):
                _bind(h, i % 7, (f"user{i}",))
                out[i] = (v.get(), list(lst.get()), m.getValue((f"k{i}",)), gone.exists())
            return out

        expect = rows()
        assert expect[3] == ((1.5, 3, None), [(3,), (4,)], (3,), False)
        # one more SST, then compaction merges both into level 1
        _bind(h, 0, ("other",))
        v.update((9.0, 9, "x"))
        t.changed = True
        t.commit(2)
        db.wait_for_compaction()
        _bind(h, 0, ("other2",))
        v.update((9.0, 9, "y"))
        t.changed = True
        t.commit(3)
        stats = db.stats()
        assert stats["compactions_adopted"] >= 1 and stats["compactions_in_subprocess"] >= 1
        after = dict(db.scan())
        assert rows() == expect
    codecs = _schema.codecs(reg2)
    changed = {k for k in before if after.get(k) != before[k]}
    assert changed
    for k, old in before.items():
        new = after[k]
        tagged = old[:1] in (b"\x80", b"\x81")
        if not tagged or _keys_name(k) in (None, "gone"):
            assert new == old, k  # untagged, timers and the deleted generation: as written
            continue
        sid = (new[1] << 8) | new[2]
        assert sid == codecs[_keys_name(k)].sid, k  # every typed value now in the latest


def _keys_name(key):
    from silt_spark.runtime import _keys

    if _keys.tag_of(key) != _keys.STATE_TAG:
        return None
    _, rest = _keys.split_length_prefixed(key)
    if rest[:1] == _keys.TIMER_MARK:
        return None
    return _keys.split_state_name(rest)[0]
