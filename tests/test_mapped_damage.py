"""An SST shrunk by another process while this one reads it: the reads report a
:class:`~silt.errors.CorruptionError` and the process lives on.

A reader that touched a page of a memory map that the file no longer has would die of
``SIGBUS`` with no message; block reads are ``pread`` calls (:mod:`silt.tiers.blockread`),
which read short instead, and the reader maps no SST. So the reader runs in a child process
(under each twin): it opens a DB on ``file://``, reads every key (its descriptor cached, some
of its blocks in the block cache), then the parent damages the SST and the child reads every
key again, through the open DB and through a DB opened afresh (which reads the tail again
through the same cached descriptor). It must exit normally having got a ``CorruptionError``,
no wrong value and no map of the SST; a read may still return a value read and checked before
the damage (a cached block).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import silt

N = 3000
#: Small blocks, a cache that holds some of them; uncompressed blocks are the ones a compiled
#: decoder could read in place (lz4 ones are decompressed into memory of their own).
SETTINGS = dict(inline_delta_bytes=0, block_bytes=1024, block_cache_bytes=32 * 1024)

CHILD = r"""
import json, os, sys
import silt
from silt.errors import CorruptionError

url, n = sys.argv[1], int(sys.argv[2])
settings = silt.Settings(**json.loads(sys.argv[3]))
keys = [b"k%06d" % i for i in range(n)]
want = {k: b"value-%d-" % i * 3 for i, k in enumerate(keys)}
db = silt.open(url, settings=settings)
assert [db.get(k) for k in keys] == [want[k] for k in keys]
print("ready", flush=True)
sys.stdin.readline()  # the parent damages the SST now
seen = {"values": 0, "corruption": 0, "wrong": 0}

def read_all(db):
    for k in keys:
        try:
            got = db.get(k)
        except CorruptionError:
            seen["corruption"] += 1
            continue
        seen["values" if got == want[k] else "wrong"] += 1
    try:
        for k, v in db.scan():
            seen["values" if v == want.get(k) else "wrong"] += 1
    except CorruptionError:
        seen["corruption"] += 1

read_all(db)
with silt.open(url, settings=settings) as fresh:
    read_all(fresh)
seen["maps"] = 0
if os.path.exists("/proc/self/maps"):  # Linux: no SST of this process is mapped
    with open("/proc/self/maps") as f:
        seen["maps"] = sum(1 for line in f if line.rstrip().endswith(".sst"))
print(json.dumps(seen), flush=True)
"""


def damage(path: pathlib.Path, how: str, tail_offset: int, block_size: int) -> None:
    """Shrink the SST at ``path`` from this (the parent) process."""
    size = path.stat().st_size
    if how == "to zero":
        os.truncate(path, 0)
    elif how == "mid-block":
        os.truncate(path, 5 * block_size + block_size // 2)
    elif how == "mid-tail":
        os.truncate(path, tail_offset + (size - tail_offset) // 2)
    elif how == "to zero, then grown back":  # the old size again, its bytes gone (zeros)
        os.truncate(path, 0)
        os.truncate(path, size)
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize("compression", ["none", "lz4"])
@pytest.mark.parametrize("twin", ["compiled", "pure"])
@pytest.mark.parametrize("how", ["to zero", "mid-block", "mid-tail", "to zero, then grown back"])
def test_a_shrunk_sst_is_corruption_not_a_crash(tmp_path: pathlib.Path, twin: str,
                                                how: str, compression: str) -> None:
    url = (tmp_path / "db").as_uri()
    options = {**SETTINGS, "compression": compression}
    settings = silt.Settings(**options)
    with silt.open(url, settings=settings) as db:
        db.put_many([b"k%06d" % i for i in range(N)],
                    [b"value-%d-" % i * 3 for i in range(N)])
        db.commit()
        (info,) = db.manifest.l0
    (sst,) = (tmp_path / "db" / "sst").iterdir()
    env = dict(os.environ)
    env.pop("SILT_NO_EXTENSIONS", None)
    env.pop("SILT_REQUIRE_EXTENSIONS", None)
    env["SILT_NO_EXTENSIONS" if twin == "pure" else "SILT_REQUIRE_EXTENSIONS"] = "1"
    child = subprocess.Popen([sys.executable, "-c", CHILD, url, str(N), json.dumps(options)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read()  # type: ignore[union-attr]
        damage(sst, how, info.tail_offset, settings.block_bytes)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, f"the reader died ({child.returncode}): {err[-2000:]}"
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["wrong"] == 0 and seen["corruption"] > 0 and seen["maps"] == 0, seen
