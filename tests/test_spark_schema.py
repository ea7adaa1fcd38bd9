"""Typed processor state without Spark: the evolution rules (silt_spark._schema.evolve), the
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
from silt_spark import _codec, _processor, _schema
from silt_spark._schema import Declared
from silt_spark.errors import StateSchemaError

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


# --- the encoding ------------------------------------------------------------------------------

TYPES = {
    "tinyint": st.integers(-128, 127),
    "smallint": st.integers(-(1 << 15), (1 << 15) - 1),
    "int": st.integers(-(1 << 31), (1 << 31) - 1),
    "bigint": st.integers(-(1 << 63), (1 << 63) - 1),
    "double": st.floats(allow_nan=False),
    "float": st.sampled_from([0.0, 1.5, -2.25, 1e10]),
    "boolean": st.booleans(),
    "string": st.text(max_size=20),
    "binary": st.binary(max_size=20),
    "date": st.dates(),
    "timestamp": st.datetimes(timezones=st.just(dt.UTC)),
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
    ]
    for value, error, message in cases:
        with pytest.raises(error, match=message):
            codec.encode(value)
    # a dict by field name and numpy scalars are accepted
    np = pytest.importorskip("numpy")
    assert codec.decode(codec.encode({"n": np.int32(3), "x": np.float64(0.5)})) == (3, None, 0.5)


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
