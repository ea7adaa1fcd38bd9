"""The ``silt`` command line, in-process through ``main([...])`` and as a real subprocess.

Every test works on a real ``file://`` root filled through :func:`silt.open` (plus a few on
``memory://``, which only the in-process runs can see).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import struct
import subprocess
import sys
import uuid
import zlib
from dataclasses import replace

import hypothesis.strategies as st
import pytest
import silt
import sstparts
from hypothesis import given, settings
from silt import paths
from silt.checkpoints import encode_checkpoint
from silt.cli import escape, main, show_key
from silt.compaction.compactor import run_compaction
from silt.compaction.record import CompactionRecord
from silt.compaction.task import CompactionTask
from silt.errors import CorruptionError, FencedError, StoreError, WithdrawnError
from silt.gc import collect_garbage
from silt.manifest import MANIFEST_MAGIC, Manifest
from silt.markers import read_markers
from silt.sst.format import FOOTER, FOOTER_SIZE
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore
from silt.versions import read_fate

N = 5000  # keys in version 1: several SSTs at the test settings' 64 KiB memtable
#: Where this process imported silt from (the installed build, or packages/core/src):
#: subprocesses must run the same implementation.
CORE_SRC = pathlib.Path(silt.__file__).resolve().parents[1]
T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def key(i: int) -> bytes:
    return b"k%05d" % i


def value(i: int) -> bytes:
    return b"value-%d" % i


def fill(url: str, settings: silt.Settings) -> None:
    """Version 1: ``N`` keys (several SSTs); version 2: a delete, a binary key, a UTF-8 key."""
    clock = silt.ManualClock(T0)
    with silt.open(url, settings=settings, clock=clock) as db:
        for i in range(N):
            db.put(key(i), value(i))
        assert db.commit(meta={"query": "q1"}) == 1
        clock.advance(60_000)
        db.delete(key(1))
        db.put(b"\x00\xff", b"bin\tary\n")
        db.put("zürich".encode(), b"\xe2\x82\xac")
        assert db.commit(meta={"batch": "7"}) == 2


@pytest.fixture
def root(file_url: str, small: silt.Settings) -> str:
    # No compaction, no inline deltas: these tests count SST objects and bytes per version.
    fill(file_url, small.replace(compaction="none", inline_delta_bytes=0))
    return file_url


@pytest.fixture
def mem_root(small: silt.Settings):
    name = f"cli-{uuid.uuid4().hex}"
    url = f"memory://{name}"
    fill(url, small)
    yield url
    MemoryStore.drop(name)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*argv: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(CORE_SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["SILT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "silt", *argv], env=env, capture_output=True, timeout=120
    )


def root_dir(url: str) -> pathlib.Path:
    return pathlib.Path(url.removeprefix("file://"))


def flip_byte(path: pathlib.Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def biggest_sst(url: str) -> tuple[str, pathlib.Path]:
    """The object name and file of the largest SST (it has many blocks)."""
    files = sorted((root_dir(url) / "sst").iterdir(), key=lambda p: p.stat().st_size)
    return f"{paths.SST_PREFIX}{files[-1].name}", files[-1]


# --- formatting ----------------------------------------------------------------------------------


def test_escape_is_one_unambiguous_line() -> None:
    assert escape(b"plain text") == "plain text"
    assert escape("café €".encode()) == "café €"
    assert escape(b"a\tb\nc\\d") == "a\\x09b\\x0ac\\\\d"
    assert escape(b"\x00\xff\xfe") == "\\x00\\xff\\xfe"
    assert escape("\u0085\u200b".encode()) == "\\u0085\\u200b"
    assert escape(b"") == ""


def test_show_key() -> None:
    assert show_key(b"user:1") == "user:1"
    assert show_key("zürich".encode()) == "zürich"
    assert show_key(b"\x00\xff") == "0x00ff"
    assert show_key(b"tab\there") == "0x" + b"tab\there".hex()
    assert show_key(b"") == "0x"


# --- ls ------------------------------------------------------------------------------------------


def test_ls(root: str, capsys) -> None:
    code, out, err = run(capsys, "ls", root)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["VERSION", "CREATED", "SSTS", "BYTES", "REQUESTS", "META"]
    assert len(lines) == 3
    v1, v2 = (line.split() for line in lines[1:])
    assert v1[:2] == ["1", "2023-11-14T22:13:20.000Z"]
    assert v2[:2] == ["2", "2023-11-14T22:14:20.000Z"]
    # Class A (PUT, LIST) / class B (GET) requests paid since the writer's previous commit.
    assert re.fullmatch(r"A[1-9]\d*/B\d+", v1[4]) and re.fullmatch(r"A[1-9]\d*/B\d+", v2[4])
    assert v1[5:] == ["query=q1"]
    assert v2[5:] == ["batch=7", "query=q1"]
    assert int(v2[2]) == int(v1[2]) + 1  # version 2 added one L0 SST
    assert int(v2[3]) > int(v1[3]) > 0


def test_ls_cuts_long_meta_unless_wide(file_url: str, capsys) -> None:
    meta = {f"spark.field{i}": "x" * 20 for i in range(10)}
    with silt.open(file_url) as db:
        db.put(b"k", b"v")
        db.commit(meta=meta)
    code, out, _ = run(capsys, "ls", file_url)
    row = out.splitlines()[1]
    assert code == 0 and row.endswith("...")
    assert len(row.split("  ")[-1].strip()) == 60
    code, out, _ = run(capsys, "ls", file_url, "--wide")
    row = out.splitlines()[1]
    assert code == 0 and all(f"spark.field{i}={'x' * 20}" in row for i in range(10))


def test_ls_json_matches_manifests(root: str, capsys) -> None:
    code, out, _ = run(capsys, "ls", root, "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["version"] for r in rows] == [1, 2]
    sst_dir = root_dir(root) / "sst"
    all_bytes = sum(p.stat().st_size for p in sst_dir.iterdir())
    assert rows[1]["bytes"] == all_bytes  # version 2 references every SST written
    assert rows[1]["ssts"] == len(list(sst_dir.iterdir()))
    assert rows[1]["parent"] == 1 and rows[0]["parent"] is None
    assert rows[1]["meta"] == {"query": "q1", "batch": "7"}
    assert rows[0]["created_ms"] == T0


def test_ls_empty_root(tmp_path, capsys) -> None:
    code, out, err = run(capsys, "ls", tmp_path.as_uri())
    assert (code, out) == (0, "")
    assert "no committed versions" in err


def test_ls_reports_a_corrupt_manifest_and_goes_on(root: str, capsys) -> None:
    flip_byte(root_dir(root) / paths.manifest_key(1), 30)
    code, out, err = run(capsys, "ls", root)
    assert code == 2
    assert paths.manifest_key(1) in err and "checksum" in err
    assert "CORRUPT" in out and "batch=7" in out


# --- inspect -------------------------------------------------------------------------------------


def test_inspect_latest(root: str, capsys) -> None:
    code, out, err = run(capsys, "inspect", root)
    assert code == 0, err
    assert "version   2" in out and "parent    1" in out
    assert "created   2023-11-14T22:14:20.000Z" in out
    assert "meta      batch=7 query=q1" in out
    assert "L0: " in out and "total: " in out
    assert "k00000 .. " in out  # printable keys as text
    assert "0x00ff .. zürich" in out  # non-printable as hex
    assert "BLOCKS" not in out  # no SST reads without --tails


def test_inspect_json_totals(root: str, capsys) -> None:
    code, out, _ = run(capsys, "inspect", root, "--version", "1", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == 1 and doc["parent"] is None
    assert doc["meta"] == {"query": "q1"}
    [l0] = doc["levels"]
    assert l0["level"] == "L0"
    assert l0["entries"] == N == doc["totals"]["entries"]
    assert l0["ssts"] == len(l0["sst_list"]) > 1
    assert doc["totals"]["bytes"] == sum(s["size"] for s in l0["sst_list"])
    first = min(l0["sst_list"], key=lambda s: s["smallest"])
    assert first["smallest"] == key(0).hex() and first["smallest_text"] == "k00000"
    assert first["object"] == f"sst/{first['id']}.sst"
    assert "properties" not in first


def test_inspect_reads_only_the_manifest_unless_tails(root: str, capsys, monkeypatch) -> None:
    from silt.sst import reader

    def no_reads(self):
        raise AssertionError("inspect read an SST")

    monkeypatch.setattr(reader.SstReader, "_load_tail", no_reads)
    assert run(capsys, "inspect", root)[0] == 0
    monkeypatch.undo()
    code, out, _ = run(capsys, "inspect", root, "--tails", "--json")
    assert code == 0
    ssts = json.loads(out)["levels"][0]["sst_list"]
    for s in ssts:
        assert s["properties"]["entries"] == s["entries"]
        assert s["properties"]["blocks"] >= 1
    code, out, _ = run(capsys, "inspect", root, "--tails")
    assert code == 0 and "BLOCKS" in out and "lz4" in out


def test_inspect_missing_version_and_empty_root(root: str, tmp_path, capsys) -> None:
    code, out, err = run(capsys, "inspect", root, "--version", "9")
    assert code == 1 and out == ""
    assert err.startswith("silt: error: version 9 ") and "silt ls" in err
    assert "Traceback" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "inspect", empty.as_uri())
    assert code == 1 and "no committed versions" in err
    # A folder holding DBs (here the root fixture's "root/") is shown as a root of DBs.
    code, out, _ = run(capsys, "inspect", tmp_path.as_uri())
    assert code == 0 and "1 DBs" in out and "\nroot " in out


def test_get_and_scan_on_a_root_of_dbs_name_the_dbs(root: str, tmp_path, capsys) -> None:
    """A folder of DBs (an operator root) is not one DB: get and scan say so and how to name
    one, instead of "no committed versions"."""
    folder = tmp_path.as_uri()
    for command in (["get", folder, "k00042"], ["scan", folder]):
        code, out, err = run(capsys, *command)
        assert (code, out) == (1, ""), command
        assert f"'{folder}' is a root of 1 DBs" in err and "root" in err
        assert f"e.g. '{folder}/root'" in err and "silt ls" in err
    # The URL it suggests is one that works.
    code, out, _ = run(capsys, "scan", f"{folder}/root", "--limit", "1")
    assert code == 0 and out == "\\x00\\xff\tbin\\x09ary\\x0a\n"


def test_verify_counts_inline_ssts_as_ls_and_inspect_do(file_url: str, capsys) -> None:
    """A root whose deltas ride in manifests (inline SSTs): verify's SST count is the one
    inspect shows, with the inline ones named."""
    with silt.open(file_url) as db:
        for i in range(3):
            db.put(f"k{i}".encode(), b"v")
            db.commit()
    code, out, _ = run(capsys, "inspect", file_url, "--json")
    assert code == 0
    shown = sum(len(level["sst_list"]) for level in json.loads(out)["levels"])
    code, out, _ = run(capsys, "verify", file_url)
    assert code == 0 and shown >= 1
    assert f", {shown} SSTs ({shown} inline), " in out, out


def test_memory_roots_the_command_cannot_see_are_errors(capsys) -> None:
    """A memory:// root lives in the process that wrote it: in silt's own process it is
    always empty, so each reading command fails instead of reporting an empty root."""
    for command in (["ls"], ["inspect"], ["verify"], ["get", None, "k"], ["scan"]):
        argv = [command[0], "memory://never-written", *command[2:]]
        code, out, err = run(capsys, *argv)
        assert (code, out) == (1, ""), argv
        assert "lives only in the process that wrote it" in err, argv
    proc = run_process("ls", "memory://x")
    assert proc.returncode == 1 and b"lives only in the process" in proc.stderr


# --- get -----------------------------------------------------------------------------------------


def test_get(root: str, capsysbinary) -> None:
    assert main(["get", root, "k00042"]) == 0
    assert capsysbinary.readouterr().out == value(42)  # raw bytes, no newline
    assert main(["get", root, "zürich"]) == 0
    assert capsysbinary.readouterr().out == b"\xe2\x82\xac"
    assert main(["get", root, "00ff", "--key-hex"]) == 0
    assert capsysbinary.readouterr().out == b"bin\tary\n"
    assert main(["get", root, "00ff", "--key-hex", "--hex"]) == 0
    assert capsysbinary.readouterr().out == b"bin\tary\n".hex().encode() + b"\n"


def test_get_missing_key_exits_1(root: str, capsys) -> None:
    code, out, err = run(capsys, "get", root, "k00001")  # deleted in version 2
    assert code == 1 and out == ""
    assert "'k00001' not found in version 2" in err
    code, out, _ = run(capsys, "get", root, "k00001", "--version", "1")
    assert code == 0 and out == value(1).decode()
    code, _, err = run(capsys, "get", root, "nope")
    assert code == 1 and "not found" in err


def test_get_bad_hex_key(root: str, capsys) -> None:
    code, _, err = run(capsys, "get", root, "zz", "--key-hex")
    assert code == 1 and "silt: error: KEY 'zz' is not hex" in err


def test_get_on_memory_root(mem_root: str, capsys) -> None:
    code, out, _ = run(capsys, "get", mem_root, "k00007")
    assert (code, out) == (0, "value-7")


# --- scan ----------------------------------------------------------------------------------------


def test_scan_everything(root: str, capsys) -> None:
    code, out, _ = run(capsys, "scan", root)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == N - 1 + 2
    assert lines[0] == "\\x00\\xff\tbin\\x09ary\\x0a"
    assert lines[1] == "k00000\tvalue-0"
    assert lines[2] == "k00002\tvalue-2"  # k00001 was deleted
    assert lines[-1] == "zürich\t€"
    assert all(line.count("\t") == 1 for line in lines)


def test_scan_ranges_prefix_limit_version(root: str, capsys) -> None:
    code, out, _ = run(capsys, "scan", root, "--start", "k00010", "--end", "k00013")
    assert out.splitlines() == [f"k{i:05d}\tvalue-{i}" for i in (10, 11, 12)]
    code, out, _ = run(capsys, "scan", root, "--prefix", "k0150", "--limit", "3")
    assert out.splitlines() == [f"k{i:05d}\tvalue-{i}" for i in (1500, 1501, 1502)]
    code, out, _ = run(capsys, "scan", root, "--prefix", "k0000", "--version", "1")
    assert [line.split("\t")[0] for line in out.splitlines()] == [
        f"k{i:05d}" for i in range(10)
    ]
    code, out, _ = run(capsys, "scan", root, "--prefix", "00", "--key-hex", "--hex")
    assert out == "00ff\t" + b"bin\tary\n".hex() + "\n"
    code, out, _ = run(capsys, "scan", root, "--limit", "0")
    assert (code, out) == (0, "")


def test_scan_on_memory_root(mem_root: str, capsys) -> None:
    _, out, _ = run(capsys, "scan", mem_root, "--start", f"k{N - 2:05d}")
    assert out.splitlines() == [
        f"k{N - 2:05d}\tvalue-{N - 2}", f"k{N - 1:05d}\tvalue-{N - 1}", "zürich\t€"
    ]


# --- verify --------------------------------------------------------------------------------------


def test_verify_clean(root: str, capsys) -> None:
    code, out, err = run(capsys, "verify", root)
    assert (code, err) == (0, "")
    assert out.startswith("verified version 2: 1 manifests, ")
    assert out.rstrip().endswith(": OK")
    code, out, _ = run(capsys, "verify", root, "--all", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] is True and doc["problems"] == []
    assert doc["versions"] == 2
    assert doc["entries"] == N + 3  # every SST entry, tombstone included
    assert doc["ssts"] == len(list((root_dir(root) / "sst").iterdir()))
    assert doc["blocks"] > doc["ssts"]
    on_disk = sum(p.stat().st_size for d in ("sst", "manifest")
                  for p in (root_dir(root) / d).iterdir())
    assert doc["bytes"] == on_disk


def test_verify_detects_a_flipped_byte_in_a_block(root: str, capsys) -> None:
    name, path = biggest_sst(root)
    flip_byte(path, 100)  # inside the first data block
    code, out, err = run(capsys, "verify", root)
    assert code == 2
    assert f"corruption in {name!r} at offset 0" in err
    assert "1 PROBLEM(S)" in out
    # The same damage is reported by reads that meet it, as exit 2, never as data.
    code, out, err = run(capsys, "scan", root)
    assert code == 2 and f"corruption in {name!r}" in err
    assert "Traceback" not in err


def test_verify_detects_damage_in_the_tail_and_a_manifest(root: str, capsys) -> None:
    name, path = biggest_sst(root)
    flip_byte(path, path.stat().st_size - 60)  # index block, just before the footer
    flip_byte(root_dir(root) / paths.manifest_key(1), 40)
    code, out, err = run(capsys, "verify", root, "--all", "--json")
    assert code == 2
    problems = json.loads(out)["problems"]
    assert {p["object"] for p in problems} == {name, paths.manifest_key(1)}
    assert all(p["kind"] == "corruption" for p in problems)
    assert name in err and paths.manifest_key(1) in err


def test_verify_reports_missing_and_truncated_ssts(root: str, capsys) -> None:
    files = sorted((root_dir(root) / "sst").iterdir())
    files[0].unlink()
    files[1].write_bytes(files[1].read_bytes()[:-1])
    code, out, err = run(capsys, "verify", root, "--json")
    assert code == 2
    kinds = {p["object"]: p["kind"] for p in json.loads(out)["problems"]}
    assert kinds == {f"sst/{files[0].name}": "missing", f"sst/{files[1].name}": "corruption"}
    assert "does not exist" in err and "bytes but the manifest" in err


def test_verify_scope_errors(root: str, tmp_path, capsys) -> None:
    code, _, err = run(capsys, "verify", root, "--version", "5")
    assert code == 1 and "version 5" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "verify", empty.as_uri(), "--all")
    assert code == 1 and "no committed versions" in err
    # The fixture's parent folder holds one DB ("root"): verified as a root of DBs.
    code, out, _ = run(capsys, "verify", tmp_path.as_uri(), "--all")
    assert code == 0 and out.startswith("root: verified all versions") and "1 DBs: OK" in out
    code, _, err = run(capsys, "verify", root, "--all", "--version", "1")
    assert code == 2 and "not allowed with argument" in err  # argparse usage error


def test_verify_memory_root(mem_root: str, capsys) -> None:
    code, out, _ = run(capsys, "verify", mem_root, "--all")
    assert code == 0 and out.startswith("verified all versions: 2 manifests")


def _pending_compaction(url: str) -> CompactionRecord:
    """A compaction record (not adopted) that merges version 2's L0 into level 1."""
    store = silt.open_store(url)
    try:
        m = silt.read_manifest(store, 2)
        task = CompactionTask(inputs=tuple(s.id for s in m.l0), mode="into_level",
                              target_level=1)
        return run_compaction(store, m, task, silt.Settings(target_sst_bytes=20_000),
                              silt.ManualClock(T0))
    finally:
        store.close()


