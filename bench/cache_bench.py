"""Cache benchmark: random gets and multi_gets through silt-cache-ssd vs no cache, same run.

    PYTHONPATH=packages/core/src:packages/cache-ssd/src:packages/tier-s3/src \\
        python bench/cache_bench.py --keys 200000

Tiers: ``file`` is the file:// tier behind a wrapper that sleeps ``--latency-ms`` per request
(default 10 ms, a typical S3 first-byte latency), so that the numbers show what a remote tier
costs; ``s3`` is silt-tier-s3 against a local moto server (its own, real latency; run only when
``silt_s3`` and moto are importable). For each tier the data set (``--keys`` 16-byte keys in
order ``key%012d``, ``--value-bytes`` random values, ``--memtable-mib`` memtables so that there are
several SSTs) is written once; then each phase opens a fresh DB (fresh in-memory block cache of
``--block-cache-mib``, default 4 MiB: smaller than the data, so block reads reach the store):

==================  =========================================================================
phase               what it measures
==================  =========================================================================
no cache            the tier alone
cold                the cache in front of the tier, empty cache directory
warm after restart  a new SsdCache and DB on the directory the cold phase filled (another
                    sample of random keys: hits are what the previous process left behind)
fully cached        after a full scan has admitted every block and tail (new DB and cache)
==================  =========================================================================

Every phase reads its own sample of ``--gets`` random keys with ``get`` (timed one by one: mean,
p50, p99) and ``--multi-gets`` batches of ``--batch`` random keys with ``multi_get``. Reported:
gets/s, multi_get keys/s, requests that reached the tier, cache hit ratio (hits / (hits +
misses) of cacheable reads), and the speed-up over "no cache". Results also go to JSON
(``--json``, default bench/results/cache_bench.json). A wrong value exits non-zero.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for sub in ("core", "cache-ssd", "tier-s3"):
    src = str(REPO / "packages" / sub / "src")
    if src not in sys.path:
        sys.path.append(src)

import silt  # noqa: E402
from silt.store import ObjectInfo, ObjectStore  # noqa: E402
from silt.tiers.file import FileStore  # noqa: E402
from silt_ssd import SsdCache  # noqa: E402

now = time.perf_counter


class LatencyStore(ObjectStore):
    """Wraps a store; every request first sleeps ``latency`` seconds (the GIL is released, so
    parallel block fetches overlap as they would over a network). Counts requests by operation."""

    def __init__(self, inner: ObjectStore, latency: float) -> None:
        self.inner, self.latency, self.url = inner, latency, inner.url
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _wait(self, op: str) -> None:
        with self._lock:
            self.calls[op] += 1
        if self.latency:
            time.sleep(self.latency)

    def get(self, key: str) -> bytes:
        self._wait("get")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self._wait("get_range")
        return self.inner.get_range(key, start, length)

    def put(self, key: str, data: bytes) -> None:
        self._wait("put")
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._wait("put_if_absent")
        return self.inner.put_if_absent(key, data)

    def delete_many(self, keys: Iterable[str]) -> None:
        self._wait("delete_many")
        self.inner.delete_many(keys)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        self._wait("list")
        return self.inner.list(prefix, start_after)

    def close(self) -> None:
        self.inner.close()


def key_of(i: int) -> bytes:
    return b"key%012d" % i


def value_of(i: int, size: int) -> bytes:
    return random.Random(i).randbytes(size)


def build(store: ObjectStore, url: str, n: int, value_bytes: int, settings: silt.Settings) -> float:
    t0 = now()
    with silt.open(url, store=store, settings=settings) as db:
        batch = silt.WriteBatch()
        for i in random.Random(1).sample(range(n), n):
            batch.put(key_of(i), value_of(i, value_bytes))
            if len(batch) >= 1000:
                db.write(batch)
                batch = silt.WriteBatch()
        db.write(batch)
        db.commit()
    return now() - t0


def run_phase(name: str, store: ObjectStore, counter: LatencyStore, url: str, args, seed: int,
              settings: silt.Settings) -> dict[str, Any]:
    rng = random.Random(seed)
    get_keys = [rng.randrange(args.keys) for _ in range(args.gets)]
    batches = [[rng.randrange(args.keys) for _ in range(args.batch)]
               for _ in range(args.multi_gets)]
    before = sum(counter.calls.values())
    gc.collect()
    t_open = now()
    db = silt.open(url, store=store, settings=settings)
    open_s = now() - t_open
    lat = []
    bad = 0
    t0 = now()
    for i in get_keys:
        t = now()
        v = db.get(key_of(i))
        lat.append(now() - t)
        bad += v != value_of(i, args.value_bytes)
    gets_s = now() - t0
    t0 = now()
    for b in batches:
        vals = db.multi_get([key_of(i) for i in b])
        bad += sum(v != value_of(i, args.value_bytes) for i, v in zip(b, vals))
    mg_s = now() - t0
    db.close()  # also closes the store (and the cache's lock file)
    stats = store.stats() if isinstance(store, SsdCache) else {}
    lat.sort()
    return {
        "phase": name,
        "open_s": open_s,
        "gets_per_s": len(get_keys) / gets_s,
        "get_mean_ms": statistics.fmean(lat) * 1e3,
        "get_p50_ms": lat[len(lat) // 2] * 1e3,
        "get_p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
        "multi_get_keys_per_s": args.multi_gets * args.batch / mg_s,
        "tier_requests": sum(counter.calls.values()) - before,
        "hit_ratio": stats.get("hit_ratio"),
        "cache_used_mib": (stats.get("used_bytes") or 0) / 2**20 if stats else None,
        "wrong_values": bad,
    }


def bench_tier(tier: str, base_store, url: str, workdir: Path, args) -> list[dict[str, Any]]:
    settings = silt.Settings(memtable_bytes=args.memtable_mib << 20,
                             block_cache_bytes=args.block_cache_mib << 20)
    latency = args.latency_ms / 1e3 if tier == "file" else 0.0
    counter = LatencyStore(base_store(), latency)
    print(f"[{tier}] writing {args.keys:,} keys ...", flush=True)
    build_s = build(LatencyStore(base_store(), 0), url, args.keys, args.value_bytes, settings)
    cache_dir = workdir / f"cache-{tier}"

    def cached() -> SsdCache:
        return SsdCache(counter, cache_dir, size_limit=args.cache_mib << 20, reserve=0)

    rows = []
    print(f"[{tier}] built in {build_s:.1f} s; no cache ...", flush=True)
    rows.append(run_phase("no cache", counter, counter, url, args, 11, settings))
    print(f"[{tier}] cold ...", flush=True)
    rows.append(run_phase("cold", cached(), counter, url, args, 12, settings))
    print(f"[{tier}] warm after restart ...", flush=True)
    rows.append(run_phase("warm after restart", cached(), counter, url, args, 13, settings))
    store = cached()
    with silt.open(url, store=store, settings=settings) as db:
        rows_scanned = sum(1 for _ in db.scan())
    assert rows_scanned == args.keys, rows_scanned
    print(f"[{tier}] fully cached ...", flush=True)
    rows.append(run_phase("fully cached", cached(), counter, url, args, 14, settings))
    base = rows[0]
    for r in rows:
        r["tier"] = tier
        r["gets_speedup"] = r["gets_per_s"] / base["gets_per_s"]
        r["multi_get_speedup"] = r["multi_get_keys_per_s"] / base["multi_get_keys_per_s"]
    return rows


def start_moto(workdir: Path):
    """A moto S3 server (tests/servers.py) and a fresh bucket; returns (url, stop)."""
    sys.path.insert(0, str(REPO / "tests"))
    import boto3
    from servers import start_server

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                        "AWS_CONFIG_FILE": str(workdir / "none"),
                        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "none")}.items():
        os.environ[name] = value
    server = start_server("moto S3", [sys.executable, "-m", "moto.server", "-H", "{host}", "-p",
                                      "{port}"], ready_path="/moto-api/", timeout=60)
    boto3.client("s3", endpoint_url=server.url, region_name="us-east-1").create_bucket(
        Bucket="bench")
    return f"s3://bench/state?endpoint_url={server.url}", server.stop


def print_table(rows: list[dict[str, Any]]) -> None:
    head = ("tier", "phase", "gets/s", "get p50 ms", "get p99 ms", "multi_get keys/s",
            "tier reqs", "hit ratio", "gets x", "mget x")
    lines = [head]
    for r in rows:
        lines.append((
            r["tier"], r["phase"], f"{r['gets_per_s']:,.0f}", f"{r['get_p50_ms']:.2f}",
            f"{r['get_p99_ms']:.2f}", f"{r['multi_get_keys_per_s']:,.0f}",
            f"{r['tier_requests']:,}",
            "-" if r["hit_ratio"] is None else f"{r['hit_ratio']:.3f}",
            f"{r['gets_speedup']:.1f}", f"{r['multi_get_speedup']:.1f}",
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for n, line in enumerate(lines):
        print(" | ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(line, widths))))
        if n == 0:
            print("-|-".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--gets", type=int, default=1000)
    p.add_argument("--multi-gets", type=int, default=20)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--latency-ms", type=float, default=10.0, help="file tier: sleep per request")
    p.add_argument("--memtable-mib", type=int, default=8)
    p.add_argument("--block-cache-mib", type=int, default=4)
    p.add_argument("--cache-mib", type=int, default=1024, help="SSD cache size limit")
    p.add_argument("--tiers", default="file,s3", help="file, s3 (s3 needs silt_s3 and moto)")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--json", type=Path, default=HERE / "results" / "cache_bench.json")
    args = p.parse_args(argv)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="silt-cache-bench-"))
    rows: list[dict[str, Any]] = []
    try:
        tiers = args.tiers.split(",")
        if "file" in tiers:
            root = workdir / "file-root"
            rows += bench_tier("file", lambda: FileStore(root), root.as_uri(), workdir, args)
        if "s3" in tiers:
            try:
                import moto  # noqa: F401
                from silt_s3 import S3Store
            except ImportError as exc:
                print(f"[s3] skipped: {exc}", flush=True)
            else:
                url, stop = start_moto(workdir)
                base, endpoint = url.split("?endpoint_url=")
                try:
                    rows += bench_tier(
                        "s3", lambda: S3Store.from_url(base, {"endpoint_url": endpoint}), base,
                        workdir, args,
                    )
                finally:
                    stop()
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(f"{args.keys:,} keys, {args.value_bytes}-byte values; {args.gets} gets and "
          f"{args.multi_gets} multi_gets of {args.batch} keys per phase; block cache "
          f"{args.block_cache_mib} MiB; file tier latency {args.latency_ms:g} ms/request")
    print_table(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "python": platform.python_version(), "rows": rows,
    }, indent=2))
    return 1 if any(r["wrong_values"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
