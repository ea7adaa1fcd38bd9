"""A version number names one state forever, and nothing committed is lost (docs/architecture.md,
invariants 4, 7 and 8), under the attacks that once broke it:

* GC with a grace shorter than the writers' (0, negative, NaN) beside a writer holding flushed,
  uncommitted SSTs; ``retain_versions=0``;
* a commit that stalls past the grace period while GC runs, with a reader and a checkpoint of
  its version in the window before the writer's checks: the version is withdrawn (its number
  never used again) unless the checkpoint settled it first;
* a zombie writer committing an explicit version past versions it never saw (a fork);
* a rolled-back root (the newest manifest deleted while a checkpoint pins it);
* a reader whose version GC collected.
"""

from __future__ import annotations

import math
import uuid

import pytest
import silt
from silt import paths
from silt.errors import (
    CommitConflict,
    CorruptionError,
    InvalidArgumentError,
    NotFoundError,
    VersionNotFoundError,
    WithdrawnError,
)
from silt.gc import collect_garbage
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore
from silt.versions import list_versions, read_fate

T0 = 1_700_000_000_000
GRACE = 100.0
#: Commits upload their SSTs (no inline deltas): losing SST objects is the subject here.
SETTINGS = silt.Settings(memtable_bytes=2000, block_bytes=256, compaction="none",
                         gc_grace_seconds=GRACE, retain_versions=3, inline_delta_bytes=0)


@pytest.fixture
def mem():
    name = f"identity-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStore.drop(name)


def commit_versions(url: str, clock: silt.Clock, n: int) -> dict[int, dict[bytes, bytes]]:
    """Commit versions 1..n (key ``k`` = the version, plus one key per version)."""
    models: dict[int, dict[bytes, bytes]] = {}
    state: dict[bytes, bytes] = {}
    with silt.open(url, settings=SETTINGS, clock=clock) as db:
        for i in range(1, n + 1):
            db.put(b"k", b"%d" % i)
            db.put(b"v%03d" % i, b"x" * 50)
            state.update({b"k": b"%d" % i, b"v%03d" % i: b"x" * 50})
            assert db.commit() == i
            models[i] = dict(state)
    return models


def read(url: str, version: int | None, clock: silt.Clock) -> dict[bytes, bytes]:
    with silt.open(url, version=version, settings=SETTINGS, clock=clock) as db:
        return dict(db.scan())


# -- defect 1: GC beside a writer's flushed, uncommitted SSTs --------------------------------------
@pytest.mark.parametrize("grace", [0, -1, 50.0, math.nan, math.inf])
def test_gc_refuses_a_grace_shorter_than_the_writers(mem: str, grace: float) -> None:
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 2)
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        for i in range(200):
            db.put(b"p%03d" % i, b"y" * 40)
        db.flush()  # flushed SSTs that no manifest names yet
        clock.advance(int(GRACE * 1000) + 1)
        before = {i.key for i in db.store.list("")}
        with pytest.raises(InvalidArgumentError, match="grace"):
            db.gc(grace_seconds=grace)
        with pytest.raises(InvalidArgumentError, match="grace"):
            collect_garbage(db.store, retain_versions=1, grace_seconds=grace, clock=clock)
        assert {i.key for i in db.store.list("")} == before  # nothing deleted or written
        assert db.commit() == 3
    state = read(mem, 3, clock)
    assert all(state[b"p%03d" % i] == b"y" * 40 for i in range(200))


def test_gc_refuses_no_retained_versions(mem: str) -> None:
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 3)
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        with pytest.raises(InvalidArgumentError, match="retain_versions must be at least 1"):
            db.gc(retain_versions=0)
        with pytest.raises(InvalidArgumentError, match="retain_versions"):
            collect_garbage(db.store, retain_versions=0, grace_seconds=GRACE, clock=clock)
    assert silt.versions(mem) == [1, 2, 3]


def test_the_writers_grace_is_recorded_and_enforced_for_any_caller(mem: str) -> None:
    """``silt gc`` and ``collect_garbage`` do not know the writers' settings: each manifest
    records its writer's grace, and GC of the root refuses anything shorter."""
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 1)
    store = silt.open_store(mem)
    assert silt.read_manifest(store, 1).gc_grace_ms == int(GRACE * 1000)
    with pytest.raises(InvalidArgumentError, match=r"shorter than the 100s"):
        collect_garbage(store, retain_versions=1, grace_seconds=GRACE - 1, clock=clock)
    collect_garbage(store, retain_versions=1, grace_seconds=GRACE, clock=clock)