def test_verify_checks_checkpoints_and_compaction_records(root: str, capsys) -> None:
    with silt.open(root) as db:
        db.checkpoint("nightly")
    rec = _pending_compaction(root)
    code, out, err = run(capsys, "verify", root, "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["checkpoints"], doc["records"], doc["record_outputs"]) == (1, 1, len(rec.outputs))
    code, out, _ = run(capsys, "verify", root)
    assert code == 0 and "1 checkpoints, 1 compaction records: OK" in out


def test_verify_reports_damaged_checkpoints_and_records(root: str, capsys) -> None:
    """A changed digit re-pointing a checkpoint, a damaged record and a damaged output of
    another are each reported with the object's name, and verify exits 2."""
    with silt.open(root) as db:
        db.checkpoint("nightly")
    cp = root_dir(root) / paths.checkpoint_key("nightly")
    cp.write_bytes(cp.read_bytes().replace(b'"version":2', b'"version":1'))
    damaged, broken = _pending_compaction(root), _pending_compaction(root)
    flip_byte(root_dir(root) / paths.compaction_key(damaged.id), 30)
    out_name = paths.sst_key(broken.outputs[0].id)
    flip_byte(root_dir(root) / out_name, 20)
    code, out, err = run(capsys, "verify", root, "--json")
    assert code == 2
    kinds = {p["object"]: p["kind"] for p in json.loads(out)["problems"]}
    assert kinds == {paths.checkpoint_key("nightly"): "corruption",
                     paths.compaction_key(damaged.id): "corruption", out_name: "corruption"}
    assert "checkpoint checksum mismatch" in err and "compaction record checksum" in err
    assert "Traceback" not in err


def test_verify_reports_what_checkpoints_and_records_name_but_is_missing(root: str,
                                                                          capsys) -> None:
    with silt.open(root, version=1) as db:
        db.checkpoint("first")
    rec = _pending_compaction(root)
    (root_dir(root) / paths.manifest_key(1)).unlink()
    (root_dir(root) / paths.sst_key(rec.outputs[-1].id)).unlink()
    code, out, err = run(capsys, "verify", root, "--json")
    assert code == 2
    kinds = {p["object"]: p["kind"] for p in json.loads(out)["problems"]}
    pin = next(i.name for i in (root_dir(root) / "gc" / "pin").iterdir())
    assert kinds == {paths.checkpoint_key("first"): "missing",
                     paths.sst_key(rec.outputs[-1].id): "missing",
                     paths.PIN_PREFIX + pin: "rollback"}  # the pinned manifest is gone
    assert "pins version 1" in err and "an output of compaction record" in err


def test_verify_notes_a_checkpoint_from_before_checksums(root: str, capsys) -> None:
    """Checkpoint format 1 (bare JSON) still pins its version; verify says it has no checksum."""
    cp = root_dir(root) / paths.checkpoint_key("old")
    cp.parent.mkdir(exist_ok=True)
    cp.write_text('{"version": 1, "created_ms": 1700000000000, "token": "abc"}')
    code, out, err = run(capsys, "verify", root, "--json")
    assert code == 0
    assert [n["object"] for n in json.loads(out)["notes"]] == [paths.checkpoint_key("old")]
    assert "without a checksum" in err


# --- verify: version identity --------------------------------------------------------------------
GRACE = 100.0
#: Commits upload their SSTs (an inline delta is never at GC's mercy, so a stalled commit of
#: one is not withdrawn): the withdrawal below needs an uploaded SST.
IDENTITY = silt.Settings(memtable_bytes=2000, block_bytes=256, compaction="none",
                         gc_grace_seconds=GRACE, retain_versions=20, inline_delta_bytes=0)


def identity_root(url: str) -> silt.ManualClock:
    """A healthy root whose history uses the whole version-identity protocol: versions 1 and 2;
    3 withdrawn (its commit stalled past the grace while a GC pass ran); 4 on top of it; 5 a
    reservation (a commit from 4 skipped to 8); 8, pinned by another DB's checkpoint (settled)."""
    clock = silt.ManualClock(T0)
    with silt.open(url, settings=IDENTITY, clock=clock) as db:
        for v in (1, 2):
            db.put(b"k", b"%d" % v)
            assert db.commit() == v
    faulty = FaultyStore(silt.open_store(url))
    db = silt.open(url, settings=IDENTITY, clock=clock, store=faulty)
    db.put(b"k", b"stalled")

    def stall_while_gc_runs(op: str, key: str) -> None:
        clock.advance(int(GRACE * 1000) + 1)
        gc = FaultyStore(silt.open_store(url))  # a pass that dies before it is done
        gc.fail_matching("put_if_absent", lambda k: k.endswith(paths.PASS_DONE_SUFFIX),
                         error=StoreError, times=None)
        with pytest.raises(StoreError):
            collect_garbage(gc, retain_versions=20, grace_seconds=GRACE, clock=clock)

    faulty.on_call("list", stall_while_gc_runs, predicate=lambda k: k.startswith(paths.GC_PREFIX),
                   times=1)
    with pytest.raises(WithdrawnError):
        db.commit()
    assert db.commit() == 4
    db.put(b"k", b"eight")
    assert db.commit(8) == 8
    db.close()
    with silt.open(url, settings=IDENTITY, clock=clock) as other:
        assert other.checkpoint("release") == 8
    return clock


def manifest_of(url: str, version: int) -> Manifest:
    return Manifest.decode((root_dir(url) / paths.manifest_key(version)).read_bytes(), "m")


def write_manifest(url: str, manifest: Manifest) -> None:
    (root_dir(url) / paths.manifest_key(manifest.version)).write_bytes(manifest.encode())


def verify_problems(capsys, url: str) -> tuple[dict[str, str], str]:
    """``silt verify URL --json``: exit 2, and ``{object: kind}`` of its problems, stderr."""
    code, out, err = run(capsys, "verify", url, "--json")
    assert code == 2, (out, err)
    assert "Traceback" not in err
    return {p["object"]: p["kind"] for p in json.loads(out)["problems"]}, err


def test_verify_a_healthy_root_with_withdrawals_and_reservations(file_url: str) -> None:
    identity_root(file_url)
    store = silt.open_store(file_url)
    assert read_fate(store, 3).withdrawn and read_fate(store, 8).fate == "settled"
    assert manifest_of(file_url, 5).skip_to == 8
    proc = run_process("verify", file_url, "--all")
    out = proc.stdout.decode()
    assert (proc.returncode, proc.stderr) == (0, b""), out
    assert out.startswith("verified all versions: 5 manifests")  # 1, 2, 4, 5, 8
    assert "1 withdrawn (3), 1 reservations (5): OK" in out
    proc = run_process("verify", file_url, "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"] is True
    assert (doc["withdrawn"], doc["reservations"], doc["settled"], doc["pins"]) == \
        ([3], [5], [8], 1)


def test_verify_does_not_judge_a_stale_writers_leftovers_below_the_horizon(file_url: str,
                                                                          capsys) -> None:
    """A stale writer at version 2 commits version 11 after GC collected versions 1-3: its
    reservation re-creates the collected name 3 (below the horizon, where nothing is judged),
    is checked against the horizon and withdrawn before version 11 is created. Version 4, built
    on the collected 3, is no fork."""
    clock = silt.ManualClock(T0)
    with silt.open(file_url, settings=IDENTITY, clock=clock) as db:
        for v in range(1, 6):
            db.put(b"k", b"%d" % v)
            assert db.commit() == v
    stale = silt.open(file_url, version=2, settings=IDENTITY, clock=clock)
    collect_garbage(silt.open_store(file_url), retain_versions=2, grace_seconds=GRACE,
                    clock=clock)
    stale.put(b"k", b"stale")
    with pytest.raises(FencedError):
        stale.commit(11)
    stale.close()
    assert manifest_of(file_url, 3).skip_to == 11 and manifest_of(file_url, 4).parent == 3
    code, out, err = run(capsys, "verify", file_url, "--all")
    assert (code, err) == (0, ""), out
    assert "1 withdrawn (3): OK" in out
    assert 11 not in silt.versions(file_url)


def test_verify_reports_a_rolled_back_root(file_url: str, capsys) -> None:
    """The pinned newest manifest deleted: the pin marker names a version that is gone."""
    identity_root(file_url)
    (root_dir(file_url) / paths.manifest_key(8)).unlink()
    pin = paths.pin_key(8, next(iter(read_markers(silt.open_store(file_url)).pins))[1])
    kinds, err = verify_problems(capsys, file_url)
    assert kinds[pin] == "rollback" and f"{pin!r}" in err and "rolled back" in err
    assert kinds[paths.checkpoint_key("release")] == "missing"
    proc = run_process("verify", file_url)
    assert proc.returncode == 2 and b"rolled back" in proc.stderr


def test_verify_reports_a_pinned_manifest_restored_from_an_old_copy(file_url: str,
                                                                   capsys) -> None:
    """Version 8 replaced by another commit of the same number (another commit token)."""
    identity_root(file_url)
    old = manifest_of(file_url, 8)
    write_manifest(file_url, replace(old, token=uuid.uuid4().hex, l0=old.l0[1:]))
    kinds, err = verify_problems(capsys, file_url)
    assert kinds[paths.pin_key(8, old.token)] == "rollback"
    assert f"commit token {old.token}" in err and "number reused" in err


def test_verify_reports_a_checkpoint_of_a_withdrawn_version(file_url: str, capsys) -> None:
    identity_root(file_url)
    cp = root_dir(file_url) / paths.checkpoint_key("bad")
    cp.write_bytes(encode_checkpoint(3, T0, "t"))
    kinds, err = verify_problems(capsys, file_url)
    assert kinds == {paths.checkpoint_key("bad"): "missing"}
    assert "pins version 3" in err and "withdrew" in err


def test_verify_reports_a_damaged_fate_record(file_url: str, capsys) -> None:
    identity_root(file_url)
    flip_byte(root_dir(file_url) / paths.fate_key(3), 20)
    kinds, err = verify_problems(capsys, file_url)
    assert kinds == {paths.fate_key(3): "corruption"}
    assert "fate record checksum mismatch" in err


def test_verify_reports_a_fate_record_whose_manifest_is_gone(file_url: str, capsys) -> None:
    identity_root(file_url)
    (root_dir(file_url) / paths.manifest_key(3)).unlink()
    kinds, err = verify_problems(capsys, file_url)
    assert kinds == {paths.fate_key(3): "missing"}
    assert "not below the garbage-collection horizon 1" in err and "withdrawn" in err


@pytest.mark.parametrize("version, parent, forks", [(10, 4, [10]), (6, 5, [6, 8])],
                         ids=["beside", "reserved"])
def test_verify_reports_a_fork(file_url: str, capsys, version: int, parent: int,
                               forks: list[int]) -> None:
    """A version built on 4 past 5 and 8; or inside the numbers reservation 5 skipped (then 8,
    built on 5 as well, has it beside)."""
    identity_root(file_url)
    write_manifest(file_url, replace(manifest_of(file_url, 8), version=version, parent=parent,
                                     token=uuid.uuid4().hex))
    kinds, err = verify_problems(capsys, file_url)
    assert kinds == {paths.manifest_key(v): "fork" for v in forks}
    assert "history forked" in err


def test_verify_reports_a_reservation_that_is_not_its_parents_state(file_url: str,
                                                                     capsys) -> None:
    identity_root(file_url)
    write_manifest(file_url, replace(manifest_of(file_url, 5), l0=manifest_of(file_url, 8).l0))
    kinds, err = verify_problems(capsys, file_url)
    assert kinds == {paths.manifest_key(5): "corruption"}
    assert "reserves the numbers up to 8" in err


def test_verify_reports_a_missing_referenced_sibling_sst(tmp_path, capsys) -> None:
    """A kept version of ``b`` references ``a``'s SSTs; ``b``'s latest version compacted them
    into its own. Deleting one of ``a``'s SSTs breaks the older version: reported, by name."""
    a_url, b_url = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    with silt.open(a_url, settings=IDENTITY) as a:
        for i in range(300):
            a.put(key(i), value(i))
        assert a.commit() == 1
        with silt.open(b_url, settings=IDENTITY.replace(
                compaction="leveled", l0_compaction_trigger=1)) as b:
            b.reference(a, key(0), key(200))
            assert b.commit() == 1
            assert b.wait_for_compaction(30)
            b.put(b"x", b"y")
            assert b.commit() == 2
    refs = [s for s in manifest_of(b_url, 1).all_ssts() if s.db == "a"]
    assert refs and not any(s.db for s in manifest_of(b_url, 2).all_ssts())
    (tmp_path / "a" / paths.sst_key(refs[0].id)).unlink()
    kinds, err = verify_problems(capsys, b_url)
    name = f"../a/{paths.sst_key(refs[0].id)}"
    assert kinds == {name: "missing"} and "referenced by version 1" in err


# --- plugins -------------------------------------------------------------------------------------


def test_plugins(capsys) -> None:
    code, out, _ = run(capsys, "plugins")
    assert code == 0
    assert out.splitlines()[0].split() == ["PLUGIN", "DISTRIBUTION", "VERSION", "PROVIDES"]
    assert "tier file" in out and "tier memory" in out
    assert "pip install silt-tier-s3" in out and "pip install silt-cache-ssd" in out
    code, out, _ = run(capsys, "plugins", "--json")
    doc = json.loads(out)
    installed = {p["name"]: p for p in doc["installed"]}
    assert installed["file"]["provides"] == ["tier file"]
    assert installed["file"]["distribution"] == "silt-core"
    missing = {n["distribution"]: n for n in doc["not_installed"]}
    assert missing["silt-tier-gcs"]["provides"] == ["tier gs", "tier gcs"]
    assert missing["silt-tier-azure"]["install"] == "pip install silt-tier-azure"
    assert missing["silt-tier-azure"]["from_checkout"] == "pip install ./packages/tier-azure"


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not-a-url", "is not a store URL"),
        ("s3://bucket/state", "no tier installed for 's3://' - pip install silt-tier-s3"),
        ("gs://bucket/state", "pip install silt-tier-gcs"),
        ("nosuch://x", "no tier installed for 'nosuch://'"),
        ("file://relative/path", "a file:// URL holds an absolute path"),
        ("memory://x?cache=ssd", "pip install silt-cache-ssd"),
    ],
)
def test_bad_urls(url: str, message: str, capsys) -> None:
    for command in (["ls", url], ["get", url, "k"], ["verify", url]):
        code, out, err = run(capsys, *command)
        assert code == 1, command
        assert out == ""
        assert err.startswith("silt: error: ") and message in err
        assert "Traceback" not in err


