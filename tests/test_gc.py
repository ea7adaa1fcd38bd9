"""Retention, checkpoints and garbage collection, including the two races GC has with
writers (docs/safety.md).

Ages are deterministic: every writer runs on a :class:`silt.ManualClock`, SST and record ids
carry that clock's time (``paths.new_id(now)``), and GC is given the same clock.

* (a) a stalled writer re-creating a manifest name GC deleted is withdrawn with ``FencedError``;
  a manifest created between GC's listing and its horizon marker keeps what it references.
* (b) an uploaded-but-unpublished SST older than the grace period is deleted only if its writer
  never publishes it: a writer re-uploads SSTs older than half the grace period, withdraws a
  version whose commit stalled past the grace period, and fails cleanly when GC got there first.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time
import uuid

import pytest
import silt
from silt import paths
from silt.compaction.compactor import run_compaction
from silt.compaction.task import CompactionTask
from silt.errors import (
    AlreadyExistsError,
    CommitConflict,
    CorruptionError,
    FencedError,
    StoreError,
    WithdrawnError,
)
from silt.gc import collect_garbage, horizon, read_checkpoints
from silt.markers import bump_epoch
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore

#: Where this process imported silt from (the installed build, or packages/core/src):
#: subprocesses must run the same implementation.
CORE_SRC = pathlib.Path(silt.__file__).resolve().parents[1]
T0 = 1_700_000_000_000
GRACE = 100.0  # seconds
#: Commits upload their SSTs (no inline deltas): GC of SST objects is the subject here
#: (test_inline.py covers GC beside inline deltas).
SETTINGS = silt.Settings(memtable_bytes=2000, block_bytes=256, compaction="none",
                         gc_grace_seconds=GRACE, retain_versions=3, inline_delta_bytes=0)
#: Compaction on, stalling at 3 L0 SSTs: later versions stop referencing older SSTs.
COMPACTING = SETTINGS.replace(compaction="leveled", l0_compaction_trigger=2, l0_stall_trigger=3)


@pytest.fixture
def mem():
    name = f"gc-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStore.drop(name)


def write_version(db: silt.DB, expected: dict[bytes, bytes], i: int, n: int = 40) -> int:
    """Overwrite/delete some keys, commit, return the version; ``expected`` follows along."""
    for j in range(n):
        k = b"k%03d" % ((i * 7 + j) % 120)
        if j % 9 == 0:
            db.delete(k)
            expected.pop(k, None)
        else:
            v = b"v%d-%d" % (i, j)
            db.put(k, v)
            expected[k] = v
    return db.commit()


def reads_back(url: str, version: int, expected: dict[bytes, bytes], clock: silt.Clock) -> None:
    with silt.open(url, version=version, settings=SETTINGS, clock=clock) as db:
        assert dict(db.scan()) == expected, f"version {version}"


def objects(url: str, prefix: str = "") -> set[str]:
    store = silt.open_store(url)
    try:
        return {i.key for i in store.list(prefix)}
    finally:
        store.close()


def fill(url: str, clock: silt.ManualClock, versions: int,
         settings: silt.Settings = SETTINGS) -> dict[int, dict[bytes, bytes]]:
    models: dict[int, dict[bytes, bytes]] = {}
    expected: dict[bytes, bytes] = {}
    with silt.open(url, settings=settings, clock=clock) as db:
        for i in range(versions):
            v = write_version(db, expected, i)
            models[v] = dict(expected)
            clock.advance(10_000)
    return models


# --- retention ------------------------------------------------------------------------------------


def test_retention_keeps_the_newest_versions_and_checkpoints(mem: str) -> None:
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 5, COMPACTING)
    with silt.open(mem, version=2, settings=SETTINGS, clock=clock) as db:
        assert db.checkpoint("two") == 2
        assert db.checkpoint("two") == 2  # naming the same version again is fine
    with silt.open(mem, settings=COMPACTING, clock=clock) as db:
        with pytest.raises(AlreadyExistsError, match="already pins version 2"):
            db.checkpoint("two")
        with pytest.raises(silt.errors.InvalidArgumentError):
            db.checkpoint("no/slashes")
        expected = dict(models[5])
        for i in range(5, 9):
            v = write_version(db, expected, i)
            models[v] = dict(expected)
            clock.advance(10_000)
        clock.advance(int(GRACE * 1000) * 2)
        report = db.gc()  # retain 3, grace 100 s from the settings
    assert read_checkpoints(silt.open_store(mem)) == {"two": 2}
    assert report.kept_versions[""] == [2, 7, 8, 9]
    assert report.horizons[""] == 7
    assert silt.versions(mem) == [2, 7, 8, 9]
    assert sorted(report.deleted_manifests) == [paths.manifest_key(v) for v in (1, 3, 4, 5, 6)]
    assert report.deleted_ssts  # SSTs only the deleted versions needed
    for v in (2, 7, 8, 9):
        reads_back(mem, v, models[v], clock)
    # Nothing a kept manifest references was deleted; everything else old is gone.
    store = silt.open_store(mem)
    referenced = {paths.sst_key(s.id) for v in silt.versions(mem)
                  for s in silt.read_manifest(store, v).all_ssts()}
    assert objects(mem, paths.SST_PREFIX) == referenced
    assert horizon(store) == 7
    # A second pass finds nothing more to do.
    again = collect_garbage(store, retain_versions=3, grace_seconds=GRACE, clock=clock)
    assert (again.deleted_manifests, again.deleted_ssts) == ([], [])


def test_grace_period_protects_young_unreferenced_objects(mem: str) -> None:
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 3)
    # An abandoned writer: flushed SSTs, never committed (a crash between upload and commit).
    abandoned = silt.open(mem, settings=SETTINGS, clock=clock)
    for j in range(200):
        abandoned.put(b"zz%04d" % j, b"x" * 30)
    abandoned.flush()
    orphans = objects(mem, paths.SST_PREFIX) - {
        paths.sst_key(s.id) for s in silt.read_manifest(silt.open_store(mem), 3).all_ssts()
    }
    assert orphans
    abandoned.close()
    store = silt.open_store(mem)
    clock.advance(int(GRACE * 1000) - 1)
    report = collect_garbage(store, retain_versions=5, grace_seconds=GRACE, clock=clock)
    assert report.deleted_ssts == [] and orphans <= objects(mem, paths.SST_PREFIX)
    clock.advance(2)
    report = collect_garbage(store, retain_versions=5, grace_seconds=GRACE, clock=clock,
                             dry_run=True)
    assert set(report.deleted_ssts) == orphans and orphans <= objects(mem, paths.SST_PREFIX)
    report = collect_garbage(store, retain_versions=5, grace_seconds=GRACE, clock=clock)
    assert set(report.deleted_ssts) == orphans
    assert not orphans & objects(mem, paths.SST_PREFIX)
    for v, model in models.items():  # every kept version still reads back
        reads_back(mem, v, model, clock)


def test_young_compaction_records_keep_their_outputs(mem: str) -> None:
    clock = silt.ManualClock(T0)
    settings = SETTINGS.replace(compaction="leveled", compaction_mode="external",
                                compaction_poll_seconds=3600)
    models = fill(mem, clock, 3)
    with silt.open(mem, settings=settings, clock=clock) as db:
        m = db.manifest
        task = CompactionTask(tuple(s.id for s in m.l0), "into_level", target_level=1)  # type: ignore[union-attr]
        clock.advance(int(GRACE * 1000) * 3)
        rec = run_compaction(db.store, m, task, settings, clock)  # type: ignore[arg-type]
        outputs = {paths.sst_key(s.id) for s in rec.outputs}
        clock.advance(int(GRACE * 500))  # younger than the grace period
        report = db.gc(grace_seconds=GRACE)
        assert not outputs & set(report.deleted_ssts) and outputs <= objects(mem)
        clock.advance(int(GRACE * 1000))  # now the record and its outputs are old garbage
        report = db.gc(grace_seconds=GRACE)
        assert outputs <= set(report.deleted_ssts)
        assert report.deleted_records == [paths.compaction_key(rec.id)]
    reads_back(mem, 3, models[3], clock)


def test_gc_of_a_root_covers_every_db_under_it() -> None:
    name = f"gc-root-{uuid.uuid4().hex}"
    root = f"memory://{name}"
    shards = [f"{root}/kg-0-127", f"{root}/kg-128-255"]
    clock = silt.ManualClock(T0)
    try:
        models = {url: fill(url, clock, 6, COMPACTING) for url in shards}
        clock.advance(int(GRACE * 1000) * 2)
        store = silt.open_store(root)
        report = collect_garbage(store, retain_versions=2, grace_seconds=GRACE, clock=clock)
        assert report.dbs == ["kg-0-127/", "kg-128-255/"]
        assert report.kept_versions == {"kg-0-127/": [5, 6], "kg-128-255/": [5, 6]}
        assert {k.split("/")[0] for k in report.deleted_ssts} == {"kg-0-127", "kg-128-255"}
        for url in shards:
            assert silt.versions(url) == [5, 6]
            for v in (5, 6):
                reads_back(url, v, models[url][v], clock)
            shard_store = silt.open_store(url)
            assert horizon(shard_store) == 5
            referenced = {paths.sst_key(s.id) for v in (5, 6)
                          for s in silt.read_manifest(shard_store, v).all_ssts()}
            assert objects(url, paths.SST_PREFIX) == referenced
    finally:
        MemoryStore.drop(name)


# --- race (a): a stalled writer re-creating a name GC deleted --------------------------------


def test_zombie_recreating_a_deleted_version_is_fenced(mem: str) -> None:
    clock = silt.ManualClock(T0)
    expected: dict[bytes, bytes] = {}
    models = {}
    with silt.open(mem, settings=SETTINGS, clock=clock) as writer:
        for i in range(3):
            v = write_version(writer, expected, i)
            models[v] = dict(expected)
        zombie = silt.open(mem, settings=SETTINGS, clock=clock)  # opens at version 3, stalls
        for i in range(3, 12):
            v = write_version(writer, expected, i)
            models[v] = dict(expected)
            clock.advance(20_000)
    clock.advance(int(GRACE * 1000) * 2)
    report = collect_garbage(silt.open_store(mem), retain_versions=3, grace_seconds=GRACE,
                             clock=clock)
    assert report.horizons[""] == 10
    assert paths.manifest_key(4) in report.deleted_manifests
    # The zombie wakes up and commits version 4, a name GC deleted: put_if_absent succeeds...
    zombie.put(b"zombie", b"brains")
    with pytest.raises(FencedError, match="horizon 10"):
        zombie.commit()
    # ... but the version is withdrawn, and the zombie stays fenced.
    assert silt.versions(mem) == [10, 11, 12]
    with pytest.raises(FencedError):
        zombie.commit()
    zombie.close()
    for v in (10, 11, 12):
        reads_back(mem, v, models[v], clock)


def test_zombie_whose_withdrawal_fails_retries_it(mem: str) -> None:
    clock = silt.ManualClock(T0)
    expected: dict[bytes, bytes] = {}
    with silt.open(mem, settings=SETTINGS, clock=clock) as writer:
        write_version(writer, expected, 0)
        faulty = FaultyStore(silt.open_store(mem))
        zombie = silt.open(mem, settings=SETTINGS, clock=clock, store=faulty)
        for i in range(1, 8):
            write_version(writer, expected, i)
    clock.advance(int(GRACE * 1000) * 2)
    collect_garbage(silt.open_store(mem), retain_versions=2, grace_seconds=GRACE, clock=clock)
    # A withdrawal is the version's fate record (the manifest stays, so its number can never
    # be committed again): make creating that record fail once.
    faulty.fail_matching("put_if_absent", lambda k: k.endswith(paths.FATE_SUFFIX),
                         error=StoreError, times=1)
    zombie.put(b"z", b"z")
    with pytest.raises(FencedError, match="retries it"):
        zombie.commit()
    assert 2 in silt.versions(mem)  # the withdrawal failed...
    with pytest.raises(FencedError):
        zombie.commit()
    assert silt.versions(mem) == [7, 8]  # ... and the next commit finished it
    assert silt.open_store(mem).get(paths.manifest_key(2))  # the number stays taken
    with pytest.raises(silt.errors.VersionNotFoundError, match="withdrawn"):
        silt.open(mem, version=2)
    zombie.close()


def test_manifest_created_while_gc_runs_keeps_its_ssts(mem: str) -> None:
    """A writer creating a manifest between GC's manifest listing and its horizon marker cannot
    see the marker, so GC itself must keep what that manifest references (it lists again)."""
    clock = silt.ManualClock(T0)
    settings = SETTINGS.replace(compaction="leveled", compaction_mode="external",
                                compaction_poll_seconds=0)
    expected: dict[bytes, bytes] = {}
    with silt.open(mem, settings=settings, clock=clock) as writer:
        write_version(writer, expected, 0)
        write_version(writer, expected, 1)
        late = silt.open(mem, settings=settings, clock=clock)  # at version 2
        # The writer jumps ahead (explicit versions) and compacts everything into new SSTs, so
        # versions 10.. share no SST with versions 1 and 2. Its first jump reserves version 3
        # (a version with version 2's state that reserves 3..9): the late writer will take it
        # as its base, as it stands for the state it started from.
        for v in (10, 11, 12):
            for j in range(30):
                writer.put(b"k%03d" % j, b"w%d" % v)
                expected[b"k%03d" % j] = b"w%d" % v
            writer.commit(v)
            m = writer.manifest
            run_compaction(writer.store, m, CompactionTask(  # type: ignore[arg-type]
                tuple(s.id for s in m.all_ssts()), "new_run", drop_tombstones=True),  # type: ignore[union-attr]
                settings, clock)
        writer.commit(13)
        assert not {s.id for s in writer.manifest.all_ssts()} & {  # type: ignore[union-attr]
            s.id for s in silt.read_manifest(writer.store, 2).all_ssts()}
    clock.advance(int(GRACE * 1000) * 2)
    late.put(b"late", b"writer")
    newest = silt.open(mem, settings=settings, clock=clock)  # at version 13
    newest.put(b"new", b"est")
    expected[b"new"] = b"est"
    gc_store = FaultyStore(silt.open_store(mem))
    conflicts: list[CommitConflict] = []

    def commit_during_gc(op: str, key: str) -> None:
        # The late writer (base 2) is a fork attempt: the jump to 10 reserved versions 3..9
        # for version 2's state, so it fails and creates nothing. The newest writer commits
        # version 14, which GC's first listing did not see.
        try:
            late.commit(3)
        except CommitConflict as exc:
            conflicts.append(exc)
        newest.commit()

    # Right before GC creates its horizon marker, both writers commit.
    gc_store.on_call("put_if_absent", commit_during_gc,
                     predicate=lambda k: k.startswith(paths.HORIZON_PREFIX), times=1)
    report = collect_garbage(gc_store, retain_versions=3, grace_seconds=GRACE, clock=clock)
    assert report.horizons[""] == 11
    assert len(conflicts) == 1 and "reserved" in str(conflicts[0])
    assert late.version == 2
    with pytest.raises(FencedError, match="below the garbage-collection horizon"):
        late.commit()  # its next free number is 10, which GC collected: a zombie's commit
    late.close()
    assert newest.version == 14
    newest.close()
    assert silt.versions(mem) == [11, 12, 13, 14]
    reads_back(mem, 14, expected, clock)  # nothing it references was deleted
    collect_garbage(silt.open_store(mem), retain_versions=3, grace_seconds=GRACE, clock=clock)
    assert silt.versions(mem) == [12, 13, 14]


def test_uncertain_commit_that_gc_kept_is_not_withdrawn(mem: str) -> None:
    """Found by the simulation (seed 24): a commit whose response was lost landed; GC saw it as
    the newest version and set the horizon to it, deleting its parent. Resolving the commit must
    keep it (GC kept what it references); withdrawing it would delete the only version left."""
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 3)
    faulty = FaultyStore(silt.open_store(mem))
    expected = dict(models[3])
    with silt.open(mem, settings=SETTINGS, clock=clock, store=faulty) as db:
        faulty.lose_response_next("put_if_absent", error=StoreError,
                                  predicate=lambda k: k.startswith(paths.MANIFEST_PREFIX))
        db.put(b"new", b"1")
        expected[b"new"] = b"1"
        with pytest.raises(StoreError, match="response lost"):
            db.commit()
        assert silt.versions(mem) == [1, 2, 3, 4]  # it landed
        clock.advance(int(GRACE * 1000) * 2)
        report = collect_garbage(silt.open_store(mem), retain_versions=1, grace_seconds=GRACE,
                                 clock=clock)
        assert report.horizons[""] == 4 and silt.versions(mem) == [4]
        db.put(b"more", b"2")
        assert db.commit() == 5  # resolves version 4 as its own, then commits 5
    assert silt.versions(mem) == [4, 5]
    reads_back(mem, 4, expected, clock)
    reads_back(mem, 5, {**expected, b"more": b"2"}, clock)


# --- race (b): uploaded but not yet published ---------------------------------------------------


def test_unpublished_sst_is_collected_only_if_never_published(mem: str) -> None:
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 2)
    # Published in time: flushed, committed within half the grace period, then GC: kept.
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        db.put(b"a", b"1")
        db.flush()
        clock.advance(int(GRACE * 500) - 1)
        v = db.commit()
        assert db.stats().get("ssts_reuploaded", 0) == 0
    clock.advance(int(GRACE * 1000) * 3)
    collect_garbage(silt.open_store(mem), retain_versions=1, grace_seconds=GRACE, clock=clock)
    reads_back(mem, v, {**models[2], b"a": b"1"}, clock)


def test_pending_sst_older_than_half_the_grace_is_reuploaded(mem: str) -> None:
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 2)
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        db.put(b"a", b"1")
        db.flush()
        old = objects(mem, paths.SST_PREFIX)
        clock.advance(int(GRACE * 500) + 1)
        v = db.commit()
        assert db.stats()["ssts_reuploaded"] == 1
        published = {paths.sst_key(s.id) for s in db.manifest.l0}  # type: ignore[union-attr]
        assert published.isdisjoint(old - {paths.sst_key(s.id) for s in
                                           silt.read_manifest(db.store, 2).all_ssts()})
    # GC now deletes the stale copy (never published) but never what the version needs.
    clock.advance(int(GRACE * 1000) // 2)
    report = collect_garbage(silt.open_store(mem), retain_versions=1, grace_seconds=GRACE,
                             clock=clock)
    assert report.deleted_ssts and not published & set(report.deleted_ssts)
    reads_back(mem, v, {**models[2], b"a": b"1"}, clock)


def test_commit_fails_cleanly_when_gc_collected_a_pending_sst(mem: str) -> None:
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 2)
    db = silt.open(mem, settings=SETTINGS, clock=clock)
    db.put(b"a", b"1")
    db.flush()  # uploaded, not published
    clock.advance(int(GRACE * 1000) + 1)
    report = collect_garbage(silt.open_store(mem), retain_versions=5, grace_seconds=GRACE,
                             clock=clock)
    assert len(report.deleted_ssts) == 1
    for _ in range(2):  # and again: the same answer, no version number used
        with pytest.raises(StoreError, match=r"writes made since version 2 and not committed "
                           r"are lost: .* deleted by garbage collection"):
            db.commit()
    db.close()
    assert silt.versions(mem) == [1, 2]  # nothing broken was committed
    reads_back(mem, 2, models[2], clock)


def test_commit_stalled_past_the_grace_period_is_withdrawn(mem: str) -> None:
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 2)
    faulty = FaultyStore(silt.open_store(mem))
    db = silt.open(mem, settings=SETTINGS, clock=clock, store=faulty)
    db.put(b"a", b"1")
    gc_reports = []

    def stall_then_gc(op: str, key: str) -> None:
        # The writer checked its SSTs' ages, then stalled past the grace period right before
        # the manifest PUT, while GC ran.
        clock.advance(int(GRACE * 1000) + 1)
        gc_reports.append(collect_garbage(silt.open_store(mem), retain_versions=5,
                                          grace_seconds=GRACE, clock=clock))

    faulty.on_call("put_if_absent", stall_then_gc,
                   predicate=lambda k: k.startswith(paths.MANIFEST_PREFIX), times=1)
    with pytest.raises(StoreError, match="withdrawn"):
        db.commit()
    assert gc_reports[0].deleted_ssts  # GC did delete the pending SST
    assert silt.versions(mem) == [1, 2]
    with pytest.raises(StoreError, match="not committed are lost"):
        db.commit()
    assert silt.versions(mem) == [1, 2]
    db.close()
    reads_back(mem, 2, models[2], clock)


def test_a_version_whose_writer_died_before_its_checks_is_not_built_on(mem: str) -> None:
    """The writer stalled past the grace period while GC collected its new SST, created its
    manifest anyway, and died before its checks (they failed): the version stands, broken. The
    next writer that opens it withdraws it, and its own version built on it, at its first
    commit instead of carrying the loss into every later version; reopened, the root is at the
    version before."""
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 2)
    faulty = FaultyStore(silt.open_store(mem))
    dead = silt.open(mem, settings=SETTINGS, clock=clock, store=faulty)
    dead.put(b"a", b"lost")

    def stall_then_gc_then_die(op: str, key: str) -> None:
        clock.advance(int(GRACE * 1000) + 1)
        collect_garbage(silt.open_store(mem), retain_versions=5, grace_seconds=GRACE,
                        clock=clock)
        # Every request after the manifest PUT fails: the writer never runs its checks.
        for op in ("get", "get_range", "list"):
            faulty.fail_next(op, 100, error=StoreError)

    faulty.on_call("put_if_absent", stall_then_gc_then_die,
                   predicate=lambda k: k.startswith(paths.MANIFEST_PREFIX), times=1)
    with pytest.raises(StoreError):
        dead.commit()
    assert silt.versions(mem) == [1, 2, 3]  # standing, with its SST collected
    with silt.open(mem, settings=SETTINGS, clock=clock) as next_writer:
        assert next_writer.version == 3
        next_writer.put(b"b", b"2")
        with pytest.raises(WithdrawnError, match=r"its base, version 3 .* lost an SST"):
            next_writer.commit()
        with pytest.raises(FencedError):
            next_writer.commit()  # this handle stands on the withdrawn version: reopen
    assert silt.versions(mem) == [1, 2]
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        assert db.version == 2
        db.put(b"b", b"2")
        assert db.commit() == 5  # 3 and 4 (built on it) are never used again
    reads_back(mem, 2, models[2], clock)


def test_the_first_commit_on_a_base_checks_its_ssts_only_when_a_pass_could_take_them(
        mem: str) -> None:
    """A pass with a cutoff past the base's new SSTs (here one that died before it was done):
    the first commit on that base reads the parent and checks the SSTs exist (they do: it
    commits); with no such pass it makes no request for the check."""
    clock = silt.ManualClock(T0)
    fill(mem, clock, 2)
    store = silt.open_store(mem)
    faulty = FaultyStore(store)
    with silt.open(mem, settings=SETTINGS, clock=clock, store=faulty) as db:
        faulty.reset_counters()
        db.put(b"c", b"3")
        assert db.commit() == 3
        assert faulty.calls["get"] == 0  # no pass: the check makes no request
    clock.advance(int(GRACE * 1000) * 3)
    store.put_if_absent(paths.pass_key(clock.now_ms() - int(GRACE * 1000)), b"")
    bump_epoch(store)
    with silt.open(mem, settings=SETTINGS, clock=clock, store=faulty) as db:
        faulty.reset_counters()
        db.put(b"d", b"4")
        assert db.commit() == 4
        # the parent's manifest, and the SST version 3 added (a ranged read of its first byte)
        assert faulty.calls["get"] == 1 and faulty.calls["get_range"] == 1, faulty.calls
        assert db.get(b"c") == b"3"


# --- the command line -------------------------------------------------------------------------


def run_silt(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CORE_SRC), *filter(None, [env.get("PYTHONPATH")])])
    env["SILT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run([sys.executable, "-m", "silt", *argv], env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_checkpoint_and_gc(file_url: str) -> None:
    clock = silt.ManualClock(T0)  # ids from 2023: far older than any grace period
    models = fill(file_url, clock, 6)
    with silt.open(file_url, settings=SETTINGS, clock=clock) as db:
        db.put(b"orphan", b"x")
        db.flush()  # an unpublished SST: garbage
    p = run_silt("checkpoint", file_url, "keep", "--version", "2")
    assert p.returncode == 0, p.stderr
    assert "pins version 2" in p.stdout
    p = run_silt("checkpoint", file_url, "keep")  # the name already pins another version
    assert p.returncode == 1 and "already pins version 2" in p.stderr
    p = run_silt("checkpoint", file_url, "latest", "--json")
    assert json.loads(p.stdout) == {"name": "latest", "version": 6,
                                    "object": "checkpoint/latest"}

    before = objects(file_url)
    p = run_silt("gc", file_url, "--retain", "2", "--dry-run", "--json")
    assert p.returncode == 0, p.stderr
    dry = json.loads(p.stdout)
    assert dry["dry_run"] and dry["kept_versions"] == {"": [2, 5, 6]}
    assert objects(file_url) == before  # a dry run deletes nothing

    p = run_silt("gc", file_url, "--retain", "2")
    assert p.returncode == 0, p.stderr
    assert "deleted 3 manifests" in p.stdout and "horizon 5" in p.stdout
    assert silt.versions(file_url) == [2, 5, 6]
    assert set(dry["deleted_ssts"]) == before - objects(file_url) - set(dry["deleted_manifests"])
    for v in (2, 5, 6):
        reads_back(file_url, v, models[v], clock)
    p = run_silt("gc", file_url, "--retain", "2", "--json")
    assert json.loads(p.stdout)["deleted_ssts"] == []
    p = run_silt("gc", file_url, "--retain", "0")
    assert p.returncode == 2 and "at least 1" in p.stderr
    p = run_silt("gc", file_url + "-missing")
    assert p.returncode == 1 and "does not exist" in p.stderr


def test_cli_gc_respects_the_grace_period(file_url: str) -> None:
    clock = silt.ManualClock(T0)
    fill(file_url, clock, 3)
    with silt.open(file_url, settings=SETTINGS) as db:  # the wall clock: a fresh orphan SST
        db.put(b"orphan", b"x")
        db.flush()
    fresh = objects(file_url, paths.SST_PREFIX)
    p = run_silt("gc", file_url, "--retain", "1", "--json")  # default grace: one hour
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["deleted_manifests"] == [paths.manifest_key(1), paths.manifest_key(2)]
    remaining = objects(file_url, paths.SST_PREFIX)
    assert len(fresh - remaining) == len(report["deleted_ssts"])
    assert any(paths.id_time_ms(k[4:-4]) > T0 + 10**9 for k in remaining)  # the orphan stays


# --- temporaries of killed writers (file://) ----------------------------------------------------

#: A writer that announces when it is inside a write (a temporary file is written and fsynced,
#: not yet published) and then hangs there until it is killed.
KILLED_WRITER = """
import os, stat, sys, time
import silt

