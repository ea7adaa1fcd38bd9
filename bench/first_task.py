"""A fresh Spark worker's first shard task on S3, without Spark: what it pays before and after its
first request (the S3 SDK's start-up, the root's origin check, the shard's open, its reads and
commit).

``python bench/first_task.py [--runs N] [--latency S] [--against CHECKOUT]``: starts moto's S3
server behind the test suite's proxy (``tests/faultproxy.py``, ``--latency`` seconds added to
every answer, default 0.02); each run is two fresh interpreters on a new operator root, as a new
Python worker: the first runs batch 0 of shard 0 (writes the root's origin and version 0), the
second batch 1, measured: ``ShardTask`` (the origin check starts), ``task.db`` (the open),
a ``multi_get`` and ``put_many`` of 2,858 keys, ``finish`` (the commit). Printed per step: wall
ms and the process's CPU ms, median [min-max]. With ``--against``, that checkout's packages run
in alternation with this one's (old, new, new, old, ...).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import s3_ab

CHILD = r"""
import json, os, time
t0, c0 = time.perf_counter(), time.process_time()
from silt import plugins
from silt_spark.runtime._root import OperatorSpec
from silt_spark.runtime._shard import ShardTask
plugins.DEFAULT_PLUGINS = (*plugins.DEFAULT_PLUGINS, ("s3", "silt_s3.plugin"))
spec = OperatorSpec(kind="aggregate", root=os.environ["ROOT"], num_shards=1,
                    records_origin=True, storage_options={"endpoint_url": os.environ["EP"]})
t1, c1 = time.perf_counter(), time.process_time()
task = ShardTask(spec, 0, int(os.environ["BATCH"]), "q", 0)
t2 = time.perf_counter()
db = task.db
t3 = time.perf_counter()
keys = [b"k%06d" % i for i in range(0, 20000, 7)]
db.multi_get(keys)
db.put_many(keys, [b"v"] * len(keys))
task.changed = True
t4 = time.perf_counter()
task.finish()
task.release(True)
t5, c5 = time.perf_counter(), time.process_time()
print(json.dumps({"imports": (t1 - t0) * 1000, "task": (t5 - t1) * 1000,
                  "task CPU": (c5 - c1) * 1000, "init": (t2 - t1) * 1000,
                  "open": (t3 - t2) * 1000, "reads and writes": (t4 - t3) * 1000,
                  "commit": (t5 - t4) * 1000}))
"""


def main() -> None:
    args = s3_ab.parse_args(__doc__.split("\n\n")[0])
    trees = s3_ab.trees(args)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with s3_ab.s3_behind_proxy("silt-first-task", args.latency) as endpoint:
        for i, name in enumerate(s3_ab.order(args.runs, list(trees))):
            env = dict(os.environ, EP=endpoint, ROOT=f"s3://silt-first-task/run-{i}",
                       PYTHONPATH=s3_ab.pythonpath(trees[name], ("core", "spark", "tier-s3")),
                       SILT_DISABLE_PLUGIN_AUTOLOAD="1")
            for batch in (0, 1):
                out = subprocess.run([sys.executable, "-c", CHILD], check=True, text=True,
                                     capture_output=True, env=dict(env, BATCH=str(batch)))
            results[name].append(json.loads(out.stdout))
    with open("/proc/loadavg") as f:
        print(f"load {f.read().split()[:3]}; {args.runs} runs each, latency {args.latency} s")
    for name, runs in results.items():
        print(f"{name} ({trees[name]}):")
        for step in runs[0]:
            values = [r[step] for r in runs]
            print(f"  {step:18s} {statistics.median(values):7.0f} "
                  f"[{min(values):.0f}-{max(values):.0f}] ms")


if __name__ == "__main__":
    main()