def test_missing_file_root_is_not_created(tmp_path, capsys) -> None:
    target = tmp_path / "typo"
    code, _, err = run(capsys, "ls", target.as_uri())
    assert code == 1 and "does not exist" in err
    assert not target.exists()


def test_usage_errors(capsys) -> None:
    code, _, err = run(capsys)
    assert code == 2 and "usage: silt" in err
    code, _, err = run(capsys, "scan", "memory://x", "--limit", "-1")
    assert code == 2 and "is negative" in err
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "verify" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gc", "memory://x", "--grace", "inf"], "'inf' is not a finite number of seconds"),
        (["gc", "memory://x", "--grace=-inf"], "'-inf' is not a finite number of seconds"),
        (["gc", "memory://x", "--grace", "nan"], "'nan' is not a finite number of seconds"),
        (["gc", "memory://x", "--grace", "NaN"], "'NaN' is not a finite number of seconds"),
        (["gc", "memory://x", "--grace", "-1"], "'-1' is negative"),
        (["gc", "memory://x", "--grace", "1e300"], "'1e300' is more than the maximum"),
        (["gc", "memory://x", "--grace", "soon"], "'soon' is not a number of seconds"),
        (["gc", "memory://x", "--retain", "0"], "'0' must be at least 1"),
        (["gc", "memory://x", "--retain", "-3"], "'-3' must be at least 1"),
        (["gc", "memory://x", "--retain", "1e3"], "'1e3' is not an integer"),
        (["gc", "memory://x", "--retain", "9" * 21], "is larger than the maximum 9{20}"),
        (["get", "memory://x", "k", "--version", "-1"], "'-1' is negative"),
        (["get", "memory://x", "k", "--version", "1" + "0" * 20], "larger than the maximum"),
        (["inspect", "memory://x", "--version", "nan"], "'nan' is not an integer"),
        (["verify", "memory://x", "--version", "inf"], "'inf' is not an integer"),
        (["checkpoint", "memory://x", "c", "--version", "-2"], "'-2' is negative"),
        (["scan", "memory://x", "--limit", "2" * 30], "larger than the maximum"),
        (["compact", "memory://x", "--interval", "inf"], "'inf' is not a finite number"),
        (["compact", "memory://x", "--interval", "nan"], "'nan' is not a finite number"),
        (["compact", "memory://x", "--iterations", "-1"], "'-1' is negative"),
    ],
)
def test_numeric_arguments_are_checked(capsys, argv: list[str], message: str) -> None:
    """``--grace inf`` used to reach GC (an OverflowError traceback) and ``--grace nan`` said
    "is negative": every numeric argument is now a usage error naming the value."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert re.search(f"error: argument --[a-z]+: .*{message}", err), err
    assert "Traceback" not in err


def test_settings_given_to_compact_are_checked(capsys) -> None:
    for item, message in [
        ("gc_grace_seconds=inf", "gc_grace_seconds must be a number of seconds in 0..10000000000"),
        ("compaction_poll_seconds=nan", "compaction_poll_seconds must be a number of seconds"),
        ("block_bytes=99999999999", r"block_bytes must be in 64..536870912"),
        ("upload_parallelism=-4", r"upload_parallelism must be in 1..1024"),
    ]:
        code, _, err = run(capsys, "compact", "memory://x", "--set", item)
        assert code == 1 and re.search(f"silt: error: Settings.{message}", err), err


def _plant_manifest(url: str, version: int, body: bytes) -> None:
    """Write ``manifest/<version>`` holding ``body`` under a valid header and checksum: what a
    crafted (or bit-rotted and re-checksummed) manifest looks like to a reader."""
    rest = struct.pack("<I", 1) + body
    data = MANIFEST_MAGIC + struct.pack("<I", zlib.crc32(rest)) + rest
    (root_dir(url) / paths.manifest_key(version)).write_bytes(data)


def _crafted_bodies(good: dict) -> dict[str, bytes]:
    """Version 2 bodies, each damaged in one way, made from version 1's decoded ``good``."""
    def with_sst(**changes: object) -> bytes:
        d = {**good, "version": 2, "parent": 1}
        d["l0"] = [{**d["l0"][0], **changes}, *d["l0"][1:]]
        return json.dumps(d).encode()

    def top(**changes: object) -> bytes:
        return json.dumps({**good, "version": 2, "parent": 1, **changes}).encode()

    return {
        "deeply nested": b'{"version":2,"meta":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "size 2^40": with_sst(size=2**40),
        "size 2^63": with_sst(size=2**63),
        "size 2^64+1": with_sst(size=2**64 + 1),
        "negative size": with_sst(size=-1),
        "tail past the end": with_sst(tail_offset=2**62),
        "negative tail": with_sst(tail_offset=-52),
        "entries not a number": with_sst(entries="many"),
        "size a float": with_sst(size=1e300),
        "size a bool": with_sst(size=True),
        "bad hex key": with_sst(smallest="zz"),
        "keys out of order": with_sst(smallest="ff", largest="00"),
        "lone surrogate in meta": top(meta={"query": "\ud800"}),
        "meta not a map": top(meta=["query"]),
        "meta value a number": top(meta={"n": 1}),
        "levels not lists": top(levels=[1, 2]),
        "l0 not a list": top(l0={"id": "x"}),
        "version a string": top(version="2"),
        "huge version": top(version=10**30),
        "parent after version": top(parent=7),
        "body a list": b"[1, 2, 3]",
        "body not JSON": b"{not json",
        "body not UTF-8": b'{"version": "\xff\xfe"}'.replace(b"\\xff\\xfe", b"\xff\xfe"),
        "number with 5000 digits": top().replace(b'"version": 2', b'"version": ' + b"9" * 5000),
        "NaN created_ms": top(created_ms=float("nan")),
    }


