"""Requests of one shard's join probe on object storage, without Spark and without timing.

Not a test: it prints a table (and writes JSON). One shard's buffer state is filled the way the
stream-stream join writes it (``silt_spark.operators.join``: its own ``Side`` parsing and its
row, index and count encodings, so the layout is byte for byte the operator's), on the workload
of ``join_evict_bench.py`` (itself ``spark_bench.py --cases join --join-buffered``'s): orders
with uniformly random keys (as many distinct keys as buffered rows), payments 0-50 s after 90% of
them, a left outer join with left time within 30 s of right time, 60 s buckets. The fill goes in
``--chunks`` write batches, each committed as the operator commits a micro-batch, then the
compactions finish. Then a **fresh handle with a cold private block cache**, opened on a
:class:`silt.testing.LatencyStore` over the ``file://`` root (``local`` false: it reads as it
would from S3), runs one batch's probe (``load_both`` of both sides, as ``merge_partition``
does it) of ``--probe`` orders (a quarter of spark_bench's 200k rows per batch, 90% of them with
a payment) whose event times follow the buffered ones.

Reported per buffer size: the rows in the shard, the GETs (ranged reads of SST blocks and
tails) of the probe, its sequential round trips (measured structurally by ``LatencyStore`` with
``--delay`` seconds per request: 0 counts requests only; ``--read-parallelism`` sets the
probing handle's read pool), the bytes read, the SSTs of the shard, and the fill's time.
``--root DIR`` keeps the filled shards, so that another build (``PYTHONPATH``) probes the same
state.
Run from the repository root::

    PYTHONPATH=packages/core/src:packages/spark/src python bench/join_gets.py \\
        --buffered 500000 5000000 --delay 0.05
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import silt
from silt import _ext
from silt.plugins import open_store
from silt.testing import LatencyStore
from silt_spark.operators.join import _buffers, _load
from silt_spark.runtime import _rowcodec

sys.path.insert(0, str(Path(__file__).parent))
from join_evict_bench import FILL_SPAN_MS, KEY_GROUPS, Task, batch, plan


def encode(jp: _buffers.JoinPlan, side: _load.Side) -> tuple[list[bytes], list[bytes]]:
    """Every state entry the join writes to buffer ``side``'s rows (unmatched, all kept):
    rows, time index entries (an indexed side), as ``merge_partition`` builds them."""
    s = side.side
    buckets = side.times // jp.bucket_us
    keys = _buffers.row_keys(side.kgs, s, buckets, side.enc_keys, side.times, side.seqs)
    vals = _buffers.row_values(side.matched, _rowcodec.encode_tuples(
        side.take(np.arange(side.n)), side.n))
    out_k, out_v = keys.to_list(), vals.to_list()
    if jp.indexed[s]:
        ik, iv = _buffers.index_entries(side.kgs, s, side.enc_keys, side.times, side.seqs,
                                        side.matched)
        out_k += ik.to_list()
        out_v += iv.to_list()
    return out_k, out_v


def fill(url: str, jp: _buffers.JoinPlan, buffered: int, chunks: int,
         rng: np.random.Generator) -> float:
    """Buffer about ``buffered`` orders (and 90% as many payments) in the shard at ``url``:
    ``chunks`` write batches over 2 x FILL_SPAN_MS of event time, each committed with the row
    counts per (key group, bucket) the operator keeps; returns the seconds it took."""
    t0 = time.perf_counter()
    db = silt.open(url)
    counts: dict[bytes, int] = {}
    span = 2 * FILL_SPAN_MS // chunks
    try:
        for c in range(chunks):
            t = batch(rng, buffered // chunks, c * span, span, buffered)
            task = Task(db, url, c, {}, [None, None])
            for s in (_buffers.LEFT, _buffers.RIGHT):
                side = _load.Side(task, t, jp, s, None)
                keys, vals = encode(jp, side)
                db.put_many(keys, vals)
                groups, n = np.unique(np.stack([side.kgs, side.times // jp.bucket_us], axis=1),
                                      axis=0, return_counts=True)
                for (kg, b), k in zip(groups.tolist(), n.tolist()):
                    ck = _buffers.count_key(kg, s, b)
                    counts[ck] = counts.get(ck, 0) + k
            db.put_many(list(counts), [_buffers.U64.pack(v) for v in counts.values()])
            db.commit()
        db.wait_for_compaction()
        db.commit()
    finally:
        db.close()
    return time.perf_counter() - t0


def probe(url: str, jp: _buffers.JoinPlan, buffered: int, rows: int, delay: float,
          rng: np.random.Generator, parallelism: int = 8) -> dict[str, Any]:
    """One batch's probe of both buffers on a fresh handle with a cold cache: requests, round
    trips, bytes, rows found."""
    t = batch(rng, rows, 2 * FILL_SPAN_MS, FILL_SPAN_MS // 10, buffered)
    slow = LatencyStore(open_store(url), delay)
    db = silt.open(url, store=slow, settings=silt.Settings(block_cache_bytes=1 << 30,
                                                             read_parallelism=parallelism))
    try:
        task = Task(db, url, 1 << 20, {}, [None, None])
        ssts = sum(1 for _ in db.manifest.all_ssts()) if db.manifest is not None else 0
        before = _bytes_read(db)
        with slow.operation() as op:
            sides = [_load.Side(task, t, jp, s, None) for s in (_buffers.LEFT, _buffers.RIGHT)]
            if hasattr(_load, "load_both"):
                got = sum(x.n for x in _load.load_both(task, jp, sides))
            else:  # a build from before it: a multi_get and a multi_scan per side
                got = sum(_load.load_buffers(task, jp, x).n for x in sides)
        read = _bytes_read(db) - before
    finally:
        db.close()
    return {"gets": op.requests["get_range"] + op.requests["get"], "requests": op.total,
            "round_trips": op.round_trips, "bytes": read, "ssts": ssts, "found": got,
            "reads": dict(getattr(task, "join_reads", {}))}


def _rows(url: str) -> int:
    """Rows buffered in the shard (both sides), from its count entries."""
    with silt.open(url) as db:
        return sum(_buffers.U64.unpack(v)[0] for kg in range(KEY_GROUPS) for s in (0, 1)
                   for _, v in db.scan(*_buffers.counts_range(kg, s)))


def _bytes_read(db: Any) -> int:
    """Bytes the DB has read from its store (every purpose)."""
    return sum(k["bytes"] for p in db.stats()["requests"].values() for name, k in p.items()
               if name in ("GET", "RANGE_GET"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--buffered", type=int, nargs="+", default=[250_000, 2_500_000],
                    help="orders buffered in the shard (payments: 90%% as many); a quarter "
                    "of spark_bench's --join-buffered N is one shard of four")
    ap.add_argument("--probe", type=int, default=50_000, help="orders in the probed batch")
    ap.add_argument("--chunks", type=int, default=10, help="committed write batches of the fill")
    ap.add_argument("--delay", type=float, default=0.0,
                    help="seconds per request (round trips are only meaningful above ~0.02)")
    ap.add_argument("--read-parallelism", type=int, default=8,
                    help="Settings.read_parallelism of the probing handle (default: silt's)")
    ap.add_argument("--root", help="keep each filled shard under this folder and probe it "
                    "again on the next run (to compare two builds on the same state)")
    ap.add_argument("--json", default="join_gets.json")
    args = ap.parse_args()
    folder = Path(args.root or tempfile.mkdtemp(prefix="silt-join-gets-"))
    jp = plan(True)
    results = []
    load = [os.getloadavg()[0]]
    try:
        for buffered in args.buffered:
            url = (folder / f"b{buffered}").as_uri()
            rng = np.random.default_rng(buffered)
            done = folder / f"b{buffered}.filled"
            if not done.exists():
                done.write_text(str(fill(url, jp, buffered, args.chunks, rng)))
            fill_s = float(done.read_text())
            r = probe(url, jp, buffered, args.probe, args.delay,
                      np.random.default_rng(buffered + 1), args.read_parallelism)
            r.update(buffered=buffered, rows=_rows(url), probe=args.probe,
                     read_parallelism=args.read_parallelism, fill_s=round(fill_s, 1))
            results.append(r)
            load.append(os.getloadavg()[0])
            print(r, flush=True)
    finally:
        if not args.root:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"\n{'orders buffered':>15s} {'rows in shard':>13s} {'probe':>7s} {'GETs':>7s} "
          f"{'round trips':>11s} {'MB read':>8s} {'SSTs':>5s} {'fill s':>7s}")
    for r in results:
        print(f"{r['buffered']:>15,d} {r['rows']:>13,d} {r['probe']:>7,d} {r['gets']:>7,d} "
              f"{r['round_trips']:>11d} {r['bytes'] / 1e6:>8.1f} {r['ssts']:>5d} "
              f"{r['fill_s']:>7.1f}")
    print(f"delay {args.delay} s per request, read_parallelism {args.read_parallelism}")
    print(f"load (1 min): {min(load):.2f}-{max(load):.2f}; {platform.processor() or 'cpu'}, "
          f"{os.cpu_count()} cores; silt hot path "
          f"{'compiled' if _ext.load() is not None else 'pure Python'}")
    Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
