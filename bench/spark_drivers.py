"""Each case of ``bench/spark_bench.py`` in a driver process of its own (not a test).

One driver running every case one after the other gives the later cases a warmer JVM (its JIT,
its loaded classes, a Python worker pool that has run before): the first case pays a first
batch several times longer than the next ones', so the order of the cases biases what they are
compared on (S3 against ``file://``, the cache refill on against off). So by default
``spark_bench.py`` first lists the cases it would run (:class:`Runner` in its listing mode, no
Spark started), then runs each one in a fresh interpreter of itself (``--one-case``: a new
SparkSession, a new JVM, its own moto server when its state is on S3), in the listed order on
even repeats and in the reverse order on odd ones, so that over an even number of
``--repeat`` runs every case has run as often early as late. A child writes its result to a
JSON file; the parent prints the table and writes the results file from them, as the single
driver did. ``--same-driver`` keeps the old way (every case in this process).

The children share the parent's scratch folder (``--work-root``): each input is generated once,
by the first child that needs it (inputs are deterministic: seeded by K), and every case's
state and checkpoint have names of their own there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: One case of one repeat: ``(repeat, K, case name)``.
Case = tuple[int, int, str]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``spark_bench.py``'s options for running cases in their own drivers."""
    ap.add_argument("--same-driver", action="store_true",
                    help="run every case in this process, one after the other (later cases "
                    "then meet a warmer JVM); by default each case runs in a driver of its own")
    ap.add_argument("--one-case", help=argparse.SUPPRESS)
    ap.add_argument("--one-keys", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--one-rep", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--one-out", help=argparse.SUPPRESS)
    ap.add_argument("--work-root", help=argparse.SUPPRESS)


class Runner:
    """Which cases this process runs: all that ``--cases`` selects (``--same-driver``), exactly
    one (a child, ``--one-case``), or none (the parent's listing: :attr:`listed` collects them
    in the order the single driver runs them)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.child = args.one_case is not None
        self.listing = not self.child and not args.same_driver
        self.listed: list[Case] = []

    def wants(self, rep: int, keys: int, name: str) -> bool:
        """Whether this process runs case ``name`` of repeat ``rep`` at ``keys`` keys."""
        wanted = [c.strip() for c in self.args.cases.split(",") if c.strip()]
        if wanted and not any(c in name for c in wanted):
            return False
        if self.listing:
            if (rep, keys, name) not in self.listed:
                self.listed.append((rep, keys, name))
            return False
        if self.child:
            a = self.args
            return (rep, keys, name) == (a.one_rep, a.one_keys, a.one_case)
        return True

    def repeats(self) -> list[tuple[int, int]]:
        """``(repeat, K)`` pairs this process goes through."""
        a = self.args
        if self.child:
            return [(a.one_rep, a.one_keys)]
        return [(r, k) for r in range(a.repeat) for k in a.keys]


def once(make: Callable[[], Any]) -> Callable[[], Any]:
    """``make`` called at most once, on first use (an input only the cases that run need)."""
    made: list[Any] = []

    def get() -> Any:
        if not made:
            made.append(make())
        return made[0]

    return get


def generated(folder: Path, make_it: Callable[[], Any]) -> Callable[[], Any]:
    """The input in ``folder``, generated on first use unless a driver before made it."""
    return once(lambda: folder if folder.exists() else make_it() or folder)


def order(cases: list[Case], repeats: int) -> list[Case]:
    """The order the children run in: each repeat's cases as listed on even repeats, reversed
    on odd ones."""
    out: list[Case] = []
    for rep in range(repeats):
        mine = [c for c in cases if c[0] == rep]
        out.extend(mine if rep % 2 == 0 else mine[::-1])
    return out


def run_in_drivers(cases: list[Case], repeats: int, root: Path,
                   argv: list[str]) -> list[dict[str, Any]]:
    """Run each case of ``cases`` in a fresh interpreter of ``spark_bench.py`` (``argv``: the
    parent's own options), in :func:`order`; returns their results in the listed order (a
    child that failed is reported as an error row, as a failed case is)."""
    results: dict[Case, list[dict[str, Any]]] = {}
    outs = Path(tempfile.mkdtemp(prefix="results-", dir=root))
    script = str(Path(__file__).resolve().with_name("spark_bench.py"))
    for n, (rep, keys, name) in enumerate(order(cases, repeats)):
        out = outs / f"case-{n}.json"
        cmd = [sys.executable, script, *argv, "--one-case", name, "--one-keys", str(keys),
               "--one-rep", str(rep), "--one-out", str(out), "--work-root", str(root)]
        print(f"-- driver {n + 1}/{len(cases)}: {name}, K={keys:,d}, repeat {rep}", flush=True)
        done = subprocess.run(cmd, check=False)
        if done.returncode == 0 and out.exists():
            results[(rep, keys, name)] = json.loads(out.read_text())
        else:
            results[(rep, keys, name)] = [{
                "case": name, "keys": keys, "rows": 0, "rows_per_s": 0.0, "recovery_s": 0.0,
                "error": f"its driver exited with {done.returncode}"}]
    return [r for case in cases for r in results.get(case, [])]
