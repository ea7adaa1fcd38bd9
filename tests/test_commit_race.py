"""Writers racing for the same version, ambiguous commits, and failed uploads.

Invariant 2 (docs/architecture.md): a version's manifest is created with ``put_if_absent``, so two
writers can never both commit it; the loser gets ``CommitConflict`` and its uploaded SSTs are
unreferenced garbage. Lost responses are resolved with the commit token read back from the store.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import silt
from silt import paths
from silt.errors import CommitConflict, StoreError, TransientStoreError
from silt.sst.reader import SstReader
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore

SRC = str(Path(silt.__file__).resolve().parent.parent)


def is_manifest(key: str) -> bool:
    return key.startswith(paths.MANIFEST_PREFIX)


def is_sst(key: str) -> bool:
    return key.startswith(paths.SST_PREFIX)


def referenced_ssts(store: silt.ObjectStore) -> set[str]:
    out = set()
    for v in silt._list_versions(store):
        # (inline deltas are no objects: their manifest carries them)
        out |= {paths.sst_key(s.id) for s in silt.read_manifest(store, v).objects()}
    return out


def listed_ssts(store: silt.ObjectStore) -> set[str]:
    return {info.key for info in store.list(paths.SST_PREFIX)}


def sst_keys(store: silt.ObjectStore, name: str) -> set[bytes]:
    size = next(i.size for i in store.list(name) if i.key == name)
    reader = SstReader(store, name, None, None, size=size)
    return {k for k, _ in reader.iter_range(None, None)}


def open_store(url: str) -> silt.ObjectStore:
    return silt.open_store(url)


# --- (a) two writers in one process -------------------------------------------------------------


def test_two_writers_same_version_exactly_one_wins(url: str, small: silt.Settings) -> None:
    with silt.open(url, settings=small) as db:
        db.put(b"base", b"1")
        assert db.commit() == 1

    a = silt.open(url, settings=small)
    b = silt.open(url, settings=small)
    try:
        for i in range(2000):  # enough for several SSTs each
            a.put(b"a:%05d" % i, b"from-a-%d" % i)
            b.put(b"b:%05d" % i, b"from-b-%d" % i)
        a.put(b"shared", b"A")
        b.put(b"shared", b"B")
        assert a.commit() == 2
        with pytest.raises(CommitConflict) as info:
            b.commit()
        assert info.value.version == 2
        assert isinstance(info.value, silt.SiltError)
        assert "already committed by another writer" in str(info.value)
        assert "reopen" in str(info.value)
        # The loser's writes stay pending in the loser; its base is unchanged.
        assert b.version == 1
        assert b.get(b"shared") == b"B"
        assert b.get(b"a:00000") is None
    finally:
        a.close()
        b.close()

    assert silt.versions(url) == [1, 2]
    with silt.open(url, settings=small) as db:
        assert db.version == 2
        assert db.get(b"shared") == b"A"
        assert db.get(b"base") == b"1"
        assert db.get(b"a:01999") == b"from-a-1999"
        assert list(db.scan(prefix=b"b:")) == []
        assert db.multi_get([b"b:00000", b"b:01999"]) == [None, None]

    store = open_store(url)
    try:
        garbage = listed_ssts(store) - referenced_ssts(store)
        assert garbage, "the loser uploaded SSTs before trying to commit"
        loser_keys: set[bytes] = set()
        for name in garbage:
            loser_keys |= sst_keys(store, name)
        # (and the base's inline delta, which its commit folded into its last SST)
        assert loser_keys == {b"b:%05d" % i for i in range(2000)} | {b"shared", b"base"}
        for name in referenced_ssts(store):
            assert not any(k.startswith(b"b:") for k in sst_keys(store, name))
    finally:
        store.close()


def test_many_threads_race_for_one_version(url: str, small: silt.Settings) -> None:
    with silt.open(url, settings=small) as db:
        db.put(b"x", b"0")
        db.commit()
    n = 6
    dbs = [silt.open(url, settings=small) for _ in range(n)]
    try:
        for i, db in enumerate(dbs):
            db.put(b"x", b"%d" % i)
            db.flush()

        def attempt(i: int) -> str:
            try:
                dbs[i].commit(2)
                return "won"
            except CommitConflict:
                return "lost"

        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            outcomes = list(pool.map(attempt, range(n)))
    finally:
        for db in dbs:
            db.close()
    assert outcomes.count("won") == 1, outcomes
    winner = outcomes.index("won")
    with silt.open(url) as db:
        assert db.get(b"x") == b"%d" % winner


# --- (b) real processes behind a barrier --------------------------------------------------------

RACER = textwrap.dedent(
    """
    import os, sys, time
    import silt
    url, ident, go, version = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    settings = silt.Settings(memtable_bytes=16 * 1024, block_bytes=512)
    db = silt.open(url, version=version - 1, settings=settings)
    for i in range(300):
        db.put(b"p%d:%04d" % (ident, i), b"v%d-%d" % (version, i))
    db.put(b"winner", b"%d" % ident)
    db.flush()
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        db.commit(version)
    except silt.CommitConflict:
        print("lost", flush=True)
    else:
        print("won", flush=True)
    db.close()
    """
)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env["SILT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def test_processes_race_for_one_version(tmp_path: Path) -> None:
    url = (tmp_path / "root").as_uri()
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    with silt.open(url) as db:
        db.put(b"winner", b"none")
        db.commit()
    n = 4
    winners: dict[int, int] = {}
    for version in (2, 3):
        go = tmp_path / f"go-{version}"
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), url, str(i), str(go), str(version)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(), text=True,
            )
            for i in range(n)
        ]
        try:
            for p in procs:
                assert p.stdout is not None
                line = p.stdout.readline().strip()
                assert line == "ready", (line, p.stderr.read() if p.stderr else "")
            # The barrier: every racer is polling for this file. (A racer prints nothing between
            # "ready" and the file appearing, so readline buffered nothing communicate() misses.)
            go.touch()
            outcomes = []
            for p in procs:
                out, err = p.communicate(timeout=60)
                assert p.returncode == 0, err
                outcomes.append(out.strip())
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert sorted(outcomes) == ["lost"] * (n - 1) + ["won"], outcomes
        winner = outcomes.index("won")
        winners[version] = winner
        with silt.open(url) as db:
            assert db.version == version
            assert db.get(b"winner") == b"%d" % winner
            for i in range(n):
                rows = list(db.scan(prefix=b"p%d:" % i))
                won = [v for v, w in winners.items() if w == i]
                if won:  # the latest version this racer won holds its rows
                    assert rows == [(b"p%d:%04d" % (i, j), b"v%d-%d" % (max(won), j))
                                    for j in range(300)]
                else:
                    assert rows == []
        store = open_store(url)
        try:
            garbage = listed_ssts(store) - referenced_ssts(store)
            assert len(garbage) >= n - 1  # every loser uploaded at least one SST
        finally:
            store.close()


# --- (c) lost responses -------------------------------------------------------------------------


def test_lost_manifest_response_still_commits(small: silt.Settings) -> None:
    faulty = FaultyStore(MemoryStore())
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        db.put(b"k", b"v1")
        faulty.lose_response_next("put_if_absent", predicate=is_manifest)
        assert db.commit() == 1  # the retry saw "exists", the token proved it was ours
        assert faulty.pending_faults == 0
        assert faulty.calls["put_if_absent"] >= 2
        db.put(b"k", b"v2")
        assert db.commit() == 2
    with silt.open("memory://unused", store=faulty) as db:
        assert db.version == 2
        assert db.get(b"k") == b"v2"
    with silt.open("memory://unused", store=faulty, version=1) as db:
        assert db.get(b"k") == b"v1"


def test_lost_response_does_not_hide_a_real_conflict(small: silt.Settings) -> None:
    faulty = FaultyStore(MemoryStore())
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        db.put(b"k", b"base")
        db.commit()
    a = silt.open("memory://unused", settings=small, store=faulty)
    b = silt.open("memory://unused", settings=small, store=faulty)
    try:
        a.put(b"k", b"A")
        assert a.commit() == 2
        b.put(b"k", b"B")
        faulty.lose_response_next("put_if_absent", predicate=is_manifest)
        with pytest.raises(CommitConflict):
            b.commit()
        assert faulty.pending_faults == 0
    finally:
        a.close()
        b.close()
    with silt.open("memory://unused", store=faulty) as db:
        assert db.get(b"k") == b"A"


# --- (d) a commit whose outcome is unknown ------------------------------------------------------


def test_failed_commit_that_landed_is_adopted_by_the_next_commit(small: silt.Settings) -> None:
    faulty = FaultyStore(MemoryStore())
    db = silt.open("memory://unused", settings=small, store=faulty)
    try:
        db.put(b"k", b"v1")
        # The manifest is created, then the response is lost with a non-retryable error.
        faulty.lose_response_next("put_if_absent", predicate=is_manifest, error=StoreError)
        with pytest.raises(StoreError):
            db.commit()
        assert silt._list_versions(faulty) == [1]  # it did land
        db.put(b"k2", b"v2")
        # The next commit reads the token back, adopts version 1 and commits version 2.
        assert db.commit() == 2
        assert db.version == 2
    finally:
        db.close()
    with silt.open("memory://unused", store=faulty, version=1) as old:
        assert old.get(b"k") == b"v1"
        assert old.get(b"k2") is None
    with silt.open("memory://unused", store=faulty) as db:
        assert db.version == 2
        assert db.manifest.parent == 1
        assert (db.get(b"k"), db.get(b"k2")) == (b"v1", b"v2")


def test_failed_commit_that_did_not_land_is_redone(small: silt.Settings) -> None:
    faulty = FaultyStore(MemoryStore())
    db = silt.open("memory://unused", settings=small, store=faulty)
    try:
        db.put(b"k", b"v1")
        faulty.fail_matching("put_if_absent", is_manifest, StoreError)
        with pytest.raises(StoreError):
            db.commit()
        assert silt._list_versions(faulty) == []
        db.put(b"k2", b"v2")
        assert db.commit() == 1  # the earlier attempt did not happen: version 1 is still free
    finally:
        db.close()
    with silt.open("memory://unused", store=faulty) as db:
        assert db.version == 1
        assert (db.get(b"k"), db.get(b"k2")) == (b"v1", b"v2")


def test_uncertain_commit_taken_by_another_writer_is_not_adopted(small: silt.Settings) -> None:
    faulty = FaultyStore(MemoryStore())
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        db.commit()
    a = silt.open("memory://unused", settings=small, store=faulty)
    b = silt.open("memory://unused", settings=small, store=faulty)
    try:
        a.put(b"k", b"A")
        assert a.commit() == 2
        b.put(b"k", b"B")
        faulty.fail_matching("put_if_absent", is_manifest, StoreError)
        with pytest.raises(StoreError):
            b.commit()
        with pytest.raises(CommitConflict):  # version 2 belongs to a, not to b's lost attempt
            b.commit()
        assert b.version == 1
    finally:
        a.close()
        b.close()
    with silt.open("memory://unused", store=faulty) as db:
        assert db.get(b"k") == b"A"


# --- (e) failed SST uploads ---------------------------------------------------------------------


def test_transient_sst_upload_failures_are_retried(small: silt.Settings) -> None:
    faulty = FaultyStore(MemoryStore())
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        faulty.fail_matching("put_if_absent", is_sst, TransientStoreError, times=3)
        for i in range(3000):
            db.put(b"k%05d" % i, b"v%d" % i)
        assert db.commit() == 1
        assert faulty.pending_faults == 0
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        assert len(list(db.scan())) == 3000
        assert db.get(b"k02999") == b"v2999"


def test_lost_sst_upload_response_is_harmless(small: silt.Settings) -> None:
    faulty = FaultyStore(MemoryStore())
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        faulty.lose_response_next("put_if_absent", n=2, predicate=is_sst)
        for i in range(1000):
            db.put(b"k%05d" % i, b"v%d" % i)
        assert db.commit() == 1
    with silt.open("memory://unused", store=faulty) as db:
        assert db.multi_get([b"k00000", b"k00999"]) == [b"v0", b"v999"]


def test_permanent_sst_upload_failure_fails_the_commit(small: silt.Settings) -> None:
    faulty = FaultyStore(MemoryStore())
    with silt.open("memory://unused", settings=small, store=faulty) as db:
        db.put(b"committed", b"yes")
        db.commit()
    db = silt.open("memory://unused", settings=small, store=faulty)
    try:
        faulty.fail_matching("put_if_absent", is_sst, StoreError("disk on fire"), times=None)
        for i in range(2000):
            db.put(b"k%05d" % i, b"v%d" % i)
        with pytest.raises(StoreError, match="disk on fire"):
            db.commit()
        assert silt._list_versions(faulty) == [1]
        with silt.open("memory://unused", store=faulty) as other:
            assert other.version == 1
            assert other.get(b"k00000") is None
            assert list(other.scan()) == [(b"committed", b"yes")]
        # The writer still reads its own pending writes, and commits once the store recovers.
        assert db.get(b"k01999") == b"v1999"
        faulty.clear_faults()
        assert db.commit() == 2
    finally:
        db.close()
    with silt.open("memory://unused", store=faulty) as db:
        assert len(list(db.scan())) == 2001


def test_reads_stay_newest_first_while_an_older_upload_is_failing() -> None:
    """An older frozen memtable whose upload failed must not shadow a newer, uploaded one.

    With one upload thread and the first SST upload failing permanently, the first frozen
    memtable stays a memtable (it is retried at commit) while the second becomes an SST.
    ``multi_get`` used to consult every pending memtable before any pending SST, returning the
    older value.
    """
    faulty = FaultyStore(MemoryStore())
    settings = silt.Settings(memtable_bytes=2048, block_bytes=256, upload_parallelism=1)
    db = silt.open("memory://unused", settings=settings, store=faulty)
    try:
        faulty.fail_matching("put_if_absent", is_sst, StoreError, times=1)
        db.put(b"k", b"old")
        i = 0
        while db.stats()["pending_parts"] < 1:
            db.put(b"f%04d" % i, b"x" * 50)
            i += 1
        db.put(b"k", b"new")
        while db.stats()["pending_parts"] < 2:
            db.put(b"g%04d" % i, b"y" * 50)
            i += 1
        # Wait until both uploads have finished (the first one failed, the second succeeded).
        deadline = time.monotonic() + 10
        while faulty.calls["put_if_absent"] < 2 or len(listed_ssts(faulty.inner)) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        concurrent.futures.wait([p.future for p in db._view.parts])  # white-box: uploads settled
        assert db.get(b"k") == b"new"
        assert db.multi_get([b"k", b"f0000", b"k"]) == [b"new", b"x" * 50, b"new"]
        assert dict(db.scan(prefix=b"k")) == {b"k": b"new"}
        assert db.commit() == 1  # the failed upload is retried at commit
        assert db.multi_get([b"k"]) == [b"new"]
    finally:
        db.close()
    with silt.open("memory://unused", store=faulty) as db:
        assert db.multi_get([b"k"]) == [b"new"]
