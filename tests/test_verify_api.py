"""``silt.verify``: the verification API ``silt verify`` prints, and roots of several DBs.

The command's output (text, ``--json``, exit codes) is covered by tests/test_cli.py; these call
the API on real ``file://`` and ``memory://`` roots and damage them on disk.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import silt
from silt import paths
from silt.cli import main
from silt.errors import VersionNotFoundError
from silt.plugins import open_store
from silt.roots import child_dbs, db_url, inspect_root, list_dbs
from silt.tiers.memory import MemoryStore
from silt.verify import COUNTS, Problem

#: Commits upload their SSTs (no inline deltas): damage to SST objects is the subject here.
SETTINGS = silt.Settings(memtable_bytes=4096, block_bytes=256, compaction="none",
                         inline_delta_bytes=0)


def fill(url: str, keys: int = 400) -> None:
    """Version 1: ``keys`` keys (several SSTs of many blocks); version 2: a delete; a checkpoint
    ``first`` of version 1."""
    with silt.open(url, settings=SETTINGS) as db:
        for i in range(keys):
            db.put(b"k%05d" % i, b"value-%d" % i)
        assert db.commit() == 1
        db.checkpoint("first")
        db.delete(b"k00001")
        assert db.commit() == 2


def folder(url: str) -> pathlib.Path:
    return pathlib.Path(url.removeprefix("file://"))


def flip_byte(path: pathlib.Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def ssts(url: str) -> list[pathlib.Path]:
    """The SST files of the DB at ``url``, largest last."""
    return sorted((folder(url) / "sst").iterdir(), key=lambda p: p.stat().st_size)


@pytest.fixture
def root(file_url: str) -> str:
    fill(file_url)
    return file_url


def test_verify_is_exported() -> None:
    from silt.verify import VerifyReport, verify

    assert {"verify", "VerifyReport"} <= set(silt.__all__)
    assert silt.verify is verify and silt.VerifyReport is VerifyReport


def test_a_healthy_root_is_ok(root: str) -> None:
    report = silt.verify(root, all_versions=True)
    assert report.ok and report.problems == [] and report.notes == []
    assert report.versions == [1, 2] and report.identity.live == [1, 2]
    assert report.counts["versions"] == 2 and report.counts["checkpoints"] == 1
    assert report.counts["ssts"] == len(ssts(root)) and report.counts["blocks"] > len(ssts(root))
    assert report.counts["entries"] == 400 + 1  # the tombstone is an entry
    on_disk = sum(p.stat().st_size for d in ("sst", "manifest")
                  for p in (folder(root) / d).iterdir())
    assert report.bytes == on_disk
    doc = report.to_json()
    assert doc["ok"] is True and set(COUNTS) <= set(doc) and doc["problems"] == []
    latest = silt.verify(root)
    assert latest.ok and latest.versions == [2] and not latest.all_versions


def test_a_damaged_sst_block_is_a_corruption_of_that_sst(root: str) -> None:
    path = ssts(root)[-1]
    flip_byte(path, 100)  # inside the first data block
    report = silt.verify(root)
    assert not report.ok
    assert report.problems == [Problem("corruption", paths.SST_PREFIX + path.name,
                                       report.problems[0].message, 0)]
    assert "corruption in" in report.problems[0].message
    assert report.log == report.problems


def test_a_missing_sst_is_missing(root: str) -> None:
    path = ssts(root)[0]
    path.unlink()
    report = silt.verify(root, all_versions=True)
    assert [(p.kind, p.object) for p in report.problems] == [
        ("missing", paths.SST_PREFIX + path.name)]
    assert "does not exist" in report.problems[0].message and not report.ok


def test_a_damaged_checkpoint_is_a_corruption_of_that_checkpoint(root: str) -> None:
    name = paths.checkpoint_key("first")
    flip_byte(folder(root) / name, 12)
    report = silt.verify(root)
    assert [(p.kind, p.object) for p in report.problems] == [("corruption", name)]
    assert report.counts["checkpoints"] == 0  # a checkpoint that does not decode pins nothing


def test_a_damaged_version_is_scoped(root: str) -> None:
    """Damage in version 1's manifest is found when version 1 is in scope."""
    flip_byte(folder(root) / paths.manifest_key(1), 40)
    assert silt.verify(root, version=2).counts["versions"] == 1
    report = silt.verify(root, all_versions=True)
    assert ("corruption", paths.manifest_key(1)) in {(p.kind, p.object) for p in report.problems}


def test_verify_takes_an_open_store_and_leaves_it_open() -> None:
    store = MemoryStore("verify-api-store")
    try:
        fill("memory://verify-api-store", keys=50)
        report = silt.verify(store, version=1)
        assert report.ok and report.versions == [1]
        assert list(store.list(paths.MANIFEST_PREFIX))  # still usable
    finally:
        MemoryStore.drop("verify-api-store")


