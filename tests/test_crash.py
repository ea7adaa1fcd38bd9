"""Crash safety with real processes: a writer killed with SIGKILL at random points.

The writer (a subprocess) writes deterministic data for version ``v`` (keys and values derived
from ``v``: overwrites, deletes, enough to freeze the small memtable several times), flushes,
commits ``v`` and prints ``committed v``. The parent kills it at random moments (while writing,
flushing or committing), reopens the root and checks invariant 7: the latest version is the last
one the writer reported (or the one it was committing when it died) and holds exactly that
version's state, recomputed here from the same deterministic recipe.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import silt
from silt import paths
from silt.manifest import Manifest

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

SRC = str(Path(silt.__file__).resolve().parent.parent)

#: The recipe, shared verbatim by the writer and the parent.
RECIPE = textwrap.dedent(
    """
    import random

    NKEYS = 1500

    def ops_for(version, size):
        rng = random.Random(version * 7919 + size)
        out = []
        for i in range(size):
            key = b"k%05d" % rng.randrange(NKEYS)
            if rng.random() < 0.12:
                out.append((key, None))
            else:
                out.append((key, b"v%d-%d|" % (version, i) * rng.randint(1, 8)))
        return out
    """
)

WRITER = RECIPE + textwrap.dedent(
    """
    import os
    import sys
    import silt

    def say(*words):
        # One write(2) per line: a kill never leaves half a line for the parent to misread.
        os.write(1, (" ".join(map(str, words)) + "\\n").encode())

    url, size = sys.argv[1], int(sys.argv[2])
    inline = sys.argv[3:] == ["inline"]  # no flush: small versions ride in their manifests
    settings = silt.Settings(memtable_bytes=4 * 1024, block_bytes=256, block_cache_bytes=64 * 1024,
                             inline_max_entries=3)
    db = silt.open(url, settings=settings)
    version = (db.version or 0) + 1
    say("start", version - 1)
    while True:
        ops = ops_for(version, size)
        half = len(ops) // 2
        for key, value in ops[:half]:
            if value is None:
                db.delete(key)
            else:
                db.put(key, value)
        say("flushing", version)
        if not inline:
            db.flush()
        for key, value in ops[half:]:
            if value is None:
                db.delete(key)
            else:
                db.put(key, value)
        say("committing", version)
        assert db.commit() == version
        say("committed", version)
        version += 1
    """
)

recipe: dict = {}
exec(RECIPE, recipe)


class Model:
    """Expected state per version, computed incrementally from the recipe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.states: dict[int, dict[bytes, bytes]] = {0: {}}

    def state(self, version: int) -> dict[bytes, bytes]:
        top = max(self.states)
        while top < version:
            state = dict(self.states[top])
            top += 1
            for key, value in recipe["ops_for"](top, self.size):
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = value
            self.states[top] = state
        return self.states[version]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env["SILT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def run_and_kill(script: Path, url: str, size: int, lines_before_kill: int, delay: float,
                 *args: str) -> list:
    """Start the writer, kill it ``delay`` seconds after its ``lines_before_kill``-th line.

    Returns every line it printed (read to the end after the kill).
    """
    proc = subprocess.Popen(
        [sys.executable, str(script), url, str(size), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        while len(lines) < lines_before_kill:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        # Read the rest through the same buffered streams readline used (communicate() would
        # read the raw pipes and miss what readline already buffered). The writer is dead, so
        # both pipes are at EOF.
        out = proc.stdout.read()
        err = proc.stderr.read() if proc.stderr is not None else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines.extend(line.strip() for line in out.splitlines())
    assert proc.returncode == -signal.SIGKILL, f"writer ended by itself: {err}"
    assert lines and lines[0].startswith("start"), err
    return lines


def last_committed(lines: list[str]) -> int:
    last = int(lines[0].split()[1])
    for line in lines[1:]:
        word, version = line.split()
        if word == "committed":
            assert int(version) == last + 1
            last = int(version)
    return last


def check_manifests(root: Path) -> list[int]:
    """Every object under manifest/ decodes (no partial manifest); versions are contiguous."""
    names = sorted(os.listdir(root / "manifest")) if (root / "manifest").exists() else []
    versions = []
    for name in names:
        key = f"{paths.MANIFEST_PREFIX}{name}"
        version = paths.parse_manifest_key(key)
        assert version is not None, f"stray object {key!r} under manifest/"
        manifest = Manifest.decode((root / "manifest" / name).read_bytes(), key)
        assert manifest.version == version
        for sst in manifest.objects():  # (inline deltas: the manifest carries them)
            path = root / paths.sst_key(sst.id)
            assert path.stat().st_size == sst.size, f"{path} missing or wrong size"
        versions.append(version)
    assert versions == list(range(1, len(versions) + 1))
    return versions


def check_state(url: str, model: Model, low: int) -> int:
    """Reopen; the latest version is ``low`` or ``low + 1`` and holds exactly its state."""
    with silt.open(url) as db:
        latest = db.version or 0
        assert low <= latest <= low + 1, (low, latest)
        expected = model.state(latest)
        assert dict(db.scan()) == expected
        assert list(db.scan()) == sorted(expected.items())
        keys = [b"k%05d" % i for i in range(recipe["NKEYS"])]
        assert db.multi_get(keys) == [expected.get(k) for k in keys]
        for key in keys[::37]:
            assert db.get(key) == expected.get(key)
    return latest


def test_sigkill_at_random_points_keeps_the_last_commit(tmp_path: Path) -> None:
    root = tmp_path / "root"
    url = root.as_uri()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    size = 240
    model = Model(size)
    rng = random.Random(20240601)
    rounds = 16
    for round_no in range(rounds):
        # Lines come as: start, then per version: flushing, committing, committed.
        lines_before_kill = rng.randrange(1, 11)
        delay = rng.uniform(0, 0.05)
        if round_no % 4 == 3:
            delay = rng.uniform(0, 0.003)  # right after "flushing"/"committing"
        lines = run_and_kill(script, url, size, lines_before_kill, delay)
        reported = last_committed(lines)
        latest = check_state(url, model, reported)
        assert check_manifests(root) == list(range(1, latest + 1))
    # The writer made progress across restarts.
    assert (silt.versions(url) or [0])[-1] >= rounds // 2


def test_sigkill_during_commits_never_leaves_a_partial_manifest(tmp_path: Path) -> None:
    """Tiny versions committed back to back, so most kills land inside a commit."""
    root = tmp_path / "root"
    url = root.as_uri()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    size = 4
    model = Model(size)
    rng = random.Random(7)
    for _ in range(10):
        lines = run_and_kill(script, url, size, rng.randrange(1, 40), rng.uniform(0, 0.03))
        reported = last_committed(lines)
        latest = check_state(url, model, reported)
        assert check_manifests(root) == list(range(1, latest + 1))
        tmp = root / ".tmp"
        store = silt.open_store(url)
        listed = {info.key for info in store.list("")}
        store.close()
        assert not any(k.startswith(".tmp") for k in listed)
        # The engine's own objects only (gc/grace/: the writer's grace, announced before its
        # first upload).
        assert all(k.startswith(("manifest/", "sst/", "compaction/", paths.GRACE_PREFIX))
                   for k in listed), listed
        assert tmp.is_dir()


def test_sigkill_during_inline_commits_keeps_the_last_commit(tmp_path: Path) -> None:
    """Small versions without a flush: their deltas ride inline in the manifests, and every
    third commit folds them into an uploaded SST, so kills land in inline commits and folds."""
    root = tmp_path / "root"
    url = root.as_uri()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    size = 6
    model = Model(size)
    rng = random.Random(11)
    inline_seen = False
    for _ in range(10):
        lines = run_and_kill(script, url, size, rng.randrange(1, 40), rng.uniform(0, 0.03),
                             "inline")
        reported = last_committed(lines)
        latest = check_state(url, model, reported)
        assert check_manifests(root) == list(range(1, latest + 1))
        if latest:
            m = Manifest.decode((root / paths.manifest_key(latest)).read_bytes(), "m")
            inline_seen |= bool(m.inline_entries)
    assert inline_seen
