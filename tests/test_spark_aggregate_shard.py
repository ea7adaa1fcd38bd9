"""The aggregate's shard stage (``operators/aggregate.merge_partition``) without Spark: its
numpy grouping in state-key order (``_keyorder``) equals ``group_by`` then a sort of the
encoded keys; its records read back (``_aggregation.read_records``) as one record per value
decodes them; what it writes is the on-disk layout as before (keys ``kg:u16be 'A'
enc(key tuple)``, records ``fmt rows n sum min max``), and no Python step runs per key in it.
"""

from __future__ import annotations

import struct
import textwrap

import numpy as np
import pyarrow as pa
import pytest
import silt
from freshworker import run_fresh
from hypothesis import given, settings
from hypothesis import strategies as st
from pycalls import python_lines
from pyspark.sql import types as T
from silt_spark.operators import _aggregation
from silt_spark.operators import aggregate as _aggregate
from silt_spark.operators._batchkeys import encode_keys, encode_keys_arrow
from silt_spark.operators._groupby import group_by
from silt_spark.operators._keyorder import grouped_in_key_order
from silt_spark.runtime import _arrowcompute, _codec
from silt_spark.runtime._layout import KG_COLUMN, PARTITION_COLUMN
from silt_spark.runtime._ndarrays import record_bytes
from test_spark_processor_api import FakeTask

SPECS = [("c", "sum"), ("f", "sum"), ("f", "min"), ("f", "max"), ("i", "sum"), ("i", "min"),
         ("i", "max")]
FLOATS = [float("nan"), -0.0, 0.0, float("inf"), float("-inf"), 1.5, -2.25, 1e300]


def _sorted_group_by(t, keys, specs):
    """``group_by`` then a sort by the encoded state keys: what the numpy path replaces."""
    g = group_by(t, [*keys, KG_COLUMN], specs)
    encoded = encode_keys_arrow(g[KG_COLUMN], [g[c] for c in keys])
    return _arrowcompute.take(g, _arrowcompute.sort_indices(encoded))


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (np.isnan(a) and np.isnan(b)) or (a == b and np.signbit(a) == np.signbit(b))
    return a == b


@st.composite
def tables(draw):
    n = draw(st.integers(1, 80))
    nkeys = draw(st.integers(1, 3))
    scale = draw(st.sampled_from([1, 1 << 20, 1 << 40, 1 << 62]))  # packed or lexsort
    ints = st.integers(-3, 3).map(lambda v: max(-(1 << 63), min(v * scale, (1 << 63) - 1)))
    cols = {f"k{j}": pa.array(draw(st.lists(ints, min_size=n, max_size=n)),
                              draw(st.sampled_from([pa.int64(), pa.int64(), pa.int32()]))
                              if scale == 1 else pa.int64())
            for j in range(nkeys)}
    cols[KG_COLUMN] = pa.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
                               pa.int32())
    maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
    cols["c"] = pa.array(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), pa.int64())
    cols["f"] = pa.array(draw(st.lists(maybe(st.sampled_from(FLOATS)), min_size=n,
                                       max_size=n)), pa.float64())
    cols["i"] = pa.array(draw(st.lists(maybe(st.integers(-(1 << 62), 1 << 62)), min_size=n,
                                       max_size=n)), pa.int64())
    t = pa.table(cols)
    size = draw(st.integers(1, n))
    return pa.Table.from_batches(t.to_batches(max_chunksize=size)), [f"k{j}" for j in
                                                                     range(nkeys)]


@given(tables())
@settings(max_examples=300, deadline=None)
def test_grouping_in_key_order_equals_group_by_then_the_key_sort(case) -> None:
    t, keys = case
    want = _sorted_group_by(t, keys, SPECS)
    got = grouped_in_key_order(t, keys, KG_COLUMN, SPECS)
    assert got.schema == want.schema
    for name in want.column_names:
        pairs = zip(got[name].to_pylist(), want[name].to_pylist())
        assert all(_same(a, b) for a, b in pairs), (name, got[name], want[name])


@pytest.mark.parametrize("column", [pa.array(["a", "b"]), pa.array([1.0, 2.0]),
                                    pa.array([1, 2], pa.uint64()), pa.array([1, None])])
def test_grouping_in_key_order_declines_keys_it_cannot_order(column) -> None:
    t = pa.table({"k": column, KG_COLUMN: pa.array([0, 1], pa.int32()),
                  "c": pa.array([1, 2], pa.int64())})
    assert grouped_in_key_order(t, ["k"], KG_COLUMN, [("c", "sum")]) is None


