"""``silt ls``, ``silt inspect`` and ``silt verify`` on a silt_spark operator root, through the
core CLI's ``main()``: the operator's layout, watermark, shards and decoded values come from
silt_spark's ``silt`` entry point (``silt_spark.plugin``), never from the core importing
silt_spark.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import silt_spark
from silt import cli, plugins
from silt_spark.runtime import _names
from test_spark_operator import Run

ROOT = Path(__file__).resolve().parent.parent
EVENTS = "user string, device string, amount long, ts timestamp"


class EventRun(Run):
    """The operator tests' runs with an event time (``ts``: ``amount`` seconds)."""

    schema = EVENTS

    def write(self, rows: list[tuple]) -> None:
        # The temporary name starts with a dot: Spark's file source skips hidden files, so it
        # never lists a file being written (a visible part-N.tmp could be read as a batch of its
        # own and the part-N.json it becomes as another).
        name = self.src / f"part-{self.files:05d}.json"
        tmp = self.src / f".tmp-{self.files:05d}"
        with open(tmp, "w") as f:
            for user, device, amount in rows:
                f.write(json.dumps({"user": user, "device": device, "amount": amount,
                                    "ts": f"2024-01-01T00:00:{amount:02d}Z"}) + "\n")
        tmp.rename(name)
        self.files += 1


