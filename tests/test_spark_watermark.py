"""Spark's two watermarks per micro-batch, derived from silt's marker objects (no Spark).

Batch ``b`` closes, forgets and fires with the watermark of the batches before ``b`` (Spark's
watermark for eviction) and drops rows late against the one batch ``b - 1`` ran with (its
watermark for late events). Over random histories of markers (one or two inputs, several
shards per batch, batches that raise nothing), every attempt of every batch, including a retry
in another process after shard 0 pruned markers, must derive both values from what a model
that keeps every marker computes.
"""

from __future__ import annotations

import random

import pytest
from silt_spark.runtime import _tick, _watermark


def _fresh_process() -> None:
    """Forget this process's shared listings, as another worker process would have none."""
    with _watermark._LOCK:
        _watermark._LISTED.clear()


@pytest.mark.parametrize("seed", range(12))
def test_both_watermarks_survive_pruning_retries_and_other_processes(tmp_path, seed):
    rng = random.Random(seed)
    n = rng.choice((1, 2))
    delays = [rng.choice((0, 1_000, 5_000)) for _ in range(n)]
    root = (tmp_path / "op").as_uri()
    history: list[list[int | None]] = []  # per batch: largest event time per input
    ticks = {"w": {}}
    for b in range(14):
        def top(upto: int) -> list[int | None]:
            vals = [[h[i] for h in history[:max(upto, 0)] if h[i] is not None] for i in range(n)]
            return [max(v) if v else None for v in vals]

        wm = _watermark.watermark_of(top(b), delays)
        want = (wm, min(wm, _watermark.watermark_of(top(b - 1), delays)))
        for attempt in range(2):  # shard 0 prunes; then a retry in another process
            _fresh_process()
            seen = _watermark.observe(root, "q", b, delays, prune=attempt == 0)
            assert (seen.watermark_ms, seen.late_ms) == want, (b, attempt)
            assert seen.late_ms <= seen.watermark_ms
        # The tick source offers a batch exactly when the watermark moved since the last one.
        now = _tick.due_offset(root, delays)
        moved = b > 0 and wm > _watermark.watermark_of(top(b - 1), delays)
        assert _tick.moved(ticks, now) == moved, b
        # A run that starts now (its baseline) ticks for no move made before it.
        assert not _tick.moved(ticks, now, now), b
        assert _tick.moved(ticks, now, ticks) == moved, b
        ticks = now
        # Batch b's tasks: each shard writes markers for the inputs whose maximum it raised.
        maxima: list[int | None] = [None] * n
        for shard in range(rng.randrange(0, 4)):
            mine = [rng.choice((None, 10_000 * b + rng.randrange(9_000))) for _ in range(n)]
            _watermark.record(root, "q", b, f"kg-{shard}", mine, seen)
            maxima = [m if x is None else x if m is None else max(m, x)
                      for m, x in zip(maxima, mine)]
        history.append(maxima)


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
    start = reader.initialOffset()
    for _ in range(500):  # 5 s of polling
        clock[0] += 0.01
        assert reader.latestOffset(start, None) == start
    assert len(lists) == 3  # the first call, then every IDLE_LIST_S (2 s)
    # A batch runs (0.5 s without calls) and moves the watermark: the next call lists.
    _watermark.record(root, "q", 0, "kg-a", [9_000], _watermark.Observed((None,), 0))
    clock[0] += 0.5
    end = reader.latestOffset(start, None)
    assert end == {"w": {"q": 8_000}} and len(lists) == 4
    assert reader.partitions(start, end) and not reader.partitions(end, end)
    assert list(reader.read(reader.partitions(start, end)[0])) == [(1,)]
    clock[0] += 0.01
    assert reader.latestOffset(end, None) == end and len(lists) == 4


def test_the_tick_reader_without_a_start_offset(tmp_path):
    """pyspark < 4.2 calls ``latestOffset()`` without the previous end: the reader compares
    with what it returned last, so it offers one tick per move, as with a start offset."""
    root = (tmp_path / "op").as_uri()
    _, reader_class = _tick._classes()
    reader = reader_class(root, (0,), None)
    first = reader.initialOffset()
    assert reader.latestOffset() == first == {"w": {}}
    _watermark.record(root, "q", 0, "kg-a", [5_000], _watermark.Observed((None,), 0))
    reader.called = float("-inf")  # a batch ran since the last call
    moved = reader.latestOffset()
    assert moved == {"w": {"q": 5_000}} and reader.partitions(first, moved)
    reader.called = float("-inf")
    assert reader.latestOffset() == moved
