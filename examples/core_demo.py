"""silt core demo: keyed state in an LSM on a (local) object store, committed as versions.

Run: python3 -m pip install nox && nox -s demo      (or: python examples/core_demo.py [ROOT_URL])
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import silt


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="silt-")).as_uri()
    print(f"state root: {root}\n")
    settings = silt.Settings(memtable_bytes=4 * 1024 * 1024)
    rng = random.Random(7)

    # A stream of (user, amount) events folded into per-user totals, one "micro-batch" per commit.
    with silt.open(root, settings=settings) as db:
        for batch in range(1, 4):
            t0 = time.perf_counter()
            users = [f"user:{rng.randrange(50_000):06d}".encode() for _ in range(100_000)]
            for user, total in zip(users, db.multi_get(users)):
                db.put(user, str(int(total or b"0") + 1).encode())
            db.put(b"session:abc", b"expires soon", ttl=2)
            version = db.commit(meta={"batch": str(batch)})
            took = time.perf_counter() - t0
            print(f"batch {batch}: 100,000 events folded, committed version {version} "
                  f"in {took:.2f}s")

    print("\nrecovery is opening a manifest, whatever the state size:")
    t0 = time.perf_counter()
    db = silt.open(root)
    print(f"  opened version {db.version} in {1000 * (time.perf_counter() - t0):.1f} ms; "
          f"user:000042 -> {db.get(b'user:000042')!r}")
    first = _take(db.scan(prefix=b"user:"), 3)
    print(f"  first users: {first}")
    db.close()

    print("\ntime travel: version 1 is still there")
    with silt.open(root, version=1) as old:
        print(f"  user:000042 at version 1 -> {old.get(b'user:000042')!r}")

    print("\nthe CLI sees the same thing:")
    for args in (["ls", root], ["inspect", root], ["verify", root]):
        print(f"$ silt {' '.join(args)}")
        subprocess.run([sys.executable, "-m", "silt", *args], check=True)


def _take(it, n):
    out = []
    for item in it:
        out.append(item)
        if len(out) == n:
            break
    return out


if __name__ == "__main__":
    main()
