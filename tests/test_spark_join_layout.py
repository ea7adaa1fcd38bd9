"""The join buffers' state layout (silt_spark.operators.join._probe) against a model, with no Spark.

Rows of both sides are buffered as the operator buffers them (a row entry per row, a count
entry per time bucket), then the watermark advances in random steps and each side is evicted as
a micro-batch evicts it. The model says which rows the watermark allows to drop (time at or
below the side's state watermark, Spark's bound): an outer side must keep exactly the others
and emit its expired rows never matched, each exactly once; an inner side drops whole buckets
only (a bucket once all its times are expired), never a row the watermark still needs. The
count entries always add up to the rows left. Runs with the core's range deletes where the
core has them, and with per-key deletes; with an outer side's time index (roots made since it
exists: the index lists exactly the rows left, with their marks) and without (older roots).
Rows matched in the batch that evicts them (marks written with the eviction) are never emitted.
"""

from __future__ import annotations

import types
import uuid

import pytest
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt.tiers.memory import MemoryStore
from silt_spark.operators.join import _buffers, _evict
from silt_spark.operators.join import _probe as _join
from silt_spark.runtime import _codec

KGS = 3
RANGE_MS = (1500, 500)  # left time between right time - 1.5 s and right time + 0.5 s


class NoRangeDelete:
    """A DB without ``delete_range`` (the core before range deletes): eviction deletes keys."""

    def __init__(self, db):
        self._db = db

    def __getattr__(self, name):
        if name == "delete_range":
            raise AttributeError(name)
        return getattr(self._db, name)


MODES = ["keys"] + (["range"] if hasattr(silt.DB, "delete_range") else [])

rows_st = st.lists(
    st.tuples(st.integers(0, KGS - 1), st.integers(0, 1), st.integers(0, 20_000),
              st.sampled_from(["a", "b", "c"]), st.booleans()),
    min_size=1, max_size=60,
)
steps_st = st.lists(st.integers(0, 6000), min_size=1, max_size=6)


def plan(how: str, indexed: bool = False) -> _buffers.JoinPlan:
    rng = (RANGE_MS[0] * 1000, RANGE_MS[1] * 1000)
    return _buffers.JoinPlan(
        how=how, nkeys=1, columns=(("k", "t"), ("k", "t")), time_index=(1, 1), time_range=rng,
        bucket_us=max(_buffers.MIN_BUCKET_US, sum(rng)), output=(), side_schemas=(None, None),
        output_schema=None, time_indexed=indexed,
    )


def index_entry(k: bytes, matched: bool) -> tuple[bytes, bytes]:
    """The time index entry of row key ``k`` (as the operator writes it)."""
    mark = b"\x01" if matched else b"\x00"
    return _buffers.index_key_of(k), mark + _buffers.split_row_key(k)[2]


def buffer(db, jp, rows) -> dict[bytes, tuple]:
    """Buffer ``rows`` as the operator does; returns row key -> (side, time us, matched, row)."""
    model = {}
    ops = []
    counts: dict[tuple[int, int, int], int] = {}
    for seq, (kg, side, ms, key, matched) in enumerate(rows):
        us = ms * 1000
        b = _buffers.bucket_of(us, jp.bucket_us)
        k = _buffers.row_key(kg, side, b, _codec.encode((key,)), us, seq)
        row = (key, ms)
        ops.append((k, (b"\x01" if matched else b"\x00") + _codec.encode(row), None))
        if jp.indexed[side]:
            ops.append((*index_entry(k, matched), None))
        counts[(side, kg, b)] = counts.get((side, kg, b), 0) + 1
        model[k] = (side, us, matched, row)
    _join.write(db, ops, counts, set())
    return model


def live_rows(db, side: int) -> set[bytes]:
    out = set()
    for kg in range(KGS):
        h = _buffers.rows_head(kg, side)
        out |= {k for k, _ in db.scan(h, _buffers.prefix_end(h))}
    return out


