"""silt_spark's Arrow <-> numpy conversions (``runtime._ndarrays``) give exactly pyarrow's own
(``pa.array``, ``Array.to_numpy``, ``pc.fill_null``) without importing pandas, and the shard
stages built on them import no pandas in a fresh interpreter (a fresh Spark Python worker
after a cold restart paid about 0.2 s of CPU for it in its first shard task)."""

from __future__ import annotations

import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from freshworker import run_fresh
from hypothesis import given, settings
from hypothesis import strategies as st
from silt_spark.runtime._ndarrays import empty_binary, from_numpy, numpy_dtype, to_numpy

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
         pa.uint64(), pa.float32(), pa.float64()]


@st.composite
def arrow_arrays(draw):
    """A numeric Arrow Array or ChunkedArray, maybe sliced, maybe with nulls."""
    t = draw(st.sampled_from(TYPES))
    dtype = numpy_dtype(t)
    if dtype.kind == "f":
        elems = st.floats(-1e6, 1e6, allow_nan=False, width=dtype.itemsize * 8)
    else:
        info = np.iinfo(dtype)
        elems = st.integers(int(info.min), int(info.max))
    nulls = draw(st.booleans())
    chunks = []
    for _ in range(draw(st.integers(1, 3))):
        values = draw(st.lists(st.one_of(st.none(), elems) if nulls else elems, max_size=40))
        arr = pa.array(values, t)
        lo = draw(st.integers(0, len(arr)))
        chunks.append(arr.slice(lo, draw(st.integers(0, len(arr) - lo))))
    if len(chunks) == 1 and draw(st.booleans()):
        return chunks[0]
    return pa.chunked_array(chunks, t)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


@given(arrow_arrays(), st.booleans())
@settings(max_examples=400, deadline=None)
def test_to_numpy_equals_pyarrows(arr, with_fill) -> None:
    if with_fill:
        fill = 7
        _same(to_numpy(arr, fill), pc.fill_null(arr, fill).to_numpy(zero_copy_only=False))
    else:
        _same(to_numpy(arr), arr.to_numpy(zero_copy_only=False))


@st.composite
def numpy_arrays(draw):
    kind = draw(st.sampled_from(["int64", ">i8", "int32", "uint16", "float64", ">f4", "bool"]))
    n = draw(st.integers(0, 50))
    dtype = np.dtype(kind)
    if dtype.kind == "b":
        values = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    elif dtype.kind == "f":
        values = np.array(draw(st.lists(st.floats(-1e6, 1e6, width=32), min_size=n,
                                        max_size=n)), dtype)
    else:
        info = np.iinfo(dtype)
        values = np.array(draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=n,
                                        max_size=n)), dtype)
    if draw(st.booleans()):
        values = values[::2]  # not contiguous
    mask = None
    if draw(st.booleans()):
        mask = np.array(draw(st.lists(st.booleans(), min_size=len(values),
                                      max_size=len(values))), bool)
    target = None
    if dtype.kind in "iu" and draw(st.booleans()):
        target = draw(st.sampled_from([pa.int64(), pa.float64()]))
    return values, target, mask


@given(numpy_arrays())
@settings(max_examples=400, deadline=None)
def test_from_numpy_equals_pa_array(case) -> None:
    values, target, mask = case
    # (pyarrow refuses byte-swapped input; from_numpy converts it to native order first)
    try:
        want = pa.array(values.astype(values.dtype.newbyteorder("=")), target, mask=mask)
    except pa.ArrowInvalid:  # a lossy conversion is refused both ways
        with pytest.raises(pa.ArrowInvalid):
            from_numpy(values, target, mask=mask)
        return
    got = from_numpy(values, target, mask=mask)
    got.validate(full=True)
    assert got.type == want.type
    assert got.equals(want), (got, want)


def test_from_numpy_refuses_a_mask_of_another_shape() -> None:
    with pytest.raises(ValueError, match="mask of shape"):
        from_numpy(np.arange(3), mask=np.zeros(2, bool))


def test_empty_binary_is_the_empty_binary_scalar() -> None:
    assert empty_binary().equals(pa.scalar(b"", pa.binary()))
    a = pa.array([b"x", b"yz"])
    assert pc.binary_join_element_wise(a, a, empty_binary()).to_pylist() == [b"xx", b"yzyz"]


def test_shard_stages_in_a_fresh_interpreter_import_no_pandas() -> None:
    # As a Spark worker's first shard task after a cold restart: the batch arrives as an Arrow
    # stream; the aggregate's key encoding, state merge and output, the deduplication's late
    # filter and numbering, and the task's metrics row must not import pandas.
    table = pa.table({"k": pa.array([3, 1, 3, 2], pa.int64()),
                      "s": pa.array(["a", "b", "a", "c"]),
                      "v": pa.array([1.5, None, 2.5, 4.0], pa.float64()),
                      "ts": pa.array([1000, 2000, None, 9000], pa.timestamp("ms"))})
    code = textwrap.dedent("""
        import json, sys
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql.types import (DoubleType, LongType, StringType, StructField,
                                       StructType, TimestampType)
        from silt_spark.operators import _aggregation, dedup
        from silt_spark.operators._batchkeys import encode_keys_arrow
        from silt_spark.operators._groupby import group_by
        from silt_spark.runtime import _progress
        from silt_spark.runtime._layout import KG_COLUMN

        t = pa.Table.from_batches(list(pa.ipc.open_stream(sys.stdin.buffer.read())))
        schema = StructType([StructField("k", LongType()), StructField("s", StringType()),
                             StructField("v", DoubleType()), StructField("ts", TimestampType())])
        p = _aggregation.plan(schema, ["k", "s"],
                              _aggregation.parse_aggs(["count", "sum(v)", "avg(v)"]))[0]
        parts = pa.Table.from_batches(list(_aggregation.partial_aggregate(
            iter(t.to_batches()), p)))
        kg = pc.cast(parts["k"], pa.int32())
        parts = parts.append_column(KG_COLUMN, kg)
        g = group_by(parts, ["k", "s", KG_COLUMN], _aggregation.merge_specs(p))
        keys = encode_keys_arrow(g[KG_COLUMN], [g["k"], g["s"]]).to_pylist()
        old = _aggregation.read_records([None] * len(keys), p, "file:///x")
        new = _aggregation.combine(old, g, p)
        out = pa.Table.from_arrays([g["k"], g["s"]] + _aggregation.output_arrays(new, p),
                                   schema=p.output_schema)
        rows = sorted(zip(*out.to_pydict().values()))
        assert rows == [(1, "b", 1, None, None), (2, "c", 1, 4.0, 4.0), (3, "a", 2, 4.0, 2.0)], rows
        assert len(set(keys)) == 3

        dp = dedup.DedupPlan(("k",), None, t.schema, None, "ts", 0)
        kept = dedup.drop_late(t, dp, 1500)
        assert kept["k"].to_pylist() == [1, 3, 2], kept  # 1000 is late; a null time never is
        struct = pa.struct([("rows_in", pa.int64()), ("process_ms", pa.float64())])
        metrics = _progress.metrics_batch(
            {"rows_in": 4, "process_ms": 1.5},
            pa.schema([("k", pa.int64()), (_progress.METRICS_COLUMN, struct)]))
        assert metrics.column(0).to_pylist() == [None]
        row = metrics.column(1).to_pylist()[0]
        assert row == {"rows_in": 4, "process_ms": 1.5}, row
        print(json.dumps(sorted(m for m in ("pandas", "pyarrow.dataset", "pyarrow.acero")
                                if m in sys.modules)))
    """)
    assert run_fresh(code, table) == []
