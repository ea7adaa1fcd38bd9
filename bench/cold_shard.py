"""One shard's first micro-batch after a restart, in a fresh process (not a test).

Run by ``bench/batch_profile.py --cold`` (which fills the shard and writes the batches), one
fresh interpreter per run, as a restarted Spark worker is one: nothing of silt imported, no
block cache, no loaded tail. ``python bench/cold_shard.py DIR`` prints one JSON line with the
seconds of each step:

* ``worker``: what any Python worker has before it unpickles an operator's function
  (``pyspark.worker``, pyarrow): the stateless floor pays it too, so it is not silt's;
* ``imports``: unpickling the shard stage's function (``aggregate.merge_partition`` and its
  plan), which imports silt_spark's modules and the parts of silt they name;
* ``open``: ``silt.open`` of the shard at the last committed version (``silt.db`` and the
  engine behind it are imported here, at the shard's first open);
* ``process``: ``merge_partition`` of the restart batch (output consumed) behind the shard
  task's key group check (``runtime._run.placed``), the cold batch
  (``read_threads``: the read pool's threads it started);
* ``commit``: the shard's commit of that batch;
* ``warm_process`` / ``warm_commit``: the median of the next batches on the same handle;
* with ``next_url`` in the job (``batch_profile.py --next-shard``): ``next_open``,
  ``next_process``, ``next_commit``, the same restart batch on a second copy of the shard,
  opened right after the first shard's commit (before the warm batches), as a reused Spark
  worker runs its next shard task beside what the first one's commit started.

Each step has its wall seconds, ``cpu_`` its process CPU seconds (every thread) and ``tcpu_``
the main thread's CPU seconds.
``--steps`` (``batch_profile.py --cold --steps``): the cold batch's own steps, ``step_*``
(see ``stepwise``), with the block cache's misses and the reads' RANGE_GETs.

``requests``: each step's requests by kind (the next shard's steps too) (the DB's own count, ``DB.stats``). When the job
says ``"round_trips": true`` (a remote root: ``batch_profile.py --cold --s3-latency-ms``), the
store is wrapped in ``silt.testing.LatencyStore`` with no added delay, which counts each step's
*sequential round trips* structurally (the longest chain of requests each started after the one
before had completed; the latency is the proxy's) and its requests; ``waves`` lists the
requests of each round trip of each step (kind and the key's first folder: ``get_range sst/``).

This module imports nothing but the standard library at its top, so that the child's steps are
measured from a cold interpreter; ``Task`` is also what ``batch_profile.py`` runs its stages
with. ``--profile cprofile`` wraps the steps after ``worker`` in cProfile and prints its top
functions to stderr (and writes the raw profile to ``$COLD_PROFILE_OUT`` if set). py-spy:
``py-spy record -o out.svg -- python bench/cold_shard.py DIR`` (py-spy's pauses count as
waits, so under it the reads may go to the read pool).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_SRC = Path(__file__).resolve().parents[1]
#: This checkout's packages first (not an installed silt).
PATHS = [str(_SRC / "packages" / p / "src") for p in ("core", "spark", "tier-s3", "cache-ssd")]

#: The key groups of the one shard (all of them).
KEY_GROUPS = 256


class Task:
    """What the shard stages use of a ``ShardTask``: the shard's DB and the batch's identity."""

    def __init__(self, db: Any, url: str, batch_id: int) -> None:
        self.db = db
        self.url = url
        self.batch_id = batch_id
        self.shard = 0
        self.spec = None
        self.first_kg, self.last_kg = 0, KEY_GROUPS - 1
        self.base_meta = db.meta
        self.meta_updates: dict[str, str] = {}
        self.changed = False
        self.watermark = self.late_watermark = None

    def commit(self) -> None:
        if self.changed:
            self.db.commit(self.batch_id, meta=self.meta_updates)


class Clock:
    """Wall and CPU seconds (the process's, every thread) of the steps: on a shared machine
    the CPU figure moves less with the load than the wall figure."""

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = out
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.tcpu = time.thread_time()

    def step(self, name: str) -> None:
        """Record the time since the last step (or the clock's start) as step ``name``."""
        wall, cpu, tcpu = time.perf_counter(), time.process_time(), time.thread_time()
        self.out[name] = wall - self.wall
        self.out["cpu_" + name] = cpu - self.cpu
        self.out["tcpu_" + name] = tcpu - self.tcpu
        self.wall, self.cpu, self.tcpu = wall, cpu, tcpu


class Counted:
    """Each step's requests, and on a remote root its sequential round trips (see the module):
    ``store`` is what ``silt.open`` is given (``None``: the URL's own store)."""

    def __init__(self, url: str, round_trips: bool) -> None:
        self.store: Any = None
        self.db: Any = None
        if round_trips:
            from silt.plugins import open_store
            from silt.testing import LatencyStore

            self.store = LatencyStore(open_store(url), 0.0)

    def _requests(self) -> dict[str, int]:
        return dict(self.db.stats()["requests_by_kind"]) if self.db is not None else {}

    @contextlib.contextmanager
    def step(self, out: dict[str, Any], name: str) -> Any:
        """Record the requests (and round trips) of the block as step ``name`` of ``out``."""
        before = self._requests()
        if self.store is None:
            yield
            after = self._requests()
            out.setdefault("requests", {})[name] = {
                k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0)}
            return
        with self.store.operation() as op:
            yield
        out.setdefault("requests", {})[name] = dict(op.requests)
        out.setdefault("round_trips", {})[name] = op.round_trips
        out.setdefault("waves", {})[name] = [
            dict(collections.Counter(f"{kind} {key.split('/')[0]}/" for kind, key in wave))
            for wave in op.waves()]


def _read_batches(path: Path) -> list[Any]:
    import pyarrow.ipc as ipc

    with ipc.open_file(str(path)) as f:
        return [f.get_batch(i) for i in range(f.num_record_batches)]


def _open_counted(job: dict[str, Any], url: str, out: dict[str, Any], clock: Any,
                  step: str) -> tuple[Any, Any]:
    """Open the shard at ``url`` at the job's last committed batch as step ``step`` (timed by
    ``clock``, its requests and, on a remote root, its round trips counted into ``out``);
    returns the DB and its :class:`Counted`."""
    import silt

    counted = Counted(url, bool(job.get("round_trips")))
    with counted.step(out, step):
        db = silt.open(url, at_most=job["batch"] - 1, store=counted.store,
                       settings=silt.Settings.from_dict(job["settings"]))
    clock.step(step)
    counted.db = db
    return db, counted


def _next_shard(job: dict[str, Any], stage: Any, batches: list[Any],
                out: dict[str, Any]) -> None:
    """The next shard task of the same worker: open the shard's second copy, run the restart
    batch on it, commit, close (steps ``next_open``, ``next_process``, ``next_commit``, each
    with its requests and, on a remote root, its round trips as the first shard's)."""
    from silt_spark.runtime._run import placed

    clock = Clock(out)
    db, counted = _open_counted(job, job["next_url"], out, clock, "next_open")
    try:
        task = Task(db, job["next_url"], job["batch"])
        with counted.step(out, "next_process"):
            sum(b.num_rows for b in stage(task, placed(task, iter(batches))))
        clock.step("next_process")
        with counted.step(out, "next_commit"):
            task.commit()
        clock.step("next_commit")
    finally:
        db.close()


def stepwise(task: Task, stage: Any, batches: list[Any], out: dict[str, Any]) -> int:
    """The aggregate's shard stage (``placed`` then ``merge_partition``) on ``batches``, its
    steps timed one by one into ``out`` (``--steps``; the same calls as ``merge_partition``,
    kept in step with it by hand) with the block cache's misses and the RANGE_GETs of the
    reads."""
    import pyarrow as pa
    from silt_spark.operators import _aggregation as agg
    from silt_spark.operators import aggregate
    from silt_spark.runtime._layout import PARTITION_COLUMN
    from silt_spark.runtime._ndarrays import record_bytes
    from silt_spark.runtime._run import placed

    p, db = stage.keywords["p"], task.db
    before = db.stats()
    gets = list(db._metrics.requests[("read", "RANGE_GET")])
    clock = Clock(out)
    t = pa.Table.from_batches(list(placed(task, iter(batches)))).drop_columns(
        [PARTITION_COLUMN])
    clock.step("step_check_and_table")
    g, keys = aggregate._groups_in_key_order(t, p)
    clock.step("step_group_and_order")
    values = db.multi_get(keys)
    clock.step("step_multi_get")
    old = agg.read_records(values, p, task.url)
    clock.step("step_read_records")
    new = agg.combine(old, g, p)
    clock.step("step_combine")
    db.put_many(keys, record_bytes(new))
    task.changed = True
    clock.step("step_put_many")
    arrays = [g[c] for c in p.key_columns] + agg.output_arrays(new, p)
    rows = sum(b.num_rows for b in pa.Table.from_arrays(
        arrays, schema=p.output_schema).to_batches())
    clock.step("step_output")
    out["step_cache_misses"] = db.stats()["cache_misses"] - before["cache_misses"]
    count, nbytes = db._metrics.requests[("read", "RANGE_GET")]  # the DB's own counters
    out["step_range_gets"], out["step_range_get_bytes"] = count - gets[0], nbytes - gets[1]
    return rows


def child(folder: Path, profile: str | None, dump: str | None = None,
          by_step: bool = False) -> dict[str, Any]:
    """The steps of one cold shard task on the shard under ``folder`` (see the module)."""
    out: dict[str, Any] = {}
    clock = Clock(out)
    import pyarrow  # noqa: F401
    import pyspark.worker  # noqa: F401
    clock.step("worker")
    sys.path[:0] = PATHS
    job = json.loads((folder / "job.json").read_text())
    cold = _read_batches(folder / "cold.arrow")
    warm = [_read_batches(p) for p in sorted(folder.glob("warm-*.arrow"))]
    stage_bytes = (folder / "stage.pickle").read_bytes()
    prof = None
    if profile == "cprofile":
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    import pickle

    clock = Clock(out)
    stage = pickle.loads(stage_bytes)
    import silt  # noqa: F401  (its package import counts in the imports step, as before)
    from silt_spark.runtime._run import placed  # run_shard's check of the rows' key groups

    def run(task: Task, batches: list[Any]) -> int:
        return sum(b.num_rows for b in stage(task, placed(task, iter(batches))))

    clock.step("imports")
    db, counted = _open_counted(job, job["url"], out, clock, "open")
    opened = db.stats()
    out["shape"] = {"l0_ssts": opened["l0_ssts"], "levels": opened["levels"]}
    try:
        task = Task(db, job["url"], job["batch"])
        clock = Clock(out)
        with counted.step(out, "process"):
            out["rows"] = (stepwise(task, stage, cold, out) if by_step
                           else run(task, cold))
        clock.step("process")
        import threading

        # Read threads the cold batch started (a local store's reads stay in the task's thread).
        out["read_threads"] = sum(t.name.startswith("silt-read") for t in threading.enumerate())
        with counted.step(out, "commit"):
            task.commit()
        clock.step("commit")
        if job.get("next_url"):
            _next_shard(job, stage, cold, out)
        if prof is not None:
            prof.disable()
        steps: list[dict[str, Any]] = []
        for i, batches in enumerate(warm, 1):
            task = Task(db, job["url"], job["batch"] + i)
            steps.append({})
            clock = Clock(steps[-1])
            run(task, batches)
            clock.step("warm_process")
            task.commit()
            clock.step("warm_commit")
        for name in steps[0] if steps else ():
            out[name] = statistics.median(s[name] for s in steps)
        out["stats"] = {k: v for k, v in db.stats().items()
                        if isinstance(v, (int, float, str))}
    finally:
        db.close()
    if prof is not None:
        import pstats

        if dump:
            prof.dump_stats(dump)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(30)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumtime").print_stats(40)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    prof_mode, by_step = None, False
    if args[:1] == ["--steps"]:
        by_step, args = True, args[1:]
    if args[:1] == ["--profile"]:
        prof_mode, args = args[1], args[2:]
    print(json.dumps(child(Path(args[0]), prof_mode, os.environ.get("COLD_PROFILE_OUT"),
                           by_step)))