@pytest.fixture
def tiny_root(file_url: str) -> tuple[str, dict]:
    """One committed version with one SST; returns the URL and version 1's JSON body."""
    with silt.open(file_url, settings=silt.Settings(inline_delta_bytes=0)) as db:
        db.put(b"k", b"v")
        db.commit(meta={"query": "q1"})
    body = json.loads((root_dir(file_url) / paths.manifest_key(1)).read_bytes()[16:])
    return file_url, body


def test_crafted_manifests_are_reported_by_every_command(tiny_root, capsys) -> None:
    """Deep nesting used to raise RecursionError in every command, an SST size of 2^40 or 2^63
    MemoryError/OverflowError in get and scan, a lone surrogate in meta crashed ls and inspect.
    Every crafted manifest is now one ``corruption in`` line and exit status 2 (or, for ls and
    inspect of a manifest whose only fault is an SST's size, a normal listing)."""
    url, good = tiny_root
    commands = [["ls"], ["inspect"], ["inspect", "--json"], ["get", "k"], ["scan"], ["verify"],
                ["verify", "--all"], ["gc", "--dry-run"], ["compact"], ["checkpoint", "c1"],
                ["ls", "--json"]]
    for case, body in _crafted_bodies(good).items():
        _plant_manifest(url, 2, body)
        for command in commands:
            argv = [command[0], url, *command[1:]]
            code, _, err = run(capsys, *argv)
            assert "unexpected" not in err and "Traceback" not in err, (case, argv, err)
            lines = err.splitlines()
            if code == 0:  # only commands that never read SST tails, for a bad SST size
                assert case.startswith(("size 2^40", "tail past")), (case, argv)
                assert command[0] in ("ls", "inspect", "gc", "compact", "checkpoint"), argv
                continue
            assert code == 2, (case, argv, code, err)
            assert any("corruption in" in line for line in lines), (case, argv, err)
        with pytest.raises(CorruptionError):
            with silt.open(url) as db:
                db.get(b"k")
                list(db.scan())


