"""Two opens on S3 that prepared for what they never do: a handle taken over from another
process (its first upload announced the writer grace again) and a reader (its open listed the
GC markers for a commit it never makes).

``python bench/handoff_readonly.py [--runs N] [--latency S] [--against CHECKOUT]``: starts
moto's S3 server behind the test suite's proxy (``tests/faultproxy.py``, ``--latency`` seconds
added to every answer, default 0.02); each run is a fresh interpreter on a new root that
commits versions 1 and 2 (an uploaded SST each) and leaves the handle's record
(``DB.handoff``), then measures, each on a store of its own wrapped in
:class:`silt.testing.LatencyStore` (no delay added: it counts the round trips the proxy's
latency makes):

* ``taken commit``: ``silt.resume`` of the record, ``put_many`` of 2,858 keys and the commit
  (uploads an SST): round trips, requests, wall ms;
* ``reader open``: ``silt.open(url, at_most=2)`` as a state source opens a shard, with
  ``read_only=True`` where the checkout has it: round trips, requests, wall ms.

With ``--against``, that checkout's packages run in alternation with this one's (old, new, new,
old, ...). Printed: median [min-max] per figure, and the machine's load.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import s3_ab

CHILD = r"""
import inspect, json, os, time
import silt
from silt import plugins
from silt.testing import LatencyStore
plugins.DEFAULT_PLUGINS = (*plugins.DEFAULT_PLUGINS, ("s3", "silt_s3.plugin"))
url = os.environ["ROOT"] + "?endpoint_url=" + os.environ["EP"]
settings = silt.Settings(inline_delta_bytes=0, compaction="none")
writer = silt.open(url, settings=settings)
for v in (1, 2):
    writer.put(b"w%d" % v, b"x" * 100)
    writer.commit()
record = writer.handoff("q/1")
out = {}
store = LatencyStore(silt.open_store(url), 0.0)
keys = [b"k%06d" % i for i in range(0, 20000, 7)]
t0 = time.perf_counter()
taken = silt.resume(url, record, 2, scope="q/1", store=store, settings=settings)
taken.put_many(keys, [b"v"] * len(keys))
with store.operation() as op:
    taken.commit()
out["taken commit"] = (op.round_trips, op.total, (time.perf_counter() - t0) * 1000)
extra = {"read_only": True} if "read_only" in inspect.signature(silt.open).parameters else {}
store = LatencyStore(silt.open_store(url), 0.0)
t0 = time.perf_counter()
with store.operation() as op:
    reader = silt.open(url, at_most=2, store=store, settings=settings, **extra)
out["reader open"] = (op.round_trips, op.total, (time.perf_counter() - t0) * 1000)
assert reader.get(b"w1") == b"x" * 100
for db in (reader, taken, writer):
    db.close()
print(json.dumps(out))
"""


def main() -> None:
    args = s3_ab.parse_args(__doc__.split("\n\n")[0])
    trees = s3_ab.trees(args)
    results: dict[str, list[dict[str, list[float]]]] = {name: [] for name in trees}
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    with s3_ab.s3_behind_proxy("silt-handoff-readonly", args.latency) as endpoint:
        for i, name in enumerate(s3_ab.order(args.runs, list(trees))):
            env = dict(os.environ, EP=endpoint, ROOT=f"s3://silt-handoff-readonly/run-{i}",
                       PYTHONPATH=s3_ab.pythonpath(trees[name], ("core", "tier-s3")),
                       SILT_DISABLE_PLUGIN_AUTOLOAD="1")
            out = subprocess.run([sys.executable, "-c", CHILD], check=True, text=True,
                                 capture_output=True, env=env)
            results[name].append(json.loads(out.stdout))
    with open("/proc/loadavg") as f:
        print(f"load {load_before} -> {f.read().split()[:3]}; {args.runs} runs each, "
              f"latency {args.latency} s")
    for name, runs in results.items():
        print(f"{name} ({trees[name]}):")
        for step in runs[0]:
            for j, unit in enumerate(("round trips", "requests", "ms")):
                values = [r[step][j] for r in runs]
                print(f"  {step:13s} {unit:11s} {statistics.median(values):7.0f} "
                      f"[{min(values):.0f}-{max(values):.0f}]")


if __name__ == "__main__":
    main()
