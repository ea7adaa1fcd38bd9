"""silt_spark's group-by (``_groupby.group_by``) returns exactly pyarrow's
``Table.group_by(...).aggregate(...)`` without importing pandas (which ``pyarrow.acero`` does
through ``pyarrow.dataset``, in every fresh Python worker of a cold restart)."""

from __future__ import annotations

import textwrap

import pyarrow as pa
import pyarrow.compute as pc
from freshworker import run_fresh
from hypothesis import given, settings
from hypothesis import strategies as st
from silt_spark.operators._groupby import group_by

FUNCS = ("count", "sum", "min", "max", "mean", "count_distinct", "first", "last", "any", "all")


@st.composite
def cases(draw):
    n = draw(st.integers(0, 60))
    nkeys = draw(st.integers(0, 2))
    ints = st.one_of(st.none(), st.integers(-5, 5))
    cols = {f"k{i}": pa.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
                              pa.int64()) for i in range(nkeys)}
    cols["v"] = pa.array(draw(st.lists(ints, min_size=n, max_size=n)), pa.int64())
    cols["f"] = pa.array(draw(st.lists(st.one_of(st.none(), st.floats(-9, 9)), min_size=n,
                                       max_size=n)), pa.float64())
    cols["b"] = pa.array(draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=n,
                                       max_size=n)), pa.bool_())
    aggs = []
    for _ in range(draw(st.integers(1, 5))):
        func = draw(st.sampled_from((*FUNCS, "count_all")))
        if func == "count_all":
            aggs.append(([], "count_all"))
            continue
        col = "b" if func in ("any", "all") else draw(st.sampled_from(["v", "f"]))
        if func in ("first", "last") and not nkeys:
            func = "min"  # first/last are grouped functions only
        prefix = draw(st.sampled_from(["", "hash_"])) if nkeys else ""
        form = draw(st.integers(0, 2))
        if form == 0:
            aggs.append((col, prefix + func))
        elif form == 1:
            aggs.append(([col], prefix + func))
        else:
            opt = pc.CountOptions(mode="all") if func in ("count", "count_distinct") else None
            aggs.append((col, prefix + func, opt))
    keys = [f"k{i}" for i in range(nkeys)]
    return pa.table(cols), (keys[0] if nkeys == 1 and draw(st.booleans()) else keys), aggs


@given(cases())
@settings(max_examples=300, deadline=None)
def test_group_by_equals_pyarrows_table_group_by(case) -> None:
    table, keys, aggs = case
    want = table.group_by(keys, use_threads=False).aggregate(aggs)
    got = group_by(table, keys, aggs)
    assert got.schema == want.schema
    assert got.equals(want), (got.to_pydict(), want.to_pydict())


def test_group_by_in_a_fresh_interpreter_imports_neither_pandas_nor_pyarrow_dataset() -> None:
    # as in a Spark worker's partial aggregation: batches read from an Arrow stream (building
    # arrays from Python lists or numpy would import pandas through pyarrow itself)
    table = pa.table({"k": [1, 2, 1], "v": [1, 2, 3]})
    code = textwrap.dedent("""
        import json, sys
        import pyarrow as pa
        import silt_spark.operators.aggregate
        from silt_spark.operators._groupby import group_by
        t = pa.Table.from_batches(list(pa.ipc.open_stream(sys.stdin.buffer.read())))
        g = group_by(t, ["k"], [([], "count_all"), ("v", "sum")])
        assert g.to_pydict() == {"count_all": [2, 1], "v_sum": [4, 2], "k": [1, 2]}, g
        # the partial aggregation before the shuffle, as the worker runs it
        from pyspark.sql.types import LongType, StructField, StructType
        from silt_spark.operators._aggregation import parse_aggs, partial_aggregate, plan
        schema = StructType([StructField("k", LongType()), StructField("v", LongType())])
        p = plan(schema, ["k"], parse_aggs(["count", "sum(v)"]))[0]
        rows = pa.Table.from_batches(list(partial_aggregate(iter(t.to_batches()), p)))
        assert rows.num_rows == 2, rows
        print(json.dumps(sorted(m for m in ("pandas", "pyarrow.dataset", "pyarrow.acero")
                                if m in sys.modules)))
    """)
    assert run_fresh(code, table) == []
