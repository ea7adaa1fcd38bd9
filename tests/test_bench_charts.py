"""bench/charts.py draws the benchmarks' JSON results as PNGs, and refuses malformed results
with an error naming the file and the field, before any PNG is written.

Also the Spark benchmark's results summary (bench/spark_results.py): median, min and max per
case and state size over the runs that did not fail.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _module(name: str) -> Any:
    """Import a bench/ script by path (bench/ is not a package; its scripts import each
    other as siblings, so it is on sys.path while they load)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


charts = _module("charts")
spark_results = _module("spark_results")


def _stat(median: float, spread: float = 0.1) -> dict[str, float]:
    return {"median": median, "min": median * (1 - spread), "max": median * (1 + spread),
            "n": 3}


def _load(one: float) -> dict[str, Any]:
    return {"unix": 1.8e9, "load_1m": one, "load_5m": one, "load_15m": one, "cpus": 2}


def core_result(keys: int, started: float = 1.8e9) -> dict[str, Any]:
    """A core_bench.json as bench/core_bench.py writes it (the fields charts.py reads)."""
    stores = {"silt": 1.0, "plyvel_bloom10": 0.5, "rocksdict": 0.4}
    main = {metric: {"kind": "rate", "stores": {s: _stat(f * 1e5) for s, f in stores.items()}}
            for metric in ("batched_puts", "warm_gets", "cold_gets", "scan")}
    scale = {f"scale_{size}": {metric: {"kind": "time", "stores": {
        s: _stat(0.01 * f * (1 + i)) for s, f in stores.items()}}
        for metric in ("commit_s", "open_fresh_s", "first_get_fresh_s")}
        for i, size in enumerate((10_000, 100_000, 1_000_000))}
    return {"config": {"keys": keys, "repeat": 3}, "started_unix": started,
            "load": {"start": _load(1.5), "end": _load(2.5)},
            "summary": {"main": main, "scale": scale}}


def spark_result() -> dict[str, Any]:
    """A spark_bench.json's summary as bench/spark_results.py writes it."""
    rows = []
    for k in (100_000, 2_000_000, 20_000_000):
        for case, rps, rec in (("silt aggregate", 2e5, 3.0),
                               ("native groupBy (RocksDB)", 1.5e5, k / 3e5),
                               ("stateless floor (Arrow)", 4.5e5, 1.5)):
            rows.append({"case": case, "keys": k, "rows_per_batch": 200_000, "runs": 3,
                         "failed_runs": 0, "rows_per_s": _stat(rps),
                         "recovery_s": _stat(rec), "commit_ms": _stat(40)})
        rows.append({"case": "silt aggregate (s3 +20 ms)", "keys": k, "rows_per_batch": 5000,
                     "runs": 3, "failed_runs": 0,
                     "requests_per_batch_and_shard": _stat(12 + k / 1e6)})
    return {"bench": "spark_bench", "started_unix": 1.8e9,
            "load": {"start": _load(1.0), "end": _load(3.0)}, "summary": rows, "runs": []}