# -- defect 2: a withdrawn commit's number is never reused ----------------------------------------
def stalled_commit(url: str, clock: silt.ManualClock, *, in_window) -> tuple[silt.DB, list]:
    """A writer at the latest version whose commit stalls right after creating its manifest,
    past the grace period; ``in_window(version)`` runs then, before the writer's checks."""
    faulty = FaultyStore(silt.open_store(url))
    db = silt.open(url, settings=SETTINGS, clock=clock, store=faulty)
    db.put(b"k", b"stalled")
    seen: list = []

    def window(op: str, key: str) -> None:
        clock.advance(int(GRACE * 1000) + 1)
        seen.append(in_window(db.version + 1))

    faulty.on_call("list", window, predicate=lambda k: k.startswith(paths.GC_PREFIX), times=1)
    return db, seen


def running_gc_pass(url: str, clock: silt.Clock) -> None:
    """A GC pass that has written its markers and not finished (it dies before its end)."""
    gc = FaultyStore(silt.open_store(url))
    gc.fail_matching("put_if_absent", lambda k: k.endswith(paths.PASS_DONE_SUFFIX),
                     error=silt.errors.StoreError, times=None)
    with pytest.raises(silt.errors.StoreError):
        collect_garbage(gc, retain_versions=5, grace_seconds=GRACE, clock=clock)


def test_a_withdrawn_number_is_never_committed_again(mem: str) -> None:
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 2)

    def reader_opens_then_gc_runs(v: int) -> dict[bytes, bytes]:
        state = read(mem, v, clock)  # a reader opens the new version in the window
        running_gc_pass(mem, clock)
        return state

    db, seen = stalled_commit(mem, clock, in_window=reader_opens_then_gc_runs)
    with pytest.raises(WithdrawnError, match="never used again"):
        db.commit()
    assert seen[0][b"k"] == b"stalled"
    store = silt.open_store(mem)
    assert read_fate(store, 3).withdrawn and 3 not in silt.versions(mem)
    with pytest.raises(VersionNotFoundError, match="withdrawn"):
        silt.open(mem, version=3)
    # The writer's writes are still pending: the next commit takes the next number.
    assert db.commit() == 4
    assert db.manifest.parent == 3  # the lineage goes through the withdrawn number
    db.close()
    assert silt.versions(mem) == [1, 2, 4]
    assert read(mem, 4, clock)[b"k"] == b"stalled"
    # A zombie from version 2 cannot bring number 3 back either: it moves past it too.
    with silt.open(mem, version=2, settings=SETTINGS, clock=clock) as zombie:
        zombie.put(b"k", b"zombie")
        with pytest.raises(CommitConflict):
            zombie.commit(3)
    assert read_fate(store, 3).withdrawn


def test_a_checkpoint_in_the_window_settles_the_version(mem: str) -> None:
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 2)

    def checkpoint_then_gc(v: int) -> int:
        with silt.open(mem, settings=SETTINGS, clock=clock) as other:
            pinned = other.checkpoint("keep")
        running_gc_pass(mem, clock)
        return pinned

    db, seen = stalled_commit(mem, clock, in_window=checkpoint_then_gc)
    assert db.commit() == 3  # settled by the checkpoint: the writer may not withdraw it
    assert seen == [3]
    db.close()
    assert read_fate(silt.open_store(mem), 3).fate == "settled"
    assert silt.versions(mem) == [1, 2, 3]
    assert read(mem, 3, clock)[b"k"] == b"stalled"


def test_a_checkpoint_is_refused_while_its_version_may_be_withdrawn(mem: str) -> None:
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 2)

    def gc_then_checkpoint(v: int) -> str:
        running_gc_pass(mem, clock)
        with silt.open(mem, settings=SETTINGS, clock=clock) as other:
            assert other.version == v
            with pytest.raises(VersionNotFoundError, match="may still be withdrawn") as info:
                other.checkpoint("too-early")
        return str(info.value)

    db, seen = stalled_commit(mem, clock, in_window=gc_then_checkpoint)
    with pytest.raises(WithdrawnError):
        db.commit()
    db.close()
    assert seen and "running" in seen[0]
    assert silt.versions(mem) == [1, 2]
    assert "too-early" not in silt.gc.read_checkpoints(silt.open_store(mem))


