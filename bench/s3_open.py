"""What a process pays to open S3 stores: the tier's import, its first store, and a second store
of the same configuration (as a Spark shard task opens its root's origin, then its shard).

``python bench/s3_open.py [--runs N] [--against CHECKOUT]``: each run is a fresh interpreter
that imports ``silt_s3`` and builds two ``S3Store`` objects of the same options on different
prefixes (no request is sent: building a store makes no request), printing the CPU ms of each
step; with ``--against``, that checkout's packages run in alternation with this one's. Since one
client serves every store of one configuration (``silt_s3.sdk.shared_client``), the second
store costs next to nothing; before, it built a second client.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, time
t0 = time.process_time()
from silt_s3 import S3Options, S3Store
t1 = time.process_time()
opts = S3Options(endpoint_url="http://127.0.0.1:9", region="us-east-1",
                 access_key_id="bench", secret_access_key="bench")
S3Store("bucket", "root/origin", options=opts)
t2 = time.process_time()
S3Store("bucket", "root/kg-00000-00063", options=opts)
t3 = time.process_time()
print(json.dumps({"import": t1 - t0, "first store": t2 - t1, "second store": t3 - t2}))
"""


def child(tree: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        str(tree / "packages" / p / "src") for p in ("core", "tier-s3")))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--against", help="another checkout of silt, run in alternation")
    args = ap.parse_args()
    sides = {"this": Path(__file__).resolve().parents[1]}
    if args.against:
        sides = {"against": Path(args.against).resolve(), **sides}
    got: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for r in range(args.runs):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            got[name].append(child(sides[name]))
    for name, runs in got.items():
        print(f"{name}: median [min-max] CPU ms of {len(runs)} runs: " + ", ".join(
            f"{k} {1000 * statistics.median(g[k] for g in runs):.1f} "
            f"[{1000 * min(g[k] for g in runs):.1f}-{1000 * max(g[k] for g in runs):.1f}]"
            for k in runs[0]) + f"; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
