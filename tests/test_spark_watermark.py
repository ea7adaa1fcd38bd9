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
from silt_spark import _tick, _watermark


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
        ticks = now
        # Batch b's tasks: each shard writes markers for the inputs whose maximum it raised.
        maxima: list[int | None] = [None] * n
        for shard in range(rng.randrange(0, 4)):
            mine = [rng.choice((None, 10_000 * b + rng.randrange(9_000))) for _ in range(n)]
            _watermark.record(root, "q", b, f"kg-{shard}", mine, seen)
            maxima = [m if x is None else x if m is None else max(m, x)
                      for m, x in zip(maxima, mine)]
        history.append(maxima)