def _plan(floating: bool = False):
    schema = T.StructType([T.StructField("key", T.LongType()),
                           T.StructField("amount", T.DoubleType() if floating else T.LongType())])
    p, _, _ = _aggregation.plan(schema, ["key"], _aggregation.parse_aggs(
        ["count", "sum(amount)", "min(amount)", "max(amount)"]))
    return p


def _one_by_one(values, p):
    """Each stored record decoded on its own (what read_records vectorizes)."""
    out = np.zeros(len(values), _aggregation.state_dtype(p))
    for i, v in enumerate(values):
        if v is not None:
            rec = np.frombuffer(v, _aggregation.state_dtype(
                p, (len(v) - 9) // 32))[0]
            for name in rec.dtype.names:
                out[name][i] = rec[name]
    return out


@given(st.lists(st.one_of(st.none(), st.tuples(st.booleans(), st.integers(-99, 99))),
                max_size=40))
@settings(max_examples=200, deadline=None)
def test_read_records_equals_decoding_each_record(items) -> None:
    # two value columns; a record written before the second was appended is 32 bytes shorter
    p = _aggregation.AggPlan(("key",), (), ("a", "b"), (False, True), None, None)
    values = []
    for item in items:
        if item is None:
            values.append(None)
            continue
        short, x = item
        rec = np.zeros(1, _aggregation.state_dtype(p, 1 if short else 2))
        rec["fmt"], rec["rows"], rec["n0"], rec["s0"] = 1, abs(x), 1, x
        if not short:
            rec["n1"], rec["s1"], rec["mn1"] = 2, x / 4, -x
        values.append(rec.tobytes())
    got = _aggregation.read_records(values, p, "file:///r")
    assert got.tobytes() == _one_by_one(values, p).tobytes()


def test_read_records_refuses_a_record_of_a_foreign_width_or_format() -> None:
    p = _plan()
    good = bytes([1]) + bytes(40)
    with pytest.raises(ValueError, match="does not match"):
        _aggregation.read_records([good, None, bytes(17)], p, "file:///r")
    with pytest.raises(ValueError, match="unknown aggregation state format"):
        _aggregation.read_records([good, bytes([2]) + bytes(40)], p, "file:///r")


def test_record_bytes_are_each_records_bytes() -> None:
    rec = np.zeros(4, _aggregation.state_dtype(_plan()))
    rec["rows"] = [0, 1, -1, 1 << 40]  # trailing zero bytes kept
    assert record_bytes(rec) == [r.tobytes() for r in rec]
    assert record_bytes(rec[::2]) == [r.tobytes() for r in rec[::2]]


def _task(path):
    """A shard task on a fresh DB under ``path``."""
    task = FakeTask(silt.open(path.as_uri()))
    task.url = path.as_uri()
    return task


def _batch(keys, amounts, p, key_groups=256):
    """The shard stage's input for rows ``(key, amount)``: their partials, with the routing
    columns (key group = the key modulo 256, as the benchmark routes)."""
    t = pa.table({"key": pa.array(keys, p.partial_schema.field("key").type),
                  "amount": pa.array(amounts)})
    parts = pa.Table.from_batches(list(_aggregation.partial_aggregate(iter(t.to_batches()), p)))
    kg = pa.array([hash(k) % key_groups if isinstance(k, str) else k % key_groups
                   for k in parts["key"].to_pylist()], pa.int32())
    parts = parts.append_column(KG_COLUMN, kg)
    return parts.append_column(PARTITION_COLUMN, pa.array([0] * parts.num_rows, pa.int32()))


@pytest.mark.parametrize("floating", [False, True])
def test_the_shard_stage_writes_the_layout_it_always_wrote(tmp_path, floating) -> None:
    p = _plan(floating)
    rng = np.random.default_rng(3)
    model: dict[int, list] = {}
    task = _task(tmp_path)
    try:
        for batch in range(3):
            keys = rng.integers(-(1 << 40), 1 << 40, 50) if batch == 0 else \
                rng.choice(sorted(model), 60)
            amounts = rng.integers(-50, 50, len(keys)).astype(float if floating else int)
            for k, a in zip(keys.tolist(), amounts.tolist()):
                m = model.setdefault(k, [0, 0, None, None])
                m[0] += 1
                m[1] += a
                m[2] = a if m[2] is None else min(m[2], a)
                m[3] = a if m[3] is None else max(m[3], a)
            out = pa.Table.from_batches(list(_aggregate.merge_partition(
                task, iter(_batch(keys, amounts, p).to_batches()), p)))
            assert out["key"].to_pylist() == sorted(set(keys.tolist()),
                                                    key=lambda k: (k % 256, k & (2**64 - 1)))
            for k, n, s, lo, hi in zip(*(out[c].to_pylist() for c in out.column_names)):
                assert [n, s, lo, hi] == model[k]
            task.changed = True
            task.commit(batch + 1)
        f = "<d" if floating else "<q"
        stored = dict(task.db.scan())
        assert stored == {
            encode_keys([k % 256], [[k]])[0]: struct.pack(f"<Bqq{f[1] * 3}", 1, m[0], m[0],
                                                          m[1], m[2], m[3])
            for k, m in model.items()
        }
    finally:
        task.db.close()


def test_string_keys_take_group_by_and_write_the_same_layout(tmp_path) -> None:
    schema = T.StructType([T.StructField("key", T.StringType()),
                           T.StructField("amount", T.LongType())])
    p, _, _ = _aggregation.plan(schema, ["key"], _aggregation.parse_aggs(["count"]))
    task = _task(tmp_path)
    try:
        rows = ["b", "a", "b", "c"]
        out = pa.Table.from_batches(list(_aggregate.merge_partition(
            task, iter(_batch(rows, [1, 2, 3, 4], p, key_groups=1).to_batches()), p)))
        assert out.to_pydict() == {"key": ["a", "b", "c"], "count": [1, 2, 1]}
        stored = dict(task.db.scan())
        assert stored == {b"\x00\x00A" + _codec.encode((k,)):
                          struct.pack("<Bq", 1, n) for k, n in [("a", 1), ("b", 2), ("c", 1)]}
    finally:
        task.db.close()


def test_the_shard_stage_runs_no_python_step_per_key(tmp_path) -> None:
    """The Python lines the stage executes in silt_spark do not grow with the batch's keys
    (the grouping, the key order, reading and writing the records are numpy and Arrow)."""
    p = _plan()
    counts = []
    for n in (200, 2000):
        task = _task(tmp_path / str(n))
        try:
            keys = np.arange(n)
            for batch in range(2):  # the second batch reads the first one's records
                rows = _batch(keys, keys, p).to_batches()
                lines = python_lines(
                    lambda t=task, r=rows: list(_aggregate.merge_partition(t, iter(r), p)),
                    "silt_spark")
                task.changed = True
                task.commit(batch + 1)
            counts.append(sum(lines.values()))
        finally:
            task.db.close()
    assert counts[0] == counts[1], counts


def test_the_shard_stage_in_a_fresh_worker_imports_no_pandas_acero_or_numpy_ma(tmp_path) -> None:
    # A restarted worker's first shard task: grouping, reading the records back and writing
    # them import neither pandas, Acero (through pyarrow.dataset), pyarrow.compute nor
    # numpy.ma (which np.unique imports: 10-20 ms of a fresh worker's CPU).
    p = _plan(floating=True)
    keys = np.arange(-50, 50)
    parts = _batch(keys, (keys * 0.5).astype(float), p)
    code = textwrap.dedent(f"""
        import json, sys
        import pyarrow as pa
        import silt
        from pyspark.sql import types as T
        from silt_spark.operators import _aggregation, aggregate

        class Task:
            url = {tmp_path.as_uri()!r}
            db = silt.open(url)
            changed = False

            def commit(self, version):
                self.db.commit(version)

        t = pa.Table.from_batches(list(pa.ipc.open_stream(sys.stdin.buffer.read())))
        schema = T.StructType([T.StructField("key", T.LongType()),
                               T.StructField("amount", T.DoubleType())])
        p, _, _ = _aggregation.plan(schema, ["key"], _aggregation.parse_aggs(
            ["count", "sum(amount)", "min(amount)", "max(amount)"]))
        task = Task()
        for batch in (1, 2):  # the second batch reads the first one's records
            out = pa.Table.from_batches(list(aggregate.merge_partition(
                task, iter(t.to_batches()), p)))
            task.changed = True
            task.commit(batch)
        assert out["count"].to_pylist() == [2] * 100
        task.db.close()
        print(json.dumps(sorted(m for m in ("pandas", "pyarrow.dataset", "pyarrow.acero",
                                            "pyarrow.compute", "numpy.ma")
                                if m in sys.modules)))
    """)
    assert run_fresh(code, parts) == []
