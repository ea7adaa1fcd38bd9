"""Spark's two watermarks per micro-batch, derived from silt's marker objects (no Spark).

Batch ``b`` closes, forgets and fires with the watermark computed after batch ``b - 1`` (Spark's
watermark for eviction) and drops rows late against the one batch ``b - 1`` ran with (its
watermark for late events). The model below is Spark's own ``WatermarkTracker``: per run of the
query (a restart), each input's largest event time minus its delay, 0 for an input without
data in the run; the global value rises to their minimum and never goes down, and only it
survives a restart. Over random histories (one or two inputs, several shards per batch,
batches that raise nothing, restarts, a run that dies inside a batch after some shards wrote
their markers), every attempt of every batch, including a retry in another process after shard
0 pruned, must derive both values the model gives.
"""

from __future__ import annotations

import random
import uuid

import pytest
from silt_spark.runtime import _tick, _watermark


def _fresh_process() -> None:
    """Forget this process's shared listings, as another worker process would have none."""
    with _watermark._LOCK:
        _watermark._LISTED.clear()


class SparkTracker:
    """Spark's ``WatermarkTracker`` under the default ``min`` policy."""

    def __init__(self, delays: list[int]) -> None:
        self.delays, self.global_ms = delays, 0
        self.restart()

    def restart(self) -> None:
        self.per_input: list[int | None] = [None] * len(self.delays)

    def update(self, maxima: list[int | None]) -> None:
        for i, (m, d) in enumerate(zip(maxima, self.delays)):
            if m is not None and (self.per_input[i] is None or m - d > self.per_input[i]):
                self.per_input[i] = m - d
        chosen = min(0 if w is None else w for w in self.per_input)
        self.global_ms = max(self.global_ms, chosen)


def _shards(rng, b, n):
    """Batch ``b``'s input (fixed by Spark's offset log whichever run executes it): each
    shard's largest event time per input."""
    return [[rng.choice((None, 10_000 * b + rng.randrange(9_000))) for _ in range(n)]
            for _ in range(rng.randrange(0, 4))]


def _run_batch(root, b, n, shards, seen):
    """Batch ``b``'s tasks: each shard writes what its rows raised; returns the batch's
    largest event time per input."""
    maxima: list[int | None] = [None] * n
    for shard, mine in enumerate(shards):
        _watermark.record(root, "q", b, f"kg-{shard}", mine, seen[shard % len(seen)])
        maxima = [m if x is None else x if m is None else max(m, x) for m, x in zip(maxima, mine)]
    return maxima


