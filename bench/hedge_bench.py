"""Hedged reads against a latency tail: point reads of a DB on S3 (moto) behind the fault proxy.

Not a test: it prints a table (and writes JSON) and fails only when a read returns wrong data.
The proxy adds ``--latency-ms`` to every answer and ``--tail-ms`` more to a ``--tail-share`` of
them (a seeded draw): the shape of an object store's latency, where most ranged GETs answer in
tens of milliseconds and a few in hundreds. One DB of ``--keys`` keys is loaded once; each mode
then opens it with a fresh store and an empty block cache and reads ``--gets`` random keys one
at a time (each a block-cache miss, so each is one ranged GET), in the same process:

* ``off``: no hedging (the default);
* ``after N ms``: ``hedge_after_ms=N`` (a second request when the first has not answered);
* ``p95``: ``hedge_quantile=0.95`` (after the store's own recent 95th percentile).

Reported per mode, over ``--repeat`` rounds: the median, p99 and max of one get's latency
(median [min-max] across rounds), the total time, and the requests the proxy saw per get (a
hedge is a second request: its price). Run from the repository root::

    PYTHONPATH=packages/core/src:packages/tier-s3/src python bench/hedge_bench.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # servers.py, faultproxy.py
sys.path.insert(0, str(ROOT / "bench"))

import silt  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402
from tier_bench import Emulator, register_tiers  # noqa: E402


def key(i: int) -> bytes:
    return b"key%012d" % i


def value(i: int, size: int) -> bytes:
    return (b"%012d" % i) * (size // 12 + 1)


def percentile(samples: list[float], q: float) -> float:
    ranked = sorted(samples)
    return ranked[min(len(ranked) - 1, int(q * len(ranked)))]


def run_mode(url: str, options: str, gets: int, keys: int, value_bytes: int, seed: int,
             proxy: FaultProxy) -> dict[str, Any]:
    settings = silt.Settings(block_cache_bytes=1 << 30)
    rng = random.Random(seed)
    picks = [rng.randrange(keys) for _ in range(gets)]
    with silt.open(url + options, settings=settings) as db:
        db.get(key(0))  # the SST tail (index, filter): not part of the figures
        before = proxy.counts["requests"]
        lat = []
        start = time.perf_counter()
        for i in picks:
            t = time.perf_counter()
            got = db.get(key(i))
            lat.append(time.perf_counter() - t)
            if got != value(i, value_bytes)[:value_bytes]:
                raise RuntimeError(f"wrong value for key {i}")
        total = time.perf_counter() - start
        requests = proxy.counts["requests"] - before
        hedging = db.store.stats().get("hedging", {})
    return {"median_ms": statistics.median(lat) * 1000, "p99_ms": percentile(lat, 0.99) * 1000,
            "max_ms": max(lat) * 1000, "total_s": total, "requests_per_get": requests / gets,
            "hedged": hedging.get("hedged", 0), "hedge_wins": hedging.get("hedge_wins", 0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--gets", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--tail-share", type=float, default=0.03)
    parser.add_argument("--tail-ms", type=float, default=300)
    parser.add_argument("--after-ms", type=float, default=60)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "hedge_bench.json"))
    args = parser.parse_args(argv)
    register_tiers()
    modes = {"off": "", f"after {args.after_ms:g} ms": f"&hedge_after_ms={args.after_ms:g}",
             "p95": "&hedge_quantile=0.95"}
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as work:
        emulator = Emulator("s3", Path(work))
        try:
            bucket = emulator.create_bucket()
            with FaultProxy(emulator.server.url) as proxy:
                url = emulator.url(bucket, "hedge", proxy.url)
                with silt.open(url) as db:
                    for start in range(0, args.keys, 5000):
                        ks = range(start, min(args.keys, start + 5000))
                        db.put_many([key(i) for i in ks],
                                    [value(i, args.value_bytes)[:args.value_bytes] for i in ks])
                    db.commit()
                proxy.latency = args.latency_ms / 1000
                proxy.tail = (args.tail_share, args.tail_ms / 1000)
                for r in range(args.repeat):
                    for name, options in modes.items():
                        proxy.tail_random.seed(1000 + r)  # the same tail draws for every mode
                        results[name].append(run_mode(url, options, args.gets, args.keys,
                                                      args.value_bytes, r, proxy))
        finally:
            emulator.stop()
    load = os.getloadavg()
    print(f"# hedged reads: S3 (moto) + {args.latency_ms:g} ms per answer, "
          f"{args.tail_share:.0%} of answers +{args.tail_ms:g} ms; {args.gets} cold gets x "
          f"{args.repeat}; load {load[0]:.1f}/{load[1]:.1f}")
    print("| mode | median ms | p99 ms | max ms | total s | requests per get | hedged / won |")
    print("|---|---|---|---|---|---|---|")

    def cell(rows: list[dict[str, Any]], k: str, fmt: str) -> str:
        vals = [row[k] for row in rows]
        return (f"{format(statistics.median(vals), fmt)} "
                f"[{format(min(vals), fmt)}-{format(max(vals), fmt)}]")

    for name, rows in results.items():
        won = f"{sum(r['hedged'] for r in rows)} / {sum(r['hedge_wins'] for r in rows)}"
        print(f"| {name} | {cell(rows, 'median_ms', '.1f')} | {cell(rows, 'p99_ms', '.0f')} | "
              f"{cell(rows, 'max_ms', '.0f')} | {cell(rows, 'total_s', '.2f')} | "
              f"{cell(rows, 'requests_per_get', '.3f')} | {won} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "results": results, "load": load,
                               "machine": platform.platform()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
