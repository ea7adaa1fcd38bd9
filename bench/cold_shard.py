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
  task's key group check (``runtime._shard.placed``), the cold batch
  (``read_threads``: the read pool's threads it started);
* ``commit``: the shard's commit of that batch;
* ``warm_process`` / ``warm_commit``: the median of the next batches on the same handle.

``requests``: each step's requests by kind (the DB's own count, ``DB.stats``). When the job
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

    def step(self, name: str) -> None:
        """Record the time since the last step (or the clock's start) as step ``name``."""
        wall, cpu = time.perf_counter(), time.process_time()
        self.out[name] = wall - self.wall
        self.out["cpu_" + name] = cpu - self.cpu
        self.wall, self.cpu = wall, cpu


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


def child(folder: Path, profile: str | None, dump: str | None = None) -> dict[str, Any]:
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
    import silt
    from silt_spark.runtime._shard import placed  # run_shard's check of the rows' key groups

    def run(task: Task, batches: list[Any]) -> int:
        return sum(b.num_rows for b in stage(task, placed(task, iter(batches))))

    clock.step("imports")
    counted = Counted(job["url"], bool(job.get("round_trips")))
    with counted.step(out, "open"):
        db = silt.open(job["url"], at_most=job["batch"] - 1, store=counted.store,
                       settings=silt.Settings.from_dict(job["settings"]))
    clock.step("open")
    counted.db = db
    opened = db.stats()
    out["shape"] = {"l0_ssts": opened["l0_ssts"], "levels": opened["levels"]}
    try:
        task = Task(db, job["url"], job["batch"])
        clock = Clock(out)
        with counted.step(out, "process"):
            out["rows"] = run(task, cold)
        clock.step("process")
        import threading

        # Read threads the cold batch started (a local store's reads stay in the task's thread).
        out["read_threads"] = sum(t.name.startswith("silt-read") for t in threading.enumerate())
        with counted.step(out, "commit"):
            task.commit()
        clock.step("commit")
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
    prof_mode = None
    if args[:1] == ["--profile"]:
        prof_mode, args = args[1], args[2:]
    print(json.dumps(child(Path(args[0]), prof_mode, os.environ.get("COLD_PROFILE_OUT"))))
