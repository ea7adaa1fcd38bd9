"""Charts of the benchmarks' results: PNGs drawn from the JSON files the benchmarks write.

    python bench/charts.py                                   # bench/results/*.json -> *.png
    python bench/charts.py --results bench/figures --out bench/figures

``nox -s bench`` and ``nox -s spark_bench`` run this after their benchmarks; run alone, it
draws again from the results already there. From ``core_bench*.json`` (``bench/core_bench.py``):

* ``core_throughput.png``: batched puts/s, warm gets/s and cold gets/s (fresh process) against
  the keys in the store, silt and each peer (LevelDB via plyvel, RocksDB via rocksdict); one
  point per results file (run ``core_bench.py --keys N --json bench/results/core_bench-N.json``
  at several N for a line), the newest file winning at the same N;
* ``core_recovery.png``: commit of the same delta and open in a fresh process against the total
  state size (the checkpoint/recovery section, ``--scale``).

From ``spark_bench*.json`` (``bench/spark_bench.py``):

* ``spark_restart.png``: rows/s and the cold restart (a new SparkSession until the query's first
  batch is done) against the state's keys K: silt, Spark's RocksDB store and the stateless floor;
* ``spark_s3_requests.png``: silt's object-store requests per micro-batch and shard against K,
  state on S3 (``--s3-latency-ms``), drawn only where the results have those cases.

Points are medians, bars span min to max over the runs; each chart's foot names the runs it was
drawn from (date, the machine's load at their start and end). Every file is checked before
anything is drawn: a malformed one raises :class:`ResultsError` naming the file, the field and
what was expected, and no PNG is written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
#: Every chart's size: WIDTH_PX x HEIGHT_PX pixels (inches x DPI).
DPI = 100
WIDTH_PX, HEIGHT_PX = 1000, 400

#: core_bench stores, in drawing order: name -> (label, colour); silt stands out.
CORE_STORES = {
    "silt": ("silt", "#d62728"),
    "plyvel_bloom10": ("LevelDB, bloom 10 (plyvel)", "#1f77b4"),
    "plyvel": ("LevelDB default (plyvel)", "#9ecae1"),
    "rocksdict": ("RocksDB (rocksdict)", "#2ca02c"),
}
#: core_bench main-section metrics drawn against the store's size: metric -> panel title.
CORE_THROUGHPUT = {
    "batched_puts": "batched puts/s",
    "warm_gets": "warm gets/s",
    "cold_gets": "cold gets/s (fresh process)",
}
#: core_bench scale-section metrics (seconds, drawn in ms): metric -> panel title.
CORE_RECOVERY = {
    "commit_s": "commit of the same 10k-key delta (ms)",
    "open_fresh_s": "open in a fresh process (ms)",
}
#: spark_bench cases drawn in spark_restart.png: case -> (label, colour).
SPARK_CASES = {
    "silt aggregate": ("silt aggregate", "#d62728"),
    "silt StatefulProcessor (arrow)": ("silt StatefulProcessor (arrow)", "#ff9896"),
    "native groupBy (RocksDB)": ("Spark groupBy, RocksDB store", "#2ca02c"),
    "stateless floor (Arrow)": ("stateless floor (no state)", "#7f7f7f"),
}
#: The prefix of the spark_bench cases whose state is on S3 (behind added latency).
S3_CASE_PREFIX = "silt aggregate (s3"
#: Compared against the S3 cases: the same aggregation on file:// in the same run.
S3_LOCAL_CASE = "silt aggregate (file://)"
STAT_FIELDS = ("median", "min", "max")


class ResultsError(ValueError):
    """A results file that cannot be drawn; the message names the file, the field and what was
    expected there."""


# ---------------------------------------------------------------------------------------------
# Reading and checking
# ---------------------------------------------------------------------------------------------
@dataclass
class Stat:
    """One figure over a run's repeats."""

    median: float
    low: float
    high: float


@dataclass
class Source:
    """One results file: where it is, when it ran, the machine's load, what it holds."""

    path: Path
    started: float | None
    load: tuple[float | None, float | None]
    data: dict[str, Any] = field(repr=False)

    def describe(self) -> str:
        when = (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.started))
                if self.started else "date not recorded")
        a, b = self.load
        note = self.data.get("source")  # a transcribed file says where its figures came from
        if a is not None and b is not None:
            load = f", load {a:.1f} -> {b:.1f}"
        else:
            load = "" if note else ", load not recorded"
        return f"{self.path.name}: {when}{load}" + (f" ({note})" if note else "")