def test_no_versions_and_an_absent_version_raise(root: str, tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(VersionNotFoundError, match="no committed versions"):
        silt.verify(empty.as_uri())
    with pytest.raises(VersionNotFoundError, match=r"version 7 .* does not exist"):
        silt.verify(root, version=7)


# --- roots of several DBs ------------------------------------------------------------------------


@pytest.fixture
def operator_root(tmp_path) -> str:
    """A root with no DB of its own and two DBs under it, as the Spark binding lays out shards."""
    url = (tmp_path / "op").as_uri()
    for shard in ("kg-00000-00127", "kg-00128-00255"):
        fill(f"{url}/{shard}", keys=100)
    return url


def test_db_url_keeps_the_tier_options() -> None:
    assert db_url("s3://b/op?region=x", "kg-0-63/") == "s3://b/op/kg-0-63?region=x"
    assert db_url("file:///state/op/", "a b/") == "file:///state/op/a%20b"


def test_child_dbs_of_an_operator_root_a_db_and_a_db_s_parent(operator_root: str,
                                                              root: str, tmp_path) -> None:
    fill((tmp_path / "alone" / "db").as_uri(), keys=10)
    for url, expected in ((operator_root, ["kg-00000-00127/", "kg-00128-00255/"]),
                          (root, []),                              # a DB
                          ((tmp_path / "alone").as_uri(), ["db/"]),  # one DB (one shard)
                          (tmp_path.as_uri(), ["alone/db/", "op/kg-00000-00127/",
                                               "op/kg-00128-00255/", "root/"])):  # any depth
        store = open_store(url)
        try:
            assert child_dbs(store) == expected
        finally:
            store.close()
    store = open_store(operator_root)
    try:
        assert list_dbs(store) == ["kg-00000-00127/", "kg-00128-00255/"]
        rows = inspect_root(store, list_dbs(store))
        assert list(silt.verify(tmp_path.as_uri()).dbs) == [
            "alone/db", "op/kg-00000-00127", "op/kg-00128-00255", "root"]
        assert [(r["db"], r["version"], r["versions"]) for r in rows] == [
            ("kg-00000-00127", 2, 2), ("kg-00128-00255", 2, 2)]
    finally:
        store.close()


def test_verify_an_operator_root_verifies_each_db(operator_root: str) -> None:
    report = silt.verify(operator_root, all_versions=True)
    assert report.ok and list(report.dbs) == ["kg-00000-00127", "kg-00128-00255"]
    assert all(r.versions == [1, 2] and r.ok for r in report.dbs.values())
    # A DB with nothing committed yet (here: only a stray object under manifest/) is skipped.
    stray = folder(operator_root) / "kg-00256-00300" / "manifest" / "README"
    stray.parent.mkdir(parents=True)
    stray.write_text("not a manifest")
    assert list(silt.verify(operator_root).dbs) == ["kg-00000-00127", "kg-00128-00255"]
    damaged = ssts(f"{operator_root}/kg-00128-00255")[-1]
    flip_byte(damaged, 100)
    report = silt.verify(operator_root)
    assert not report.ok and report.dbs["kg-00000-00127"].ok
    assert [(p.kind, p.object) for p in report.dbs["kg-00128-00255"].problems] == [
        ("corruption", paths.SST_PREFIX + damaged.name)]
    assert report.to_json()["dbs"]["kg-00128-00255"]["ok"] is False


def test_cli_ls_and_verify_an_operator_root(operator_root: str, capsys) -> None:
    assert main(["ls", operator_root]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["DB", "VERSION"]
    assert [line.split()[:2] for line in lines[1:]] == [
        ["kg-00000-00127", "1"], ["kg-00000-00127", "2"],
        ["kg-00128-00255", "1"], ["kg-00128-00255", "2"]]
    assert main(["ls", operator_root, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["db"], r["version"]) for r in rows][:2] == [("kg-00000-00127", 1),
                                                            ("kg-00000-00127", 2)]
    assert main(["verify", operator_root, "--all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kg-00000-00127: verified all versions: 2 manifests")
    assert out.rstrip().endswith("2 DBs: OK")
    damaged = ssts(f"{operator_root}/kg-00000-00127")[-1]
    flip_byte(damaged, 100)
    assert main(["verify", operator_root]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("silt: corruption: kg-00000-00127: corruption in")
    assert "1 DB(S) WITH PROBLEMS" in captured.out


def test_ls_inspect_and_verify_agree_on_a_root_of_one_db(tmp_path, capsys) -> None:
    """A Spark operator with one shard leaves a root holding exactly one DB: every command
    shows that DB under its name (none of them says "no committed versions")."""
    url = (tmp_path / "op").as_uri()
    fill(f"{url}/kg-00000-00255", keys=50)
    assert main(["ls", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["DB", "VERSION"]
    assert [line.split()[:2] for line in out[1:]] == [["kg-00000-00255", "1"],
                                                       ["kg-00000-00255", "2"]]
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    assert "1 DBs" in out and "kg-00000-00255" in out
    assert main(["verify", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kg-00000-00255: verified version 2") and "1 DBs: OK" in out


def test_inspect_an_operator_root_at_a_version(operator_root: str, capsys) -> None:
    assert main(["inspect", operator_root, "--version", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["dbs"]
    assert [(r["db"], r["version"], r["versions"]) for r in rows] == [
        ("kg-00000-00127", 1, 2), ("kg-00128-00255", 1, 2)]
    assert main(["inspect", operator_root, "--version", "7"]) == 1
    err = capsys.readouterr().err
    assert "no DB under" in err and "has version 7" in err and "Traceback" not in err
