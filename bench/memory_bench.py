"""Memory benchmark: peak RSS of one process that writes and reads through many silt DBs, against
its memory budget (``silt.set_memory_budget``; see ``silt.budget``).

Run ``python bench/memory_bench.py`` (with ``PYTHONPATH=packages/core/src`` or silt-core
installed). ``--quick`` is a short smoke run. Each mode runs in a fresh child process, so its
peak RSS is its own:

* ``budget``: every DB shares the process budget (``--budget``, default 256 MiB): one block cache,
  memtables charged to it (the default since budgets exist);
* ``private``: every DB has its own cache (``Settings.block_cache_bytes``, 256 MiB by default as
  before budgets) and its own uncounted memtables: what a Spark worker with 16 open shards did.

Per mode: ``--dbs`` DBs (default 16, silt-spark's ``MAX_CACHED_SHARDS``) on file:// in a temp
directory each get ``--keys`` keys (16-byte random keys, 100-byte random values) written
round-robin in batches of 10,000 with ``put_many`` (a commit per DB every round), then
``--gets`` random warm gets and as many keys again in ``multi_get`` batches of 1,000 spread over
all DBs. Reported: the RSS before the first DB opens (interpreter, modules, key lists), the peak
RSS (``getrusage``) and peak minus baseline (what silt added), against the budget; the budget's
own peaks (memtable bytes reserved, cache bytes); writes and gets per second. Results are printed
as a table and written to ``bench/results/memory_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
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
    import silt

MiB = 1 << 20
BATCH = 10_000
MULTI = 1_000


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _keys(db_index: int, n: int) -> list[bytes]:
    rng = random.Random(f"memory-bench-{db_index}")
    buf = rng.randbytes(16 * n)
    return [buf[i:i + 16] for i in range(0, 16 * n, 16)]


def child(mode: str, dbs: int, keys: int, gets: int, budget: int, cache: int,
          changes: dict[str, Any]) -> dict[str, Any]:
    """One measurement in this (fresh) process."""
    settings = silt.Settings.from_dict(changes)
    if mode == "budget":
        silt.set_memory_budget(budget)
    else:
        settings = settings.replace(block_cache_bytes=cache)
    all_keys = [_keys(i, keys) for i in range(dbs)]
    value_rng = random.Random("values")
    work = tempfile.mkdtemp(prefix="silt-memory-bench-")
    try:
        base_rss = _rss_bytes()
        handles = [silt.open(Path(work, f"db{i}").as_uri(), settings=settings)
                   for i in range(dbs)]
        t0 = time.perf_counter()
        for start in range(0, keys, BATCH):
            for db, ks in zip(handles, all_keys):
                chunk = ks[start:start + BATCH]
                db.put_many(chunk, [value_rng.randbytes(100) for _ in chunk])
            for db in handles:
                db.commit()
        write_s = time.perf_counter() - t0
        rng = random.Random("gets")
        t0 = time.perf_counter()
        for _ in range(gets):
            i = rng.randrange(dbs)
            if handles[i].get(all_keys[i][rng.randrange(keys)]) is None:
                raise SystemExit("a written key was not found")
        get_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(max(1, gets // MULTI)):
            i = rng.randrange(dbs)
            batch = [all_keys[i][rng.randrange(keys)] for _ in range(MULTI)]
            if None in handles[i].multi_get(batch):
                raise SystemExit("multi_get missed a written key")
        multi_s = time.perf_counter() - t0
        result: dict[str, Any] = {
            "mode": mode, "dbs": dbs, "keys_per_db": keys,
            "baseline_rss": base_rss, "peak_rss": _peak_rss_bytes(),
            "writes_per_s": dbs * keys / write_s, "gets_per_s": gets / get_s,
            "multi_get_keys_per_s": max(1, gets // MULTI) * MULTI / multi_s,
            "budget": budget if mode == "budget" else None,
            "private_cache": cache if mode == "private" else None,
        }
        result["silt_peak"] = result["peak_rss"] - base_rss
        if mode == "budget":
            b = silt.memory_budget().stats()
            result["peak_memtable_bytes"] = b["peak_memtable_bytes"]
            result["cache_bytes_end"] = b["cache_bytes"]
            result["refusals"] = b["refusals"]
        else:
            result["cache_bytes_end"] = sum(db.cache.used for db in handles)
        for db in handles:
            db.close()
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fmt(n: float | None) -> str:
    return "-" if n is None else f"{n / MiB:,.0f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dbs", type=int, default=16)
    ap.add_argument("--keys", type=int, default=200_000, help="keys per DB")
    ap.add_argument("--gets", type=int, default=100_000)
    ap.add_argument("--budget", type=int, default=256 * MiB, help="bytes (budget mode)")
    ap.add_argument("--cache", type=int, default=256 * MiB, help="bytes per DB (private mode)")
    ap.add_argument("--modes", default="budget,private")
    ap.add_argument("--silt-setting", action="append", default=[], metavar="NAME=VALUE",
                    help="a silt.Settings field for both modes (JSON value), repeatable")
    ap.add_argument("--quick", action="store_true", help="4 DBs x 50k keys, 20k gets")
    ap.add_argument("--json", default=str(HERE / "results" / "memory_bench.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.dbs, args.keys, args.gets = 4, 50_000, 20_000
    changes = {}
    for item in args.silt_setting:
        name, _, value = item.partition("=")
        try:
            changes[name] = json.loads(value)
        except ValueError:
            changes[name] = value
    if args.child:
        print(json.dumps(child(args.child, args.dbs, args.keys, args.gets, args.budget,
                               args.cache, changes)))
        return
    results = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "packages" / "core" / "src"), os.environ.get("PYTHONPATH", "")])}
    for mode in args.modes.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--dbs", str(args.dbs), "--keys",
             str(args.keys), "--gets", str(args.gets), "--budget", str(args.budget),
             "--cache", str(args.cache),
             *(f"--silt-setting={item}" for item in args.silt_setting)],
            check=True, capture_output=True, text=True, env=env,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    state = args.dbs * args.keys * 116
    print(f"{args.dbs} DBs x {args.keys:,} keys ({_fmt(state)} of keys and values), "
          f"{args.gets:,} gets; load average {os.getloadavg()[0]:.2f}")
    print(f"{'mode':8} {'limit':>14} {'baseline RSS':>13} {'peak RSS':>10} {'silt peak':>10} "
          f"{'memtables':>10} {'cache end':>10} {'writes/s':>10} {'gets/s':>9} {'mget/s':>9}")
    for r in results:
        limit = (f"{_fmt(r['budget'])}" if r["mode"] == "budget"
                 else f"{args.dbs}x{_fmt(r['private_cache'])}")
        print(f"{r['mode']:8} {limit:>14} {_fmt(r['baseline_rss']):>13} "
              f"{_fmt(r['peak_rss']):>10} {_fmt(r['silt_peak']):>10} "
              f"{_fmt(r.get('peak_memtable_bytes')):>10} {_fmt(r['cache_bytes_end']):>10} "
              f"{r['writes_per_s']:>10,.0f} {r['gets_per_s']:>9,.0f} "
              f"{r['multi_get_keys_per_s']:>9,.0f}")
    for r in results:
        if r["mode"] == "budget":
            print(f"budget mode: silt's peak is {r['silt_peak'] / r['budget']:.2f}x the budget "
                  f"(memtables peaked at {_fmt(r['peak_memtable_bytes'])}, "
                  f"{r['refusals']} early freezes)")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
