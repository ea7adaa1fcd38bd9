"""Compaction benchmark: sustained random overwrites with a commit every second, once per policy.

Run ``PYTHONPATH=packages/core/src python bench/compaction_bench.py`` (defaults finish in about
ten minutes on a 2-core machine). ``--keys 5000000 --seconds 600`` is the issue's full-size run;
``--quick`` is a smoke run of about a minute.

For each policy (``leveled``, ``tiered``, ``ttl``) on a fresh ``file://`` root:

1. **Load**: every key once, in random order (16-byte random keys, 100-byte random values).
2. **Sustained phase** (``--seconds``): random overwrites of existing keys (a few percent are
   deletes; for ``ttl`` every put carries ``--ttl`` seconds) in batches, a commit every
   ``--commit-interval`` seconds, compaction in the writer's background thread.
3. **Reads**: ``--gets`` random gets (point reads of keys, present or not) on the final version,
   with a block cache smaller than the data; p50/p99 latency; SSTs probed per get.
4. **Space**: GC with ``retain_versions=1`` and grace 0 (the writer is closed, so that is safe
   here), then every object under the root is counted against the live data size.

Figures (bench/README.md has the long form):

* ``writes/s``: puts+deletes per second over the sustained phase, commits included.
* ``write amp``: bytes written to SSTs (flushes + adopted compaction outputs) per byte flushed.
* ``read amp``: SSTs a point read may probe at the end (L0 SSTs + non-empty levels), and
  ``probed/get``: the mean number of SSTs whose key range holds the key read (what a miss
  probes; bloom filters skip most of those probes without reading a block).
* ``L0 max``: the largest L0 seen at any commit; ``stalls``: commits that waited for compaction.
* ``objects``/``bytes``: under the root after GC; ``space amp`` = those bytes / live data bytes
  (keys + values of live entries; values are incompressible).

Results are printed as a table and written to ``bench/results/compaction_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
try:  # pragma: no cover - depends on how the script is launched
    import silt
except ImportError:  # running from a checkout without PYTHONPATH
    sys.path.insert(0, str(REPO / "packages" / "core" / "src"))

import silt  # noqa: E402
from silt.gc import collect_garbage  # noqa: E402
from silt.plugins import open_store  # noqa: E402

KEY_BYTES = 16
VALUE_BYTES = 100
BATCH = 2000
now = time.perf_counter


def settings_for(policy: str, args: argparse.Namespace) -> silt.Settings:
    mib = 1024 * 1024
    return silt.Settings(
        compaction=policy,
        memtable_bytes=int(args.memtable_mib * mib),
        target_sst_bytes=int(args.target_sst_mib * mib),
        level1_bytes=int(args.level1_mib * mib),
        block_cache_bytes=int(args.cache_mib * mib),
        l0_compaction_trigger=4,
        l0_stall_trigger=12,
        retain_versions=1,
        gc_grace_seconds=3600,
    )


def range_probes(manifest: Any, keys: list[bytes]) -> float:
    """Mean number of SSTs whose key range holds the key, over ``keys``: what a point read
    probes when the key is absent (every L0 SST covering it, then one SST per level); a present
    key stops earlier, and bloom filters skip most probes without a block read."""
    from bisect import bisect_left

    l0 = [(s.smallest, s.largest) for s in manifest.l0]
    runs = [([s.largest for s in run], [s.smallest for s in run]) for run in manifest.levels if run]
    total = 0
    for k in keys:
        total += sum(1 for lo, hi in l0 if lo <= k <= hi)
        for largest, smallest in runs:
            i = bisect_left(largest, k)
            total += i < len(largest) and smallest[i] <= k
    return total / len(keys)


def run_policy(policy: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    root = workdir / policy
    url = root.as_uri()
    settings = settings_for(policy, args)
    rng = random.Random(f"{args.seed}-{policy}")
    keys = [rng.randbytes(KEY_BYTES) for _ in range(args.keys)]
    ttl = args.ttl if policy == "ttl" else None
    model_live: dict[bytes, int] = {}  # key -> expiry (0 = never), for live-size accounting

    db = silt.open(url, settings=settings)
    t0 = now()
    order = list(range(args.keys))
    rng.shuffle(order)
    for i in range(0, args.keys, BATCH):
        chunk = [keys[j] for j in order[i:i + BATCH]]
        vals = [rng.randbytes(VALUE_BYTES) for _ in chunk]
        if ttl is None:
            db.put_many(chunk, vals)
        else:
            for k, v in zip(chunk, vals):
                db.put(k, v, ttl=ttl)
    db.commit()
    load_seconds = now() - t0
    load_expiry = int((time.time() + ttl) * 1000) if ttl else 0
    for k in keys:
        model_live[k] = load_expiry

    # Sustained random overwrites, a commit every commit_interval seconds.
    ops = 0
    commits = 0
    l0_max = 0
    commit_times: list[float] = []
    start = now()
    last_commit = start
    while True:
        t = now()
        if t - start >= args.seconds:
            break
        idx = [rng.randrange(args.keys) for _ in range(BATCH)]
        chunk = [keys[j] for j in idx]
        deletes = int(BATCH * args.delete_fraction)
        vals = [rng.randbytes(VALUE_BYTES) for _ in range(BATCH - deletes)]
        if ttl is None:
            db.put_many(chunk[deletes:], vals)
        else:
            for k, v in zip(chunk[deletes:], vals):
                db.put(k, v, ttl=ttl)
        for k in chunk[:deletes]:
            db.delete(k)
        wall = time.time()
        for k in chunk[:deletes]:
            model_live.pop(k, None)
        for k in chunk[deletes:]:
            model_live[k] = int((wall + ttl) * 1000) if ttl else 0
        ops += BATCH
        if now() - last_commit >= args.commit_interval:
            c0 = now()
            db.commit()
            commit_times.append(now() - c0)
            last_commit = now()
            commits += 1
            l0_max = max(l0_max, db.stats()["l0_ssts"])
    db.commit()
    commits += 1
    sustained = now() - start
    # Let the last background compaction land so the end state is representative.
    for _ in range(20):
        if not db.stats()["compaction_running"]:
            break
        time.sleep(0.5)
    db.commit()
    stats = db.stats()
    db.close()

    # Reads on the final version with a cold, smaller-than-data block cache.
    db = silt.open(url, settings=settings)
    read_keys = [keys[rng.randrange(args.keys)] for _ in range(args.gets)]
    lat: list[float] = []
    for k in read_keys:
        g0 = now()
        db.get(k)
        lat.append(now() - g0)
    final = db.stats()
    probes = range_probes(db.manifest, read_keys)
    db.close()
    lat.sort()

    # Space: collect garbage (writer closed), then count what is left.
    store = open_store(url)
    try:
        # As if the writers' grace period had passed (GC refuses a shorter grace).
        grace = silt.Settings().gc_grace_seconds
        later = silt.ManualClock(int(time.time() * 1000) + int(grace * 1000) + 1000)
        collect_garbage(store, retain_versions=1, grace_seconds=grace, clock=later)
        objects = list(store.list(""))
    finally:
        store.close()
    now_ms = int(time.time() * 1000)
    live_bytes = sum(
        KEY_BYTES + VALUE_BYTES for exp in model_live.values() if exp == 0 or exp > now_ms
    )
    total_bytes = sum(o.size for o in objects)
    flushed = stats.get("flush_bytes", 0)
    compacted = stats.get("compaction_output_bytes", 0)
    result = {
        "policy": policy,
        "keys": args.keys,
        "load_seconds": round(load_seconds, 2),
        "sustained_seconds": round(sustained, 2),
        "writes": ops,
        "writes_per_second": round(ops / sustained),
        "commits": commits,
        "commit_p99_ms": round(1000 * _pct(sorted(commit_times), 0.99), 1) if commit_times
        else None,
        "write_amplification": round((flushed + compacted) / flushed, 2) if flushed else None,
        "read_amplification": final["read_amplification"],
        "probed_per_get": round(probes, 2),
        "l0_max": l0_max,
        "l0_end": final["l0_ssts"],
        "levels_end": final["levels"],
        "stalls": int(stats.get("stalls", 0)),
        "stall_seconds": round(stats.get("stall_seconds", 0.0), 1),
        "compactions_adopted": int(stats.get("compactions_adopted", 0)),
        "compactions_refused": int(stats.get("compactions_refused", 0)),
        "objects": len(objects),
        "bytes": total_bytes,
        "live_bytes": live_bytes,
        "space_amplification": round(total_bytes / live_bytes, 2) if live_bytes else None,
        "get_p50_us": round(1e6 * _pct(lat, 0.50), 1),
        "get_p99_us": round(1e6 * _pct(lat, 0.99), 1),
    }
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return result


def _pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def print_table(results: list[dict[str, Any]]) -> None:
    cols = [
        ("policy", "policy"), ("writes/s", "writes_per_second"),
        ("write amp", "write_amplification"), ("read amp", "read_amplification"),
        ("probed/get", "probed_per_get"), ("L0 max", "l0_max"), ("stalls", "stalls"),
        ("objects", "objects"), ("MiB", "mib"), ("live MiB", "live_mib"),
        ("space amp", "space_amplification"), ("get p50 us", "get_p50_us"),
        ("get p99 us", "get_p99_us"),
    ]
    rows = []
    for r in results:
        r = {**r, "mib": f"{r['bytes'] / 2**20:.1f}", "live_mib": f"{r['live_bytes'] / 2**20:.1f}"}
        rows.append([str(r[k]) if r[k] is not None else "n/a" for _, k in cols])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, (h, _) in enumerate(cols)]
    line = " | ".join(h.rjust(w) for (h, _), w in zip(cols, widths))
    print(f"| {line} |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=300_000,
                   help="distinct keys (default 300k; the issue's full size is 5000000)")
    p.add_argument("--seconds", type=float, default=120.0,
                   help="sustained overwrite phase per policy (default 120)")
    p.add_argument("--commit-interval", type=float, default=1.0)
    p.add_argument("--delete-fraction", type=float, default=0.02)
    p.add_argument("--ttl", type=float, default=60.0, help="TTL of every put under 'ttl'")
    p.add_argument("--gets", type=int, default=20_000)
    p.add_argument("--policies", default="leveled,tiered,ttl")
    p.add_argument("--memtable-mib", type=float, default=4)
    p.add_argument("--target-sst-mib", type=float, default=8)
    p.add_argument("--level1-mib", type=float, default=8)
    p.add_argument("--cache-mib", type=float, default=8)
    p.add_argument("--seed", default="silt")
    p.add_argument("--quick", action="store_true", help="30k keys, 15 s per policy")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--keep", action="store_true", help="keep the roots")
    p.add_argument("--json", type=Path, default=HERE / "results" / "compaction_bench.json")
    args = p.parse_args(argv)
    if args.quick:
        args.keys, args.seconds, args.gets = 30_000, 15.0, 5_000
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="silt-compaction-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for policy in args.policies.split(","):
            print(f"# {policy}: {args.keys} keys, {args.seconds:g}s of overwrites ...",
                  file=sys.stderr, flush=True)
            results.append(run_policy(policy, args, workdir))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ncompaction_bench: {args.keys} keys x {KEY_BYTES}+{VALUE_BYTES} bytes, "
          f"{args.seconds:g}s sustained overwrites per policy, commit every "
          f"{args.commit_interval:g}s, file:// tier, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, speedups={_speedups()}\n")
    print_table(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"config": {k: str(v) for k, v in vars(args).items()},
                                     "results": results}, indent=2))
    print(f"\nwritten to {args.json}")
    bad = [r["policy"] for r in results
           if r["policy"] == "leveled" and (r["space_amplification"] or 0) >= 2]
    if bad:
        print(f"space amplification >= 2x with {bad}", file=sys.stderr)
    return 0


def _speedups() -> str:
    try:
        return str(silt.speedups())
    except Exception:
        return "n/a"


if __name__ == "__main__":
    raise SystemExit(main())
