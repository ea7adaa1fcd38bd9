"""Core benchmark: silt (file:// tier) against plyvel (LevelDB) and rocksdict (RocksDB).

Run ``python bench/core_bench.py`` (with ``PYTHONPATH=packages/core/src`` or silt-core
installed), or ``nox -s bench -- [flags]``. ``--quick --repeat 1`` is a short smoke run.
Every store runs in the same process, on the same generated data (16-byte random keys, 100-byte
random values, random key order); every figure is measured ``--repeat`` times and reported as the
median with min-max. Results are printed as tables and written to
``bench/results/core_bench.json``. bench/README.md explains each figure.

Internal: ``--child JSON`` runs one fresh-process measurement (cold gets, open time) and prints
its result as JSON; the parent uses it, users never need it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
try:  # pragma: no cover - depends on how the script is launched
    import silt  # noqa: F401
except ImportError:  # running from a checkout without PYTHONPATH
    sys.path.insert(0, str(REPO / "packages" / "core" / "src"))

from core_data import (  # noqa: E402
    BATCH,
    COLD_FIRST,
    KEY_BYTES,
    VALUE_BYTES,
    gen_keys,
    gen_values,
    outside_keys,
)
from core_report import Recorder, fmt_cell, print_table, report, versions_info  # noqa: E402
from core_stores import PlyvelStore, SiltStore, Store, make_stores  # noqa: E402
from run_record import RESULTS, machine_load, write_results  # noqa: E402

now = time.perf_counter


# ---------------------------------------------------------------------------------------------
# Stores: one small adapter per store, so every loop below has the same shape for all of them.
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Fresh-process measurements
# ---------------------------------------------------------------------------------------------
def write_keys_file(path: Path, keys: Sequence[bytes]) -> None:
    path.write_bytes(b"".join(keys))


def read_keys_file(path: str) -> list[bytes]:
    buf = Path(path).read_bytes()
    return [buf[i:i + KEY_BYTES] for i in range(0, len(buf), KEY_BYTES)]


def child_main(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in a fresh interpreter: open the store, optionally do gets, report timings."""
    store = make_stores([spec["store"]], spec.get("silt_settings") or {})[0]
    keys = read_keys_file(spec["keys_file"]) if spec.get("keys_file") else []
    gc.collect()
    # The interpreter, the store's library and the keys to get, before the store opens; then
    # what the open adds (mostly modules it imports) and what the gets add (the caches).
    base = rss_split_mib().get("rss_anon_mib")
    t0 = now()
    db = store.open(spec["path"])
    t_open = now() - t0
    opened = rss_split_mib().get("rss_anon_mib")
    out: dict[str, Any] = {"open_s": t_open}
    get = store.get_fn(db)
    if spec["op"] == "open":
        probe = keys[0] if keys else b"\x00" * KEY_BYTES
        t0 = now()
        v = get(probe)
        out["first_get_s"] = now() - t0
        out["first_get_found"] = v is not None
    elif spec["op"] == "cold_gets":
        first = keys[:COLD_FIRST]
        found = 0
        t0 = now()
        for k in first:
            if get(k) is not None:
                found += 1
        t_first = now() - t0
        rest = keys[COLD_FIRST:]
        t0 = now()
        for k in rest:
            if get(k) is not None:
                found += 1
        t_rest = now() - t0
        out.update(n=len(keys), first_n=len(first), first_s=t_first, total_s=t_first + t_rest,
                   found=found)
    store.close(db)
    out["peak_rss_mib"] = peak_rss_mib()
    out.update(rss_split_mib())
    if base is not None and opened is not None and "rss_anon_mib" in out:
        # the open's share is mostly the modules it imports (and the store's handles); what
        # the gets add is the store's caches (blocks, SST tails): its budget's to hold
        out["rss_anon_open_mib"] = opened - base
        out["rss_anon_added_mib"] = out["rss_anon_mib"] - opened
    return out


