"""Where silt spends its time: cProfile of gets, multi_get, scan and flush on the core bench data.

    PYTHONPATH=packages/core/src python bench/profile_silt.py [--keys 200000] [--top 12]

Uses the same data shape as core_bench.py (16-byte random keys, 100-byte random values). Prints,
per operation, the functions with the most own time (tottime). "flush" profiles what the
background uploader does for one memtable (sort, build the SST, write it) by calling the builder
directly in this thread, because cProfile sees only the thread it runs in.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import core_bench as cb
import silt


def profile(label: str, fn, top: int, n_ops: int) -> None:
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    fn()
    pr.disable()
    t = time.perf_counter() - t0
    s = io.StringIO()
    ps = pstats.Stats(pr, stream=s).sort_stats("tottime")
    ps.print_stats(top)
    body = s.getvalue()
    # keep the table only
    body = body[body.find("   ncalls"):] if "   ncalls" in body else body
    print(f"\n=== {label}: {n_ops:,} ops in {t:.2f} s under cProfile "
          f"({n_ops / t:,.0f} ops/s profiled) ===")
    print(body.rstrip())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--gets", type=int, default=50_000)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--ops", default="flush,commit,warm_get,cold_get,missing_get,multi_get,scan")
    args = p.parse_args()
    compiled = [m for m, on in silt.speedups().items() if on]
    print(f"silt hot path: {'compiled: ' + ', '.join(compiled) if compiled else 'pure Python'}"
          " (cProfile does not see inside compiled functions: their time shows as the caller's)")
    ops = set(args.ops.split(","))
    keys = cb.gen_keys(args.keys, "keys")
    values = cb.gen_values(args.keys, "values")
    sample = random.Random("sample").sample(keys, min(args.gets, args.keys))
    missing = cb.gen_keys(len(sample), "missing")
    work = tempfile.mkdtemp(prefix="silt-prof-")
    url = "file://" + os.path.abspath(work)
    try:
        if "flush" in ops:
            from silt.memtable import Memtable
            from silt.sst.builder import build_sst

            settings = silt.Settings()

            def flush() -> None:
                mem = Memtable()
                for k, v in zip(keys, values):
                    mem.put(k, v)
                ks, recs = mem.sorted_items()
                build_sst("prof", ks, recs, settings, created_ms=0)

            profile("flush (memtable fill + sort + build_sst, one thread)", flush, args.top,
                    args.keys)
        db = silt.open(url)
        store = cb.SiltStore()
        cb.loop_write_batches(store, db, keys, values)
        if "commit" in ops:
            profile("commit (calling thread only; upload threads not seen)", db.commit,
                    args.top, args.keys)
        else:
            db.commit()
        get = db.get
        if "cold_get" in ops:
            db2 = silt.open(url)
            profile("cold gets (new DB object: empty block cache, tails not loaded)",
                    lambda: cb.loop_get(db2.get, sample), args.top, len(sample))
            db2.close()
        cb.loop_get(get, sample)  # warm-up
        if "warm_get" in ops:
            profile("warm gets", lambda: cb.loop_get(get, sample), args.top, len(sample))
        if "missing_get" in ops:
            profile("missing-key gets", lambda: cb.loop_get(get, missing), args.top, len(sample))
        if "multi_get" in ops:
            profile("multi_get, batches of 1000 (warm)",
                    lambda: cb.loop_multi_get(db.multi_get, sample), args.top, len(sample))
        if "scan" in ops:
            profile("full scan", lambda: store.scan_count(db), args.top, args.keys)
        db.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