@pytest.mark.parametrize("seed", range(16))
def test_both_watermarks_follow_spark_across_runs_pruning_and_retries(tmp_path, seed,
                                                                      monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setattr(_watermark, "PRUNE_AT", rng.choice((1, 3, 16)))
    n = rng.choice((1, 2))
    delays = [rng.choice((0, 1_000, 5_000)) for _ in range(n)]
    root = (tmp_path / "op").as_uri()
    spark = SparkTracker(delays)
    late = 0  # the value the batch before ran with
    run = str(uuid.UUID(int=rng.getrandbits(128)))
    ticks = {"w": {}}
    for b in range(24):
        shards = _shards(rng, b, n)
        # The tick source offers a batch exactly when the watermark moved since the last one.
        now = _tick.due_offset(root, delays)
        moved = b > 0 and spark.global_ms > late
        assert _tick.moved(ticks, now) == moved, b
        # A run that starts now (its baseline) ticks for no move made before it.
        assert not _tick.moved(ticks, now, now), b
        assert _tick.moved(ticks, now, ticks) == moved, b
        ticks = now
        if b and rng.random() < 0.2:  # a restart before b; sometimes a run dies inside b first
            if rng.random() < 0.5:
                _fresh_process()
                dying = str(uuid.UUID(int=rng.getrandbits(128)))
                seen = _watermark.observe(root, "q", b, delays, run_id=dying)
                _run_batch(root, b, n, shards[:rng.randrange(len(shards) + 1)], [seen])
            spark.restart()
            run = str(uuid.UUID(int=rng.getrandbits(128)))
        want = (spark.global_ms, late if b else spark.global_ms)
        seen = []
        for attempt in range(2):  # shard 0 prunes; then a retry in another process
            _fresh_process()
            seen.append(_watermark.observe(root, "q", b, delays, prune=attempt == 0,
                                           run_id=run))
            assert (seen[-1].watermark_ms, seen[-1].late_ms) == want, (b, attempt)
        late = spark.global_ms
        spark.update(_run_batch(root, b, n, shards, seen))
    # Pruning keeps the listing small however long the query runs.
    store = _watermark._root_store(root)
    assert len(list(store.list(_watermark.PREFIX))) <= _watermark.PRUNE_AT + 4 * n * 2 + 4


def test_an_input_without_data_holds_the_watermark_and_a_restart_forgets_the_maxima(tmp_path):
    """The two rules Spark adds for several inputs, spelled out: the global value stays at 0
    until every input has had data, and after a restart an input's maximum starts again from
    the rows of the new run (the global value does not go down)."""
    root = (tmp_path / "op").as_uri()
    delays = [0, 0]
    first, second = (str(uuid.UUID(int=i)) for i in (1, 2))

    def batch(b, run, maxima):
        _fresh_process()
        seen = _watermark.observe(root, "q", b, delays, run_id=run)
        _watermark.record(root, "q", b, "kg-a", maxima, seen)
        return seen.watermark_ms

    assert batch(0, first, [9_000, None]) == 0
    assert batch(1, first, [20_000, 5_000]) == 0  # the right input had no data before batch 1
    assert batch(2, first, [None, None]) == 5_000
    # The restart: the new run's maxima are 12_000 and 30_000, not 20_000 and 30_000.
    assert batch(3, second, [12_000, 30_000]) == 5_000
    assert batch(4, second, [None, None]) == 12_000
    assert batch(5, second, [None, 1_000]) == 12_000  # never lower


def test_the_tick_reader_lists_after_each_batch_not_while_spark_polls(tmp_path, monkeypatch):
    """Spark polls an idle query's sources every 10 ms: those calls reuse the last listing
    (refreshed every ``IDLE_LIST_S``), while a call after a gap (a micro-batch ran) lists, so
    it sees the markers that batch wrote."""
    root = (tmp_path / "op").as_uri()
    clock = [1000.0]
    monkeypatch.setattr(_tick.time, "monotonic", lambda: clock[0])
    lists = []
    real = _tick.due_offset
    monkeypatch.setattr(_tick, "due_offset", lambda *a: lists.append(clock[0]) or real(*a))
    _, reader_class = _tick._classes()
    reader = reader_class(root, (1_000,), None)
    initial = reader.initialOffset()
    rows, start = reader.read(initial)  # a new query's first batch ends at the offset now
    assert initial == {"w": {}, _tick.NEW: True} and start == {"w": {}} and list(rows) == []
    for _ in range(500):  # 5 s of polling
        clock[0] += 0.01
        rows, end = reader.read(start)
        assert end == start and list(rows) == []
    assert len(lists) == 3  # the first call, then every IDLE_LIST_S (2 s)
    # A batch runs (0.5 s without calls) and moves the watermark: the next call lists.
    _watermark.record(root, "q", 0, "kg-a", [9_000], _watermark.Observed((None,), 0))
    clock[0] += 0.5
    rows, end = reader.read(start)
    assert end == {"w": {"q": 8_000}} and list(rows) == [(1,)] and len(lists) == 4
    clock[0] += 0.01
    rows, after = reader.read(end)
    assert after == end and list(rows) == [] and len(lists) == 4


def test_the_tick_reader_offers_one_row_per_move_and_re_reads_it(tmp_path):
    """Each move of a watermark is one row with the new offset as the batch's end (none
    without a move, none for a move made before the run started: its ``baseline``); a batch
    re-run from the offset log after a restart reads its row again from its two offsets."""
    root = (tmp_path / "op").as_uri()
    _, reader_class = _tick._classes()
    _watermark.record(root, "q", 0, "kg-a", [2_000], _watermark.Observed((None,), 0))
    reader = reader_class(root, (0,), None)
    assert reader.initialOffset() == {"w": {"q": 2_000}, _tick.NEW: True}
    rows, first = reader.read(reader.initialOffset())
    assert first == {"w": {"q": 2_000}} and list(rows) == []
    # The previous run's end offset is older than the run's start: no tick for that move.
    rows, end = reader.read({"w": {}})
    assert end == {"w": {}} and list(rows) == []
    for batch, event_ms in enumerate([5_000, 7_000, 6_000, 9_000], start=1):
        _watermark.record(root, "q", batch, "kg-a", [event_ms], _watermark.Observed((None,), 0))
        reader.called = float("-inf")  # a batch ran since the last call
        rows, end = reader.read(first)
        moved = event_ms > first["w"]["q"]  # a watermark never goes down
        assert list(rows) == ([(1,)] if moved else [])
        assert end == ({"w": {"q": event_ms}} if moved else first)
        first = end
    assert list(reader.readBetweenOffsets({"w": {"q": 7_000}}, first)) == [(1,)]
    assert list(reader.readBetweenOffsets(first, first)) == []


def test_a_run_s_first_batch_writes_its_markers_in_one_round_trip(monkeypatch):
    # The run marker and every raised input's event marker do not depend on each other: on a
    # remote store a task writes them at once (the fewest round trips of a few tries: load
    # can only lengthen a chain, see silt.testing.latency).
    from silt.plugins import open_store
    from silt.testing import LatencyStore

    root = f"memory://wm-{uuid.uuid4().hex}"
    slow = LatencyStore(open_store(root), delay=0.1)
    monkeypatch.setitem(_watermark._STORES, (root, ()), slow)
    fewest = None
    for attempt in range(3):
        observed = _watermark.Observed((None, 5, None), 0, 0, new_run=f"run{attempt}")
        with slow.operation() as op:
            written = _watermark.record(root, "q", 7 + attempt, "kg-00000-00255",
                                        [100, 4, 300], observed)
        assert written == 3  # the run's marker, inputs 0 and 2 (input 1 did not pass 5)
        assert op.requests == {"put_if_absent": 3}
        fewest = op.round_trips if fewest is None else min(fewest, op.round_trips)
    assert fewest == 1
    names = {info.key for info in slow.list(_watermark.query_prefix("q"))}
    assert _watermark.run_key("q", 7, "run0") in names
    assert _watermark.marker_key("q", 7, 0, "kg-00000-00255", 100) in names
    assert _watermark.marker_key("q", 7, 2, "kg-00000-00255", 300) in names
