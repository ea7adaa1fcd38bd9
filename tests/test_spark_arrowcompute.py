"""silt_spark's Arrow kernels without ``pyarrow.compute`` (``runtime._arrowcompute``) give
exactly pyarrow's own results, and the aggregate's stages in a fresh interpreter import no
``pyarrow.compute`` (a fresh Spark Python worker after a cold restart paid 30-40 ms of CPU for
it in its first task, more on a loaded machine; the stateless floor's workers never do)."""

from __future__ import annotations

import textwrap

import pyarrow as pa
import pyarrow.compute as pc
from freshworker import run_fresh
from hypothesis import given, settings
from hypothesis import strategies as st
from silt_spark.runtime import _arrowcompute

values = st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), max_size=30)
blobs = st.lists(st.one_of(st.none(), st.binary(max_size=6)), min_size=1, max_size=20)


@given(values, st.sampled_from([pa.int64(), pa.float64(), pa.int32(), pa.string()]))
@settings(max_examples=200, deadline=None)
def test_cast_equals_pyarrows(vals, target) -> None:
    arr = pa.array(vals, pa.int64())
    try:
        want = pc.cast(arr, target)
    except pa.ArrowInvalid as exc:  # an unsafe cast refuses the same way
        try:
            _arrowcompute.cast(arr, target)
        except pa.ArrowInvalid as got:
            assert str(got) == str(exc)
            return
        raise AssertionError(f"cast to {target} of {vals} did not fail") from None
    got = _arrowcompute.cast(arr, target)
    assert got.equals(want) and got.type == want.type
    table = pa.table({"a": arr})
    assert _arrowcompute.cast(table["a"], target).equals(pc.cast(table["a"], target))


@given(blobs, st.data())
@settings(max_examples=200, deadline=None)
def test_sort_take_and_binary_kernels_equal_pyarrows(vals, data) -> None:
    arr = pa.array(vals, pa.binary())
    order = _arrowcompute.sort_indices(arr)
    assert order.equals(pc.sort_indices(arr))
    idx = pa.array(data.draw(st.lists(st.integers(0, len(vals) - 1), max_size=20)), pa.int64())
    assert _arrowcompute.take(arr, idx).equals(pc.take(arr, idx))
    table = pa.table({"b": arr, "n": pa.array(range(len(vals)), pa.int64())})
    assert _arrowcompute.take(table, order).equals(table.take(order))
    assert _arrowcompute.binary_length(arr).equals(pc.binary_length(arr))
    sep = pa.scalar(b"-", pa.binary())
    assert _arrowcompute.binary_join_element_wise(arr, arr, sep).equals(
        pc.binary_join_element_wise(arr, arr, sep))
    large = _arrowcompute.cast(arr, pa.large_binary())
    assert large.equals(arr.cast(pa.large_binary()))


def test_the_aggregates_stages_in_a_fresh_interpreter_import_no_pyarrow_compute(tmp_path) -> None:
    # As a restarted query's fresh workers: the partial aggregation before the shuffle, then
    # the shard task's key group check and the shard stage (merge with the stored state,
    # write, output) on a real file:// shard, three times, each on a new handle (a cold one
    # reading what the one before committed).
    table = pa.table({"k": pa.array([3, 1, 3, 2, 7], pa.int64()),
                      "s": pa.array(["a", "b", "a", "c", "d"]),
                      "v": pa.array([1, None, 2, 4, 5], pa.int64())})
    code = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        import pyarrow as pa
        import silt
        from pyspark.sql.types import LongType, StringType, StructField, StructType
        from silt_spark.operators import _aggregation, aggregate
        from silt_spark.errors import ShardPlacementError
        from silt_spark.runtime._layout import KG_COLUMN, PARTITION_COLUMN
        from silt_spark.runtime._ndarrays import from_numpy
        from silt_spark.runtime._run import placed

        t = pa.Table.from_batches(list(pa.ipc.open_stream(sys.stdin.buffer.read())))
        schema = StructType([StructField("k", LongType()), StructField("s", StringType()),
                             StructField("v", LongType())])
        p = _aggregation.plan(schema, ["k", "s"],
                              _aggregation.parse_aggs(["count", "sum(v)", "avg(v)"]))[0]

        class Task:
            shard, first_kg, last_kg = 0, 1, 2

            def __init__(self, db):
                self.db, self.url, self.changed = db, {str(tmp_path.as_uri())!r}, False

        def shard_input(t, kg=1):
            parts = pa.Table.from_batches(list(_aggregation.partial_aggregate(
                iter(t.to_batches()), p)))
            kg = from_numpy(np.full(parts.num_rows, kg, np.int32))
            return parts.append_column(KG_COLUMN, kg).append_column(
                PARTITION_COLUMN, from_numpy(np.zeros(parts.num_rows, np.int32)))

        rows = []
        for version in (1, 2, 3):
            with silt.open({str(tmp_path.as_uri())!r}) as db:
                # placed(): the shard task's key group check, as run_shard wraps the stage
                out = pa.Table.from_batches(list(aggregate.merge_partition(
                    Task(db), placed(Task, iter(shard_input(t).to_batches())), p)))
                db.commit(version)
            rows.append(sorted(zip(*out.to_pydict().values())))
        heartbeat = shard_input(t.slice(0, 1), kg=-1).to_batches()
        assert len(list(placed(Task, iter(heartbeat)))) == 1  # rows of every shard pass
        try:
            list(placed(Task, iter(shard_input(t, kg=3).to_batches())))
            raise AssertionError("a row of key group 3 reached the shard of 1..2")
        except ShardPlacementError as exc:
            assert "key groups 1..2 but received rows of key groups 3..3" in str(exc), exc
        print(json.dumps([rows, sorted(m for m in ("pyarrow.compute", "pandas")
                                       if m in sys.modules)]))
    """)
    rows, imported = run_fresh(code, table)
    assert imported == []
    for n, got in enumerate(rows, 1):
        assert got == [[1, "b", n, None, None], [2, "c", n, 4 * n, 4.0],
                       [3, "a", 2 * n, 3 * n, 1.5], [7, "d", n, 5 * n, 5.0]], (n, got)
