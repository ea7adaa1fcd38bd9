"""The write and point-read paths of this checkout against another one, in one run.

A regression check for restructurings of the engine (not a peer comparison: ``core_bench.py``
measures silt against LevelDB and RocksDB). Each round runs a child process per checkout,
alternating, so both see the same machine; each child puts ``--keys`` keys into a memtable, commits
them, then reads 100k of them back with ``get`` and with ``multi_get`` (batches of 1000), several
times, and reports medians. Prints one table with the median and min-max over rounds, and the
machine's load.

    python bench/hot_path_bench.py --other /path/to/other/checkout [--keys 300000] [--rounds 3]

Set ``SILT_NO_EXTENSIONS=1`` to compare the pure-Python twins; build each checkout's compiled
module first otherwise (``cd packages/core && python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(keys_n: int, repeat: int) -> dict[str, float]:
    import silt

    rng = random.Random(1)
    keys = [b"k%015d" % rng.randrange(10**15) for _ in range(keys_n)]
    value = b"v" * 100
    out: dict[str, list[float]] = {"puts/s": [], "warm gets/s": [], "multi_get keys/s": [],
                                   "commit ms": []}
    for _ in range(repeat):
        root = tempfile.mkdtemp(prefix="silt-hot-")
        try:
            db = silt.open(Path(root).as_uri(), settings=silt.Settings(compaction="none"))
            t = time.perf_counter()
            for k in keys:
                db.put(k, value)
            out["puts/s"].append(keys_n / (time.perf_counter() - t))
            t = time.perf_counter()
            db.commit()
            out["commit ms"].append((time.perf_counter() - t) * 1000)
            probe = keys[:100_000]
            for k in probe[:20_000]:  # warm the block cache
                db.get(k)
            t = time.perf_counter()
            for k in probe:
                db.get(k)
            out["warm gets/s"].append(len(probe) / (time.perf_counter() - t))
            t = time.perf_counter()
            for i in range(0, len(probe), 1000):
                db.multi_get(probe[i:i + 1000])
            out["multi_get keys/s"].append(len(probe) / (time.perf_counter() - t))
            db.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return {k: statistics.median(v) for k, v in out.items()}


def run_child(src: Path, keys_n: int, repeat: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src / "packages" / "core" / "src"),
               SILT_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(keys_n), "--repeat", str(repeat)],
        env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(proc.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--other", type=Path, help="the checkout to compare with")
    p.add_argument("--keys", type=int, default=300_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5, help="runs per child (median)")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.repeat)))
        return
    if args.other is None:
        p.error("--other is required: the checkout to compare this one with")
    this = HERE.parent
    results: dict[str, list[dict[str, float]]] = {"other": [], "this": []}
    for _ in range(args.rounds):
        results["other"].append(run_child(args.other.resolve(), args.keys, args.repeat))
        results["this"].append(run_child(this, args.keys, args.repeat))
    load = os.getloadavg()
    impl = "pure Python" if os.environ.get("SILT_NO_EXTENSIONS") else "compiled"
    print(f"{impl}, {args.keys} keys, {args.rounds} rounds of {args.repeat} runs; "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"| figure | {args.other} | this checkout | this / other |")
    print("|---|---|---|---|")
    for figure in results["this"][0]:
        cells = []
        for side in ("other", "this"):
            vals = [r[figure] for r in results[side]]
            cells.append((statistics.median(vals), min(vals), max(vals)))
        ratio = cells[1][0] / cells[0][0]
        print(f"| {figure} | " + " | ".join(
            f"{m:,.0f} [{lo:,.0f}-{hi:,.0f}]" for m, lo, hi in cells) + f" | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
