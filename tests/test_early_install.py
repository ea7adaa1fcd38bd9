"""Finished compactions serve reads before the commit that publishes them (silt.compaction.early).

* Right after a compaction finishes, and before any commit, a get probes fewer L0 SSTs (counted
  in the read view), the base version and its manifest are unchanged, and the next commit
  publishes the same tree a commit without early installation would.
* Reads answer the same with the compaction installed as without, over many random schedules:
  overwrites, deletes and range deletes made while the compaction ran (newer data must still
  shadow its outputs), scans and iterators opened before the installation (they keep reading
  their own SSTs), multi_get and multi_scan, on ``file://`` and ``memory://``.
* GC: what is shown leaves the view at half the writer's grace (a ``ManualClock`` wake-up), so
  a GC pass with the writer's grace never deletes what the view reads; a zombie fenced by GC
  keeps reading correctly and leaves nothing GC does not collect; a withdrawn commit keeps the
  view correct; a follower handle moved to another writer's version shows nothing it did not
  commit.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
import silt
from silt import paths
from silt.compaction.compactor import run_compaction
from silt.compaction.task import make_policy
from silt.errors import FencedError, WithdrawnError
from silt.gc import collect_garbage
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore

T0 = 1_700_000_000_000

#: One L0 SST per commit; the fourth triggers a compaction of all four into L1.
SETTINGS = silt.Settings(
    memtable_bytes=1 << 20,
    block_bytes=128,
    compaction="leveled",
    compaction_mode="thread",
    l0_compaction_trigger=4,
    l0_stall_trigger=64,
    inline_delta_bytes=0,
)

KEYS = [b"k%03d" % i for i in range(60)]


def mem_url() -> str:
    return f"memory://early-{uuid.uuid4().hex}"


def l0_ids(db: silt.DB) -> list[str]:
    return [r.info.id for r in db._view.l0]


def load(db: silt.DB, model: dict[bytes, bytes], rng: random.Random, commits: int) -> None:
    """``commits`` commits of overlapping random puts (one L0 SST each)."""
    for c in range(commits):
        for _ in range(25):
            k = rng.choice(KEYS)
            if rng.random() < 0.15:
                db.delete(k)  # a tombstone a bottom compaction drops
                model.pop(k, None)
                continue
            v = b"v%d-%d" % (c, rng.randrange(1000))
            db.put(k, v)
            model[k] = v
        db.commit()


def check_reads(db: silt.DB, model: dict[bytes, bytes]) -> None:
    for k in KEYS:
        assert db.get(k) == model.get(k), k
    assert db.multi_get(KEYS) == [model.get(k) for k in KEYS]
    assert list(db.scan()) == sorted(model.items())
    ranges = [(b"k000", b"k010"), (b"k020", b"k021"), (b"k030", b"k045")]
    assert db.multi_scan(ranges) == [(k, v) for k, v in sorted(model.items())
                                     if any(a <= k < b for a, b in ranges)]


def test_l0_a_get_probes_drops_when_the_compaction_finishes_before_any_commit() -> None:
    rng = random.Random(1)
    model: dict[bytes, bytes] = {}
    with silt.open(mem_url(), settings=SETTINGS) as db:
        load(db, model, rng, 4)  # the fourth commit starts the compaction of L0
        version, manifest = db.version, db.manifest
        assert len(manifest.l0) == 4 and not manifest.levels
        assert db.wait_for_compaction(60)
        # No commit since: the base is the same, its manifest still lists four L0 SSTs ...
        assert db.version == version and db.manifest is manifest
        assert len(db.manifest.l0) == 4
        # ... but a get probes none of them: the outputs serve reads from level 1.
        assert l0_ids(db) == []
        assert db.stats()["l0_ssts"] == 0
        assert db.stats()["read_amplification"] == 1
        assert db.stats()["compactions_installed"] == 1
        check_reads(db, model)
        # The commit that publishes it: the same tree the view shows.
        shown = [[r.info.id for r in lv.readers] for lv in db._view.levels]
        db.put(b"k000", b"new")
        model[b"k000"] = b"new"
        db.commit()
        assert [[s.id for s in run] for run in db.manifest.levels] == shown
        assert len(db.manifest.l0) == 1  # the new delta only
        check_reads(db, model)
    with silt.open(db.url, settings=SETTINGS) as again:
        check_reads(again, model)


@pytest.mark.parametrize("tier", ["memory", "file"])
@pytest.mark.parametrize("seed", range(12))
def test_reads_are_the_same_with_the_compaction_installed(tier: str, seed: int,
                                                          tmp_path) -> None:
    """Writes made while the compaction ran (puts, deletes, range deletes, some flushed to
    parts, some committed into L0 above its inputs) shadow its outputs; iterators opened
    before the installation keep their own view."""
    rng = random.Random(seed)
    url = mem_url() if tier == "memory" else (tmp_path / "root").as_uri()
    model: dict[bytes, bytes] = {}
    with silt.open(url, settings=SETTINGS.replace(compaction_mode="external",
                                                  compaction_poll_seconds=0)) as db:
        load(db, model, rng, rng.randint(4, 6))
        store = silt.open_store(url)
        policy = make_policy("leveled", SETTINGS)
        picked = db.manifest
        task = policy.pick(picked, T0)
        assert task is not None
        # Writes after the compaction's input version, committed (a new L0 SST above the
        # inputs) and not (memtable, parts).
        for round_ in range(rng.randint(1, 3)):
            for _ in range(rng.randint(3, 15)):
                k = rng.choice(KEYS)
                roll = rng.random()
                if roll < 0.25:
                    db.delete(k)
                    model.pop(k, None)
                elif roll < 0.4:
                    a, b = sorted(rng.sample(KEYS, 2))
                    db.delete_range(a, b)
                    for key in [key for key in model if a <= key < b]:
                        del model[key]
                else:
                    v = b"w%d-%d" % (round_, rng.randrange(1000))
                    db.put(k, v)
                    model[k] = v
            action = rng.choice(["commit", "flush", "none"])
            if action == "commit":
                db.commit()
            elif action == "flush":
                db.flush()
        run_compaction(store, picked, task, SETTINGS, silt.Clock())
        before_l0 = l0_ids(db)
        committed = list(db.committed_records())  # tombstones included
        open_scan = db.scan()  # taken before the installation: reads its own SSTs
        old_view = db._view
        first = next(open_scan, None)
        assert db.wait_for_compaction(60)  # external mode: found, checked and installed
        inputs = set(task.inputs)
        shown = set(l0_ids(db)) | {r.info.id for lv in db._view.levels for r in lv.readers}
        assert not inputs & shown, "the compaction is installed"
        assert len(l0_ids(db)) < len(before_l0)
        assert db._view is not old_view
        check_reads(db, model)
        # What the base version committed is still what it committed (tombstones and all).
        assert list(db.committed_records()) == committed
        rest = [first, *open_scan] if first is not None else []
        assert rest == sorted(model.items())
        store.close()
        # And after the commit that publishes it, and a reopen.
        db.commit()
        assert not inputs & {s.id for s in db.manifest.all_ssts()}
        check_reads(db, model)
    with silt.open(url, settings=SETTINGS) as again:
        check_reads(again, model)


def test_a_record_leaves_the_view_at_half_the_grace_and_gc_never_takes_what_it_reads() -> None:
    clock = silt.ManualClock(T0)
    grace_ms = 10_000
    settings = SETTINGS.replace(compaction_mode="external", compaction_poll_seconds=0,
                                gc_grace_seconds=grace_ms / 1000)
    url = mem_url()
    rng = random.Random(7)
    model: dict[bytes, bytes] = {}
    with silt.open(url, settings=settings, clock=clock) as db:
        load(db, model, rng, 4)
        base_l0 = [s.id for s in db.manifest.l0]
        store = silt.open_store(url)
        task = make_policy("leveled", settings).pick(db.manifest, clock.now_ms())
        record = run_compaction(store, db.manifest, task, settings, clock)
        outputs = {paths.sst_key(s.id) for s in record.outputs}
        assert db.wait_for_compaction(10)
        assert l0_ids(db) == []
        # At half the writer's grace it is still shown, and GC with that grace keeps it.
        clock.advance(grace_ms // 2)
        report = db.gc(grace_seconds=grace_ms / 1000)
        assert not outputs & set(report.deleted_ssts)
        assert l0_ids(db) == []
        check_reads(db, model)
        # A moment later a commit would refuse it: it leaves the view (the clock's wake-up).
        clock.advance(1)
        assert l0_ids(db) == base_l0
        assert db.wait_for_compaction(10) and l0_ids(db) == base_l0  # not shown again
        check_reads(db, model)
        # Past the whole grace GC collects the outputs: the view reads none of them.
        clock.advance(grace_ms)
        report = db.gc(grace_seconds=grace_ms / 1000)
        assert outputs <= set(report.deleted_ssts)
        check_reads(db, model)
        db.put(b"k001", b"x")
        model[b"k001"] = b"x"
        db.commit()  # refuses the record, as it did before early installation
        assert [s.id for s in db.manifest.l0][1:] == base_l0
        check_reads(db, model)
        store.close()


GRACE_MS = 10_000
EXTERNAL = SETTINGS.replace(compaction_mode="external", compaction_poll_seconds=0,
                            gc_grace_seconds=GRACE_MS / 1000)
#: Another writer: never compacts, never looks for records.
OTHER = EXTERNAL.replace(compaction="none", compaction_mode="thread")


def shown_record(db: silt.DB, url: str, clock: silt.Clock):
    """Compact ``db``'s base like ``silt compact`` would, and let ``db`` install it."""
    store = silt.open_store(url)
    try:
        task = make_policy("leveled", EXTERNAL).pick(db.manifest, clock.now_ms())
        record = run_compaction(store, db.manifest, task, EXTERNAL, clock)
    finally:
        store.close()
    assert db.wait_for_compaction(10)
    assert l0_ids(db) == []
    return record


