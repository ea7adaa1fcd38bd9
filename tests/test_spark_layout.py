"""silt_spark routing: key groups, shard ranges, and Spark partition id == shard id; the value
codec; aggregate parsing. The partition checks run against a real local SparkSession."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from silt_spark.operators import _aggregation, _batchkeys
from silt_spark.runtime import _codec, _layout


@pytest.mark.parametrize("key_groups", [1, 7, 256, 1000])
@pytest.mark.parametrize("num_shards", [1, 2, 3, 4, 7, 16])
def test_shard_ranges_partition_the_key_groups(num_shards, key_groups):
    if num_shards > key_groups:
        with pytest.raises(ValueError):
            _layout.check_layout(num_shards, key_groups)
        return
    _layout.check_layout(num_shards, key_groups)
    expected_first = 0
    for shard in range(num_shards):
        first, last = _layout.shard_range(shard, num_shards, key_groups)
        assert first == expected_first and first <= last
        for kg in (first, last):
            assert _layout.shard_of(kg, num_shards, key_groups) == shard
        expected_first = last + 1
    assert expected_first == key_groups


def test_murmur3_matches_spark_hash(spark):
    values = [0, 1, 2, 42, -1, -(2**31), 2**31 - 1, 123456789]
    df = spark.createDataFrame([(v,) for v in values], "v int")
    got = {r.v: r.h for r in df.select("v", F.hash("v").alias("h")).collect()}
    assert got == {v: _layout.murmur3_hash_int(v) for v in values}


@pytest.mark.parametrize("num_shards", [1, 2, 3, 4, 7, 16])
def test_partition_values_land_in_their_shard(spark, num_shards):
    values = _layout.partition_values(num_shards)
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "shard int, v int")
    rows = df.select(
        "shard", F.pmod(F.hash("v"), F.lit(num_shards)).alias("p")
    ).collect()
    assert all(r.shard == r.p for r in rows)


def test_routing_puts_each_key_group_in_its_shard_partition(spark):
    num_shards, key_groups = 5, 64
    df = spark.range(0, 3000).selectExpr("id as user", "cast(id % 7 as string) as device")
    routed = _layout.with_routing_columns(df, ["user", "device"], num_shards, key_groups)
    routed = routed.repartition(num_shards, _layout.PARTITION_COLUMN)

    def report(batches):
        from pyspark import TaskContext

        pid = TaskContext.get().partitionId()
        for b in batches:
            yield pa.RecordBatch.from_pydict(
                {"pid": pa.array([pid] * b.num_rows, pa.int32()), "kg": b.column(_layout.KG_COLUMN)}
            )

    rows = routed.mapInArrow(report, "pid int, kg int").collect()
    assert len(rows) == 3000
    assert {r.kg for r in rows} == set(range(key_groups))  # 3000 keys cover all groups
    for r in rows:
        assert r.pid == _layout.shard_of(r.kg, num_shards, key_groups)
    # The key group is a function of the key values only (Spark's xxhash64, seed 42).
    again = _layout.with_routing_columns(df, ["user", "device"], num_shards, key_groups)
    a = {(r.user, r.device): r[_layout.KG_COLUMN] for r in again.collect()}
    b = {(r.user, r.device): r.kg for r in df.select(
        "user", "device",
        F.pmod(F.xxhash64("user", "device"), F.lit(key_groups)).alias("kg"),
    ).collect()}
    assert a == b


def test_the_plan_names_the_operator_and_holds_no_key_group_table(spark, tmp_path):
    """The explain plan of an operator reads as what it is: ``MapInArrow silt_aggregate`` and
    one literal array of ``num_shards`` partition values, not one per key group."""
    import re

    import silt_spark

    src = tmp_path / "in"
    src.mkdir()
    df = spark.readStream.schema("user string, amount long").json(str(src))
    out = silt_spark.aggregate(df, ["user"], ["count"], state_url=(tmp_path / "s").as_uri(),
                               num_shards=4)
    plan = out._jdf.queryExecution().logical().toString()
    assert "silt_aggregate" in plan and "shard_fn" not in plan
    arrays = re.findall(r"array\(([^()]*)\)", plan)
    assert arrays and max(len(a.split(",")) for a in arrays) == 4, arrays


def test_child_and_shard_urls():
    assert _layout.child_url("file:///tmp/x/", "kg-1") == "file:///tmp/x/kg-1"
    assert (
        _layout.child_url("s3://b/state?endpoint_url=http://h:1", "kg-00000-00063")
        == "s3://b/state/kg-00000-00063?endpoint_url=http://h:1"
    )
    assert _layout.shard_url("file:///r", 1, 4, 256) == "file:///r/kg-00064-00127"


@pytest.mark.parametrize(
    "value",
    [
        None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**70, 1.5, float("-inf"), "", "héllo",
        b"\x00\xff", (1, "a", None), [1, [2, (3,)]], {"a": 1, 2: [b"x"]},
        dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC), dt.date(1999, 12, 31),
        decimal.Decimal("12.340"),
    ],
)
def test_codec_round_trips(value):
    assert _codec.decode(_codec.encode(value)) == value


def test_codec_normalizes_numpy_and_is_stable():
    import numpy as np

    assert _codec.encode((np.int64(5), np.float64(2.5))) == _codec.encode((5, 2.5))
    # On-disk format: these bytes must never change.
    assert _codec.encode(("a", 1)).hex() == "0700000002050000000161030000000000000001"
    with pytest.raises(TypeError, match="cannot store"):
        _codec.encode(object())


def test_parse_aggs():
    parsed = _aggregation.parse_aggs(["count", "sum(x)", "AVG( y )", "count(z)"])
    assert parsed == [
        _aggregation.Agg("count", "count", None),
        _aggregation.Agg("sum(x)", "sum", "x"),
        _aggregation.Agg("AVG( y )", "avg", "y"),
        _aggregation.Agg("count(z)", "count", "z"),
    ]
    parsed = _aggregation.parse_aggs({"n": "count(1)", "t": "sum(x)", "m": "mean(y)"})
    assert parsed == [
        _aggregation.Agg("n", "count", None),
        _aggregation.Agg("t", "sum", "x"),
        _aggregation.Agg("m", "avg", "y"),
    ]
    assert _aggregation.parse_aggs(["max(`a`)"]) == [_aggregation.Agg("max(`a`)", "max", "a")]
    for bad in (["median(x)"], ["sum(*)"], [], ["sum(x)", "sum(x)"], ["sum x"]):
        with pytest.raises(ValueError):
            _aggregation.parse_aggs(bad)


def test_vectorized_key_encoding_equals_the_codec():
    """aggregate's Arrow key encoder writes exactly the bytes of the per-key codec path, and
    declines columns it does not handle (nulls, other types) instead of encoding them wrong."""
    import random

    rng = random.Random(7)
    for _ in range(30):
        n = rng.randrange(1, 200)
        kinds = [rng.choice(["i64", "i32", "i8", "f64", "f32", "str"])
                 for _ in range(rng.randrange(1, 4))]
        cols = []
        for kind in kinds:
            if kind.startswith("i"):
                bits = int(kind[1:])
                lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
                cols.append(pa.array([rng.randint(lo, hi) for _ in range(n)],
                                     getattr(pa, f"int{bits}")()))
            elif kind == "f64":
                cols.append(pa.array([rng.uniform(-1e9, 1e9) for _ in range(n)], pa.float64()))
            elif kind == "f32":
                cols.append(pa.array([rng.uniform(-1e3, 1e3) for _ in range(n)], pa.float32()))
            else:
                cols.append(pa.array(["".join(rng.choice("ab\u00e9\u4e2d\U0001f600 ")
                                              for _ in range(rng.randrange(0, 9)))
                                      for _ in range(n)]))
        kg = pa.array([rng.randrange(0, 1 << 16) for _ in range(n)], pa.int32())
        fast = _batchkeys.encode_keys_arrow(kg, cols).to_pylist()
        slow = _batchkeys.encode_keys(kg.to_pylist(), [c.to_pylist() for c in cols])
        assert fast == slow, kinds
    kg = pa.array([1, 2], pa.int32())
    assert _batchkeys.encode_keys_arrow(kg, [pa.array([1, None])]) is None
    assert _batchkeys.encode_keys_arrow(kg, [pa.array([True, False])]) is None
    assert _batchkeys.encode_keys_arrow(kg, [pa.array([1, 2], pa.uint64())]) is None
    # encode_key_columns: either path, any tag, row order kept
    cols = [pa.array(["b", "a"]), pa.array([1, None])]
    assert _batchkeys.encode_key_columns(kg, cols, b"D") == _batchkeys.encode_keys(
        [1, 2], [["b", "a"], [1, None]], b"D")
    assert _batchkeys.encode_key_columns(kg, cols[:1], b"D") == _batchkeys.encode_keys(
        [1, 2], [["b", "a"]], b"D")
