"""The join's vectorized encoding (silt_spark._rowcodec) against the per-row ``_codec`` path.

State written by the vectorized join must be byte for byte what the per-row path wrote (one
on-disk format): row tuples, join keys and whole state keys, for several columns and types,
nulls, unicode, negative times and buckets. Decoding gives the columns back; a row key's
fields come back out of it. No Spark.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import numpy as np
import pyarrow as pa
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt.tiers.memory import MemoryStore
from silt_spark import _codec, _join, _rowcodec

UTC = dt.UTC
MIN_US, MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999

TYPES = {
    "int64": (pa.int64(), st.integers(-(1 << 63), (1 << 63) - 1)),
    "int32": (pa.int32(), st.integers(-(1 << 31), (1 << 31) - 1)),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "float64": (pa.float64(), st.floats(allow_nan=False)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), st.text(max_size=12)),
    "binary": (pa.binary(), st.binary(max_size=12)),
    "ts_us": (pa.timestamp("us", tz="UTC"), st.integers(MIN_US, MAX_US)),
    "ts_ntz": (pa.timestamp("us"), st.integers(MIN_US, MAX_US)),
    "ts_ms": (pa.timestamp("ms", tz="UTC"), st.integers(MIN_US // 1000, MAX_US // 1000)),
    "date": (pa.date32(), st.integers(-719_162, 2_932_896)),
    # not vectorized: goes through _codec per value, with the same bytes
    "decimal": (pa.decimal128(12, 2), st.decimals(-10**9, 10**9, places=2)),
}


@st.composite
def tables(draw, min_cols=1):
    names = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=min_cols, max_size=5))
    n = draw(st.integers(0, 12))
    cols = []
    for name in names:
        typ, values = TYPES[name]
        vals = draw(st.lists(st.none() | values, min_size=n, max_size=n))
        if name in ("ts_us", "ts_ntz", "ts_ms", "date"):
            cols.append(pa.array(vals, pa.int64() if name != "date" else pa.int32()).cast(typ))
        else:
            cols.append(pa.array(vals, typ))
    return cols, n


def per_row(cols, n):
    rows = list(zip(*[c.to_pylist() for c in cols])) if cols else [()] * n
    return [_codec.encode(tuple(r)) for r in rows]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=tables())
def test_tuples_are_the_per_row_bytes_and_decode_back(data):
    cols, n = data
    got = _rowcodec.encode_tuples(cols, n)
    assert got.to_list() == per_row(cols, n)
    schema = pa.schema([pa.field(f"c{i}", c.type) for i, c in enumerate(cols)])
    back = _rowcodec.decode_tuples(_join.row_values(np.ones(n, bool), got), schema, skip=1)
    assert [c.to_pylist() for c in back] == [c.to_pylist() for c in cols]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=tables(), side=st.integers(0, 1), seed=st.integers(0, 2**32 - 1))
def test_row_keys_are_the_per_row_keys(data, side, seed):
    cols, n = data
    rng = np.random.default_rng(seed)
    kgs = rng.integers(0, 1 << 16, n)
    times = rng.integers(-(1 << 62), 1 << 62, n)
    buckets = times // 1_000_000
    seqs = rng.integers(0, 1 << 63, n, dtype=np.uint64)
    enc = _rowcodec.encode_tuples(cols, n)
    keys = _join.row_keys(kgs, side, buckets, enc, times, seqs).to_list()
    want = [_join.row_key(int(kgs[i]), side, int(buckets[i]), e, int(times[i]), int(seqs[i]))
            for i, e in enumerate(per_row(cols, n))]
    assert keys == want
    # and the fields come back out of the keys, as a probe reads them
    loaded = _join._Loaded(side, keys, [b"\x00" + e for e in per_row(cols, n)])
    assert loaded.kgs.tolist() == kgs.tolist()
    assert loaded.times.tolist() == times.tolist()
    assert loaded.enc_keys.to_list() == per_row(cols, n)
    assert [_join.split_row_key(k)[2] for k in keys] == per_row(cols, n)


def test_unicode_nulls_and_mixed_columns_by_example():
    cols = [
        pa.array(["é", None, "日本語", "", "\U0001f600"]),
        pa.array([-1, None, 0, 1 << 40, -(1 << 63)], pa.int64()),
        pa.array([None, None, None, None, None], pa.float64()),
        pa.array([True, False, None, True, False]),
        pa.array([dt.datetime(1960, 1, 1, tzinfo=UTC), None, dt.datetime(2024, 2, 29,
                                                                         tzinfo=UTC),
                  dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, tzinfo=UTC)],
                 pa.timestamp("us", tz="UTC")),
        pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-3.00"), None,
                  decimal.Decimal("0.01")], pa.decimal128(6, 2)),
    ]
    assert _rowcodec.encode_tuples(cols).to_list() == per_row(cols, 5)


def test_a_mark_set_on_a_row_that_expires_in_the_same_batch_does_not_bring_it_back():
    """Marks are written before eviction's range deletes, which win: an outer row matched and
    expired in one batch is gone afterwards, not written back by its mark."""
    name = f"join-codec-{uuid.uuid4().hex}"
    db = silt.open(f"memory://{name}")
    try:
        enc = _codec.encode(("k",))
        key = _join.row_key(0, 0, 0, enc, 5, 1)
        _join.write(db, [(key, b"\x00" + _codec.encode(("k", 5)), None)], {(0, 0, 0): 1}, set())
        db.commit()
        ops = [(key, b"\x01" + _codec.encode(("k", 5)), None)]  # a mark set this batch
        ranges: list = []
        dead: set = set()
        delta: dict = {}
        jp = _join.JoinPlan(how="full", nkeys=1, columns=(("k", "t"), ("k", "t")),
                            time_index=(1, 1), time_range=(0, 0), bucket_us=1_000_000,
                            output=(), side_schemas=(None, None), output_schema=None)
        task = type("T", (), {"db": db, "first_kg": 0, "last_kg": 0})()
        _, n, unmatched = _join.evict(task, jp, 0, 10_000_000, True, {key}, ops, ranges, dead,
                                      delta)
        _join.write(db, ops, delta, dead, ranges)
        assert n == 1 and len(unmatched) == 0  # marked this batch: not emitted as unmatched
        assert list(db.scan(b"", b"\xff" * 8)) == []
    finally:
        db.close()
        MemoryStore.drop(name)