def rss_split_mib() -> dict[str, float]:
    """This process's resident memory now, split (Linux /proc; empty elsewhere): anonymous
    (``RssAnon``: the heap, block caches) and file-backed (``RssFile``: mapped files, such as
    SSTs read through memory maps, pages the kernel can drop and read again)."""
    out: dict[str, float] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                out["rss_anon_mib"] = int(line.split()[1]) / 1024
            elif line.startswith("RssFile:"):
                out["rss_file_mib"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def peak_rss_mib() -> float:
    """This process's peak RSS. /proc VmHWM first: on Linux, ``ru_maxrss`` of a process started
    by fork+exec inherits the parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec['op']} for {spec['store']} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Timing helpers
# ---------------------------------------------------------------------------------------------
def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    gc.collect()
    t0 = now()
    result = fn(*args)
    return now() - t0, result


def loop_put(put: Callable[[bytes, bytes], Any], keys: Sequence[bytes],
             values: Sequence[bytes]) -> None:
    for k, v in zip(keys, values):
        put(k, v)


def loop_get(get: Callable[[bytes], Any], keys: Sequence[bytes]) -> int:
    found = 0
    for k in keys:
        if get(k) is not None:
            found += 1
    return found


def loop_multi_get(mget: Callable[[list[bytes]], list[Any]], keys: list[bytes]) -> int:
    found = 0
    for i in range(0, len(keys), BATCH):
        for v in mget(keys[i:i + BATCH]):
            if v is not None:
                found += 1
    return found


def loop_put_many(store: Store, db: Any, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
    for i in range(0, len(keys), BATCH):
        store.put_many(db, keys[i:i + BATCH], values[i:i + BATCH])


def loop_write_batches(store: Store, db: Any, keys: Sequence[bytes],
                       values: Sequence[bytes]) -> None:
    wb = store.write_batch
    for i in range(0, len(keys), BATCH):
        wb(db, keys[i:i + BATCH], values[i:i + BATCH])


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Main section: 1M keys
# ---------------------------------------------------------------------------------------------
def run_main(args: argparse.Namespace, stores: list[Store], rec: Recorder, work: Path) -> None:
    n = args.keys
    log(f"generating {n:,} keys/values ...")
    keys = gen_keys(n, "keys")
    values = gen_values(n, "values")
    n_gets = min(args.gets, n)
    data = {
        "keys": keys,
        "values": values,
        "sample": random.Random("sample").sample(keys, n_gets),
        "missing": gen_keys(n_gets, "missing"),
        "outside": outside_keys(keys, n_gets),
    }
    cold_file = work / "cold_keys.bin"
    write_keys_file(cold_file, random.Random("cold").sample(keys, min(args.cold_gets, n)))
    for rep in range(args.repeat):
        for store in stores:
            log(f"[main rep {rep + 1}/{args.repeat}] {store.label}")
            main_one(args, store, rec, work, data, cold_file, rep)
    data.clear()
    gc.collect()


def main_one(args: argparse.Namespace, store: Store, rec: Recorder, work: Path,
             data: dict[str, list[bytes]], cold_file: Path, rep: int) -> None:
    """One round of the main section for one store (locals die on return)."""
    S = "main"
    name = store.name
    keys, values, sample, missing = data["keys"], data["values"], data["sample"], data["missing"]
    n, n_gets = len(keys), len(sample)
    # 1. puts, one call per key, into a fresh store (then discarded)
    path = str(work / f"{name}-puts-{rep}")
    db = store.open(path, create=True)
    t, _ = timed(loop_put, store.put_fn(db), keys, values)
    rec.add(S, "puts", name, n / t)
    store.close(db)
    shutil.rmtree(path, ignore_errors=True)

    # 1b. batches given as two sequences (silt DB.put_many; the peers have no such call)
    if store.has_put_many:
        path = str(work / f"{name}-putmany-{rep}")
        db = store.open(path, create=True)
        t, _ = timed(loop_put_many, store, db, keys, values)
        rec.add(S, "put_many", name, n / t)
        store.close(db)
        shutil.rmtree(path, ignore_errors=True)

    # 2. batched puts into a fresh store, then make them durable
    path = str(work / f"{name}-batched-{rep}")
    db = store.open(path, create=True)
    t, _ = timed(loop_write_batches, store, db, keys, values)
    rec.add(S, "batched_puts", name, n / t)
    t2, _ = timed(store.durable, db)
    rec.add(S, "durable_s", name, t2)
    rec.add(S, "load_durable", name, n / (t + t2))
    if args.settle:
        t3, _ = timed(store.settle, db)
        rec.add(S, "settle_s", name, t3)

    # 3. warm gets: a warm-up pass, then the timed pass over the same keys
    get = store.get_fn(db)
    found = loop_get(get, sample)
    rec.check(found == n_gets, f"{name}: warm-up found {found}/{n_gets}")
    t, found = timed(loop_get, get, sample)
    rec.add(S, "warm_gets", name, n_gets / t)
    rec.check(found == n_gets, f"{name}: warm gets found {found}/{n_gets}")

    # 4. missing keys
    t, found = timed(loop_get, get, missing)
    rec.add(S, "missing_gets", name, n_gets / t)
    rec.check(found == 0, f"{name}: missing gets found {found}")

    # 4b. absent keys outside every SST's range (a range check only), and in the same run the
    # floor of a call: an empty compiled call (id) and a dict hit, over as many keys
    outside = data["outside"]
    t, found = timed(loop_get, get, outside)
    rec.add(S, "outside_gets", name, len(outside) / t)
    rec.check(found == 0, f"{name}: gets outside every range found {found}")
    t, _ = timed(loop_get, id, outside)
    rec.add(S, "floor_call", name, len(outside) / t)
    hits = dict.fromkeys(sample, b"")
    t, _ = timed(loop_get, hits.get, sample)
    rec.add(S, "floor_dict_hit", name, n_gets / t)
    del hits

    # 5. multi_get in batches of 1000
    mget = store.multi_get_fn(db)
    if mget is not None:
        t, found = timed(loop_multi_get, mget, sample)
        rec.add(S, "multi_get", name, n_gets / t)
        rec.check(found == n_gets, f"{name}: multi_get found {found}/{n_gets}")

    # 6. full scan
    t, count = timed(store.scan_count, db)
    expected = n + (1 if isinstance(store, PlyvelStore) else 0)  # plyvel's sync marker
    rec.add(S, "scan", name, count / t)
    rec.check(count == expected, f"{name}: scan saw {count} rows, expected {expected}")
    store.close(db)

    # 7. cold gets and open in a fresh process (OS page cache left as it is)
    res = run_child({"op": "cold_gets", "store": name, "path": path,
                     "keys_file": str(cold_file), "silt_settings": args.silt_settings})
    rec.add(S, "cold_gets", name, res["n"] / res["total_s"])
    rec.add(S, "cold_first_gets", name, res["first_n"] / res["first_s"])
    rec.add(S, "open_fresh_s", name, res["open_s"])
    rec.add(S, "cold_peak_rss_mib", name, res["peak_rss_mib"])
    for key in ("rss_anon_mib", "rss_anon_open_mib", "rss_anon_added_mib", "rss_file_mib"):
        if key in res:
            rec.add(S, f"cold_{key}", name, res[key])
    rec.check(res["found"] == res["n"], f"{name}: cold gets found {res['found']}")
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Scale section: commit and open time against total state size
# ---------------------------------------------------------------------------------------------
def load_chunks(total: int, chunk: int, seed: str) -> Iterable[tuple[list[bytes], list[bytes]]]:
    done = 0
    i = 0
    while done < total:
        m = min(chunk, total - done)
        yield gen_keys(m, f"{seed}-k{i}"), gen_values(m, f"{seed}-v{i}")
        done += m
        i += 1


def run_scale(args: argparse.Namespace, stores: list[Store], rec: Recorder, work: Path) -> None:
    deltas = [(gen_keys(args.delta, f"delta-k{r}"), gen_values(args.delta, f"delta-v{r}"))
              for r in range(args.scale_repeat)]
    for size in args.scale:
        # every store loads the same keys for this size (chunks generated per store, untimed)
        for store in stores:
            log(f"[scale {size:,}] {store.label}")
            scale_one(args, store, rec, work, size, deltas)


def scale_one(args: argparse.Namespace, store: Store, rec: Recorder, work: Path, size: int,
              deltas: list[tuple[list[bytes], list[bytes]]]) -> None:
    S = f"scale_{size}"
    name = store.name
    path = str(work / f"{name}-scale-{size}")
    probe_file = work / "probe_key.bin"
    db = store.open(path, create=True)
    load_t = 0.0
    first_key = None
    since_commit = 0
    for ks, vs in load_chunks(size, args.load_chunk, f"scale{size}"):
        if first_key is None:
            first_key = ks[0]
        t0 = now()
        loop_write_batches(store, db, ks, vs)
        since_commit += len(ks)
        if since_commit >= args.commit_every:
            store.durable(db)
            since_commit = 0
        load_t += now() - t0
    t0 = now()
    store.durable(db)
    load_t += now() - t0
    rec.add(S, "load_rate", name, size / load_t)
    assert first_key is not None
    write_keys_file(probe_file, [first_key])
    # the same small delta at every size; time only making it durable
    for ks, vs in deltas:
        t, _ = timed(loop_write_batches, store, db, ks, vs)
        rec.add(S, "delta_write_s", name, t)
        t, _ = timed(store.durable, db)
        rec.add(S, "commit_s", name, t)
    if isinstance(store, SiltStore):
        st = db.stats()
        rec.add(S, "silt_l0_ssts", name, st["l0_ssts"])
        rec.add(S, "silt_levels", name, sum(st["levels"]))
        mf = db.manifest
        rec.add(S, "silt_manifest_bytes", name, len(mf.encode()) if mf else 0)
    store.close(db)
    # open: fresh process, then in-process (the writer has closed the store)
    for _ in range(args.scale_repeat):
        res = run_child({"op": "open", "store": name, "path": path,
                         "keys_file": str(probe_file), "silt_settings": args.silt_settings})
        rec.add(S, "open_fresh_s", name, res["open_s"])
        rec.add(S, "first_get_fresh_s", name, res["first_get_s"])
        rec.check(res["first_get_found"], f"{name}: probe key missing after open")
    for _ in range(args.scale_repeat):
        gc.collect()
        t0 = now()
        db = store.open(path)
        t = now() - t0
        rec.add(S, "open_inproc_s", name, t)
        store.close(db)
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--keys", type=int, default=None, help="keys in the main section "
                   "(default 1,000,000; 100,000 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="short run: 100k keys, scale 10k,100k, fewer gets")
    p.add_argument("--repeat", type=int, default=3, help="runs of each figure")
    p.add_argument("--scale-repeat", type=int, default=None,
                   help="runs of each scale figure (default: --repeat)")
    p.add_argument("--scale", type=str, default=None,
                   help="comma-separated total sizes for commit/open time "
                        "(default 100000,1000000,5000000; 10000,100000 with --quick); "
                        "'none' skips the section")
    p.add_argument("--delta", type=int, default=10_000, help="puts in the delta per commit")
    p.add_argument("--commit-every", type=int, default=1_000_000,
                   help="scale section: commit after this many loaded keys")
    p.add_argument("--load-chunk", type=int, default=100_000, help=argparse.SUPPRESS)
    p.add_argument("--gets", type=int, default=None,
                   help="keys per warm/missing/multi_get pass (default 200k; 50k with --quick)")
    p.add_argument("--cold-gets", type=int, default=None,
                   help="gets in the fresh process (default 100k; 20k with --quick)")
    p.add_argument("--stores", type=str, default="silt,plyvel_bloom10,plyvel,rocksdict")
    p.add_argument("--sections", type=str, default="main,scale")
    p.add_argument("--settle", action="store_true",
                   help="main section: after the load, every store compacts fully (silt: "
                        "compactions adopted by commits until no L0 SST is left; LevelDB and "
                        "RocksDB: compact_range) before the reads, which then measure each "
                        "store's compacted tree instead of the shape its load left")
    p.add_argument("--silt-setting", action="append", default=[], metavar="NAME=VALUE",
                   help="override a silt.Settings field (repeatable; an int, or text for "
                        "compression, compaction and compaction_mode)")
    p.add_argument("--workdir", type=str, default=None, help="where to put the stores "
                   "(default: a new temp dir, removed at the end)")
    p.add_argument("--json", type=str, default=str(RESULTS / "core_bench.json"))
    p.add_argument("--child", type=str, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.keys is None:
        args.keys = 100_000 if args.quick else 1_000_000
    if args.gets is None:
        args.gets = 50_000 if args.quick else 200_000
    if args.cold_gets is None:
        args.cold_gets = 20_000 if args.quick else 100_000
    if args.scale is None:
        args.scale = "10000,100000" if args.quick else "100000,1000000,5000000"
    args.scale = [] if args.scale == "none" else [int(s) for s in args.scale.split(",")]
    args.scale.sort()
    if args.scale_repeat is None:
        args.scale_repeat = args.repeat
    settings: dict[str, Any] = {}
    for item in args.silt_setting:
        k, _, v = item.partition("=")
        settings[k] = v if k in ("compression", "compaction", "compaction_mode") else int(v)
    args.silt_settings = settings
    return args


# ---------------------------------------------------------------------------------------------
# Compaction section: gets/s while a compaction runs (silt only)
# ---------------------------------------------------------------------------------------------
def run_compaction_reads(args: argparse.Namespace, rec: Recorder, work: Path) -> None:
    """Gets/s on an idle DB and while a background compaction runs, with compaction in the
    compaction subprocess (the default, ``compaction_mode="background"``) and in the writer's
    thread (``"thread"``)."""
    import silt

    n = args.keys
    keys = gen_keys(n, "keys")
    values = gen_values(n, "values")
    sample = random.Random("sample").sample(keys, min(args.gets, n))
    chunk = max(n // 8, 1)  # eight commits: L0 reaches the trigger and compactions start
    for rep in range(args.repeat):
        for where in ("subprocess", "thread"):
            log(f"[compaction rep {rep + 1}/{args.repeat}] silt, compaction in a {where}")
            mode = "background" if where == "subprocess" else "thread"
            path = work / f"silt-compact-{where}-{rep}"
            db = silt.open(SiltStore.url(str(path)), settings=SiltStore(
                args.silt_settings)._settings().replace(compaction_mode=mode))
            try:
                for i in range(0, n, chunk):
                    for j in range(i, min(i + chunk, n), BATCH):
                        db.put_many(keys[j:j + BATCH], values[j:j + BATCH])
                    db.commit()
                db.wait_for_compaction()
                db.commit()
                db.wait_for_compaction()
                # overwrite a share of the keys until a compaction is running, then read a hot
                # set whose blocks are cached (warmed first, so that only the compaction differs
                # from the idle figure below, which reads the same set in the same view)
                i = 0
                while not db.stats()["compaction_running"] and i < n:
                    for j in range(i, min(i + chunk, n), BATCH):
                        db.put_many(keys[j:j + BATCH], values[j:j + BATCH])
                    db.commit()
                    i += chunk
                hot = sample[:20_000]
                loop_get(db.get, hot)
                done = 0
                t0 = now()
                get = db.get
                while db.stats()["compaction_running"] and now() - t0 < 60:
                    for k in hot[done % len(hot):][:BATCH]:
                        get(k)
                    done += BATCH
                t = now() - t0
                if done:
                    rec.add("compaction", "gets_during_compaction", where, done / t)
                    rec.add("compaction", "measured_during_s", where, t)
                db.wait_for_compaction()
                t, found = timed(loop_get, db.get, hot * 5)
                rec.add("compaction", "idle_gets", where, 5 * len(hot) / t)
                rec.check(found == 5 * len(hot), f"silt ({where}): idle gets found {found}")
            finally:
                db.close()
                shutil.rmtree(path, ignore_errors=True)
    section = rec.samples.get("compaction", {})
    rows = []
    for metric, label in (("idle_gets", "gets/s, no compaction running"),
                          ("gets_during_compaction", "gets/s while a compaction runs"),
                          ("measured_during_s", "seconds measured during the compaction")):
        ms = section.get(metric, {})
        rows.append([label, *[fmt_cell(ms.get(w), "rate" if "gets" in metric else "time")
                              for w in ("subprocess", "thread")]])
    print_table(f"Gets during compaction: {n:,} keys, median [min-max] of {args.repeat}",
                ["figure", "compaction subprocess (default)", "compaction in a thread"], rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(child_main(json.loads(args.child))))
        return 0
    stores = make_stores(args.stores.split(","), args.silt_settings)
    usable = []
    for s in stores:
        why = s.available()
        if why:
            log(f"skipping {s.label}: {why}")
        else:
            usable.append(s)
    stores = usable
    sections = set(args.sections.split(","))
    rec = Recorder()
    own_work = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="silt-bench-") if own_work else args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    load_at_start = machine_load()
    try:
        if "main" in sections:
            run_main(args, stores, rec, work)
        if "scale" in sections and args.scale:
            run_scale(args, stores, rec, work)
        if "compaction" in sections:
            run_compaction_reads(args, rec, work)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    summary = report(args, stores, rec)
    elapsed = time.time() - started
    print(f"\n(wall time {elapsed:.0f} s)")
    result = {
        "config": {k: v for k, v in vars(args).items() if k != "child"},
        "key_bytes": KEY_BYTES, "value_bytes": VALUE_BYTES, "batch": BATCH,
        "durable_means": {s.name: s.durable_means for s in stores},
        "environment": versions_info(),
        "started_unix": started, "elapsed_s": elapsed,
        "load": {"start": load_at_start, "end": machine_load()},
        "summary": summary,
        "samples": rec.samples,
        "failed_checks": rec.checks,
    }
    out = write_results(args.json, result)
    print(f"results written to {out}")
    return 1 if rec.checks else 0


if __name__ == "__main__":
    sys.exit(main())
