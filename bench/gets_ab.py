"""Point gets at large state, old against new code and plyvel in alternation (CPU time).

    python bench/gets_ab.py build-peer DIR
    python bench/gets_ab.py ab DIR --old SRC --new SRC [--rounds 3]
    python bench/gets_ab.py reads --old SRC --new SRC [--rounds 3]
    python bench/gets_ab.py fill DIR

``DIR`` is a store made by ``bench/block_cache_ab.py build DIR`` (a settled silt store of
core_bench.py's data, its multi_get sample and cold keys beside it). ``build-peer`` loads the
same keys and values into plyvel (LevelDB, default options, as core_bench.py's ``plyvel``) at
``DIR/plyvel`` and compacts it. ``run`` (one fresh process) opens one store, then times in CPU
seconds of the process (``time.process_time``, all its threads), per key:

* ``cold_first_us`` / ``cold_rest_us``: the 100k cold keys one ``get`` each, the first 10k and
  the other 90k (the block cache empty at open; the OS page cache as the last run left it);
* ``warm_us``: core_bench.py's warm gets: the 200k-key sample, a warm-up pass, then the timed
  pass (at 5M keys the sample touches nearly every block, more than the 512 MiB cache holds,
  so about a third of these gets still miss the block cache);
* ``hit_us``: a 20k sub-sample after a warm-up pass: every block cached.

``reads`` times the ``file://`` tier's direct block reads alone, the old code and the new in
alternation, a fresh process each: 200k reads of 8,600 bytes at random offsets of a 64 MiB
file in the OS page cache, through ``FileStore.direct_reader`` (CPU us per read), and the same
offsets read with a bare ``os.pread`` in the same process (the floor: one Python call and the
``pread``).

``fill`` (one process, the code on ``PYTHONPATH``) runs the 100k cold keys in tens of
thousands and prints, for each, the CPU us and the minor page faults per get and how full the
process's block cache is: where the cold rows stop filling the cache and start evicting.

``ab`` runs ``run`` for the old code, the new code (``SRC``: a ``packages/core/src`` with its
compiled twin built) and plyvel in turn, each round, and prints each run with
``/proc/loadavg`` before it, then the median and min-max of each figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from run_record import print_summaries

HERE = Path(__file__).resolve().parent
COLD_FIRST = 10_000
FIGURES = ("cold_first_us", "cold_rest_us", "warm_us", "hit_us")


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _keys(path: Path) -> list[bytes]:
    buf = path.read_bytes()
    return [buf[i:i + 16] for i in range(0, len(buf), 16)]


def build_peer(args: argparse.Namespace) -> None:
    import plyvel

    sys.path.insert(0, str(HERE))
    from core_data import gen_keys, gen_values

    d = Path(args.dir)
    n = args.keys
    keys, values = gen_keys(n, "keys"), gen_values(n, "values")
    db = plyvel.DB(str(d / "plyvel"), create_if_missing=True)
    t0 = time.perf_counter()
    for i in range(0, n, 1000):
        with db.write_batch() as wb:
            for k, v in zip(keys[i:i + 1000], values[i:i + 1000]):
                wb.put(k, v)
    db.compact_range()
    db.close()
    print(f"plyvel: {n:,} keys in {time.perf_counter() - t0:.1f} s")


def run(args: argparse.Namespace) -> None:
    d = Path(args.dir)
    sample, cold = _keys(d / "sample.bin"), _keys(d / "cold.bin")
    out: dict[str, object] = {}
    if args.store == "plyvel":
        import plyvel

        db = plyvel.DB(str(d / "plyvel"))
        get, close = db.get, db.close
        cache = None
    else:
        import silt
        from silt.budget import process_budget

        db = silt.open("file://" + str((d / "db").resolve()))
        get, close = db.get, db.close
        cache = process_budget().cache
        out["silt"] = silt.__file__
        out["compiled"] = type(cache).__module__
    cpu = time.process_time

    def one_pass(keys: list[bytes]) -> float:
        t = cpu()
        n = 0
        for k in keys:
            if get(k) is not None:
                n += 1
        assert n == len(keys), n
        return (cpu() - t) / len(keys) * 1e6

    out["cold_first_us"] = one_pass(cold[:COLD_FIRST])
    out["cold_rest_us"] = one_pass(cold[COLD_FIRST:])
    one_pass(sample)
    if cache is not None:
        h, m = cache.hits, cache.misses
    out["warm_us"] = one_pass(sample)
    if cache is not None:
        out["warm_hits"], out["warm_misses"] = cache.hits - h, cache.misses - m
    sub = sample[:20_000]
    one_pass(sub)
    out["hit_us"] = one_pass(sub)
    close()
    print(json.dumps(out))


def read_once(args: argparse.Namespace) -> None:
    import random

    from silt.tiers import fdcache
    from silt.tiers.file import FileStore

    size, n = 64 << 20, 200_000
    store = FileStore(args.dir)
    if not (Path(args.dir) / "sst" / "a").exists():
        store.put("sst/a", random.Random(0).randbytes(size))
    read = store.direct_reader("sst/a")
    assert read is not None
    fdcache.RECHECK_SECONDS = 3600.0  # no recheck falls due: every read is the lenient hit
    rnd = random.Random(1)
    offsets = [rnd.randrange(size - 9_000) for _ in range(n)]
    cpu = time.process_time
    for off in offsets[:20_000]:  # warm-up: the file in the page cache, the allocator settled
        read(off, 8_600)
    t = cpu()
    for off in offsets:
        read(off, 8_600)
    out = {"read_us": (cpu() - t) / n * 1e6, "cache": type(fdcache.FDS).__module__}
    fd = os.open(Path(args.dir) / "sst" / "a", os.O_RDONLY)
    pread = os.pread
    t = cpu()
    for off in offsets:
        pread(fd, 8_600, off)
    out["pread_us"] = (cpu() - t) / n * 1e6
    os.close(fd)
    print(json.dumps(out))


def reads_ab(args: argparse.Namespace) -> None:
    rows: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for label, src in (("old", args.old), ("new", args.new)):
            env = dict(os.environ, PYTHONPATH=src, SILT_REQUIRE_EXTENSIONS="1")
            load = _loadavg()
            proc = subprocess.run([sys.executable, __file__, "read-once", args.dir], env=env,
                                  capture_output=True, text=True, check=True)
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            rows[label].append(res)
            print(f"round {r + 1} {label} (load {load}): read {res['read_us']:.3f} us, "
                  f"bare pread {res['pread_us']:.3f} us", flush=True)
    print_summaries(rows, ("read_us", "pread_us"), digits=3)


def fill(args: argparse.Namespace) -> None:
    import resource

    import silt
    from silt.budget import process_budget

    d = Path(args.dir)
    cold = _keys(d / "cold.bin")
    db = silt.open("file://" + str((d / "db").resolve()))
    cache = process_budget().cache
    cpu = time.process_time
    step = 10_000
    for i in range(0, len(cold), step):
        f0, t = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, cpu()
        for k in cold[i:i + step]:
            db.get(k)
        us = (cpu() - t) / step * 1e6
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / step
        print(f"cold gets {i:>6,}-{i + step:,}: {us:.2f} us CPU, {faults:.2f} page faults per "
              f"get; cache {cache.used >> 20} of {cache.capacity >> 20} MiB, "
              f"{cache.evictions:,} evictions (load {_loadavg()})", flush=True)
    db.close()


def ab(args: argparse.Namespace) -> None:
    runs = (("old", args.old), ("new", args.new), ("plyvel", None))
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in runs}
    for r in range(args.rounds):
        for label, src in runs:
            env = dict(os.environ)
            cmd = [sys.executable, __file__, "run", args.dir]
            if src is None:
                cmd += ["--store", "plyvel"]
            else:
                env.update(PYTHONPATH=src, SILT_REQUIRE_EXTENSIONS="1")
            load = _loadavg()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res["load"] = load
            results[label].append(res)
            print(f"round {r + 1} {label} (load {load}): "
                  + ", ".join(f"{k} {res[k]:.2f}" for k in FIGURES), flush=True)
    print_summaries(results, FIGURES)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build-peer")
    b.add_argument("dir")
    b.add_argument("--keys", type=int, default=5_000_000)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--store", choices=("silt", "plyvel"), default="silt")
    a = sub.add_parser("ab")
    a.add_argument("dir")
    a.add_argument("--old", required=True)
    a.add_argument("--new", required=True)
    a.add_argument("--rounds", type=int, default=3)
    o = sub.add_parser("read-once")
    o.add_argument("dir")
    ra = sub.add_parser("reads")
    ra.add_argument("--dir", default="/tmp/silt-gets-ab-reads")
    ra.add_argument("--old", required=True)
    ra.add_argument("--new", required=True)
    ra.add_argument("--rounds", type=int, default=3)
    f = sub.add_parser("fill")
    f.add_argument("dir")
    args = p.parse_args()
    {"build-peer": build_peer, "run": run, "ab": ab, "read-once": read_once,
     "reads": reads_ab, "fill": fill}[args.cmd](args)


if __name__ == "__main__":
    main()