def test_a_stalled_commit_gc_did_not_touch_stands(mem: str) -> None:
    """A finished GC pass that kept the new SSTs is no reason to withdraw."""
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 2)

    def full_gc(v: int) -> None:
        collect_garbage(silt.open_store(mem), retain_versions=5, grace_seconds=GRACE,
                        clock=clock)

    db, _ = stalled_commit(mem, clock, in_window=full_gc)
    assert db.commit() == 3
    db.close()
    assert read(mem, 3, clock)[b"k"] == b"stalled"


# -- defect 3: no forks through explicit versions ------------------------------------------------
def test_a_zombie_cannot_fork_history_with_an_explicit_version(mem: str) -> None:
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 1)
    with silt.open(mem, settings=SETTINGS, clock=clock) as a, \
            silt.open(mem, settings=SETTINGS, clock=clock) as b:
        for v in (2, 3, 4):
            a.put(b"a", b"%d" % v)
            assert a.commit() == v
        b.put(b"b", b"zombie")
        with pytest.raises(CommitConflict, match="another writer"):
            b.commit(version=10)
        with pytest.raises(CommitConflict):
            b.commit()
    assert silt.versions(mem) == [1, 2, 3, 4]
    assert read(mem, None, clock)[b"a"] == b"4"


def test_a_writer_at_the_latest_version_may_skip_numbers(mem: str) -> None:
    """The stream processor's case: a shard idle for some batches commits a later batch id."""
    clock = silt.ManualClock(T0)
    models = commit_versions(mem, clock, 4)
    with silt.open(mem, settings=SETTINGS, clock=clock) as a, \
            silt.open(mem, settings=SETTINGS, clock=clock) as rival:
        a.put(b"a", b"ten")
        assert a.commit(10) == 10
        rival.put(b"r", b"x")
        with pytest.raises(CommitConflict, match="reserved"):
            rival.commit(7)  # the numbers 6..9 are reserved for version 4's state
    listing = list_versions(silt.open_store(mem))
    assert listing.versions == [1, 2, 3, 4, 5, 10]
    reservation = silt.read_manifest(silt.open_store(mem), 5)
    assert reservation.skip_to == 10 and reservation.parent == 4
    assert read(mem, 5, clock) == models[4]
    with silt.open(mem, at_most=9, settings=SETTINGS, clock=clock) as db:
        assert db.version == 5 and dict(db.scan()) == models[4]
    assert read(mem, 10, clock) == {**models[4], b"a": b"ten"}


# -- defect 8: rollback ----------------------------------------------------------------------------
def test_a_rolled_back_root_is_detected_at_the_next_commit(mem: str) -> None:
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 5)
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        assert db.checkpoint("release") == 5
    store = silt.open_store(mem)
    store.delete_many([paths.manifest_key(5)])  # the newest manifest is lost
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        assert db.version == 4
        db.put(b"k", b"after the rollback")
        with pytest.raises(CorruptionError, match="rolled back"):
            db.commit()
        with pytest.raises(silt.errors.FencedError):
            db.commit()
    # The reuse reads as withdrawn: the fate record the checkpoint left settles the lost
    # manifest (its commit token), not this one.
    assert 5 not in silt.versions(mem)
    with pytest.raises(VersionNotFoundError, match="withdrawn"):
        silt.read_manifest(store, 5)


def test_pinning_a_version_again_is_no_rollback(mem: str) -> None:
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 2)
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        db.checkpoint("a")
        db.checkpoint("b")
        db.put(b"k", b"more")
        assert db.commit() == 3