def objects(url: str) -> set[str]:
    store = silt.open_store(url)
    try:
        return {info.key for info in store.list("")}
    finally:
        store.close()


def test_in_background_mode_the_view_changes_without_any_call() -> None:
    rng = random.Random(3)
    model: dict[bytes, bytes] = {}
    with silt.open(mem_url(), settings=SETTINGS) as db:
        load(db, model, rng, 4)
        assert db._compaction.wait(60)
        # The install (a thread started when the compaction finished) needs no call: wait for
        # the condition, with a generous bound (a loaded machine may take long).
        deadline = time.monotonic() + 120
        while l0_ids(db) and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        assert l0_ids(db) == [] and len(db.manifest.l0) == 4
        check_reads(db, model)


def test_a_fenced_zombie_reads_correctly_and_leaves_nothing_behind() -> None:
    clock = silt.ManualClock(T0)
    url = mem_url()
    rng = random.Random(11)
    model: dict[bytes, bytes] = {}
    zombie = silt.open(url, settings=EXTERNAL, clock=clock)
    load(zombie, model, rng, 4)
    record = shown_record(zombie, url, clock)
    made = {paths.sst_key(s.id) for s in record.outputs} | {paths.compaction_key(record.id)}
    assert made <= objects(url)
    # Another writer moves on from the same version; GC passes the zombie's next number.
    with silt.open(url, settings=OTHER, clock=clock) as other:
        for i in range(8):
            other.put(b"o%d" % i, b"x")
            other.commit()
    collect_garbage(silt.open_store(url), retain_versions=3, grace_seconds=GRACE_MS / 1000,
                    clock=clock)
    zombie.put(b"k000", b"zombie")
    model[b"k000"] = b"zombie"
    with pytest.raises(FencedError):
        zombie.commit()
    check_reads(zombie, model)  # its own view: what it showed, and its uncommitted put
    assert l0_ids(zombie) == []
    clock.advance(GRACE_MS // 2 + 1)  # the record leaves the view: the inputs serve reads
    assert l0_ids(zombie) == [s.id for s in zombie.manifest.l0]
    check_reads(zombie, model)
    with pytest.raises(FencedError):
        zombie.commit()
    zombie.close()
    # Nothing of the compaction outlives GC: no manifest ever listed it.
    clock.advance(GRACE_MS)
    collect_garbage(silt.open_store(url), retain_versions=3, grace_seconds=GRACE_MS / 1000,
                    clock=clock)
    assert not made & objects(url)


def test_a_withdrawn_commit_takes_out_what_a_gc_pass_may_collect() -> None:
    """A GC pass on a clock ahead of the writer's collects the outputs; the commit that
    adopts them is withdrawn, after which the view reads the inputs, and the next commit
    publishes without the record."""
    clock = silt.ManualClock(T0)
    url = mem_url()
    rng = random.Random(5)
    model: dict[bytes, bytes] = {}
    with silt.open(url, settings=EXTERNAL, clock=clock) as db:
        load(db, model, rng, 4)
        record = shown_record(db, url, clock)
        clock.advance(3000)  # still younger than half the grace: shown
        assert l0_ids(db) == []
        ahead = silt.ManualClock(clock.now_ms() + GRACE_MS - 1000)  # cutoff: 2 s after birth
        report = collect_garbage(silt.open_store(url), retain_versions=10,
                                 grace_seconds=GRACE_MS / 1000, clock=ahead)
        assert {paths.sst_key(s.id) for s in record.outputs} <= set(report.deleted_ssts)
        db.put(b"k001", b"after")
        model[b"k001"] = b"after"
        with pytest.raises(WithdrawnError):
            db.commit()
        assert l0_ids(db) == [s.id for s in db.manifest.l0]  # the inputs again
        check_reads(db, model)
        db.commit()
        assert not {s.id for s in record.outputs} & {s.id for s in db.manifest.all_ssts()}
        check_reads(db, model)
    with silt.open(url, settings=EXTERNAL, clock=clock) as again:
        check_reads(again, model)


def test_a_follower_shows_only_what_it_committed() -> None:
    clock = silt.ManualClock(T0)
    url = mem_url()
    rng = random.Random(9)
    model: dict[bytes, bytes] = {}
    with silt.open(url, settings=EXTERNAL, clock=clock) as writer:
        load(writer, model, rng, 4)
        # A handle that never committed finds the record too, and shows nothing of it.
        with silt.open(url, settings=EXTERNAL, clock=clock) as follower:
            shown_record(writer, url, clock)
            assert follower.wait_for_compaction(10)
            assert l0_ids(follower) == [s.id for s in follower.manifest.l0] != []
            check_reads(follower, model)
            with silt.open(url, settings=OTHER, clock=clock) as other:
                other.put(b"k002", b"other")
                other.commit()
            model[b"k002"] = b"other"
            # The writer follows the other writer's version: it shows that version as committed
            assert writer.advance(10) == other.version
            assert l0_ids(writer) == [s.id for s in writer.manifest.l0]
            assert writer.wait_for_compaction(10)
            assert l0_ids(writer) == [s.id for s in writer.manifest.l0]
            check_reads(writer, model)
            assert follower.catch_up(10)[0] == other.version
            assert l0_ids(follower) == [s.id for s in follower.manifest.l0]
            check_reads(follower, model)
            # Once the writer commits from there, the commit adopts its record as before.
            writer.commit()
            assert len(writer.manifest.l0) == 1  # the other writer's delta stays above
            assert l0_ids(writer) == [s.id for s in writer.manifest.l0]
            check_reads(writer, model)


def test_clock_wakeups_run_at_their_time_and_not_when_cancelled() -> None:
    """The wake-ups early installation takes records out with (silt.clock.Clock.call_at)."""
    manual = silt.ManualClock(T0)
    ran: list[str] = []
    manual.call_at(T0 + 10, lambda: ran.append("a"))
    cancelled = manual.call_at(T0 + 5, lambda: ran.append("cancelled"))
    manual.call_at(T0 + 3, lambda: ran.append("b"))
    cancelled.cancel()
    manual.advance(2)
    assert ran == []
    manual.advance(10)
    assert ran == ["b", "a"]  # in time order, once
    manual.advance(100)
    assert ran == ["b", "a"]
    manual.call_at(T0, lambda: ran.append("due"))  # already due: at once
    assert ran[-1] == "due"
    # The wall clock runs them on a thread of their own.
    clock = silt.Clock()
    done = threading.Event()
    clock.call_at(clock.now_ms(), done.set)
    assert done.wait(30)


def test_compactions_follow_one_another_with_no_commit_in_between() -> None:
    """A load commits 12 times while the first compaction (of the first 4 L0 SSTs) is held:
    once it finishes, the next one is picked from the tree it shows, so L0 empties in the
    view before any commit; the next commit adopts both, in the order they finished."""
    gate = threading.Event()

    def hold(op: str, key: str) -> None:
        if threading.current_thread().name.startswith("silt-compact"):
            assert gate.wait(120)

    faulty = FaultyStore(MemoryStore(None))
    faulty.on_call("put_if_absent", hold, lambda k: k.startswith(paths.SST_PREFIX))
    rng = random.Random(4)
    model: dict[bytes, bytes] = {}
    with silt.open(mem_url(), store=faulty, settings=SETTINGS) as db:
        load(db, model, rng, 12)
        assert len(db.manifest.l0) == 12 and len(l0_ids(db)) == 12
        gate.set()
        assert db.wait_for_compaction(120)  # the first one: 4 SSTs fewer
        deadline = time.monotonic() + 120
        while l0_ids(db) and time.monotonic() < deadline:  # the next one, with no commit
            threading.Event().wait(0.01)
        assert l0_ids(db) == [] and len(db.manifest.l0) == 12
        assert db.stats()["compactions_installed"] >= 2
        check_reads(db, model)
        assert db.wait_for_compaction(120)
        shown = [[r.info.id for r in lv.readers] for lv in db._view.levels]
        db.put(b"k000", b"new")
        model[b"k000"] = b"new"
        db.commit()
        assert db.stats()["compactions_adopted"] >= 2
        assert [[s.id for s in run] for run in db.manifest.levels] == shown
        assert len(db.manifest.l0) == 1
        check_reads(db, model)
