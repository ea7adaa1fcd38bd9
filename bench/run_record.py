"""What a benchmark run records beside its figures: the machine's load and summaries of runs.

The benchmarks that ``nox -s bench`` and ``nox -s spark_bench`` run write their results as JSON
into ``bench/results/``; ``bench/charts.py`` draws them. Each file carries the machine's load
when the run started and when it ended (a shared machine's load moves every figure), and every
figure as the median, min and max of its runs (:func:`summarize`), next to the peers' figures
measured in the same run.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

#: Where the benchmarks write their results (gitignored) and charts.py reads them by default.
RESULTS = Path(__file__).resolve().parent / "results"


def machine_load() -> dict[str, Any]:
    """The load averages over 1, 5 and 15 minutes now, the CPU count and the wall time (Unix
    seconds); load figures are ``None`` where the platform has no load average."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        one = five = fifteen = None
    return {"unix": time.time(), "load_1m": one, "load_5m": five, "load_15m": fifteen,
            "cpus": os.cpu_count()}


def summarize(values: list[float]) -> dict[str, float]:
    """``median``, ``min``, ``max`` and ``n`` of one figure's runs (at least one value)."""
    if not values:
        raise ValueError("summarize needs at least one run's value")
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def print_summaries(results: dict[str, list[dict[str, float]]], figures: tuple[str, ...],
                    digits: int = 2) -> None:
    """One line per label of ``results`` (label -> its runs' figures): each of ``figures`` as
    ``median [min-max]`` over the runs with ``digits`` decimals (the A/B scripts' closing
    lines)."""
    for label, rows in results.items():
        cells = []
        for k in figures:
            xs = [row[k] for row in rows]
            med = statistics.median(xs)
            cells.append(f"{k} {med:.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]")
        print(f"{label}: " + ", ".join(cells))


def write_results(path: Path | str, result: dict[str, Any]) -> Path:
    """Write ``result`` as JSON to ``path`` (its folder made if missing) and return the path.
    Numbers that JSON has no name for (numpy scalars) are written as floats."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=float))
    return out