def test_crafted_ssts_are_reported_by_every_command(file_url: str, capsys) -> None:
    """SSTs whose tail or blocks are impossible behind valid checksums (offsets past the end,
    counts of billions, lz4 sizes of gigabytes, ...), referenced by a manifest that matches
    them: one ``corruption in 'sst/...'`` line and status 2 from every command that reads
    them, and CorruptionError from the API."""
    with silt.open(file_url, settings=silt.Settings(block_bytes=128, compaction="none",
                                                    inline_delta_bytes=0)) as db:
        for i in range(60):
            db.put(b"key-%03d" % i, b"value-%d" % i)
        db.commit()
    store = silt.open_store(file_url)
    good = silt.read_manifest(store, 1)
    (info,) = good.l0
    raw = store.get(paths.sst_key(info.id))
    for n, (case, (data, tail_is_bad)) in enumerate(sstparts.crafted_variants(raw).items()):
        sst_id = paths.new_id()
        store.put(paths.sst_key(sst_id), data)
        tail = FOOTER.unpack_from(data, len(data) - FOOTER_SIZE)[0]
        crafted = replace(info, id=sst_id, size=len(data),
                          tail_offset=tail if 0 <= tail <= len(data) - FOOTER_SIZE else 0)
        store.put(paths.manifest_key(2 + n), replace(good, version=2 + n, parent=1 + n,
                                                     l0=(crafted,)).encode())
        reads = [["scan"], ["verify"]] + ([["get", "key-007"], ["inspect", "--tails"]]
                                          if tail_is_bad else [])
        for command in reads:
            code, _, err = run(capsys, command[0], file_url, *command[1:])
            assert code == 2 and "unexpected" not in err, (case, command, err)
            assert f"corruption in {paths.sst_key(sst_id)!r}" in err, (case, command, err)
        with silt.open(file_url) as db:
            with pytest.raises(CorruptionError):
                list(db.scan())
            if tail_is_bad:
                with pytest.raises(CorruptionError):
                    db.multi_get([b"key-001", b"key-050"])
    store.close()