def index_of(db, side: int) -> dict[bytes, bytes]:
    out = {}
    for kg in range(KGS):
        h = _buffers.index_head(kg, side)
        out.update(db.scan(h, _buffers.prefix_end(h)))
    return out


def counted(db, side: int) -> int:
    task = types.SimpleNamespace(db=db, first_kg=0, last_kg=KGS - 1)
    return _join._count_buffered(task, side)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how,indexed", [("full", True), ("full", False), ("inner", True)])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_st, steps=steps_st, marks=st.sets(st.integers(0, 59), max_size=20))
def test_eviction_matches_the_model(mode, how, indexed, rows, steps, marks):
    name = f"join-layout-{uuid.uuid4().hex}"
    db = silt.open(f"memory://{name}")
    try:
        view = db if mode == "range" else NoRangeDelete(db)
        jp = plan(how, indexed)
        assert jp.indexed == ((True, True) if indexed and how == "full" else (False, False))
        model = buffer(view, jp, rows)
        task = types.SimpleNamespace(db=view, first_kg=0, last_kg=KGS - 1, url="memory://t")
        emitted: list[tuple] = []
        wm = 0
        keys = list(model)
        for i, step in enumerate(steps):
            wm += step
            for side in (0, 1):
                evict_us = jp.evict_us(side, wm)
                outer = jp.outer[side]
                ops: list = []
                ranges: list = []
                dead: set = set()
                delta: dict = {}
                marked: set[bytes] = set()
                if outer:  # the batch matches some rows still buffered and marks them, as
                    # the operator does: marks written first, eviction's deletes after them
                    live = live_rows(db, side)
                    for j in sorted(m for m in marks if m % len(steps) == i):
                        if (j < len(keys) and keys[j] in live and model[keys[j]][0] == side
                                and not model[keys[j]][2]):
                            k = keys[j]
                            sd, us, _, row = model[k]
                            model[k] = (sd, us, True, row)
                            marked.add(k)
                            ops.append((k, b"\x01" + _codec.encode(row), None))
                            if jp.indexed[side]:
                                ops.append((*index_entry(k, True), None))
                evict = _evict.evict_indexed if jp.indexed[side] else _evict.evict
                nxt, n, unmatched = evict(task, jp, side, evict_us, outer, marked, ops,
                                          ranges, dead, delta)
                _join.write(view, ops, delta, dead, ranges)
                emitted += [(side, _codec.decode(v[1:])) for v in unmatched.to_list()]
                assert outer or not len(unmatched)
                left = live_rows(db, side)
                mine = {k: v for k, v in model.items() if v[0] == side}
                if outer:
                    want = {k for k, v in mine.items() if v[1] > evict_us}
                else:  # whole buckets: those whose every time is expired
                    full = _buffers.full_buckets_below(evict_us, jp.bucket_us)
                    want = {k for k, v in mine.items() if v[1] // jp.bucket_us >= full}
                assert left == want
                # never a row the watermark still needs
                assert all(k in left for k, v in mine.items() if v[1] > evict_us)
                assert counted(db, side) == len(left)
                index = index_of(db, side)
                if jp.indexed[side]:  # the index lists the rows left, with their marks
                    assert index == dict(index_entry(k, model[k][2]) for k in left)
                else:
                    assert not index
                if nxt is None:
                    assert not left
                else:
                    assert all(_buffers.split_row_key(k)[1] >= nxt for k in left)
                assert n >= 0
        # an outer side emits exactly its expired, never-matched rows, each once
        for side in (0, 1):
            if not jp.outer[side]:
                assert not [e for e in emitted if e[0] == side]
                continue
            final = jp.evict_us(side, wm)
            want = sorted(v[3] for v in model.values()
                          if v[0] == side and not v[2] and v[1] <= final)
            got = sorted(tuple(r) for s, r in emitted if s == side)
            assert got == want
    finally:
        db.close()
        MemoryStore.drop(name)
