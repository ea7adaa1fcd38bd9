"""Adding aggregate columns to a running query: a restart from the same checkpoint and state
root may aggregate more columns; removing one or changing its type is refused when the query
starts, naming the change. On a real SparkSession, against a pandas model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import silt_spark
from pyspark import cloudpickle
from pyspark.sql import functions as F
from silt_spark.errors import LayoutMismatchError
from silt_spark.runtime import _names, _root
from test_spark_operator import Run, assert_frames, batch

cloudpickle.register_pickle_by_value(sys.modules[__name__])

BEFORE = ["count", "sum(amount)"]
#: Reordered, with aggregates over a column aggregated before (max(amount): full history) and
#: over a new one (price: from the restart on).
AFTER = ["sum(price)", "count", "max(amount)", "sum(amount)", "count(price)", "avg(price)"]


def with_price(df: Any) -> Any:
    return df.withColumn("price", (F.col("amount") * 1.5).cast("double"))


def model(history: list[list[tuple]], after: list[tuple]) -> pd.DataFrame:
    """The users of ``after``: count, sum and max of amount over everything, and the price
    aggregates over ``after`` only (the rows the new column has seen)."""
    cols = ["user", "device", "amount"]
    seen = pd.DataFrame([r for rows in history for r in rows] + after, columns=cols)
    now = pd.DataFrame(after, columns=cols)
    now["price"] = now["amount"] * 1.5
    g = seen[seen["user"].isin(now["user"])].groupby("user")["amount"]
    p = now.groupby("user")["price"]
    return pd.DataFrame({
        "sum(price)": p.sum(), "count": g.size(), "max(amount)": g.max(),
        "sum(amount)": g.sum(), "count(price)": p.count(), "avg(price)": p.mean(),
    }).reset_index()


def test_a_restart_may_append_aggregate_columns(spark: Any, tmp_path: Path) -> None:
    state = (tmp_path / "state").as_uri()
    run = Run(spark, tmp_path)
    history = [batch(1), batch(2)]
    run.start(silt_spark.aggregate(run.stream(), ["user"], BEFORE, state, num_shards=2))
    for rows in history:
        run.write(rows)
        run.drain()
    run.stop()

    after = batch(3, n=30, users=12)  # some users new, some seen before
    run.start(silt_spark.aggregate(with_price(run.stream()), ["user"], AFTER, state,
                                   num_shards=2))
    run.write(after)
    run.drain()
    run.stop()
    got = run.outputs[2][["user", *[c for c in AFTER]]]
    assert_frames(got, model(history, after))
    desc = _root.read_descriptor(state)
    assert desc is not None and desc["state_columns"] == [["amount", "i64"], ["price", "f64"]]

    # read_state decodes records of both widths: a user not in the last batch has no price yet.
    parts = {r.user: json.loads(r.value)
             for r in silt_spark.read_state(spark, state, raw=True).collect()}
    quiet = sorted({r[0] for rows in history for r in rows} - {r[0] for r in after})
    assert quiet, "the model needs a user absent from the last batch"
    assert parts[quiet[0]]["price"] == {"n": 0}
    busy = after[0][0]
    assert parts[busy]["price"]["n"] == sum(1 for r in after if r[0] == busy)


def test_removing_or_retyping_an_aggregated_column_is_refused_at_start(
    spark: Any, tmp_path: Path
) -> None:
    state = (tmp_path / "state").as_uri()
    src = tmp_path / "in"
    src.mkdir()
    stream = with_price(spark.readStream.schema(Run.schema).json(str(src)))
    silt_spark.aggregate(stream, ["user"], ["count", "sum(amount)", "min(price)"], state, 2)
    before = (tmp_path / "state" / _names.DESCRIPTOR).read_bytes()
    with pytest.raises(LayoutMismatchError, match=r"column\(s\) 'amount', which the aggregates"):
        silt_spark.aggregate(stream, ["user"], ["count", "max(price)"], state, 2)
    with pytest.raises(LayoutMismatchError, match=r"column 'price' changed type.*floating-point "
                                                  r"\(f64\), the column is now integral"):
        silt_spark.aggregate(stream.withColumn("price", F.col("price").cast("long")), ["user"],
                             ["sum(amount)", "sum(price)"], state, 2)
    assert (tmp_path / "state" / _names.DESCRIPTOR).read_bytes() == before
    # Output columns alone may change: another aggregate over a column already aggregated.
    # The state's layout stays; the recorded outputs (what typed read_state shows) follow.
    silt_spark.aggregate(stream, ["user"], ["avg(price)", "max(amount)"], state, 2)
    was, now = json.loads(before), _root.read_descriptor(state)
    assert now is not None and now["state_columns"] == was["state_columns"]
    assert {k: v for k, v in now.items() if k != "outputs"} == {
        k: v for k, v in was.items() if k != "outputs"}
    assert now["outputs"] == [["avg(price)", "avg", "price", "double"],
                              ["max(amount)", "max", "amount", "bigint"]]


def test_a_restarted_window_aggregate_may_append_columns(spark: Any, tmp_path: Path) -> None:
    from test_spark_inspect import EventRun  # event time ts = amount seconds

    state = (tmp_path / "state").as_uri()
    run = EventRun(spark, tmp_path)

    def build(df: Any, aggs: list[str]) -> Any:
        return silt_spark.window_aggregate(df, ["user"], "ts", "10 seconds", aggs, state,
                                           num_shards=2, output="update")

    run.start(build(run.stream(), ["count", "sum(amount)"]))
    run.write([("a", "d", 1), ("a", "d", 2)])
    run.drain()
    run.stop()
    before = max(run.outputs)  # (the tick source may have run batches after the data's)
    run.start(build(with_price(run.stream()), ["count", "sum(amount)", "sum(price)",
                                               "count(price)"]))
    run.write([("a", "d", 3)])
    run.drain()
    run.stop()
    got = run.outputs[before + 1].to_dict("records")
    assert len(got) == 1
    row = got[0]
    # The window [0 s, 10 s) was open at the restart: the price columns count its row since.
    assert (row["count"], row["sum(amount)"], row["sum(price)"], row["count(price)"]) == (
        3, 6, 4.5, 1)
    with pytest.raises(LayoutMismatchError, match=r"column\(s\) 'amount', 'price', which"):
        build(with_price(run.stream()), ["count"])