def test_crafted_manifest_in_a_real_process_is_one_line(tiny_root) -> None:
    url, good = tiny_root
    for case in ("deeply nested", "lone surrogate in meta", "size 2^40"):
        _plant_manifest(url, 2, _crafted_bodies(good)[case])
        for argv in (["scan", url], ["inspect", url], ["ls", url]):
            proc = run_process(*argv)
            if case == "size 2^40" and argv[0] != "scan":
                assert proc.returncode == 0, proc.stderr
                continue
            assert proc.returncode == 2, (case, argv, proc.stderr)
            assert b"Traceback" not in proc.stderr
            assert b"silt: error: corruption in 'manifest/00000000000000000002'" in proc.stderr or (
                case == "size 2^40" and b"silt: error: corruption in 'sst/" in proc.stderr
            ), proc.stderr


def test_unexpected_errors_are_one_line_with_a_hint(mem_root: str, capsys, monkeypatch) -> None:
    """A bug (here: a tier that raises something silt does not expect) is reported in one line
    that says what to do, never as a traceback."""

    def broken(self, *args, **kwargs):
        raise RuntimeError("tier exploded\nwith a second line")

    monkeypatch.setattr(MemoryStore, "list", broken)
    code, out, err = run(capsys, "ls", mem_root)
    assert code == 1 and out == ""
    assert err == (
        "silt: error: unexpected RuntimeError: tier exploded. This is a bug in silt or an "
        "installed plugin; please report it with the command that caused it (`silt plugins` "
        "lists versions)\n"
    )


