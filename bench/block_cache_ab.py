"""The block cache's cost at large state, old against new code in alternation (CPU time).

    python bench/block_cache_ab.py build DIR [--keys 5000000]
    python bench/block_cache_ab.py ab DIR --old SRC --new SRC [--rounds 3]

``build`` loads ``--keys`` of core_bench.py's data (same seeds) into a silt store at ``DIR``
through write batches, commits and settles it (no L0 SST left), and writes the multi_get sample
(200k keys, core_bench's ``sample``) and the cold-get keys (100k, its ``cold`` keys) beside it.
``run`` (one fresh process, the code on ``sys.path``) opens the store with the default process
budget (a 512 MiB block cache shared as every DB shares it), does the cold gets one by one, then
a warm-up pass of multi_get over the sample in batches of 1,000 and ``--passes`` timed passes,
and a pass over a 20k sub-sample whose blocks are all cached; it prints one JSON line of CPU
time per key (``time.process_time``: the process's CPU, all threads) and the cache's counts.
``ab`` runs ``run`` with the old and the new code's ``silt`` (``SRC`` is a ``packages/core/src``
with its compiled twin built) in alternation and prints each round, the median and min-max of
each figure, and ``/proc/loadavg`` before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from run_record import print_summaries

HERE = Path(__file__).resolve().parent
BATCH = 1000
COLD_FIRST = 10_000


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def build(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "packages" / "core" / "src"))
    import silt
    from core_data import gen_keys, gen_values
    from core_stores import SiltStore

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    keys = gen_keys(args.keys, "keys")
    values = gen_values(args.keys, "values")
    (d / "sample.bin").write_bytes(b"".join(random.Random("sample").sample(keys, 200_000)))
    (d / "cold.bin").write_bytes(b"".join(random.Random("cold").sample(keys, 100_000)))
    store = SiltStore()
    db = silt.open(SiltStore.url(str(d / "db")))
    t0 = time.perf_counter()
    for i in range(0, len(keys), BATCH):
        store.write_batch(db, keys[i:i + BATCH], values[i:i + BATCH])
    db.commit()
    store.settle(db)
    print(f"loaded {len(keys):,} keys in {time.perf_counter() - t0:.1f} s: {db.stats()}")
    db.close()


def _keys(path: Path) -> list[bytes]:
    buf = path.read_bytes()
    return [buf[i:i + 16] for i in range(0, len(buf), 16)]


def run(args: argparse.Namespace) -> None:
    import silt
    from silt.budget import process_budget

    d = Path(args.dir)
    sample, cold = _keys(d / "sample.bin"), _keys(d / "cold.bin")
    cpu = time.process_time
    db = silt.open("file://" + str((d / "db").resolve()))
    cache = process_budget().cache
    out: dict[str, object] = {"silt": silt.__file__, "compiled": type(cache).__module__}
    t0 = cpu()
    found = sum(db.get(k) is not None for k in cold[:COLD_FIRST])
    t1 = cpu()
    found += sum(db.get(k) is not None for k in cold[COLD_FIRST:])
    t2 = cpu()
    assert found == len(cold), found
    out["cold_first_us"] = (t1 - t0) / COLD_FIRST * 1e6
    out["cold_rest_us"] = (t2 - t1) / (len(cold) - COLD_FIRST) * 1e6
    mget = db.multi_get

    def one_pass(keys: list[bytes]) -> float:
        t = cpu()
        n = 0
        for i in range(0, len(keys), BATCH):
            n += sum(v is not None for v in mget(keys[i:i + BATCH]))
        assert n == len(keys), n
        return (cpu() - t) / len(keys) * 1e6

    one_pass(sample)
    h, m, e = cache.hits, cache.misses, cache.evictions
    passes = [one_pass(sample) for _ in range(args.passes)]
    out["mget_us_min"] = min(passes)
    out["mget_us_median"] = statistics.median(passes)
    out["mget_hits"] = (cache.hits - h) // args.passes
    out["mget_misses"] = (cache.misses - m) // args.passes
    out["mget_evictions"] = (cache.evictions - e) // args.passes
    warm = sample[:20_000]
    one_pass(warm)
    m = cache.misses
    out["warm_us_min"] = min(one_pass(warm) for _ in range(args.passes))
    out["warm_misses"] = cache.misses - m
    out["cache_entries"] = len(cache)
    db.close()
    print(json.dumps(out))


FIGURES = ("cold_first_us", "cold_rest_us", "mget_us_min", "mget_us_median", "warm_us_min")


def ab(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for label, src in (("old", args.old), ("new", args.new)):
            env = dict(os.environ, PYTHONPATH=src, SILT_REQUIRE_EXTENSIONS="1")
            load = _loadavg()
            proc = subprocess.run(
                [sys.executable, __file__, "run", args.dir, "--passes", str(args.passes)],
                env=env, capture_output=True, text=True, check=True)
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res["load"] = load
            results[label].append(res)
            print(f"round {r + 1} {label} (load {load}): "
                  + ", ".join(f"{k} {res[k]:.2f}" for k in FIGURES)
                  + f"; mget hits/misses/evictions {res['mget_hits']}/{res['mget_misses']}/"
                    f"{res['mget_evictions']}", flush=True)
    print_summaries(results, FIGURES)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir")
    b.add_argument("--keys", type=int, default=5_000_000)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--passes", type=int, default=5)
    a = sub.add_parser("ab")
    a.add_argument("dir")
    a.add_argument("--old", required=True)
    a.add_argument("--new", required=True)
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--passes", type=int, default=5)
    args = p.parse_args()
    {"build": build, "run": run, "ab": ab}[args.cmd](args)


if __name__ == "__main__":
    main()
