"""What a stream-stream join's probe costs on an object store, in requests and round trips, with
no Spark and no clock.

A shard's buffers are filled as the operator writes them (``silt_spark.operators.join``: its
``Side`` parsing and its row, index and count encodings), committed in several write batches
(one L0 SST each), on ``memory://`` behind a :class:`silt.testing.LatencyStore` (remote: the DB
reads as from S3). A fresh handle with a cold private cache then probes both buffers as a
micro-batch does (``load_both``: both sides' count entries with one ``multi_get``, then every
probed range of both sides with one ``multi_scan``). Asserted, from the plan the reads follow:

* the count ``multi_get`` reads the tails of all the SSTs in one wave, then at most one round
  per SST (newest first);
* the ``multi_scan`` of both sides' ranges makes exactly one ranged GET per coalesced run of
  the blocks its ranges need (computed here from the SSTs' indexes with the tier's gap rule),
  all in **one** round trip: never a round per SST, a request per key or a block read twice;
* the rows found are those of a plain handle's ``scan`` of each probed range.

Before, a cold probe read each side on its own (a ``multi_get`` and a ``multi_scan`` each),
and paid per SST: its tail, then its first run of blocks alone, then the others (2 round trips
per SST in each ``multi_scan``, 2 per SST in the ``multi_get``).
"""

from __future__ import annotations

import types
import uuid
from bisect import bisect_left

import numpy as np
import pyarrow as pa
import pytest
import silt
from silt.fetch import COALESCE_GAP_BYTES, COALESCE_MAX_BYTES, coalesce
from silt.plugins import open_store
from silt.testing import LatencyStore
from silt_spark.operators.join import _buffers, _evict, _load
from silt_spark.runtime import _keys, _layout, _rowcodec

#: Seconds each request waits: long against a thread's start-up on a loaded machine.
DELAY = 0.12
KGS = 4
TS = pa.timestamp("us", tz="UTC")
RANGE_US = (30_000_000, 30_000_000)
#: Orders buffered (payments: about 90% as many): about 190k rows in the shard.
BUFFERED = 100_000
#: Every run of a probe fits in one wave of the read pool.
SETTINGS = silt.Settings(compaction="none", inline_delta_bytes=0, read_parallelism=64,
                         block_cache_bytes=256 << 20)

#: What a failure says when the only difference is MORE round trips than expected: a loaded
#: machine can start a pool thread after another request of its wave completed (see
#: silt.testing.latency); it can never shorten a chain or change the requests.
LONGER = "more round trips than expected"

pytestmark = pytest.mark.flaky(reruns=2, only_rerun=[LONGER])


def _plan() -> _buffers.JoinPlan:
    left = pa.schema([("__l0", pa.int64()), ("__l1", pa.int64()), ("__l2", TS)])
    right = pa.schema([("__r0", pa.int64()), ("__r1", pa.int64()), ("__r2", TS)])
    return _buffers.JoinPlan(
        how="left", nkeys=1, columns=(("key", "amount", "ot"), ("pkey", "paid", "pt")),
        time_index=(2, 2), time_range=RANGE_US, bucket_us=sum(RANGE_US), output=(),
        side_schemas=(left, right), output_schema=None, time_indexed=True)


def _tagged(side: int, keys: np.ndarray, ms: np.ndarray) -> pa.Table:
    """One side's rows as the operator's shuffle hands them to a task."""
    n = len(keys)
    own = [pa.array(keys, pa.int64()), pa.array(keys % 1000, pa.int64()),
           pa.array(ms * 1000, TS)]
    other = [pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()), pa.nulls(n, TS)]
    lcols, rcols = (own, other) if side == 0 else (other, own)
    cols = {"__k0": pa.array(keys, pa.int64()), "__side": pa.array(np.full(n, side, np.int32)),
            _layout.KG_COLUMN: pa.array(keys % KGS, pa.int32())}
    cols.update({f"__l{i}": c for i, c in enumerate(lcols)})
    cols.update({f"__r{i}": c for i, c in enumerate(rcols)})
    return pa.table(cols)


def _batch(rng: np.random.Generator, rows: int, start_ms: int, span_ms: int) -> pa.Table:
    """Orders with uniformly random keys; payments 0-50 s after 90% of them."""
    ms = start_ms + rng.integers(0, span_ms, rows)
    k = rng.integers(0, BUFFERED, rows)
    paid = rng.random(rows) < 0.9
    pt = ms[paid] + rng.integers(0, 50_000, int(paid.sum()))
    return pa.concat_tables([_tagged(0, k, ms), _tagged(1, k[paid], pt)])