# --- as a real process ---------------------------------------------------------------------------


def test_process_ls_and_get(root: str) -> None:
    proc = run_process("ls", root, "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["version"] for r in json.loads(proc.stdout)] == [1, 2]
    proc = run_process("get", root, "00ff", "--key-hex")
    assert (proc.returncode, proc.stdout) == (0, b"bin\tary\n")
    proc = run_process("get", root, "k00001")
    assert proc.returncode == 1 and proc.stdout == b""
    assert b"not found" in proc.stderr


def test_process_scan_and_inspect(root: str) -> None:
    proc = run_process("scan", root, "--prefix", "zür")
    assert (proc.returncode, proc.stdout.decode()) == (0, "zürich\t€\n")
    proc = run_process("inspect", root, "--tails")
    assert proc.returncode == 0 and b"version   2" in proc.stdout


def test_process_verify_corruption(root: str) -> None:
    assert run_process("verify", root, "--all").returncode == 0
    name, path = biggest_sst(root)
    flip_byte(path, path.stat().st_size // 2)
    proc = run_process("verify", root)
    assert proc.returncode == 2
    assert name.encode() in proc.stderr and b"corruption in" in proc.stderr
    assert b"Traceback" not in proc.stderr


def test_process_errors_and_plugins(tmp_path) -> None:
    proc = run_process("ls", "s3://bucket/x")
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == (
        "silt: error: no tier installed for 's3://' - pip install silt-tier-s3 (before it is on "
        "PyPI: pip install ./packages/tier-s3 from a silt checkout, or dist/silt_tier_s3-*.whl "
        "after nox -s build)"
    )
    proc = run_process("plugins")
    assert proc.returncode == 0 and b"tier memory" in proc.stdout
    proc = run_process("get", (tmp_path / "missing").as_uri(), "k")
    assert proc.returncode == 1 and b"does not exist" in proc.stderr


def test_version_names_the_distribution_and_the_hot_path() -> None:
    from importlib.metadata import version

    proc = run_process("--version")
    assert proc.returncode == 0, proc.stderr
    compiled = all(silt.speedups().values())
    kind = "compiled" if compiled else "pure Python"
    want = f"silt-core {version('silt-core')} ({kind} hot path)"
    assert proc.stdout.decode().strip() == want


# --- binary data, terminals and progress ---------------------------------------------------------


def unescape(text: str) -> bytes:
    """The inverse of :func:`silt.cli.escape` (a test's own decoder: a silent ambiguity in the
    escaping shows up as a round trip that differs)."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        kind = text[i + 1]
        width = {"\\": 0, "x": 2, "u": 4, "U": 8}[kind]
        digits = text[i + 2:i + 2 + width]
        if kind == "\\":
            out += b"\\"
        elif kind == "x":
            out.append(int(digits, 16))
        else:
            out += chr(int(digits, 16)).encode()
        i += 2 + width
    return bytes(out)


@given(st.binary(max_size=64))
@settings(max_examples=500, deadline=None)
def test_escape_round_trips_any_bytes(data: bytes) -> None:
    text = escape(data)
    assert "\t" not in text and "\n" not in text and "\r" not in text
    assert text.isprintable()
    assert unescape(text) == data


@given(st.dictionaries(st.binary(min_size=1, max_size=24), st.binary(max_size=48),
                       min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_scan_prints_any_binary_keys_and_values_as_one_line_each(items: dict[bytes, bytes]) -> None:
    """Whatever bytes a DB holds, ``silt scan`` prints one ``key<TAB>value`` line per entry
    that decodes back to exactly those bytes (and ``--hex`` too)."""
    name = f"cli-bin-{uuid.uuid4().hex}"
    url = f"memory://{name}"
    try:
        with silt.open(url) as db:
            for k, v in items.items():
                db.put(k, v)
            db.commit()
        for hex_mode in (False, True):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert main(["scan", url, *(["--hex"] if hex_mode else [])]) == 0
            lines = out.getvalue().split("\n")
            assert lines.pop() == ""  # every line ends with a newline
            decode = bytes.fromhex if hex_mode else unescape
            got = [tuple(decode(part) for part in line.split("\t")) for line in lines]
            assert all(len(pair) == 2 for pair in got), lines
            assert got == sorted(items.items())
    finally:
        MemoryStore.drop(name)


def run_on_terminal(*argv: str, stream: str,
                    env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    """``python -m silt ARGV`` with its ``stream`` ("stdout" or "stderr") on a pseudo-terminal
    of 100x30 and the other one piped, with ``env`` added to the environment: (status, what the
    terminal showed, the pipe's bytes)."""
    import fcntl
    import pty
    import termios

    environ = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(CORE_SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    environ["SILT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    environ.update(env or {})
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: slave}
    proc = subprocess.Popen([sys.executable, "-m", "silt", *argv], env=environ,
                            stdin=subprocess.DEVNULL, **pipes)
    os.close(slave)
    shown = bytearray()
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end of the terminal
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, bytes(shown), (err if stream == "stdout" else out)


def test_get_on_a_terminal_prints_one_escaped_line(root: str) -> None:
    """Raw bytes go to a pipe or file (test_process_ls_and_get); a person at a terminal sees
    the value escaped as scan escapes it, on one line, instead of control bytes."""
    code, shown, err = run_on_terminal("get", root, "00ff", "--key-hex", stream="stdout")
    assert (code, err) == (0, b""), err
    assert shown == b"bin\\x09ary\\x0a\r\n"  # the terminal turns "\n" into "\r\n"
    code, shown, _ = run_on_terminal("get", root, "zürich", stream="stdout")
    assert (code, shown) == (0, "€\r\n".encode())
    code, shown, _ = run_on_terminal("get", root, "00ff", "--key-hex", "--hex", stream="stdout")
    assert (code, shown) == (0, b"bin\tary\n".hex().encode() + b"\r\n")


def fill_root_of_dbs(folder: pathlib.Path, small: silt.Settings, dbs: int, versions: int) -> str:
    """``dbs`` DBs under ``folder`` (as an operator's shards), each with ``versions`` versions
    of several SSTs, written at T0 (so GC may delete what they leave behind)."""
    for d in range(dbs):
        clock = silt.ManualClock(T0)
        writer = small.replace(compaction="none", inline_delta_bytes=0)
        with silt.open((folder / f"kg-{d}").as_uri(), settings=writer, clock=clock) as db:
            for v in range(versions):
                for i in range(800):
                    db.put(key(i), value(i * (v + 1)))
                db.commit()
                clock.advance(1000)
    return folder.as_uri()


def test_progress_callbacks_count_every_db_and_sst(tmp_path, small: silt.Settings) -> None:
    """The core's progress hooks (silt.progress): verify reports each DB of a root and each
    SST of each DB up to the number it checked; GC each DB and every object it deleted;
    compaction each output SST."""
    from silt.compaction.external import compact_once
    from silt.compaction.task import make_policy

    url = fill_root_of_dbs(tmp_path / "ops", small, dbs=3, versions=3)
    calls: list[tuple[str, int, int | None]] = []
    report = silt.verify(url, all_versions=True,
                         progress=lambda *call: calls.append(call))
    assert report.ok and len(report.dbs) == 3
    assert [c for c in calls if c[0] == "DBs"] == [("DBs", i, 3) for i in range(4)]
    runs: list[list[tuple[str, int, int | None]]] = []
    for call in calls:
        if call[0] == "SSTs":
            if call[1] == 0:
                runs.append([])
            runs[-1].append(call)
    assert len(runs) == 3
    for run_, db in zip(runs, report.dbs.values(), strict=True):
        total = db.counts["ssts"] + db.counts["inline_ssts"]
        assert total >= 3  # one SST per version at least
        assert run_ == [("SSTs", i, total) for i in range(total + 1)]

    calls.clear()
    store = silt.plugins.open_store(url)
    try:
        gc = collect_garbage(store, retain_versions=1, grace_seconds=small.gc_grace_seconds,
                             progress=lambda *call: calls.append(call))
    finally:
        store.close()
    deleted = (len(gc.deleted_manifests) + len(gc.deleted_ssts) + len(gc.deleted_records))
    assert deleted >= 6  # two old manifests per DB at least
    assert [c for c in calls if c[0] == "DBs"] == [("DBs", i, 3) for i in range(4)]
    objects = [c for c in calls if c[0] == "objects"]
    assert objects and objects[-1][1:] >= (deleted, deleted)
    assert [c[1] for c in objects] == sorted(c[1] for c in objects)

    calls.clear()
    one = silt.plugins.open_store(f"{url}/kg-0")
    compacting = small.replace(l0_compaction_trigger=2)
    try:
        done = compact_once(one, f"{url}/kg-0", compacting, make_policy("leveled", compacting),
                            silt.ManualClock(T0 + 10_000),
                            progress=lambda *call: calls.append(call))
    finally:
        one.close()
    assert done.status == "compacted" and done.record is not None
    assert calls == [("SSTs", i, None) for i in range(1, len(done.record.outputs) + 1)]


def test_progress_is_drawn_on_a_terminal_and_never_into_a_pipe(tmp_path,
                                                                small: silt.Settings) -> None:
    """verify, gc and compact draw tqdm bars on stderr while it is a terminal; piped (as in
    scripts, CI logs and these tests' other runs) stderr holds no bar, and stdout never does."""
    url = fill_root_of_dbs(tmp_path / "ops", small, dbs=3, versions=2)
    commands = {
        "verify": (["verify", url, "--all"], [b" DBs", b" SSTs"]),
        "gc": (["gc", url, "--retain", "1"], [b" DBs", b" objects"]),
        "compact": (["compact", f"{url}/kg-1", "--set", "l0_compaction_trigger=2"], [b" SSTs"]),
    }
    for name, (argv, units) in commands.items():
        code, shown, out = run_on_terminal(*argv, stream="stderr")
        assert code == 0, (name, shown)
        assert f"silt {name}:".encode() in shown, (name, shown)
        for unit in units:
            assert unit in shown, (name, unit, shown)
        assert b"silt " not in out and b"\r" not in out, (name, out)
    # tqdm's own switch turns them off on a terminal too.
    code, shown, _ = run_on_terminal("verify", url, env={"TQDM_DISABLE": "1"}, stream="stderr")
    assert (code, shown) == (0, b"")
    # A fresh root, so gc and compact have the same work to do, now piped.
    url = fill_root_of_dbs(tmp_path / "piped", small, dbs=3, versions=2)
    for argv in (["verify", url, "--all"], ["gc", url, "--retain", "1"],
                 ["compact", f"{url}/kg-1", "--set", "l0_compaction_trigger=2"]):
        proc = run_process(*argv)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == b"", (argv, proc.stderr)
        assert b"\r" not in proc.stdout and b"%|" not in proc.stdout


def test_set_reads_booleans_by_their_words() -> None:
    """``silt compact --set refill_after_compaction=false`` means False (``bool("false")`` is
    True, which made every boolean setting impossible to turn off)."""
    import argparse

    from silt.cli.args import settings_from

    for text, want in (("false", False), ("False", False), ("0", False), ("no", False),
                       ("true", True), ("1", True), ("YES", True)):
        args = argparse.Namespace(set=[f"refill_after_compaction={text}"], policy=None)
        assert settings_from(args).refill_after_compaction is want, text
    args = argparse.Namespace(set=["refill_after_compaction=maybe"], policy=None)
    with pytest.raises(silt.errors.InvalidArgumentError, match="not a valid bool"):
        settings_from(args)