def _fail(path: Path, where: str, expected: str, got: Any) -> ResultsError:
    shown = repr(got)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ResultsError(f"{path}: {where}: expected {expected}, got {shown}; rerun the "
                        "benchmark that wrote it, or remove the file")


def _number(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value):
        raise _fail(path, where, "a finite number", value)
    return float(value)


def _stat(path: Path, where: str, value: Any) -> Stat:
    if not isinstance(value, dict) or any(k not in value for k in STAT_FIELDS):
        raise _fail(path, where, "an object with median, min and max", value)
    med, low, high = (_number(path, f"{where}.{k}", value[k]) for k in STAT_FIELDS)
    if not low <= med <= high:
        raise _fail(path, where, "min <= median <= max", value)
    return Stat(med, low, high)


def _field(path: Path, obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise _fail(path, where, f"a field {key!r}", obj if not isinstance(obj, dict)
                    else sorted(obj))
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _fail(path, f"{where}.{key}", getattr(kind, "__name__", str(kind)), value)
    return value


def _size(path: Path, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _fail(path, where, "a positive whole number of keys", value)
    return value


def _source(path: Path) -> Source:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: not a readable JSON file ({exc}); rerun the benchmark "
                           "that wrote it, or remove the file") from exc
    if not isinstance(data, dict):
        raise _fail(path, "top level", "a JSON object", type(data).__name__)
    started = data.get("started_unix")
    if started is not None:
        started = _number(path, "started_unix", started)
    load: list[float | None] = [None, None]
    if data.get("load") is not None:
        for i, end in enumerate(("start", "end")):
            one = _field(path, data["load"], end, dict, "load").get("load_1m")
            load[i] = None if one is None else _number(path, f"load.{end}.load_1m", one)
    return Source(path, started, (load[0], load[1]), data)


@dataclass
class CoreResults:
    """core_bench figures: ``throughput[metric][store][keys]`` from main sections (newest file
    per size) and ``recovery[metric][store][keys]`` from the newest file with a scale
    section."""

    throughput: dict[str, dict[str, dict[int, Stat]]]
    recovery: dict[str, dict[str, dict[int, Stat]]]
    #: the files each chart was drawn from
    throughput_sources: list[Source]
    recovery_sources: list[Source]


def read_core(paths: Sequence[Path]) -> CoreResults:
    """Check and read core_bench result files (raises :class:`ResultsError`)."""
    throughput: dict[str, dict[str, dict[int, Stat]]] = {m: {} for m in CORE_THROUGHPUT}
    recovery: dict[str, dict[str, dict[int, Stat]]] = {m: {} for m in CORE_RECOVERY}
    sources = sorted((_source(p) for p in paths), key=lambda s: s.started or 0.0)
    main_by_size: dict[int, Source] = {}
    recovery_source: list[Source] = []
    for src in sources:  # oldest first: a newer file replaces an older one's points
        path, data = src.path, src.data
        keys = _size(path, "config.keys", _field(path, data, "config", dict, "top level")
                     .get("keys"))
        summary = _field(path, data, "summary", dict, "top level")
        took_main = False
        main = summary.get("main")
        if main is not None:
            for by_store in throughput.values():  # an older run's points at this size go
                for points in by_store.values():
                    points.pop(keys, None)
            for metric in CORE_THROUGHPUT:
                stores = _field(path, _field(path, main, metric, dict, "summary.main"),
                                "stores", dict, f"summary.main.{metric}")
                for store, value in stores.items():
                    stat = _stat(path, f"summary.main.{metric}.stores.{store}", value)
                    throughput[metric].setdefault(store, {})[keys] = stat
                    took_main = True
        scale = summary.get("scale")
        if scale is not None:
            if not isinstance(scale, dict) or not scale:
                raise _fail(path, "summary.scale", "an object of scale_<keys> sections", scale)
            fresh: dict[str, dict[str, dict[int, Stat]]] = {m: {} for m in CORE_RECOVERY}
            for section, figures in scale.items():
                if not section.startswith("scale_") or not section[6:].isdigit():
                    raise _fail(path, f"summary.scale.{section}", "a name scale_<keys>",
                                section)
                size = _size(path, f"summary.scale.{section}", int(section[6:]))
                for metric in CORE_RECOVERY:
                    stores = _field(path, _field(path, figures, metric, dict,
                                                 f"summary.scale.{section}"),
                                    "stores", dict, f"summary.scale.{section}.{metric}")
                    for store, value in stores.items():
                        stat = _stat(path, f"summary.scale.{section}.{metric}.stores.{store}",
                                     value)
                        fresh[metric].setdefault(store, {})[size] = stat
            recovery = fresh  # one run's sizes together, never mixed with another run's
            recovery_source = [src]
        elif not took_main:
            raise _fail(path, "summary", "a main or a scale section", sorted(summary))
        if took_main:
            main_by_size[keys] = src
    used = [s for s in sources if any(s is m for m in main_by_size.values())]
    return CoreResults(throughput, recovery, used, recovery_source)


@dataclass
class SparkResults:
    """spark_bench figures: ``figures[figure][case][keys]``, newest file per case and K."""

    figures: dict[str, dict[str, dict[int, Stat]]]
    #: the file each point came from: (figure, case, keys) -> source
    origin: dict[tuple[str, str, int], Source]

    def sources(self, panels: dict[str, dict[str, dict[int, Stat]]]) -> list[Source]:
        """The files the points of ``panels`` (figure -> case -> keys) came from, oldest
        first."""
        found: list[Source] = []
        for figure, by_case in panels.items():
            for case, points in by_case.items():
                for keys in points:
                    src = self.origin[(figure, case, keys)]
                    if not any(src is f for f in found):
                        found.append(src)
        return sorted(found, key=lambda s: s.started or 0.0)


SPARK_FIGURES = ("rows_per_s", "recovery_s", "requests_per_batch_and_shard")


def read_spark(paths: Sequence[Path]) -> SparkResults:
    """Check and read spark_bench result files (raises :class:`ResultsError`)."""
    figures: dict[str, dict[str, dict[int, Stat]]] = {f: {} for f in SPARK_FIGURES}
    origin: dict[tuple[str, str, int], Source] = {}
    sources = sorted((_source(p) for p in paths), key=lambda s: s.started or 0.0)
    for src in sources:
        path, data = src.path, src.data
        if data.get("bench") != "spark_bench":
            raise _fail(path, "bench", "'spark_bench'", data.get("bench"))
        rows = _field(path, data, "summary", list, "top level")
        if not rows:
            raise _fail(path, "summary", "at least one case", rows)
        for i, row in enumerate(rows):
            where = f"summary[{i}]"
            case = _field(path, row, "case", str, where)
            keys = _size(path, f"{where}.keys", _field(path, row, "keys", int, where))
            for figure in SPARK_FIGURES:
                if figure in row:
                    stat = _stat(path, f"{where}.{figure}", row[figure])
                    figures[figure].setdefault(case, {})[keys] = stat
                    origin[(figure, case, keys)] = src
    return SparkResults(figures, origin)


# ---------------------------------------------------------------------------------------------
# Drawing
# ---------------------------------------------------------------------------------------------
def _figure(panels: int, title: str) -> tuple[Any, list[Any]]:
    fig, axes = plt.subplots(1, panels, figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI,
                             layout="constrained")
    fig.suptitle(title, fontsize=11)
    return fig, list(axes) if panels > 1 else [axes]


def _line(ax: Any, points: dict[int, Stat], label: str, colour: str,
          scale: float = 1.0) -> None:
    xs = sorted(points)
    med = [points[x].median * scale for x in xs]
    err = [[(points[x].median - points[x].low) * scale for x in xs],
           [(points[x].high - points[x].median) * scale for x in xs]]
    ax.errorbar(xs, med, yerr=err, label=label, color=colour, marker="o", markersize=4,
                capsize=3, linewidth=1.5)


def _axes(ax: Any, title: str, xlabel: str, log_y: bool = False) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", alpha=0.3)
    if log_y:  # values spanning decades: each line's growth reads as its slope
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    else:
        ax.yaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))
        ax.set_ylim(bottom=0)


