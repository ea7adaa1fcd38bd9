"""The column codec of typed state values (``runtime._valuecolumns``) writes exactly the row
codec's bytes (``VarCodec.encode``) and reads exactly what the row codec decodes, for every
schema of fixed-width fields, nulls and absent values included; it declines (``None``) where
only the row codec can answer: variable-length fields, nulls in NOT NULL fields, values of
another schema version."""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from silt_spark.operators.batch._state import rows_table
from silt_spark.runtime._valuecodec import VarCodec
from silt_spark.runtime._valuecolumns import decode_columns, encode_columns

VALUES = {
    "tinyint": st.integers(-128, 127),
    "smallint": st.integers(-(2**15), 2**15 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "bigint": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "boolean": st.booleans(),
    "date": st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
    "timestamp": st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1),
                              timezones=st.just(dt.UTC)),
    "timestamp_ntz": st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)),
}


#: Spark's types as Arrow, as the batch processor's builder converts a registry schema
#: (pyspark's to_arrow_schema with timezone UTC; that one needs a SparkContext).
ARROW = {"tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(),
         "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(),
         "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
         "timestamp_ntz": pa.timestamp("us"), "string": pa.string()}


def _arrow_schema(fields):
    return pa.schema([pa.field(n, ARROW[t], nullable) for n, t, nullable in fields])


@st.composite
def cases(draw):
    nfields = draw(st.integers(1, 10))
    fields = [[f"c{i}", draw(st.sampled_from(sorted(VALUES))), draw(st.booleans())]
              for i in range(nfields)]
    n = draw(st.integers(0, 30))
    rows = []
    for _ in range(n):
        rows.append(tuple(
            None if nullable and draw(st.integers(0, 3)) == 0 else draw(VALUES[t])
            for _, t, nullable in fields))
    return fields, rows


def codec_of(fields, versions=None):
    return VarCodec("v", {"kind": "value", "versions": versions or [fields]})


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


@given(cases(), st.data())
@settings(max_examples=300, deadline=None)
def test_columns_encode_and_decode_as_the_row_codec(case, data) -> None:
    fields, rows = case
    codec = codec_of(fields)
    schema = _arrow_schema(fields)
    table = rows_table(rows, schema)
    encoded = encode_columns(codec, table)
    assert encoded == [codec.encode(r) for r in rows]
    # read back with absent values among them
    absent = data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)))
    raws = [None if gone else raw for raw, gone in zip(encoded, absent)]
    read = pa.schema([f.with_nullable(True) for f in schema])
    got = decode_columns(codec, raws, read)
    want = rows_table([None if r is None else codec.decode(r) for r in raws], read)
    assert got.schema == want.schema
    for g, w in zip(got.to_pylist(), want.to_pylist()):
        assert all(_same(g[k], w[k]) for k in w), (g, w)


def test_the_column_codec_declines_what_only_the_row_codec_answers() -> None:
    fixed = [["n", "bigint", True], ["x", "double", True]]
    codec = codec_of(fixed)
    schema = _arrow_schema(fixed)
    # a variable-length field
    strings = [["s", "string", True]]
    assert encode_columns(codec_of(strings), rows_table([("a",)], _arrow_schema(strings))) is None
    assert decode_columns(codec_of(strings), [None], _arrow_schema(strings)) is None
    # a null in a NOT NULL field: the row codec raises, naming it
    strict = [["n", "bigint", False]]
    nulled = pa.table({"n": pa.array([1, None], pa.int64())})
    assert encode_columns(codec_of(strict), nulled) is None
    with pytest.raises(Exception, match="NOT NULL"):
        codec_of(strict).encode((None,))
    # a value of an older schema version (the row codec converts it)
    older = [["n", "bigint", True]]
    evolved = codec_of(fixed, versions=[older, fixed])
    old_raw = codec_of(older).encode((5,))
    assert decode_columns(evolved, [old_raw], schema) is None
    assert evolved.decode(old_raw) == (5, None)
    # an untagged value (written before the variable had a schema)
    from silt_spark.runtime import _codec

    assert decode_columns(codec, [_codec.encode((1, 2.0))], schema) is None
    # the current version's values, with absent ones, decode here
    now = codec.encode((7, 1.5))
    got = decode_columns(codec, [None, now], schema)
    assert got.to_pylist() == [{"n": None, "x": None}, {"n": 7, "x": 1.5}]
