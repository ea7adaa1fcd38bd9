"""transform_batches' keys of a batch (``BatchKeys``) and its value states held by key position,
without Spark, on a real shard LSM.

Keys encode as ``_codec`` does: the tuple encoding ``_batchkeys.encode_key_tuples`` shares with
the other operators' state keys (integer, floating-point and string columns without nulls) equals
``_codec.encode`` byte for byte over every value of those types, and any other columns encode
through ``_rowcodec``, equal too. Every key row resolves
to ``key_prefix(kg, enc(key))`` of its key, whether the batch's keys are looked up by their key
column (one integer or string column) or by their encodings, whatever the order, repeats and
integer width of the rows asked for, and the keys sort by prefix either way; a row that is not
a key of the batch is refused naming it; keys added later (those whose timers fire) resolve
too. A value ``get``/``put``/``delete`` makes no Python call per key in
silt_spark (the count of Python calls does not grow with the keys), and a value variable
declared after the prefetch reads what is stored.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pyarrow as pa
import pytest
import silt
from hypothesis import given, settings
from hypothesis import strategies as st
from pycalls import python_calls
from silt.errors import InvalidArgumentError
from silt_spark.operators import _batchkeys, _varkeys
from silt_spark.operators.batch import BatchHandle, BatchStates
from silt_spark.operators.batch._keyset import encode_keys
from silt_spark.operators.batch._state import BatchKeys
from silt_spark.runtime import _codec, _keys, _rowcodec, _schema
from silt_spark.runtime._schema import Declared
from test_spark_processor_api import FakeTask

#: Key column shapes: the Arrow types of the batch's columns, the values of one key.
SHAPES = {
    "long": ([pa.int64()], st.tuples(st.none() | st.integers(-(1 << 63), (1 << 63) - 1))),
    "int": ([pa.int32()], st.tuples(st.none() | st.integers(-(1 << 31), (1 << 31) - 1))),
    "string": ([pa.string()], st.tuples(st.none() | st.text(max_size=4))),
    "string, long": ([pa.string(), pa.int64()],
                     st.tuples(st.text(max_size=3), st.none() | st.integers(-9, 9))),
    "double": ([pa.float64()], st.tuples(st.floats(allow_nan=False))),
    "float, string": ([pa.float32(), pa.large_string()],
                      st.tuples(st.floats(width=32, allow_nan=False), st.text(max_size=3))),
    "long, int": ([pa.int64(), pa.int8()],
                  st.tuples(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-128, 127))),
}


NAN = struct.unpack(">d", bytes.fromhex("7ff8000000000001"))[0]
NEG_NAN = struct.unpack(">d", bytes.fromhex("fff0000000000abc"))[0]
#: The column types the shared tuple encoder takes, and values a key of each may hold.
TUPLE_COLUMNS = {
    "int64": (pa.int64(), st.integers(-(1 << 63), (1 << 63) - 1)
              | st.sampled_from([-(1 << 63), (1 << 63) - 1, -1, 0])),
    "int32": (pa.int32(), st.integers(-(1 << 31), (1 << 31) - 1)),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "uint32": (pa.uint32(), st.integers(0, (1 << 32) - 1)),
    "float64": (pa.float64(), st.floats()
                | st.sampled_from([-0.0, 0.0, math.inf, -math.inf, NAN, NEG_NAN, 5e-324])),
    "float32": (pa.float32(), st.floats(width=32)),
    "string": (pa.string(), st.text() | st.sampled_from(["", "\u00e9", "\U0001f600", "\x00"])),
    "large_string": (pa.large_string(), st.text(max_size=5)),
}
#: Column types it leaves to ``_rowcodec`` (``None``): the values need another ``_codec`` tag.
OTHER_COLUMNS = {
    "uint64": (pa.uint64(), st.integers(0, (1 << 64) - 1)),
    "bool": (pa.bool_(), st.booleans()),
    "binary": (pa.binary(), st.binary(max_size=4)),
}


def _column(data, typ, values, nulls):
    """``values`` as an Arrow column of ``typ``: with a null drawn in where ``nulls``, as a
    slice of a longer array (a buffer offset) or two chunks, as the draw says."""
    if nulls and values:
        values = [data.draw(st.none() | st.just(v)) for v in values]
    shape = data.draw(st.sampled_from(["plain", "sliced", "chunked"]))
    if shape == "sliced":
        return pa.array([values[0] if values else None, *values], typ).slice(1)
    if shape == "chunked" and values:
        cut = data.draw(st.integers(0, len(values)))
        return pa.chunked_array([pa.array(values[:cut], typ), pa.array(values[cut:], typ)])
    return pa.array(values, typ)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(0, 6), nulls=st.booleans(), others=st.booleans(),
       names=st.lists(st.sampled_from(sorted(TUPLE_COLUMNS)), max_size=4))
def test_the_shared_tuple_encoding_is_the_codecs(data, n, nulls, others, names):
    kinds = [TUPLE_COLUMNS[k] for k in names]
    if others:
        kinds.insert(data.draw(st.integers(0, len(kinds))),
                     OTHER_COLUMNS[data.draw(st.sampled_from(sorted(OTHER_COLUMNS)))])
    columns = [_column(data, typ, data.draw(st.lists(values, min_size=n, max_size=n)), nulls)
               for typ, values in kinds]
    rows = list(zip(*[c.to_pylist() for c in columns])) if columns else [()] * n
    want = [_codec.encode(r) for r in rows]
    kgs = data.draw(st.lists(st.integers(0, (1 << 16) - 1), min_size=n, max_size=n))
    tag = data.draw(st.sampled_from([_keys.AGG_TAG, _keys.DEDUP_TAG, _keys.STATE_TAG]))
    keyed = [_keys.head(kg, tag) + w for kg, w in zip(kgs, want)]

    shared = _batchkeys.encode_key_tuples(columns, n)
    arrow = _batchkeys.encode_keys_arrow(pa.array(kgs, pa.int32()), columns, tag)
    if others or any(c.null_count for c in columns):
        assert shared is None and arrow is None
    else:
        assert shared.to_pylist() == want
        assert arrow.to_pylist() == keyed
    assert encode_keys(columns, n).to_list() == want  # the batch processor's, either way
    assert _batchkeys.encode_key_columns(pa.array(kgs, pa.int32()), columns, tag) == keyed


def _table(rows: list[tuple], types: list[pa.DataType]) -> pa.Table:
    return pa.table({f"k{i}": pa.array([r[i] for r in rows], t) for i, t in enumerate(types)})


@settings(max_examples=60, deadline=None)
@given(data=st.data(), shape=st.sampled_from(sorted(SHAPES)), by_column=st.booleans(),
       narrow=st.booleans())
def test_key_rows_resolve_to_their_keys_prefix(data, shape, by_column, narrow):
    types, key = SHAPES[shape]
    rows = data.draw(st.lists(key, min_size=1, max_size=10, unique=True))
    kgs = data.draw(st.lists(st.integers(0, 1023), min_size=len(rows), max_size=len(rows)))
    batch = _table(rows, types)
    names = batch.column_names
    encoded = encode_keys(batch.columns, batch.num_rows)
    assert encoded.to_list() == [_codec.encode(r) for r in rows]
    keys = BatchKeys(names, encoded if by_column else encoded.to_list(), kgs, "P",
                     batch.columns if by_column else None)
    want = {r: _varkeys.key_prefix(kg, _codec.encode(r)) for r, kg in zip(rows, kgs)}
    assert keys.prefixes == [want[r] for r in rows]
    assert keys.encoded.to_pylist() == [_codec.encode(r) for r in rows]
    assert keys.kgs.tolist() == kgs
    assert [keys.prefixes[i] for i in keys.order()] == sorted(want.values())

    asked = data.draw(st.lists(st.sampled_from(rows), max_size=15))
    ask_types = [pa.int32() if narrow and t == pa.int64() and all(
        r[i] is None or -(1 << 31) <= r[i] < (1 << 31) for r in asked) else t
        for i, t in enumerate(types)]
    table, prefixes = keys.resolve(_table(asked, ask_types), "P state 'v'.get")
    assert prefixes == [want[r] for r in asked]
    assert keys.positions(table, "x")[1].tolist() == [rows.index(r) for r in asked]

    stranger = data.draw(key.filter(lambda r: r not in want))
    at = data.draw(st.integers(0, len(asked)))
    with pytest.raises(InvalidArgumentError) as e:
        keys.resolve(_table([*asked[:at], stranger, *asked[at:]], types), "P state 'v'.put")
    assert "P state 'v'.put: " in str(e.value)
    assert f"row {at} {stranger!r}" in str(e.value)

    # keys whose timers fire join the batch's: only the new ones are returned, then resolved
    more = data.draw(st.lists(key, max_size=4))
    more_kgs = data.draw(st.lists(st.integers(0, 1023), min_size=len(more),
                                  max_size=len(more)))
    # by encoding: keys equal in Python may differ in bytes (0.0 and -0.0), as in state
    enc = _codec.encode
    prefix_of = {enc(r): want[r] for r in rows}
    fresh_of: dict[bytes, tuple] = {}
    for r in more:
        if enc(r) not in prefix_of:
            fresh_of.setdefault(enc(r), r)
    fresh = list(fresh_of.values())
    added = keys.add(_rowcodec.Rows.from_list([enc(r) for r in more]),
                     np.array(more_kgs, np.int64))
    first = {}
    for r, kg in zip(more, more_kgs):
        first.setdefault(enc(r), kg)
    prefix_of.update({enc(r): _varkeys.key_prefix(first[enc(r)], enc(r)) for r in fresh})
    assert added == [prefix_of[enc(r)] for r in fresh]
    everything = rows + fresh
    assert [added[i] for i in keys.order(len(rows))] == sorted(added)
    assert keys.resolve(_table(everything[::-1], types), "x")[1] == [
        prefix_of[enc(r)] for r in everything[::-1]]
    assert keys.kgs[len(rows):].tolist() == [first[enc(r)] for r in fresh]
    assert keys.positions_of(_rowcodec.Rows.from_list(
        [enc(r) for r in everything[::-1]])).tolist() == list(range(len(everything)))[::-1]


def test_a_key_given_twice_keeps_its_first_key_group():
    rows = [("a",), ("b",), ("a",)]
    batch = _table(rows, [pa.string()])
    keys = BatchKeys(["k0"], _rowcodec.encode_tuples(batch.columns).to_list(), [5, 6, 7], "P")
    assert keys.prefixes == [_varkeys.key_prefix(5, _codec.encode(("a",))),
                             _varkeys.key_prefix(6, _codec.encode(("b",)))]


VALUE = (("n", "bigint", False), ("x", "double", True))
VALUE_ARROW = pa.schema([("n", pa.int64(), False), ("x", pa.float64())])


def _handle(task, n, declare=True):
    registry = _schema.evolve({}, {"v": Declared("value", None, VALUE, False)})
    handle = BatchHandle(task, "P", registry, {"v": VALUE_ARROW}, {})
    if declare:
        handle.getValueState("v", "n long, x double")
    keys = pa.table({"user": [f"u{i}" for i in range(n)]})
    encoded = _rowcodec.encode_tuples(keys.columns)
    handle._bind(BatchKeys(["user"], encoded, [i % 256 for i in range(n)], "P", keys.columns))
    return handle, keys


@pytest.mark.parametrize("shuffled", [False, True])
def test_value_calls_make_no_python_call_per_key(tmp_path, shuffled):
    counts = []
    for n in (40, 400):
        task = FakeTask(silt.open((tmp_path / f"{n}{shuffled}").as_uri()))
        try:
            handle, keys = _handle(task, n)
            var = BatchStates(handle).value("v")
            if shuffled:
                keys = keys.take(pa.array(list(range(n))[::-1]))
            values = pa.table({"n": list(range(n)), "x": [None] * n}, VALUE_ARROW)

            def calls(var=var, keys=keys, values=values, n=n):
                var.put(keys, values)
                got = var.get(keys)
                var.delete(keys.slice(0, n // 2))
                assert got["n"].to_pylist() == list(range(n))

            counts.append(sum(python_calls(calls, "silt_spark").values()))
            assert var.get(keys)["n"].to_pylist() == [None] * (n // 2) + list(range(n // 2, n))
        finally:
            task.db.close()
    assert counts[0] == counts[1], counts


def test_a_value_variable_declared_after_the_prefetch_reads_the_stored_values(tmp_path):
    task = FakeTask(silt.open(tmp_path.as_uri()))
    try:
        handle, keys = _handle(task, 5)
        BatchStates(handle).value("v").put(keys, pa.table({"n": [1, 2, 3, 4, 5],
                                                           "x": [0.5, None, 1.0, 2.0, 3.0]}))
        task.changed = True
        task.commit(1)
        gets = []
        real = task.db.multi_get
        task.db.multi_get = lambda ks: gets.append(len(ks)) or real(ks)
        handle, keys = _handle(task, 5, declare=False)
        assert gets == []
        var = handle.getValueState("v", "n long, x double")
        assert var.get(keys.take([4, 0]))["n"].to_pylist() == [5, 1]
        assert var.get(keys)["x"].to_pylist() == [0.5, None, 1.0, 2.0, 3.0]
        assert gets == [5]
    finally:
        task.db.close()