# -- item 10: a reader whose version GC collected --------------------------------------------------
def test_a_reader_of_a_collected_version_is_told_why(mem: str) -> None:
    clock = silt.ManualClock(T0)
    compacting = SETTINGS.replace(compaction="leveled", l0_compaction_trigger=1,
                                  compaction_mode="external", compaction_poll_seconds=0)
    commit_versions(mem, clock, 1)
    old = silt.open(mem, version=1, settings=SETTINGS, clock=clock)
    from silt.compaction.compactor import run_compaction
    from silt.compaction.task import CompactionTask

    with silt.open(mem, settings=compacting, clock=clock) as db:
        m = db.manifest
        run_compaction(db.store, m, CompactionTask(tuple(s.id for s in m.all_ssts()),
                                                   "new_run", drop_tombstones=True),
                       compacting, clock)
        for i in range(3):
            db.put(b"n%d" % i, b"x")
            db.commit()
    clock.advance(int(GRACE * 1000) * 2)
    report = collect_garbage(silt.open_store(mem), retain_versions=1, grace_seconds=GRACE,
                             clock=clock)
    assert report.deleted_ssts
    with pytest.raises(NotFoundError, match=r"(?s)Garbage collection.*checkpoint"):
        old.get(b"k")
    old.close()
    with pytest.raises(VersionNotFoundError, match="removed by garbage collection"):
        silt.open(mem, version=1)


# -- version 0 and the empty root; the warm path's requests -------------------------------------
def test_writers_from_an_empty_root_cannot_both_win(mem: str) -> None:
    """A stream processor's first batch commits version 0; another writer from the empty root
    commits version 1 at the same time. They race for different names, so each lists the
    versions after creating its own: whoever sees another withdraws."""
    clock = silt.ManualClock(T0)
    faulty = FaultyStore(silt.open_store(mem))
    first = silt.open(mem, settings=SETTINGS, clock=clock, store=faulty)
    second = silt.open(mem, settings=SETTINGS, clock=clock)
    first.put(b"k", b"batch 0")
    second.put(b"k", b"other")

    def other_commits(op: str, key: str) -> None:
        assert second.commit() == 1  # its own check ran before version 0 existed

    faulty.on_call("put_if_absent", other_commits, times=1,
                   predicate=lambda k: k == paths.manifest_key(0))
    with pytest.raises(CommitConflict, match="committed from an empty root"):
        first.commit(0)
    first.close()
    second.close()
    assert silt.versions(mem) == [1]
    assert read_fate(silt.open_store(mem), 0).withdrawn
    assert read(mem, None, clock) == {b"k": b"other"}


def test_version_zero_then_one(mem: str) -> None:
    clock = silt.ManualClock(T0)
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        db.put(b"k", b"0")
        assert db.commit(0) == 0
        db.put(b"k", b"1")
        assert db.commit() == 1
    with silt.open(mem, at_most=-1, settings=SETTINGS, clock=clock) as db:
        assert db.version is None
        db.put(b"k", b"zombie")
        with pytest.raises(CommitConflict):
            db.commit(0)
    assert silt.versions(mem) == [0, 1]


def test_a_warm_commit_on_a_root_gc_never_touched_does_not_list(mem: str) -> None:
    """No GC or checkpoint ever ran on the root (no epoch object): after its first commit, a
    writer's checks are one GET of epoch 1, which does not exist, per commit."""
    clock = silt.ManualClock(T0)
    faulty = FaultyStore(silt.open_store(mem))
    with silt.open(mem, settings=SETTINGS, clock=clock, store=faulty) as db:
        db.put(b"a", b"0")
        db.commit()
        faulty.reset_counters()
        for i in range(3):
            db.put(b"a", b"%d" % i)
            db.commit()
        assert faulty.calls["list"] == 0 and faulty.calls["get"] == 3, faulty.calls


def test_a_warm_commit_does_not_list(mem: str) -> None:
    """After its first commit a writer checks the GC markers with one GET (of the next epoch's
    name) instead of listing them, until something changes."""
    clock = silt.ManualClock(T0)
    commit_versions(mem, clock, 1)
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        db.checkpoint("c")  # an epoch exists from now on
    faulty = FaultyStore(silt.open_store(mem))
    with silt.open(mem, settings=SETTINGS, clock=clock, store=faulty) as db:
        db.put(b"a", b"1")
        db.commit()
        faulty.reset_counters()
        for i in range(3):
            db.put(b"a", b"%d" % i)
            db.commit()
        assert faulty.calls["list"] == 0, faulty.calls
        # GC runs: its markers change the epoch, and the next commit lists them again.
        collect_garbage(silt.open_store(mem), retain_versions=5, grace_seconds=GRACE,
                        clock=clock)
        faulty.reset_counters()
        db.put(b"a", b"after gc")
        db.commit()
        assert faulty.calls["list"] >= 1
        assert db.committer.markers.passes