real_fsync = os.fsync

def fsync(fd):
    real_fsync(fd)
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.write(1, b"writing\\n")
        time.sleep(120)

os.fsync = fsync
db = silt.open(sys.argv[1])
db.put(b"k", b"v" * 1000)
db.commit()
"""


def kill_while_writing(url: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CORE_SRC), *filter(None, [env.get("PYTHONPATH")])])
    env["SILT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, url], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == b"writing\n", proc.stderr.read() if proc.stderr else b""
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_gc_removes_old_temporaries_of_killed_writers(tmp_path: pathlib.Path) -> None:
    """Writers SIGKILLed inside a write leave files in their ``.tmp/``; GC leaves young ones
    (a write may be in flight) and removes those older than the grace period, in every DB under
    the root, through DB.gc too; nothing else in ``.tmp/`` and no object is touched."""
    root = tmp_path / "root"
    shards = [root / "kg-0-127", root / "kg-128-255"]
    for shard in shards:
        with silt.open(shard.as_uri(), settings=SETTINGS) as db:
            db.put(b"a", b"1")
            db.commit()
        kill_while_writing(shard.as_uri())
    (root / ".tmp").mkdir()
    (root / ".tmp" / f"{os.getpid()}-1-{'0' * 16}.tmp").write_bytes(b"left by a GC pass")
    (shards[0] / ".tmp" / "notes.txt").write_text("not one of silt's temporaries")
    leftovers = sorted(root.glob("**/.tmp/*.tmp"))
    assert len(leftovers) == 3

    store = silt.open_store(root.as_uri())
    report = collect_garbage(store, retain_versions=1, grace_seconds=GRACE)
    assert report.removed_temporaries == 0  # young: they may belong to writes in flight
    assert sorted(root.glob("**/.tmp/*.tmp")) == leftovers

    old = time.time() - GRACE - 60
    for path in leftovers:
        os.utime(path, (old, old))
    with silt.open(shards[0].as_uri(), settings=SETTINGS) as db:
        assert db.gc().removed_temporaries == 1  # its own root only, through the DB's store
    assert not list((shards[0] / ".tmp").glob("*.tmp"))
    report = collect_garbage(store, retain_versions=1, grace_seconds=GRACE)
    assert report.removed_temporaries == 2
    assert list(root.glob("**/.tmp/*")) == [shards[0] / ".tmp" / "notes.txt"]
    for shard in shards:
        with silt.open(shard.as_uri(), settings=SETTINGS) as db:
            assert db.get(b"a") == b"1" and db.get(b"k") is None


# --- checkpoint objects are checksummed -----------------------------------------------------------


def test_a_changed_digit_cannot_repoint_a_checkpoint(mem: str) -> None:
    """A checkpoint whose version digit changed is reported as corruption, naming the object;
    GC refuses to run rather than keep the wrong version and delete the pinned one."""
    clock = silt.ManualClock(T0)
    fill(mem, clock, 4)
    with silt.open(mem, version=1, settings=SETTINGS, clock=clock) as db:
        db.checkpoint("keep")
    store = silt.open_store(mem)
    key = paths.checkpoint_key("keep")
    data = store.get(key)
    changed = re.sub(rb'"version": ?1', b'"version":2', data)
    assert changed != data
    store.put(key, changed)
    clock.advance(int(GRACE * 1000) * 2)
    with pytest.raises(CorruptionError, match="checkpoint/keep") as info:
        collect_garbage(store, retain_versions=1, grace_seconds=GRACE, clock=clock)
    assert info.value.object_name == key
    with pytest.raises(CorruptionError):
        read_checkpoints(store)
    assert silt.versions(mem) == [1, 2, 3, 4]  # nothing was deleted


def test_checkpoints_written_before_checksums_still_pin(mem: str) -> None:
    """Checkpoint format 1 (bare JSON, from an older silt) keeps pinning its version."""
    clock = silt.ManualClock(T0)
    models = fill(mem, clock, 4)
    store = silt.open_store(mem)
    store.put(paths.checkpoint_key("old"), b'{"version": 2, "created_ms": 1, "token": "t"}')
    assert read_checkpoints(store) == {"old": 2}
    clock.advance(int(GRACE * 1000) * 2)
    collect_garbage(store, retain_versions=1, grace_seconds=GRACE, clock=clock)
    assert silt.versions(mem) == [2, 4]
    reads_back(mem, 2, models[2], clock)
    with silt.open(mem, version=2, settings=SETTINGS, clock=clock) as db:
        assert db.checkpoint("old") == 2  # recognised as the same pin
