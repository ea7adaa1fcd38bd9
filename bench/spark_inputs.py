"""The generated input of bench/spark_bench.py (and session_bench.py): one parquet file per
micro-batch of random keys and amounts, with an event time for the windows, and the two streams
of the joins (orders, and payments after most of them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_input(folder: Path, batches: int, rows: int, keys: int, seed: int,
               fill: bool = False) -> None:
    """``batches`` files of ``rows`` random keys in ``[0, keys)``; with ``fill``, a first file
    holding every key once (in random order), so the state holds ``keys`` keys from the first
    batch on (``--fill``)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    first = 0
    if fill:
        for start in range(0, keys, 5_000_000):  # files of at most 5M rows, the fill batch's
            k = rng.permutation(np.arange(start, min(keys, start + 5_000_000)))
            pq.write_table(pa.table({
                "key": pa.array(k, pa.int64()),
                "amount": pa.array(rng.integers(0, 1000, len(k)), pa.int64()),
            }), folder / f"part-{first:05d}.parquet")
            first += 1
    for b in range(first, first + batches):
        k = rng.integers(0, keys, rows)
        t = pa.table({
            "key": pa.array(k, pa.int64()),
            "amount": pa.array(rng.integers(0, 1000, rows), pa.int64()),
        })
        pq.write_table(t, folder / f"part-{b:05d}.parquet")


def make_window_input(folder: Path, batches: int, rows: int, keys: int, seed: int) -> None:
    """Like :func:`make_input` plus an event time: batch ``b`` covers ``[60 s * b, 60 s * (b +
    1))``, with 1% of the rows 90 s older (late once the watermark has moved)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for b in range(batches):
        ms = 60_000 * b + rng.integers(0, 60_000, rows)
        ms[rng.random(rows) < 0.01] -= 90_000
        t = pa.table({
            "key": pa.array(rng.integers(0, keys, rows), pa.int64()),
            "amount": pa.array(rng.integers(0, 1000, rows), pa.int64()),
            "ts": pa.array(np.maximum(ms, 0) * 1000, pa.timestamp("us", tz="UTC")),
        })
        pq.write_table(t, folder / f"part-{b:05d}.parquet")


#: Seconds of event time each join side keeps buffered with --join-buffered (30 s range + 10 s
#: delay).
JOIN_KEPT_S = 40


def join_batches(args) -> list[tuple[int, int, int]]:
    """``(orders, event-time ms, gap ms before it)`` of each join batch: ``--join-rows`` over
    ``--join-span`` s each; with ``--join-step-rows R`` (and ``--join-buffered N``) the two
    batches that fill the buffers, then batches of R rows at the same event-time rate, so the
    buffers stay at N rows while each batch adds and evicts about R (commit and eviction per
    batch at a fixed delta); with ``--join-evict-rows E`` then one batch of E rows whose event
    time jumps past everything buffered (its watermark expires the whole buffer: the cost of
    evicting N rows, in the batch after the jump)."""
    fill = [(args.join_rows, args.join_span * 1000, 0)]
    if not args.join_step_rows:
        return fill * args.batches
    step_ms = max(1, args.join_step_rows * args.join_span * 1000 // args.join_rows)
    out = fill * 2 + [(args.join_step_rows, step_ms, 0)] * max(0, args.batches - 2)
    if args.join_evict_rows:
        # the jump moves the watermark; the batch after it (Spark applies a batch's watermark
        # from the next batch on) evicts everything buffered before the jump
        out.append((args.join_evict_rows, step_ms, (JOIN_KEPT_S + 120) * 1000))
        out.append((args.join_evict_rows, step_ms, 0))
    return out


def make_join_input(folder: Path, batches: list[tuple[int, int, int]], keys: int,
                    seed: int) -> tuple[Path, Path]:
    """Two folders, one file per batch each: orders ``(key, amount, ot)``, batch ``b`` having
    ``batches[b][0]`` rows over ``batches[b][1]`` ms of event time starting ``batches[b][2]``
    ms after the previous batch's, and payments ``(pkey, paid, pt)`` 0-50 s after 90% of
    them."""
    left, right = folder / "left", folder / "right"
    left.mkdir(parents=True)
    right.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    start = 0
    for b, (rows, span_ms, gap_ms) in enumerate(batches):
        start += gap_ms
        ms = start + rng.integers(0, span_ms, rows)
        start += span_ms
        k = rng.integers(0, keys, rows)
        pq.write_table(pa.table({
            "key": pa.array(k, pa.int64()),
            "amount": pa.array(rng.integers(0, 1000, rows), pa.int64()),
            "ot": pa.array(ms * 1000, pa.timestamp("us", tz="UTC")),
        }), left / f"part-{b:05d}.parquet")
        paid = rng.random(rows) < 0.9
        pq.write_table(pa.table({
            "pkey": pa.array(k[paid], pa.int64()),
            "paid": pa.array(rng.integers(0, 1000, int(paid.sum())), pa.int64()),
            "pt": pa.array((ms[paid] + rng.integers(0, 50_000, int(paid.sum()))) * 1000,
                           pa.timestamp("us", tz="UTC")),
        }), right / f"part-{b:05d}.parquet")
    return left, right
