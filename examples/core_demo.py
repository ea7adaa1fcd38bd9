"""silt core demo: keyed state in an LSM on a (local) object store, committed as versions.

Run: python3 -m pip install nox && nox -s core_demo   (or: python examples/core_demo.py [ROOT_URL])

Without ROOT_URL it writes to a temporary folder and removes it at the end; pass ``--keep`` to
keep it (``nox -s core_demo -- --keep``), or give your own root, which is always kept.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import silt


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--keep"]
    keep = "--keep" in sys.argv[1:]
    if args:
        demo(args[0])
        return
    folder = Path(tempfile.mkdtemp(prefix="silt-"))
    try:
        demo(folder.as_uri())
    finally:
        if keep:
            print(f"\nthe root stays at {folder.as_uri()} (silt ls / inspect / verify it)")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            print(f"\nremoved {folder} (--keep keeps it)")


def demo(root: str) -> None:
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