@pytest.fixture(scope="module")
def roots(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An aggregate's and a window aggregate's roots after two micro-batches (0 and 1)."""
    base = tmp_path_factory.mktemp("inspect")
    agg_url, win_url = (base / "agg").as_uri(), (base / "win").as_uri()
    agg_run, win_run = EventRun(spark, base, "agg"), EventRun(spark, base, "win")
    agg_run.start(silt_spark.aggregate(agg_run.stream(), ["user"], ["count", "sum(amount)"],
                                       state_url=agg_url, num_shards=2))
    win_run.start(silt_spark.window_aggregate(
        win_run.stream(), ["user"], "ts", "10 seconds", ["count"], state_url=win_url,
        num_shards=2, watermark_delay="5 seconds"))
    for rows in ([("a", "d", 1), ("b", "d", 2)], [("a", "d", 31)]):
        for run in (agg_run, win_run):
            run.write(rows)
            run.drain()
    agg_run.query.stop()
    win_run.query.stop()
    return {"agg": agg_url, "win": win_url, "base": str(base)}


@pytest.fixture
def spark_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """silt_spark's plugin registered as its entry point would (autoloading stays off)."""
    monkeypatch.setattr(plugins, "DEFAULT_PLUGINS",
                        (*plugins.DEFAULT_PLUGINS, ("spark", "silt_spark.plugin")))
    plugins.reset_registry()
    yield
    plugins.reset_registry()


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out, err


def test_inspect_decodes_an_aggregate_root(
    roots: dict[str, str], spark_plugin: None, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(capsys, "inspect", "--values", "5", roots["agg"])
    assert status == cli.EXIT_OK, err
    assert "silt_spark aggregate operator (described by plugin 'spark')" in out
    assert "key columns    user string" in out and "shards         2" in out
    assert "generation     0" in out and "watermark      -" in out
    assert "SHARD  DB" in out and "kg-00000-00127" in out and "kg-00128-00255" in out
    status, out, _ = run_cli(capsys, "inspect", "--json", "--values", "5", roots["agg"])
    app = json.loads(out)["application"]
    assert app["fields"]["operator"] == "aggregate" and app["inspector"] == "spark"
    shards = app["tables"][0]["rows"]
    assert [r[0] for r in shards] == [0, 1] and max(r[2] for r in shards if r[2] != "-") == 1
    values = {r[0]: json.loads(r[3]) for r in app["tables"][1]["rows"]}
    assert values == {"a": {"rows": 2, "amount": {"n": 2, "sum": 32, "min": 1, "max": 31}},
                      "b": {"rows": 1, "amount": {"n": 1, "sum": 2, "min": 2, "max": 2}}}
    # As of micro-batch 0: each shard's latest version <= 0.
    status, out, _ = run_cli(capsys, "inspect", "--json", "--version", "0", "--values", "1",
                             roots["agg"])
    app = json.loads(out)["application"]
    assert app["fields"]["as of batch"] == 0 and len(app["tables"][1]["rows"]) == 1
    assert {json.loads(r[3])["rows"] for r in app["tables"][1]["rows"]} == {1}


def test_inspect_shows_the_window_operator_and_its_watermark(
    roots: dict[str, str], spark_plugin: None, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(capsys, "inspect", "--json", "--values", "10", roots["win"])
    assert status == cli.EXIT_OK, err
    fields = json.loads(out)["application"]["fields"]
    assert fields["operator"] == "window"
    assert fields["window"] == {"slide_ms": 10000, "window_ms": 10000}
    # The last batch (the tick source's, after the file at 31 s) ran with the watermark
    # 31 s - 5 s delay: it closed the windows of 0..10 s; a's window of 30..40 s is open.
    ms = int(fields["watermark"].split()[0])
    assert ms == 1704067200000 + 31_000 - 5_000
    rows = json.loads(out)["application"]["tables"][1]["rows"]
    assert {(r[0], r[1]) for r in rows} == {("a", "window")}


def test_ls_and_verify_work_on_an_operator_root(
    roots: dict[str, str], spark_plugin: None, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run_cli(capsys, "ls", "--json", roots["agg"])
    assert status == cli.EXIT_OK, err
    listed = json.loads(out)
    assert {r["version"] for r in listed} == {0, 1} and all(r["db"].startswith("kg-")
                                                            for r in listed)
    status, out, err = run_cli(capsys, "verify", roots["agg"])
    assert status == cli.EXIT_OK, err
    assert "DBs: OK" in out


def test_bad_input_is_one_line_never_a_traceback(
    roots: dict[str, str], spark_plugin: None, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    status, _, err = run_cli(capsys, "inspect", "--values", "-1", roots["agg"])
    assert status == 2 and "--values" in err  # argparse's usage error
    one_db = (tmp_path / "db").as_uri()
    import silt

    with silt.open(one_db) as db:
        db.put(b"k", b"v")
        db.commit()
    status, _, err = run_cli(capsys, "inspect", "--values", "2", one_db)
    assert status == cli.EXIT_ERROR and "silt scan" in err
    broken = tmp_path / "broken"
    shutil.copytree(Path(roots["base"]) / "agg", broken)
    (broken / _names.DESCRIPTOR).write_text("{not json")
    status, _, err = run_cli(capsys, "inspect", broken.as_uri())
    assert status == cli.EXIT_CORRUPT and f"corruption in '{_names.DESCRIPTOR}'" in err


def test_the_entry_point_registers_the_inspector_and_the_core_never_imports_silt_spark() -> None:
    project = tomllib.loads((ROOT / "packages/spark/pyproject.toml").read_text())
    assert project["project"]["entry-points"]["silt"] == {"spark": "silt_spark.plugin"}
    from silt_spark import plugin

    assert _names.DESCRIPTOR == "silt-spark.json"  # on disk in every operator root
    registry = plugins.Registry()
    plugin.silt_register(registry)
    assert set(registry.root_inspectors) == {_names.DESCRIPTOR}
    code = ("import sys, silt.cli, silt.plugins; silt.plugins.builtin_registry(); "
            "assert not [m for m in sys.modules if m.startswith(('silt_spark', 'pyspark'))]")
    subprocess.run([sys.executable, "-c", code], check=True)
    # Loading the plugin (every process that lists silt's plugins does) stays light.
    code = ("import sys, silt_spark.plugin; heavy = [m for m in sys.modules if m.split('.')[0] "
            "in ('pyspark', 'numpy', 'pandas', 'pyarrow')]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
