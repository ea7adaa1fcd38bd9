"""The batch processor's shard stage against the aggregate's, without Spark (not a test).

    python bench/batch_profile.py                      # figures: median of --runs runs
    python bench/batch_profile.py --profile batch      # cProfile of the batch processor's stage
    python bench/batch_profile.py --cold               # a cold shard's first batch (restart)
    python bench/batch_profile.py --sessions           # the docs' sessionization (timers)
    python bench/batch_profile.py --sessions --profile batch   # ... under cProfile

What it measures: one shard's work per micro-batch, in this process, on a real shard LSM
(``file://`` under a temporary folder) — what a Spark task of the shard stage runs after the
shuffle, without Spark, the shuffle or the Python worker. Each case gets the same input: a
fill batch holding every one of ``--keys`` keys once (not timed), then ``--batches`` batches of
``--rows`` random keys in ``[0, keys)`` with an amount, the running count and sum per key:

* ``batch``: ``transform_batches``' task code (``operators/batch/_task.process_partition``)
  running ``spark_counts.BatchCount``, the benchmark's batch processor, on the batch's rows;
* ``aggregate``: ``silt_spark.aggregate``'s shard stage (``operators/aggregate.merge_partition``)
  on the partials of the same rows (the partial aggregation before the shuffle, done here per
  quarter of the batch as four input partitions would, is not timed).

``--sessions``: the ``batch`` case runs ``session_bench.Sessions`` (docs/spark.md's
sessionization: event-time gap sessions, one event-time timer per open session) on
``session_bench``'s input (``spark_inputs.make_window_input``'s: each batch the next 60 s of
event time, 1% of the rows 90 s late), with the watermark Spark would give each batch (the
previous batches' largest event time less the 3 s delay), so timers are registered, deleted
and fired as in the query; ``--shards`` divides ``--keys`` and ``--rows`` (one shard's share
of a query on that many shards). No ``aggregate`` case then.

Each timed batch is the stage's call (output consumed) plus the shard's commit. A run prints
each case's median ms per batch and rows/s, and the batch processor's speed relative to the
aggregate's in the same run; the last line, the median of the runs' figures and of their
ratios. The machine may be shared: compare ratios, not absolute figures (the load is printed).

``--cold``: what a cold shard adds to the first micro-batch after a restart. The ``aggregate``
shard of ``--keys`` keys (default 500k: one of the restart benchmark's four shards at 2M keys) is
filled as the benchmark's query fills it (every key once, then ``--batches`` batches of
``--rows`` rows, default 50k: a shard's share of 200k rows), then each of ``--runs`` runs copies
it and runs ``bench/cold_shard.py`` in a fresh interpreter: the imports the shard task needs,
the shard's open, the restart batch's ``merge_partition`` and commit, then two more batches on
the warm handle. Prints each run's steps and their medians (wall and CPU). The children import
from bytecode (written by a first, uncounted run), as from an installed package;
``--source-imports`` compiles silt's modules from source in every child instead.
``--profile-cold cprofile`` profiles one cold child (the steps after the worker's own imports).
``--s3-latency-ms 20``: each run also restarts a copy of the shard uploaded to moto's S3 server
behind the Spark benchmark's latency proxy (``spark_session.RemoteState``), file:// and S3
alternated, and prints each step's requests and, on S3, its sequential round trips and what
went out in each (``cold_shard.py``).
``--next-shard``: after the first shard's commit, the child opens a second copy of the shard
and runs the same restart batch on it, as a reused Spark worker runs its next shard task while
what the first task's commit started (threads, the compaction subprocess) goes on. ``--base
DIR`` keeps the filled shard for the next invocation (the fill of 5M keys takes a minute);
``--against CHECKOUT`` alternates children of another checkout (its compiled twin built) with
this one's, for A/B figures on a shared machine (with ``--s3-latency-ms``, the four
(checkout, tier) pairs alternate). ``--steps`` times the cold batch's steps one
by one (key group check, grouping and key order, ``multi_get``, record decoding, combine,
``put_many``, output; with the block cache's misses and the reads' RANGE_GETs). CPU is reported
for the child's process (every thread) and, for the batches, its main thread alone.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pickle
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# This checkout's packages and bench/ first (not an installed silt).
_SRC = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_SRC / "bench")] + [str(_SRC / "packages" / p / "src")
                                        for p in ("core", "spark", "tier-s3", "cache-ssd")]
# isort: split
import silt  # noqa: E402
from cold_shard import KEY_GROUPS, Task  # noqa: E402
from silt_spark.operators import _aggregation  # noqa: E402
from silt_spark.operators import aggregate as _aggregate  # noqa: E402
from silt_spark.operators.batch._task import process_partition  # noqa: E402
from silt_spark.runtime import _schema  # noqa: E402
from silt_spark.runtime._layout import KG_COLUMN, PARTITION_COLUMN  # noqa: E402
from spark_counts import BatchCount  # noqa: E402

VALUE = (("n", "bigint", True), ("total", "bigint", True))
VALUE_ARROW = pa.schema([("n", pa.int64()), ("total", pa.int64())])
OUTPUT = pa.schema([("key", pa.int64()), ("n", pa.int64()), ("total", pa.int64())])


def with_layout(t: pa.Table, key_groups: int = KEY_GROUPS) -> pa.Table:
    """``t`` with the routing columns the shard stage gets (key group: the key modulo
    ``key_groups``, by default the key's low byte)."""
    kg = pa.array(t["key"].to_numpy() % key_groups, pa.int32())
    return t.append_column(KG_COLUMN, kg).append_column(
        PARTITION_COLUMN, pa.array(np.zeros(t.num_rows, np.int32)))


def inputs(keys: int, rows: int, batches: int, seed: int) -> list[pa.Table]:
    """The fill batch, then ``batches`` batches of ``rows`` random keys (as ``make_input``)."""
    rng = np.random.default_rng(seed)
    k = rng.permutation(keys)
    out = [pa.table({"key": pa.array(k, pa.int64()),
                     "amount": pa.array(rng.integers(0, 1000, keys), pa.int64())})]
    for _ in range(batches):
        out.append(pa.table({"key": pa.array(rng.integers(0, keys, rows), pa.int64()),
                             "amount": pa.array(rng.integers(0, 1000, rows), pa.int64())}))
    return out


def batch_stage() -> Any:
    """``(prepare, run)`` of the batch processor's shard stage."""
    registry = _schema.evolve({}, {"s": _schema.Declared("value", None, VALUE, False)})

    def prepare(t: pa.Table) -> list[Any]:
        return with_layout(t).to_batches()

    def run(task: Task, batches: list[Any]) -> int:
        out = process_partition(task, iter(batches), BatchCount(), ["key"], OUTPUT, registry,
                                {"s": VALUE_ARROW}, {})
        return sum(b.num_rows for b in out)

    return prepare, run


def aggregate_plan() -> Any:
    """The aggregate's plan of the benchmark's query (count, sum(amount) by key)."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("key", T.LongType()),
                           T.StructField("amount", T.LongType())])
    plan, _, _ = _aggregation.plan(schema, ["key"], _aggregation.parse_aggs(
        ["count", "sum(amount)"]))
    return plan


def aggregate_stage() -> Any:
    """``(prepare, run)`` of the aggregate's shard stage (count, sum(amount))."""
    plan = aggregate_plan()

    def prepare(t: pa.Table) -> list[Any]:
        quarter = -(-t.num_rows // 4)
        parts = [b for i in range(0, t.num_rows, quarter)
                 for b in _aggregation.partial_aggregate(iter(t.slice(i, quarter).to_batches()),
                                                         plan)]
        return with_layout(pa.Table.from_batches(parts)).to_batches()

    def run(task: Task, batches: list[Any]) -> int:
        return sum(b.num_rows for b in _aggregate.merge_partition(task, iter(batches), plan))

    return prepare, run


STAGES = {"aggregate": aggregate_stage, "batch": batch_stage}

#: ``session_bench``'s watermark delay (ms).
SESSION_DELAY_MS = 3_000


def session_inputs(keys: int, rows: int, batches: int, seed: int) -> list[pa.Table]:
    """``1 + batches`` batches of session_bench's input, in memory: batch ``b`` covers
    ``[60 s * b, 60 s * (b + 1))`` of event time, 1% of its rows 90 s older."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(1 + batches):
        ms = 60_000 * b + rng.integers(0, 60_000, rows)
        ms[rng.random(rows) < 0.01] -= 90_000
        out.append(pa.table({
            "key": pa.array(rng.integers(0, keys, rows), pa.int64()),
            "amount": pa.array(rng.integers(0, 1000, rows), pa.int64()),
            "ts": pa.array(np.maximum(ms, 0) * 1000, pa.timestamp("us", tz="UTC")),
        }))
    return out


class SessionTask(Task):
    """:class:`Task` in event time: the batch's watermark as Spark computes it (the largest
    event time of the batches before, less the delay), the late rows' watermark the one before
    (as with no-data batches on); the shard holds ``key_groups`` key groups (one shard's share of
the 256 of a query)."""

    class Spec:
        ticks = False
        root = ""
        storage_options = None

    def __init__(self, db: Any, url: str, batch_id: int, watermark: int | None,
                 late: int | None, key_groups: int) -> None:
        super().__init__(db, url, batch_id)
        self.last_kg = key_groups - 1
        self.spec = self.Spec()
        self.watermark, self.late_watermark = watermark, late

    def observe_event_time(self, max_ms: int | None, input_index: int = 0) -> None:
        pass


def session_stage(key_groups: int = KEY_GROUPS) -> Any:
    """``(prepare, run)`` of the batch processor's shard stage running ``session_bench``'s
    ``Sessions`` on a shard of ``key_groups`` key groups."""
    from session_bench import Sessions
    from silt_spark.operators._timemode import TimeConfig

    value = (("start", "bigint", True), ("last", "bigint", True), ("n", "bigint", True))
    registry = _schema.evolve({}, {"session": _schema.Declared("value", None, value, False)})
    arrow = {"session": pa.schema([(n, pa.int64()) for n, _, _ in value])}
    output = pa.schema([(n, pa.int64()) for n in ("key", "start", "end", "n")])
    time = TimeConfig("eventtime", "ts", SESSION_DELAY_MS)
    key_schema = pa.schema([("key", pa.int64())])

    def prepare(t: pa.Table) -> list[Any]:
        return with_layout(t, key_groups).to_batches()

    def run(task: Task, batches: list[Any]) -> int:
        out = process_partition(task, iter(batches), Sessions(), ["key"], output, registry,
                                arrow, {}, time=time, key_schema=key_schema)
        return sum(b.num_rows for b in out)

    return prepare, run


def run_case(name: str, data: list[pa.Table], root: Path, profile: bool,
             shards: int = 1, cpu: list[float] | None = None) -> list[float]:
    """Seconds of each timed batch of one case (a fresh shard LSM under ``root``; sessions:
    one of ``shards`` shards' key groups); ``cpu`` gets each one's CPU seconds (the process's,
    every thread)."""
    key_groups = KEY_GROUPS // shards
    prepare, run = session_stage(key_groups) if name == "session" else STAGES[name]()
    url = (root / name).as_uri()
    db = silt.open(url)
    seconds = []
    prof = cProfile.Profile() if profile else None
    watermarks = [None]  # the watermark of each batch (sessions: event time)
    for t in data:
        if "ts" in t.column_names:
            top = pc.max(t["ts"]).cast(pa.int64()).as_py() // 1000 - SESSION_DELAY_MS
            watermarks.append(max(top, watermarks[-1] or top))
    try:
        for b, t in enumerate(data):
            batches = prepare(t)
            task = (SessionTask(db, url, b, watermarks[b], watermarks[b - 1] if b else None,
                                key_groups)
                    if name == "session" else Task(db, url, b))
            start, start_cpu = time.perf_counter(), time.process_time()
            if prof is not None and b:
                prof.enable()
            run(task, batches)
            task.commit()
            if prof is not None:
                prof.disable()
            if b:  # the fill batch is not timed
                seconds.append(time.perf_counter() - start)
                if cpu is not None:
                    cpu.append(time.process_time() - start_cpu)
    finally:
        db.close()
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof).sort_stats("cumtime").print_stats(30)
    return seconds


def cold_fill(args: argparse.Namespace, folder: Path) -> None:
    """Fill the shard under ``folder / "shard"`` (with ``--next-shard``, a second one under
    ``folder / "next"``: the same data in SSTs of other ids, so the first shard's blocks in the
    process's block cache are not the second's) and write the restart batch, the warm batches
    after it, the stage's pickled function and the job for ``cold_shard.py``."""
    data = inputs(args.keys, args.rows, args.batches + 3, seed=7)
    prepare, run = aggregate_stage()
    settings = silt.Settings()
    for name in ("shard", "next") if args.next_shard else ("shard",):
        url = (folder / name).as_uri()
        db = silt.open(url, settings=settings)
        try:
            for b, t in enumerate(data[:args.batches + 1]):
                task = Task(db, url, b)
                run(task, prepare(t))
                task.commit()
            db.wait_for_compaction()
            print(f"{name}:", {k: v for k, v in db.stats().items() if not isinstance(v, dict)})
        finally:
            db.close()
    url = (folder / "shard").as_uri()
    import pyarrow.ipc as ipc

    later = data[args.batches + 1:]
    for name, t in [("cold", later[0]), ("warm-1", later[1]), ("warm-2", later[2])]:
        batches = prepare(t)
        with ipc.new_file(str(folder / f"{name}.arrow"), batches[0].schema) as w:
            for b in batches:
                w.write_batch(b)
    (folder / "stage.pickle").write_bytes(
        pickle.dumps(partial(_aggregate.merge_partition, p=aggregate_plan())))
    (folder / "job.json").write_text(json.dumps(
        {"url": url, "batch": args.batches + 1, "settings": settings.to_dict()}))


COLD_STEPS = ("worker", "imports", "open", "process", "commit", "warm_process", "warm_commit")
#: With --next-shard: a second shard's restart batch in the same process (see cold_shard.py).
NEXT_STEPS = ("next_open", "next_process", "next_commit")
#: The steps whose S3 and file:// figures are compared (and their next shard's).
REMOTE_STEPS = ("open", "process", "commit")


def cold(args: argparse.Namespace) -> None:
    """``--cold``: the cold shard's steps in fresh interpreters (see the module)."""
    remote = None
    if args.s3_latency_ms is not None:
        from spark_session import RemoteState

        remote = RemoteState(args.s3_latency_ms)
    try:
        with tempfile.TemporaryDirectory() as d:
            _cold_runs(args, Path(d), remote)
    finally:
        if remote is not None:
            remote.stop()


def _cold_runs(args: argparse.Namespace, d: Path, remote: Any) -> None:
    """``--cold``'s runs under the scratch folder ``d``: the children of each checkout (this
    one; with ``--against``, that one first) on each tier (file://; with ``--s3-latency-ms``,
    also ``remote``'s S3), the (checkout, tier) pairs alternated run by run."""
    # Imports from bytecode, as an installed package's are: the children write and read
    # theirs under the folder (a first run, not counted, fills it). --source-imports: from
    # source, as a worker imports a checkout without bytecode when PYTHONDONTWRITEBYTECODE
    # is set (each fresh worker compiles every silt module it imports).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.source_imports:  # (the installed packages' own bytecode is still read)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    base = Path(args.base) if args.base else d / "base"
    if not (base / "job.json").exists() or (args.next_shard and not (base / "next").exists()):
        base.mkdir(parents=True, exist_ok=True)
        cold_fill(args, base)
    sides = [("this", _SRC)]
    if args.against:
        sides.insert(0, ("against", Path(args.against).resolve()))
    tiers = ["file"] if remote is None else ["file", "s3"]
    pairs = [(f"{name} {tier}", side, tier) for name, side in sides for tier in tiers]

    def one(name: str, side: Path, *flags: str,
            tier: str = "file") -> subprocess.CompletedProcess[str]:
        run_dir = d / name
        shutil.copytree(base, run_dir)
        if tier == "s3":  # the copies uploaded (the next shard's under a prefix of its own)
            _rewrite_job(run_dir, _uploaded(remote, run_dir / "shard", name), args.next_shard,
                         _uploaded(remote, run_dir / "next", name + "-next")
                         if args.next_shard else None)
        else:
            _rewrite_job(run_dir, None, args.next_shard)
        child_env = dict(env)
        if not args.source_imports:  # each checkout's bytecode apart
            child_env["PYTHONPYCACHEPREFIX"] = str(d / "pycache" / side.name)
        try:
            return subprocess.run(
                [sys.executable, str(side / "bench" / "cold_shard.py"), *flags, str(run_dir)],
                check=True, env=child_env, stdout=subprocess.PIPE, text=True)
        finally:
            shutil.rmtree(run_dir)

    for label, side, tier in pairs:  # (the S3 tier's imports too: botocore's bytecode)
        one(f"fills-the-bytecode-cache-{label.replace(' ', '-')}", side, tier=tier)
    if args.profile_cold:
        print(one("profiled", _SRC, "--profile", args.profile_cold, tier=tiers[-1]).stdout)
        return
    steps = COLD_STEPS + (NEXT_STEPS if args.next_shard else ())
    flags = ["--steps"] if args.steps else []
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in pairs}
    print(f"{args.keys} keys in the shard, {args.rows} rows per batch; "
          f"{'pure Python' if os.environ.get('SILT_NO_EXTENSIONS') else 'compiled'}; "
          f"imports from {'source' if args.source_imports else 'bytecode'}; "
          + (f"alternated with {sides[0][1]}; " if args.against else "")
          + (f"S3 (moto) +{args.s3_latency_ms:g} ms per request beside file://; "
             if remote else "") + f"load {os.getloadavg()[0]:.2f}")
    for r in range(args.runs):
        # The pairs alternate their order: (against file, against s3, this file, this s3),
        # then reversed, ...
        for label, side, tier in pairs if r % 2 == 0 else pairs[::-1]:
            got = json.loads(one(f"run-{r}-{label.replace(' ', '-')}", side, *flags,
                                 tier=tier).stdout.splitlines()[-1])
            runs[label].append(got)
            _print_run(f"run {r + 1} {label}", got, steps)
    for label, got in runs.items():
        _print_medians(label, got, steps, args.steps)
    if remote is not None:
        for name, _ in sides:
            s3, file = runs[f"{name} s3"], runs[f"{name} file"]
            diff = {k: statistics.median(s[k] - f[k] for s, f in zip(s3, file))
                    for k in steps if k in s3[0] and k.removeprefix("next_") in REMOTE_STEPS}
            print(f"{name}: S3 - file:// per step, median of the runs' differences (ms): "
                  + ", ".join(f"{k} {1000 * v:.0f}" for k, v in diff.items()))


def _print_run(title: str, got: dict[str, Any], steps: tuple[str, ...]) -> None:
    """One child's steps (ms), CPU and requests (an ``--against`` checkout's child may lack
    some figures: those are left out)."""
    cpu = "; ".join(
        f"{which}process {1000 * got['cpu_' + k]:.0f}"
        + (f", main thread {1000 * got['tcpu_' + k]:.0f}" if "tcpu_" + k in got else "")
        for k, which in (("process", ""), ("next_process", "next shard's "))
        if "cpu_" + k in got)
    print(f"{title}: " + ", ".join(f"{k} {1000 * got[k]:.0f}" for k in steps if k in got)
          + f" ms (CPU ms: {cpu or 'n/a'}); {got['rows']} keys; {got['read_threads']} read "
          f"threads; load {os.getloadavg()[0]:.2f}")
    print("   requests: " + "; ".join(
        f"{k} {_kinds(got['requests'][k])}"
        + (f" in {got['round_trips'][k]} round trips "
           + " | ".join(_kinds(w) for w in got["waves"][k]) if "round_trips" in got else "")
        for k in steps if k in got.get("requests", {})))


def _print_medians(label: str, got: list[dict[str, Any]], steps: tuple[str, ...],
                   by_step: bool) -> None:
    """The medians of one (checkout, tier) pair's runs."""
    if by_step:  # the cold batch's steps, main thread CPU ms
        parts = [k for k in got[0] if k.startswith("tcpu_step_")]
        print(f"{label}: the cold batch by step, median main thread CPU ms: "
              + ", ".join(f"{k[10:]} {1000 * statistics.median(g[k] for g in got):.1f}"
                          for k in parts)
              + "; " + ", ".join(f"{k[5:]} {statistics.median(g[k] for g in got):.0f}"
                                 for k in ("step_cache_misses", "step_range_gets",
                                           "step_range_get_bytes") if k in got[0]))
    for what, pre in (("ms", ""), ("CPU ms", "cpu_"), ("main thread CPU ms", "tcpu_")):
        keys = [k for k in steps if pre + k in got[0]]
        if not keys:
            continue
        med = {k: statistics.median(g[pre + k] for g in got) for k in keys}
        print(f"{label}: median of {len(got)} runs ({what}): "
              + ", ".join(f"{k} {1000 * med[k]:.0f}" for k in keys)
              + (f"; cold - warm process {1000 * (med['process'] - med['warm_process']):.0f}"
                 if "warm_process" in med else "")
              + f"; load {os.getloadavg()[0]:.2f}")


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"


def _uploaded(remote: Any, shard: Path, prefix: str) -> str:
    """Upload the shard copied under ``shard`` to the remote bucket under ``prefix``
    (straight to moto, not through the proxy); returns its URL (through the proxy)."""
    import boto3

    client = boto3.client("s3", endpoint_url=remote.server.url, region_name="us-east-1")
    for path in sorted(shard.rglob("*")):
        rel = path.relative_to(shard).as_posix()
        if path.is_file() and not rel.startswith(".tmp/"):
            client.put_object(Bucket=remote.bucket, Key=f"{prefix}/{rel}",
                              Body=path.read_bytes())
    client.close()
    return remote.url(prefix)


def _rewrite_job(run_dir: Path, url: str | None = None, next_shard: bool = False,
                 next_url: str | None = None) -> None:
    """Point the job of a copied shard at the copy (``url``: its upload, whose round trips the
    child counts) and, with ``next_shard``, at its second copy, ``next`` (``next_url``: that
    copy's upload)."""
    job = json.loads((run_dir / "job.json").read_text())
    job["url"] = url or (run_dir / "shard").as_uri()
    job["round_trips"] = url is not None
    if next_shard:
        job["next_url"] = next_url or (run_dir / "next").as_uri()
    (run_dir / "job.json").write_text(json.dumps(job))


def sessions(args: argparse.Namespace) -> None:
    """``--sessions``: the sessionization batch processor's shard stage (see the module)."""
    keys = (args.keys if args.keys != 500_000 else 100_000) // args.shards
    rows = (args.rows or 50_000) // args.shards
    batches = 3 if args.batches is None else args.batches
    data = session_inputs(keys, rows, batches, seed=7)
    if args.profile:
        with tempfile.TemporaryDirectory() as d:
            run_case("session", data, Path(d), True, args.shards)
        return
    print(f"sessions: {keys} keys, {rows} rows per batch (one of {args.shards} shards), "
          f"{batches} timed batches; "
          f"{'pure Python' if os.environ.get('SILT_NO_EXTENSIONS') else 'compiled'}; "
          f"load {os.getloadavg()[0]:.2f}")
    medians, cpus = [], []
    for r in range(args.runs):
        cpu: list[float] = []
        with tempfile.TemporaryDirectory() as d:
            s = run_case("session", data, Path(d), False, args.shards, cpu)
        medians.append(statistics.median(s))
        cpus.append(statistics.median(cpu))
        print(f"run {r + 1}: median {1000 * medians[-1]:7.1f} ms per batch "
              f"({rows / medians[-1] / 1000:6.1f}k rows/s), CPU {1000 * cpus[-1]:7.1f} ms "
              f"per batch (load {os.getloadavg()[0]:.2f})")
    m, c = statistics.median(medians), statistics.median(cpus)
    print(f"median of {args.runs} runs: {1000 * m:.1f} ms per batch, "
          f"{rows / m / 1000:.1f}k rows/s per shard; CPU {1000 * c:.1f} ms per batch")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=500_000)
    ap.add_argument("--rows", type=int, help="rows per batch (200k; with --cold 50k)")
    ap.add_argument("--batches", type=int, default=None,
                    help="timed batches per run (3); with --cold, batches after the fill (4)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", choices=sorted(STAGES), help="cProfile one case, one run (with --sessions: batch)")
    ap.add_argument("--cold", action="store_true",
                    help="a cold shard's restart batch in fresh interpreters")
    ap.add_argument("--profile-cold", choices=["cprofile"],
                    help="with --cold: profile one cold child")
    ap.add_argument("--source-imports", action="store_true",
                    help="with --cold: the children import silt from source, not bytecode")
    ap.add_argument("--s3-latency-ms", type=float, default=None,
                    help="with --cold: each run also restarts the shard on moto's S3 server "
                    "behind a proxy adding this latency per request (bench/spark_session.py)")
    ap.add_argument("--steps", action="store_true",
                    help="with --cold: time the cold batch's steps one by one")
    ap.add_argument("--next-shard", action="store_true",
                    help="with --cold: a second shard's restart batch in the same child "
                    "after the first's commit (a reused worker's next shard task)")
    ap.add_argument("--base", help="with --cold: keep the filled shard in this folder and "
                    "reuse it when it is there (same --keys, --rows, --batches)")
    ap.add_argument("--against", metavar="CHECKOUT",
                    help="with --cold: alternate children of CHECKOUT's bench/cold_shard.py "
                    "(another tree of silt, its compiled twin built) with this checkout's; "
                    "--steps, --next-shard, --s3-latency-ms need its cold_shard.py to know them")
    ap.add_argument("--sessions", action="store_true",
                    help="the batch case runs session_bench's Sessions (event-time timers)")
    ap.add_argument("--shards", type=int, default=4,
                    help="with --sessions: one shard's share of --keys and --rows")
    args = ap.parse_args()
    if args.sessions:
        sessions(args)
        return
    if args.cold or args.profile_cold:
        args.rows = args.rows or 50_000
        args.batches = 4 if args.batches is None else args.batches
        cold(args)
        return
    args.rows = args.rows or 200_000
    args.batches = 3 if args.batches is None else args.batches
    data = inputs(args.keys, args.rows, args.batches, seed=7)
    if args.profile:
        with tempfile.TemporaryDirectory() as d:
            run_case(args.profile, data, Path(d), True)
        return
    print(f"{args.keys} keys, {args.rows} rows per batch, {args.batches} timed batches; "
          f"load {os.getloadavg()[0]:.2f}")
    medians: dict[str, list[float]] = {n: [] for n in STAGES}
    for r in range(args.runs):
        for name in STAGES:
            with tempfile.TemporaryDirectory() as d:
                s = run_case(name, data, Path(d), False)
            medians[name].append(statistics.median(s))
            print(f"run {r + 1} {name:9s}: median {1000 * medians[name][-1]:7.1f} ms per batch "
                  f"({args.rows / medians[name][-1] / 1000:6.1f}k rows/s)")
        a, b = medians["aggregate"][-1], medians["batch"][-1]
        print(f"run {r + 1} batch / aggregate speed: {a / b:.2f}x "
              f"(load {os.getloadavg()[0]:.2f})")
    a, b = statistics.median(medians["aggregate"]), statistics.median(medians["batch"])
    ratio = statistics.median(x / y for x, y in zip(medians["aggregate"], medians["batch"]))
    print(f"median of {args.runs} runs: aggregate {1000 * a:.1f} ms, batch {1000 * b:.1f} ms "
          f"per batch; batch / aggregate speed {ratio:.2f}x (median of the runs' ratios)")


if __name__ == "__main__":
    main()