def _save(fig: Any, out: Path, sources: list[Source]) -> Path:
    legend: dict[str, Any] = {}  # every series once, whichever panels it is drawn in
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    labels = list(legend)
    fig.legend(list(legend.values()), labels, loc="outside lower center", ncol=len(labels), fontsize=8,
               frameon=False)
    fig.text(0.005, 0.005, "runs: " + "; ".join(s.describe() for s in sources), fontsize=6,
             color="#555555", ha="left", va="bottom")
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def _draw_panels(out: Path, title: str, xlabel: str,
                 panels: dict[str, dict[str, dict[int, Stat]]], titles: dict[str, str],
                 styles: dict[str, tuple[str, str]], sources: list[Source],
                 scale: float = 1.0, log_y: frozenset[str] = frozenset()) -> Path:
    fig, axes = _figure(len(panels), title)
    for ax, (metric, by_series) in zip(axes, panels.items()):
        for name, (label, colour) in styles.items():
            if by_series.get(name):
                _line(ax, by_series[name], label, colour, scale)
        _axes(ax, titles[metric], xlabel, metric in log_y)
    return _save(fig, out, sources)


def draw_core(core: CoreResults, out_dir: Path) -> list[Path]:
    """core_throughput.png (when a main section was read) and core_recovery.png (when a scale
    section was); the paths written."""
    written = []
    if any(core.throughput.values()):
        written.append(_draw_panels(
            out_dir / "core_throughput.png",
            "Core: throughput against state size (16 B keys, 100 B values; higher is better)",
            "keys in the store", core.throughput, CORE_THROUGHPUT, CORE_STORES,
            core.throughput_sources))
    if any(core.recovery.values()):
        written.append(_draw_panels(
            out_dir / "core_recovery.png",
            "Core: checkpoint and recovery against state size (lower is better)",
            "keys in the store", core.recovery, CORE_RECOVERY, CORE_STORES,
            core.recovery_sources, scale=1000.0))
    return written