def write(folder: Path, name: str, content: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's signature and IHDR chunk; fails on anything else."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_renders_each_chart_as_a_png_of_the_stated_size(tmp_path):
    results, out = tmp_path / "results", tmp_path / "out"
    write(results, "core_bench-100k.json", core_result(100_000, started=1.8e9))
    write(results, "core_bench-1m.json", core_result(1_000_000, started=1.8e9 + 60))
    write(results, "spark_bench.json", spark_result())

    written = charts.render(results, out)

    names = sorted(p.name for p in written)
    assert names == ["core_recovery.png", "core_throughput.png", "spark_restart.png",
                     "spark_s3_requests.png"]
    assert sorted(p.name for p in out.iterdir()) == names
    for path in written:
        assert png_size(path) == (charts.WIDTH_PX, charts.HEIGHT_PX), path.name
        assert path.stat().st_size < 100_000, f"{path.name} is {path.stat().st_size} bytes"


def test_reads_every_size_and_store_and_the_newest_run_wins(tmp_path):
    results = tmp_path / "results"
    old = core_result(100_000, started=1.8e9)
    new = core_result(100_000, started=1.8e9 + 60)
    new["summary"]["main"]["warm_gets"]["stores"] = {"silt": _stat(7e5)}  # silt alone
    write(results, "core_bench-old.json", old)
    write(results, "core_bench-new.json", new)
    write(results, "core_bench-1m.json", core_result(1_000_000, started=1.8e9 + 30))

    core = charts.read_core(sorted(results.glob("core_bench*.json")))

    warm = core.throughput["warm_gets"]
    assert warm["silt"][100_000].median == 7e5
    # the older run's peers at the same size are gone, not mixed with the newer run
    assert 100_000 not in warm["plyvel_bloom10"] and 1_000_000 in warm["plyvel_bloom10"]
    assert sorted(core.recovery["commit_s"]["silt"]) == [10_000, 100_000, 1_000_000]
    assert [s.path.name for s in core.throughput_sources] == ["core_bench-1m.json",
                                                              "core_bench-new.json"]
    assert "load 1.5 -> 2.5" in core.throughput_sources[0].describe()


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    here = doc
    for key in path[:-1]:
        here = here[key]
    if value is DELETE:
        del here[path[-1]]
    else:
        here[path[-1]] = value
    return doc


DELETE = object()
MAIN_SILT = ("summary", "main", "warm_gets", "stores", "silt")
#: (file name, how the file is broken, words the error must hold)
MALFORMED = [
    ("core_bench.json", "{not json", ["not a readable JSON file"]),
    ("core_bench.json", "[1, 2]", ["top level", "a JSON object"]),
    ("core_bench.json", _set(core_result(1000), ("config", "keys"), -5),
     ["config.keys", "positive whole number"]),
    ("core_bench.json", _set(core_result(1000), ("config",), DELETE), ["'config'"]),
    ("core_bench.json", _set(core_result(1000), (*MAIN_SILT, "max"), DELETE),
     ["summary.main.warm_gets.stores.silt", "median, min and max"]),
    ("core_bench.json", _set(core_result(1000), (*MAIN_SILT, "median"), "fast"),
     ["summary.main.warm_gets.stores.silt.median", "finite number"]),
    ("core_bench.json", _set(core_result(1000), (*MAIN_SILT, "median"), float("nan")),
     ["summary.main.warm_gets.stores.silt.median", "finite number"]),
    ("core_bench.json", _set(core_result(1000), (*MAIN_SILT, "min"), 1e9),
     ["summary.main.warm_gets.stores.silt", "min <= median <= max"]),
    ("core_bench.json", _set(core_result(1000), ("summary", "main", "cold_gets"), DELETE),
     ["summary.main", "'cold_gets'"]),
    ("core_bench.json", _set(core_result(1000), ("summary", "scale", "scale_big"), {}),
     ["summary.scale.scale_big", "scale_<keys>"]),
    ("core_bench.json", _set(core_result(1000), ("summary",), {}),
     ["summary", "a main or a scale section"]),
    ("core_bench.json", _set(core_result(1000), ("load", "end", "load_1m"), "high"),
     ["load.end.load_1m", "finite number"]),
    ("spark_bench.json", _set(spark_result(), ("bench",), "core_bench"),
     ["bench", "'spark_bench'"]),
    ("spark_bench.json", _set(spark_result(), ("summary",), []),
     ["summary", "at least one case"]),
    ("spark_bench.json", _set(spark_result(), ("summary", 2, "keys"), "2M"),
     ["summary[2].keys", "int"]),
    ("spark_bench.json", _set(spark_result(), ("summary", 0, "recovery_s"), 3.0),
     ["summary[0].recovery_s", "median, min and max"]),
]


@pytest.mark.parametrize("name,content,words", MALFORMED,
                         ids=[f"{i}-{m[2][0]}" for i, m in enumerate(MALFORMED)])
def test_a_malformed_results_file_fails_loudly_before_any_chart_is_written(
        tmp_path, name, content, words):
    results, out = tmp_path / "results", tmp_path / "out"
    # a good file of the other benchmark beside it: nothing is drawn from it either
    other = ("spark_bench.json", spark_result()) if name.startswith("core") else (
        "core_bench.json", core_result(1000))
    write(results, *other)
    bad = write(results, name, content)

    with pytest.raises(charts.ResultsError) as failed:
        charts.render(results, out)

    message = str(failed.value)
    assert str(bad) in message
    for word in words:
        assert word in message
    assert "rerun the benchmark" in message
    assert not out.exists() or not list(out.iterdir())


def test_nothing_to_draw_says_which_session_makes_results(tmp_path):
    with pytest.raises(charts.ResultsError, match="nox -s bench"):
        charts.render(tmp_path, tmp_path / "out")
    assert charts.main(["--results", str(tmp_path)]) == 1


def test_spark_summary_is_median_min_max_over_the_runs_that_did_not_fail():
    def run(case, keys, rows_per_s, recovery_s, **extra):
        return {"case": case, "keys": keys, "rows": 200_000, "rows_per_s": rows_per_s,
                "recovery_s": recovery_s, **extra}

    runs = [
        run("silt aggregate", 100_000, 2e5, 3.0, commit_ms=30.0,
            requests_per_task={"all": {"GET": 10.0, "PUT": 2.5}}),
        run("silt aggregate", 100_000, 1e5, 5.0, commit_ms=50.0,
            requests_per_task={"all": {"GET": 12.0, "PUT": 2.5}}),
        run("silt aggregate", 100_000, 0.0, 0.0, error="worker lost"),
        run("silt aggregate", 100_000, 3e5, 4.0, commit_ms=40.0,
            requests_per_task={"all": {"GET": 11.0, "PUT": 2.5}}),
        run("native groupBy (RocksDB)", 100_000, 1.5e5, 2.0, native_commit_ms=150.0),
    ]

    silt, native = spark_results.summary(runs)

    assert (silt["case"], silt["keys"], silt["runs"], silt["failed_runs"]) == (
        "silt aggregate", 100_000, 3, 1)
    assert silt["rows_per_s"] == {"median": 2e5, "min": 1e5, "max": 3e5, "n": 3}
    assert silt["recovery_s"] == {"median": 4.0, "min": 3.0, "max": 5.0, "n": 3}
    assert silt["commit_ms"]["median"] == 40.0
    assert silt["requests_per_batch_and_shard"] == {"median": 13.5, "min": 12.5, "max": 14.5,
                                                    "n": 3}
    assert native["commit_ms"] == {"median": 150.0, "min": 150.0, "max": 150.0, "n": 1}
    assert "requests_per_batch_and_shard" not in native


def test_each_spark_chart_names_only_the_runs_it_was_drawn_from(tmp_path):
    results = tmp_path / "results"
    restart = spark_result()
    restart["summary"] = [r for r in restart["summary"] if "s3" not in r["case"]]
    s3 = spark_result()
    s3["summary"] = [r for r in s3["summary"] if "s3" in r["case"]]
    s3["started_unix"] += 3600
    write(results, "spark_bench-restart.json", restart)
    write(results, "spark_bench-s3.json", s3)

    spark = charts.read_spark(sorted(results.glob("spark_bench*.json")))

    recovery = {"recovery_s": spark.figures["recovery_s"]}
    requests = {"requests_per_batch_and_shard": spark.figures["requests_per_batch_and_shard"]}
    assert [s.path.name for s in spark.sources(recovery)] == ["spark_bench-restart.json"]
    assert [s.path.name for s in spark.sources(requests)] == ["spark_bench-s3.json"]
