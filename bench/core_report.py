"""bench/core_bench.py's samples and tables: the recorder of every figure, the rows of the
main and scale sections, each figure's median and min-max per store, silt against the best
peer, and the versions of everything measured."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core_data import COLD_FIRST, KEY_BYTES, VALUE_BYTES
from floors import print_floor_shares
from run_record import summarize

if TYPE_CHECKING:
    from core_stores import Store

class Recorder:
    """Collects samples: results[section][metric][store] -> list of floats."""

    def __init__(self) -> None:
        self.samples: dict[str, dict[str, dict[str, list[float]]]] = {}
        self.checks: list[str] = []

    def add(self, section: str, metric: str, store: str, value: float) -> None:
        self.samples.setdefault(section, {}).setdefault(metric, {}).setdefault(store, []).append(
            value)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.checks.append(what)
            print(f"  !! check failed: {what}", file=sys.stderr)


#: The checkout (its git revision goes into the results).
REPO = Path(__file__).resolve().parent.parent


MAIN_ROWS = [
    # metric, label, kind ('rate' higher is better, 'time' lower is better, 'floor' a rate
    # measured in each store's run that no store is compared on)
    ("puts", "puts/s (one call per key)", "rate"),
    ("batched_puts", "batched puts/s (batches of 1000)", "rate"),
    ("put_many", "put_many keys/s (2 sequences of 1000)", "rate"),
    ("durable_s", "make durable after load (s)", "time"),
    ("load_durable", "batched puts + durable, keys/s", "rate"),
    ("settle_s", "compact fully before the reads (s, --settle)", "time"),
    ("warm_gets", "warm gets/s", "rate"),
    ("cold_gets", "cold gets/s (fresh process)", "rate"),
    ("cold_first_gets", f"  first {COLD_FIRST // 1000}k cold gets/s", "rate"),
    ("missing_gets", "missing-key gets/s", "rate"),
    ("outside_gets", "gets/s of keys outside every SST's range", "rate"),
    ("floor_call", "  floor: an empty compiled call (id)/s", "floor"),
    ("floor_dict_hit", "  floor: a dict hit/s", "floor"),
    ("multi_get", "multi_get keys/s (batches of 1000)", "rate"),
    ("scan", "full scan rows/s", "rate"),
    ("open_fresh_s", "open, fresh process (s)", "time"),
    ("cold_peak_rss_mib", "peak RSS of the cold-get process (MiB)", "time"),
    ("cold_rss_anon_mib", "  of which anonymous at the end (MiB)", "time"),
    ("cold_rss_anon_open_mib", "    added by the open (imports, handles; MiB)", "time"),
    ("cold_rss_anon_added_mib", "    added by the gets (the store's caches, MiB)", "time"),
    ("cold_rss_file_mib", "  of which mapped files at the end (MiB)", "time"),
]


SCALE_ROWS = [
    ("commit_s", "commit of the delta (ms)", "time"),
    ("open_fresh_s", "open, fresh process (ms)", "time"),
    ("open_inproc_s", "open, in-process (ms)", "time"),
    ("first_get_fresh_s", "first get after open (ms)", "time"),
    ("delta_write_s", "write the delta, untimed in commit (ms)", "time"),
    ("load_rate", "load rate keys/s (batches + periodic commits)", "rate"),
]


def fmt_num(x: float, kind: str, scale: float = 1.0) -> str:
    if kind == "time":
        x *= scale
        if x >= 100:
            return f"{x:.0f}"
        if x >= 10:
            return f"{x:.1f}"
        return f"{x:.2f}" if x >= 0.1 else f"{x:.3f}"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.0f}k" if x >= 1e5 else f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_cell(values: list[float] | None, kind: str, scale: float = 1.0) -> str:
    if not values:
        return "n/a"
    s = summarize(values)
    cell = fmt_num(s["median"], kind, scale)
    if s["n"] > 1:
        cell += f" [{fmt_num(s['min'], kind, scale)}-{fmt_num(s['max'], kind, scale)}]"
    return cell


def silt_vs_best(metric_samples: dict[str, list[float]], kind: str) -> tuple[str, float | None]:
    """Ratio of silt to the best peer, as 'how many times better' (>1: silt wins)."""
    if "silt" not in metric_samples or kind == "floor":
        return "n/a", None
    silt_m = statistics.median(metric_samples["silt"])
    peers = {k: statistics.median(v) for k, v in metric_samples.items() if k != "silt" and v}
    if not peers:
        return "n/a", None
    if kind == "rate":
        best = max(peers, key=lambda k: peers[k])
        ratio = silt_m / peers[best] if peers[best] else float("inf")
    else:
        best = min(peers, key=lambda k: peers[k])
        ratio = peers[best] / silt_m if silt_m else float("inf")
    return best, ratio


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    print(title)
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def report(args: argparse.Namespace, stores: list[Store], rec: Recorder) -> dict[str, Any]:
    labels = {s.name: s.label for s in stores}
    names = [s.name for s in stores]
    summary: dict[str, Any] = {}
    main = rec.samples.get("main", {})
    if main:
        header = ["figure", *[labels[n] for n in names], "silt vs best peer"]
        rows = []
        summary["main"] = {}
        for metric, label, kind in MAIN_ROWS:
            ms = main.get(metric, {})
            best, ratio = silt_vs_best(ms, kind)
            ratio_s = "n/a" if ratio is None else f"{ratio:.2f}x ({labels.get(best, best)})"
            rows.append([label, *[fmt_cell(ms.get(n), kind) for n in names], ratio_s])
            summary["main"][metric] = {
                "kind": kind, "label": label,
                "stores": {n: summarize(v) for n, v in ms.items()},
                "best_peer": best if ratio is not None else None,
                "silt_vs_best_peer": ratio,
                "silt_vs_peer": {
                    n: (statistics.median(ms["silt"]) / statistics.median(v) if kind == "rate"
                        else statistics.median(v) / statistics.median(ms["silt"]))
                    for n, v in ms.items() if n != "silt" and "silt" in ms and kind != "floor"
                },
            }
        print_table(
            f"Core benchmark: {args.keys:,} keys, {KEY_BYTES} B keys, {VALUE_BYTES} B values; "
            f"median [min-max] of {args.repeat}; silt vs best peer: >1 means silt is faster"
            + ("; settled: every store compacted fully before the reads" if args.settle else ""),
            header, rows)
        summary["floor_shares"] = print_floor_shares(main, labels)
    scale_sections = [f"scale_{s}" for s in args.scale if f"scale_{s}" in rec.samples]
    if scale_sections:
        summary["scale"] = {}
        header = ["figure", "total keys", *[labels[n] for n in names], "silt vs best peer"]
        rows = []
        for metric, label, kind in SCALE_ROWS:
            for sec in scale_sections:
                ms = rec.samples[sec].get(metric, {})
                best, ratio = silt_vs_best(ms, kind)
                ratio_s = "n/a" if ratio is None else f"{ratio:.2f}x ({labels.get(best, best)})"
                scale = 1000.0 if kind == "time" else 1.0
                rows.append([label, f"{int(sec.split('_')[1]):,}",
                             *[fmt_cell(ms.get(n), kind, scale) for n in names], ratio_s])
                summary["scale"].setdefault(sec, {})[metric] = {
                    "kind": kind, "stores": {n: summarize(v) for n, v in ms.items()},
                    "best_peer": best if ratio is not None else None,
                    "silt_vs_best_peer": ratio,
                }
        # growth ratios largest/smallest
        lo, hi = scale_sections[0], scale_sections[-1]
        growth: dict[str, dict[str, float]] = {}
        for metric in ("commit_s", "open_fresh_s", "open_inproc_s", "first_get_fresh_s"):
            growth[metric] = {}
            cells = []
            for n in names:
                a = rec.samples[lo].get(metric, {}).get(n)
                b = rec.samples[hi].get(metric, {}).get(n)
                if a and b:
                    g = statistics.median(b) / statistics.median(a)
                    growth[metric][n] = g
                    cells.append(f"{g:.2f}x")
                else:
                    cells.append("n/a")
            label = dict((m, lab) for m, lab, _ in SCALE_ROWS)[metric]
            rows.append([f"growth of {label.split(' (')[0]}",
                         f"{int(hi.split('_')[1]) // 1000:,}k/{int(lo.split('_')[1]) // 1000:,}k",
                         *cells, ""])
        summary["scale_growth"] = {"from": lo, "to": hi, "ratios": growth}
        silt_rows = []
        for sec in scale_sections:
            d = rec.samples[sec]
            if "silt_l0_ssts" in d:
                silt_rows.append(
                    f"{int(sec.split('_')[1]):,} keys: {int(d['silt_l0_ssts']['silt'][0])} L0 SSTs, "
                    f"{int(d['silt_levels']['silt'][0])} level SSTs, manifest "
                    f"{int(d['silt_manifest_bytes']['silt'][0]):,} B")
        print_table(
            f"Checkpoint/recovery: same delta of {args.delta:,} puts at each total size; "
            f"median [min-max] of {args.scale_repeat}; growth = median at largest / smallest "
            "size (1.00x = flat)",
            header, rows)
        if silt_rows:
            print("silt shape after the deltas: " + "; ".join(silt_rows))
    if rec.checks:
        print("\nFAILED CHECKS:\n  " + "\n  ".join(rec.checks))
    return summary


def versions_info() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                            "cpus": os.cpu_count()}
    from importlib import metadata
    for mod, dist in (("silt", "silt-core"), ("plyvel", "plyvel"), ("rocksdict", "rocksdict")):
        try:
            m = __import__(mod)
        except ImportError:
            info[mod] = None
            continue
        version = getattr(m, "__version__", None)
        if version is None:
            try:
                version = metadata.version(dist)
            except metadata.PackageNotFoundError:
                version = "?"
        info[mod] = version
    try:
        import silt
        sp = getattr(silt, "speedups", None)
        info["silt_speedups"] = sp() if callable(sp) else None
    except Exception as exc:  # informational only
        info["silt_speedups"] = repr(exc)
    try:
        info["git"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()
        info["git_dirty_core"] = bool(subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "packages/core"],
            capture_output=True, text=True).stdout.strip())
    except OSError:
        info["git"] = None
    info["SILT_NO_EXTENSIONS"] = os.environ.get("SILT_NO_EXTENSIONS")
    return info
