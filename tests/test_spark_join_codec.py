"""The join's vectorized encoding (runtime/_rowcodec.py) against the per-row ``_codec`` path.

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
import pytest
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt.tiers.memory import MemoryStore
from silt_spark.operators.join import _buffers, _evict, _load
from silt_spark.operators.join import _probe as _join
from silt_spark.runtime import _codec, _rowcodec, _watermark

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
    back = _rowcodec.decode_tuples(_buffers.row_values(np.ones(n, bool), got), schema, skip=1)
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
    keys = _buffers.row_keys(kgs, side, buckets, enc, times, seqs).to_list()
    want = [_buffers.row_key(int(kgs[i]), side, int(buckets[i]), e, int(times[i]), int(seqs[i]))
            for i, e in enumerate(per_row(cols, n))]
    assert keys == want
    # and the fields come back out of the keys, as a probe reads them
    loaded = _load.Loaded(side, keys, [b"\x00" + e for e in per_row(cols, n)])
    assert loaded.kgs.tolist() == kgs.tolist()
    assert loaded.times.tolist() == times.tolist()
    assert loaded.enc_keys.to_list() == per_row(cols, n)
    assert [_buffers.split_row_key(k)[2] for k in keys] == per_row(cols, n)


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
        key = _buffers.row_key(0, 0, 0, enc, 5, 1)
        _join.write(db, [(key, b"\x00" + _codec.encode(("k", 5)), None)], {(0, 0, 0): 1}, set())
        db.commit()
        ops = [(key, b"\x01" + _codec.encode(("k", 5)), None)]  # a mark set this batch
        ranges: list = []
        dead: set = set()
        delta: dict = {}
        jp = _buffers.JoinPlan(how="full", nkeys=1, columns=(("k", "t"), ("k", "t")),
                            time_index=(1, 1), time_range=(0, 0), bucket_us=1_000_000,
                            output=(), side_schemas=(None, None), output_schema=None)
        task = type("T", (), {"db": db, "first_kg": 0, "last_kg": 0})()
        _, n, unmatched = _evict.evict(task, jp, 0, 10_000_000, True, {key}, ops, ranges, dead,
                                      delta)
        _join.write(db, ops, delta, dead, ranges)
        assert n == 1 and len(unmatched) == 0  # marked this batch: not emitted as unmatched
        assert list(db.scan(b"", b"\xff" * 8)) == []
    finally:
        db.close()
        MemoryStore.drop(name)


def _tagged(side_rows, side):
    """The shuffled input of a join task: one side's ``(key, value, time ms)`` rows in the
    tagged schema (the other side's columns null)."""
    from silt_spark.runtime._layout import KG_COLUMN

    n = len(side_rows)
    ts = pa.timestamp("us", tz="UTC")
    keys = [r[0] for r in side_rows]
    mine = [pa.array(keys, pa.string()), pa.array([r[1] for r in side_rows], pa.int64()),
            pa.array([r[2] * 1000 for r in side_rows], pa.int64()).cast(ts)]
    nulls = [pa.nulls(n, pa.string()), pa.nulls(n, pa.int64()), pa.nulls(n, ts)]
    cols = {"__k0": pa.array(keys, pa.string()), "__side": pa.array([side] * n, pa.int32())}
    for i, c in enumerate(mine if side == 0 else nulls):
        cols[f"__l{i}"] = c
    for i, c in enumerate(nulls if side == 0 else mine):
        cols[f"__r{i}"] = c
    cols[KG_COLUMN] = pa.array([0] * n, pa.int32())
    return pa.table(cols)


@pytest.mark.parametrize("indexed", [True, False])
def test_a_batch_is_joined_without_python_per_row(monkeypatch, indexed):
    """Two micro-batches of a left outer join through the task's code with a real (memory) DB:
    matches, buffering, eviction and unmatched rows, with ``_codec`` never called (every
    column type here is vectorized), and the rows a nested-loop model gives; with the outer
    side's time index (roots made since it exists) and without."""
    ts = pa.timestamp("us", tz="UTC")
    side = pa.schema([("k", pa.string()), ("v", pa.int64()), ("t", ts)])
    out = pa.schema([("k", pa.string()), ("v", pa.int64()), ("t", ts), ("k2", pa.string()),
                     ("w", pa.int64()), ("t2", ts)])
    jp = _buffers.JoinPlan(
        how="left", nkeys=1, columns=(("k", "v", "t"), ("k2", "w", "t2")), time_index=(2, 2),
        time_range=(1_000_000, 1_000_000), bucket_us=2_000_000,
        output=tuple([("L", i) for i in range(3)] + [("R", i) for i in range(3)]),
        side_schemas=(side, side),
        output_schema=out, time_indexed=indexed)
    assert jp.indexed == (indexed, False)
    calls = []
    for name in ("encode", "decode"):
        real = getattr(_codec, name)
        monkeypatch.setattr(_codec, name, lambda *a, real=real, name=name: (
            calls.append(name), real(*a))[1])
    db_name = f"join-codec-{uuid.uuid4().hex}"
    db = silt.open(f"memory://{db_name}")
    left = [("é", i, 1000 + 10 * i) for i in range(40)] + [("x", 99, 1500)]
    right = [("é", 100 + i, 1000 + 25 * i) for i in range(20)]
    later = [("é", 500, 9000)]  # with z, moves the watermark: the first rows expire
    z = [("z", 0, 9000)]  # buffered, not expired yet: nothing comes out for it
    got = []
    metrics = []
    try:
        seen = [None, None]
        for b, (lrows, rrows) in enumerate([(left, right), (z, later), ([], [])]):
            t = pa.concat_tables([_tagged(lrows, 0), _tagged(rrows, 1)])
            task = type("Task", (), {})()
            task.__dict__.update(
                db=db, batch_id=b, base_meta={}, base_version=db.version, changed=b > 0,
                meta_updates={},
                operator_metrics={}, first_kg=0, last_kg=0, shard=0,
                watermark=_watermark.watermark_of(seen, (0, 0)),
                late_watermark=_watermark.watermark_of(seen, (0, 0)),  # (no tick source)
                observe_event_time=lambda ms, i=0: seen.__setitem__(i, max(seen[i] or ms, ms)))
            for batch in _join.merge_partition(task, iter(t.to_batches()), jp):
                got += list(zip(*[c.to_pylist() for c in batch.columns]))
            metrics.append(task.operator_metrics)
    finally:
        db.close()
        MemoryStore.drop(db_name)
    assert calls == []
    # the metrics: rows buffered per side after each batch, rows evicted in it
    assert [(m["buffered_left"], m["buffered_right"]) for m in metrics] == [
        (41, 20), (42, 21), (1, 1)]
    assert [(m["evicted_left"], m["evicted_right"]) for m in metrics] == [
        (0, 0), (0, 0), (41, 20)]

    def us(ms):
        return dt.datetime.fromtimestamp(ms / 1000, UTC)

    want = []
    for lk, lv, lt in left:
        m = [(rk, rv, rt) for rk, rv, rt in right + later
             if rk == lk and rt - 1000 <= lt <= rt + 1000]
        want += [(lk, lv, us(lt), rk, rv, us(rt)) for rk, rv, rt in m]
        if not m:
            want.append((lk, lv, us(lt), None, None, None))
    def norm(rows):
        return sorted(tuple(v.timestamp() if isinstance(v, dt.datetime) else v for v in r)
                      for r in rows)

    assert norm(got) == norm(want)