def draw_spark(spark: SparkResults, out_dir: Path) -> list[Path]:
    """spark_restart.png (when the results have any of :data:`SPARK_CASES`) and
    spark_s3_requests.png (when they have silt's requests with state on S3)."""
    written = []
    panels = {f: {c: spark.figures[f][c] for c in SPARK_CASES if c in spark.figures[f]}
              for f in ("rows_per_s", "recovery_s")}
    if any(panels.values()):
        written.append(_draw_panels(
            out_dir / "spark_restart.png",
            "Spark: throughput and cold restart against state size (local[2], 4 shards)",
            "keys in the state (K)", panels,
            {"rows_per_s": "input rows/s (higher is better)",
             "recovery_s": "cold restart to first batch done, s (log scale; lower is better)"},
            SPARK_CASES, spark.sources(panels), log_y=frozenset({"recovery_s"})))
    requests = spark.figures["requests_per_batch_and_shard"]
    remote = sorted(c for c in requests if c.startswith(S3_CASE_PREFIX))
    if remote:
        palette = ["#d62728", "#ff7f0e", "#9467bd", "#8c564b"]
        styles = {c: (c.removeprefix("silt aggregate ").strip("()"), palette[i % 4])
                  for i, c in enumerate(remote)}
        if S3_LOCAL_CASE in requests:
            styles[S3_LOCAL_CASE] = ("file:// (ranged reads counted as GETs)", "#7f7f7f")
        drawn = {c: requests[c] for c in styles}
        written.append(_draw_panels(
            out_dir / "spark_s3_requests.png",
            "Spark, silt aggregate with its state on S3: requests per micro-batch and shard",
            "keys in the state (K)", {"requests": drawn},
            {"requests": "object-store requests per batch and shard"}, styles,
            spark.sources({"requests_per_batch_and_shard": drawn})))
    return written


def render(results: Path, out: Path) -> list[Path]:
    """Check every ``core_bench*.json`` and ``spark_bench*.json`` under ``results``, then draw
    their charts into ``out``; returns the PNGs written. Raises :class:`ResultsError` before
    writing anything when a file is malformed or there is nothing to draw."""
    core_files = sorted(results.glob("core_bench*.json"))
    spark_files = sorted(results.glob("spark_bench*.json"))
    if not core_files and not spark_files:
        raise ResultsError(f"{results}: no core_bench*.json or spark_bench*.json to draw; run "
                           "nox -s bench (or nox -s spark_bench) first")
    # every file is read and checked before the first chart is drawn
    core = read_core(core_files) if core_files else None
    spark = read_spark(spark_files) if spark_files else None
    out.mkdir(parents=True, exist_ok=True)
    return ((draw_core(core, out) if core is not None else [])
            + (draw_spark(spark, out) if spark is not None else []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=HERE / "results",
                   help="folder of core_bench*.json and spark_bench*.json")
    p.add_argument("--out", type=Path, default=None,
                   help="where to write the PNGs (default: beside the results)")
    args = p.parse_args(argv)
    try:
        written = render(args.results, args.out or args.results)
    except ResultsError as exc:
        print(f"charts: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"chart written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
