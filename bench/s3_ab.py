"""The harness the S3 A/B scripts share (``bench/first_task.py``, ``bench/handoff_readonly.py``):
this checkout and optionally another run in alternation, each run a fresh interpreter against
moto's S3 server behind the test suite's latency proxy (``tests/faultproxy.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def parse_args(description: str) -> argparse.Namespace:
    """The A/B scripts' options: ``--runs`` (per checkout), ``--latency`` (seconds added to each
    answer) and ``--against`` (another checkout of silt, run in alternation)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--against", help="another checkout of silt, run in alternation")
    return ap.parse_args()


def trees(args: argparse.Namespace) -> dict[str, Path]:
    """``this`` checkout, and ``against`` when given."""
    return {"this": HERE, **({"against": Path(args.against).resolve()} if args.against else {})}


def order(runs: int, names: list[str]) -> list[str]:
    """The runs' order: ``names`` in turn, reversed every other round (old, new, new, old...)."""
    return [name for i in range(runs) for name in (names if i % 2 == 0 else names[::-1])]


def pythonpath(tree: Path, packages: tuple[str, ...]) -> str:
    """``PYTHONPATH`` for the source trees of ``packages`` (``core``, ``spark``...) in ``tree``."""
    return os.pathsep.join(str(tree / "packages" / p / "src") for p in packages)


@contextmanager
def s3_behind_proxy(bucket: str, latency: float) -> Iterator[str]:
    """A moto S3 server with ``bucket`` made, behind a proxy adding ``latency`` seconds to each
    answer; yields the proxy's endpoint URL and stops the server on exit. Sets dummy AWS
    credentials in this process's environment (the children inherit them)."""
    sys.path.insert(0, str(HERE / "tests"))
    import boto3
    from faultproxy import FaultProxy
    from servers import start_moto

    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    server = start_moto(timeout=60)
    try:
        boto3.client("s3", endpoint_url=server.url, region_name="us-east-1").create_bucket(
            Bucket=bucket)
        with FaultProxy(server.url) as proxy:
            proxy.latency = latency
            yield proxy.url
    finally:
        server.stop()