def _task(db: object, batch_id: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(db=db, batch_id=batch_id,
                                 observe_event_time=lambda ms, side=0: None)


def _fill(url: str, jp: _buffers.JoinPlan, chunks: int, rng: np.random.Generator) -> None:
    """Buffer the orders and payments as the operator does, one commit per chunk."""
    counts: dict[bytes, int] = {}
    span = 40_000 // chunks
    with silt.open(url, settings=SETTINGS) as db:
        for c in range(chunks):
            t = _batch(rng, BUFFERED // chunks, c * span, span)
            for s in (_buffers.LEFT, _buffers.RIGHT):
                side = _load.Side(_task(db, c), t, jp, s, None)
                buckets = side.times // jp.bucket_us
                keys = _buffers.row_keys(side.kgs, s, buckets, side.enc_keys, side.times,
                                         side.seqs).to_list()
                vals = _buffers.row_values(side.matched, _rowcodec.encode_tuples(
                    side.take(np.arange(side.n)), side.n)).to_list()
                ik, iv = _buffers.index_entries(side.kgs, s, side.enc_keys, side.times,
                                                side.seqs, side.matched)
                db.put_many(keys + ik.to_list(), vals + iv.to_list())
                for kg, b in zip(side.kgs.tolist(), buckets.tolist()):
                    ck = _buffers.count_key(kg, s, b)
                    counts[ck] = counts.get(ck, 0) + 1
            db.put_many(list(counts), [_buffers.U64.pack(v) for v in counts.values()])
            db.commit()


class Recorded:
    """A real DB whose ``multi_get`` and ``multi_scan`` calls are each recorded as one
    :meth:`LatencyStore.operation`, with their arguments."""

    def __init__(self, db: silt.DB, store: LatencyStore) -> None:
        self.db, self.store = db, store
        self.calls: list[tuple[str, list, object]] = []

    def multi_get(self, keys):
        with self.store.operation() as op:
            out = self.db.multi_get(keys)
        self.calls.append(("multi_get", list(keys), op))
        return out

    def multi_scan(self, ranges):
        with self.store.operation() as op:
            out = self.db.multi_scan(ranges)
        self.calls.append(("multi_scan", list(ranges), op))
        return out


def _blocks(reader: object, ranges: list[tuple[bytes, bytes]]) -> list[int]:
    """The blocks of an SST that hold keys of ``ranges``, from its index (last key per
    block): the blocks from the one holding a range's start to the one holding its end."""
    last = reader.tail.last_keys
    out: set[int] = set()
    for a, b in ranges:
        i = bisect_left(last, a)
        if i < len(last):
            out.update(range(i, min(len(last) - 1, bisect_left(last, b)) + 1))
    return sorted(out)


def _longer(op: object, expected: int) -> None:
    if op.round_trips > expected:
        raise AssertionError(f"{LONGER}: {op.round_trips}, expected {expected}: {op}")
    assert op.round_trips == expected, op


@pytest.mark.parametrize(("chunks", "probe"), [(1, 20_000), (3, 500), (5, 4000)])
def test_a_cold_probe_reads_each_block_once_in_one_wave(chunks: int, probe: int) -> None:
    """Per side: the count multi_get's tails in one wave, then the blocks of every SST in one
    more (before the plan across SSTs: a round per SST, up to 6 round trips at 5 chunks); the
    multi_scan one GET per planned coalesced run, all in one round trip; the same rows as a
    plain scan of each range. ``probe`` orders: 500 probe key by key, 20k whole buckets."""
    url = f"memory://join-reads-{uuid.uuid4().hex}"
    jp = _plan()
    rng = np.random.default_rng(chunks * 1000 + probe)
    _fill(url, jp, chunks, rng)
    t = _batch(rng, probe, 40_000, 4_000)
    store = LatencyStore(open_store(url), DELAY)
    db = silt.open(url, store=store, settings=SETTINGS)
    plain = silt.open(url)
    try:
        view = db._state.view
        readers = [*view.l0, *(r for level in view.levels for r in level.readers)]
        assert len(readers) == chunks  # one L0 SST per commit
        rec = Recorded(db, store)
        task = _task(rec, 1 << 20)
        sides = [_load.Side(task, t, jp, s, None) for s in (_buffers.LEFT, _buffers.RIGHT)]
        found = _load.load_both(task, jp, sides)
        kinds = [name for name, _, _ in rec.calls]
        assert kinds == ["multi_get", "multi_scan"], kinds  # both sides at once
        # the count multi_get: every tail at once (the first wave), then every SST's blocks
        get = rec.calls[0][2]
        assert get.waves()[0] == sorted(("get_range", r.name) for r in readers), get
        assert get.requests["get_range"] <= chunks + chunks * 2 * KGS, get
        _longer(get, 2)
        # the multi_scan: one GET per planned run, all in one round
        reads = task.join_reads
        assert reads["probe_key_scans" if probe < 1000 else "probe_bucket_scans"] > 0, reads
        _, ranges, op = rec.calls[1]
        runs = []
        for r in readers:
            idx = _blocks(r, ranges)
            if idx:
                runs += coalesce(r, idx, COALESCE_GAP_BYTES, COALESCE_MAX_BYTES)
        assert 0 < len(runs) < 60, len(runs)  # one wave of the pool (64 threads)
        blocks = sum(len(_blocks(r, ranges)) for r in readers)
        assert dict(op.requests) == {"get_range": len(runs)}, (len(runs), blocks, op)
        assert len(runs) <= blocks
        _longer(op, 1)
        # the same rows as a plain scan of each range, each side's its own
        for got, side in zip(found, (_buffers.RIGHT, _buffers.LEFT)):
            want = [kv for a, b in ranges if a[_keys.BODY_AT] == side for kv in plain.scan(a, b)]
            assert got.side == side
            assert got.n == len(want) > 0
            assert got.key_rows.to_list() == [k for k, _ in want]
            assert got.values.to_list() == [v for _, v in want]
    finally:
        db.close()
        plain.close()


def _rows(db: silt.DB, side: int) -> list[tuple[bytes, bytes]]:
    """Every buffered row of ``side`` in the shard's key groups, by a plain scan."""
    return [kv for kg in range(KGS) for kv in db.scan(*_row_range(kg, side))]


def _row_range(kg: int, side: int) -> tuple[bytes, bytes]:
    head = _buffers.rows_head(kg, side)
    return head, _buffers.prefix_end(head)


@pytest.mark.parametrize("indexed", [True, False])
@pytest.mark.parametrize("evict_s", [30, 75])
def test_a_cold_eviction_reads_every_key_group_at_once(indexed: bool, evict_s: int) -> None:
    """An eviction on a cold handle (both sides due, the left outer) reads the count entries of
    every key group of both sides with one multi_scan, in 2 round trips (the tails, then the
    blocks), and an outer side's rows after them (its time index, then the unmatched values;
    without an index, the expired and boundary buckets of every key group at once): 4 round
    trips for the whole eviction (3 without the index) however many key groups and SSTs,
    where a scan per key group and side took a round trip per SST each (27-28 here with the
    index, 85 without). What it evicts and emits is what a plain scan of the buffers says
    expires."""
    url = f"memory://join-evict-{uuid.uuid4().hex}"
    jp = _plan()
    if not indexed:
        jp = _buffers.JoinPlan(**{**jp.__dict__, "time_indexed": False})
    rng = np.random.default_rng(evict_s + indexed)
    _fill(url, jp, 5, rng)
    store = LatencyStore(open_store(url), DELAY)
    db = silt.open(url, store=store, settings=SETTINGS)
    plain = silt.open(url)
    evict_us = evict_s * 1_000_000
    try:
        assert len(db._state.view.l0) == 5
        task = types.SimpleNamespace(db=db, first_kg=0, last_kg=KGS - 1, url=url)
        ops: list = []
        ranges: list = []
        dead: set = set()
        delta: dict = {}
        got = []
        with store.operation() as op:
            counts = _evict.read_counts(db, range(KGS), (_buffers.LEFT, _buffers.RIGHT))
            reads = op.round_trips
            for side in (_buffers.LEFT, _buffers.RIGHT):
                evict = _evict.evict_indexed if jp.indexed[side] else _evict.evict
                got.append(evict(task, jp, side, evict_us, jp.outer[side], set(), ops,
                                 ranges, dead, delta, counts))
        if reads > 2:
            raise AssertionError(f"{LONGER}: the counts in {reads}, expected 2: {op}")
        assert reads == 2, op
        # and the outer side: its index, then the unmatched values; unindexed, its rows
        _longer(op, 4 if indexed else 3)
        full = _buffers.full_buckets_below(evict_us, jp.bucket_us)
        for side, (_, n, unmatched) in zip((_buffers.LEFT, _buffers.RIGHT), got):
            rows = _rows(plain, side)
            times = [_buffers.split_row_key(k)[3] for k, _ in rows]
            buckets = [_buffers.split_row_key(k)[1] for k, _ in rows]
            if jp.outer[side]:  # every row at or before the eviction time, emitted unmatched
                gone = [v for (_, v), t in zip(rows, times) if t <= evict_us]
                assert sorted(unmatched.to_list()) == sorted(gone)
            else:  # whole buckets only; nothing emitted
                gone = [v for (_, v), b in zip(rows, buckets) if b < full]
                assert len(unmatched) == 0
            assert n == len(gone)
        assert sum(n for _, n, _ in got) > 0
    finally:
        db.close()
        plain.close()
