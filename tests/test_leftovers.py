"""Compactions an earlier handle finished and left uncommitted serve a new handle's reads
(silt.compaction.leftovers).

* A writer loads four L0 SSTs, its compaction of them finishes, and it closes without a
  commit: a handle opened afterwards probes no L0 SST (it read all four before), answers the
  same, and its base and manifest are unchanged. Its first commit adopts nothing but starts
  reading every block of the outputs on a thread; the commit after that check adopts the
  compaction and deletes the record.
* An output damaged in a data block (its tail intact) is never adopted: the check a commit
  starts finds it, reads go back to the inputs, and no commit adopts it.
* Age: a leftover is shown only while its oldest output is younger than half of the shortest
  grace any writer announced (and of the handle's own), and leaves the view at that age.
* A handle that only reads never starts a compaction; remote stores, a follower moved to
  another version, and a DB without a compaction policy show nothing.
"""

from __future__ import annotations

import random
import uuid

import pytest
import silt
from silt import paths
from silt.compaction.record import CompactionRecord
from silt.errors import CorruptionError
from silt.graces import Announcer
from test_early_install import check_reads, load

T0 = 1_700_000_000_000
GRACE_MS = 10_000

#: One L0 SST per commit; the fourth starts a compaction of all four into L1 (in a thread, so a
#: ManualClock names its outputs).
SETTINGS = silt.Settings(
    memtable_bytes=1 << 20,
    block_bytes=128,
    compaction="leveled",
    compaction_mode="thread",
    l0_compaction_trigger=4,
    l0_stall_trigger=64,
    inline_delta_bytes=0,
    gc_grace_seconds=GRACE_MS / 1000,
)



def root(tier: str, tmp_path) -> str:
    if tier == "memory":
        return f"memory://leftovers-{uuid.uuid4().hex}"
    return (tmp_path / f"root-{uuid.uuid4().hex[:8]}").as_uri()


def leave_a_compaction(url: str, seed: int, clock: silt.Clock | None = None,
                       settings: silt.Settings = SETTINGS) -> tuple[dict[bytes, bytes], str]:
    """A writer loads four L0 SSTs, waits for their compaction, and closes without committing
    it. Returns the data and the record's object name."""
    model: dict[bytes, bytes] = {}
    with silt.open(url, settings=settings, clock=clock) as db:
        load(db, model, random.Random(seed), 4)
        assert db.wait_for_compaction(60)
        assert len(db.manifest.l0) == 4 and not db.manifest.levels
    store = silt.open_store(url)
    try:
        records = [i.key for i in store.list(paths.COMPACTION_PREFIX)]
    finally:
        store.close()
    assert len(records) == 1
    return model, records[0]


def l0_ids(db: silt.DB) -> list[str]:
    return [r.info.id for r in db._view.l0]


@pytest.mark.parametrize("tier", ["memory", "file"])
def test_a_new_handle_reads_the_compaction_an_earlier_one_left(tier: str, tmp_path) -> None:
    url = root(tier, tmp_path)
    model, record_key = leave_a_compaction(url, 1)
    with silt.open(url, settings=SETTINGS) as db:
        assert db.wait_for_compaction(60)
        manifest = db.manifest
        assert len(manifest.l0) == 4 and not manifest.levels
        # The four L0 SSTs the base lists are not probed: the outputs serve reads from L1.
        assert l0_ids(db) == []
        stats = db.stats()
        assert stats["l0_ssts"] == 0 and stats["read_amplification"] == 1
        assert stats["compactions_found"] == 1
        check_reads(db, model)
        assert db.manifest is manifest  # nothing committed
        shown = [[r.info.id for r in lv.readers] for lv in db._view.levels]
        # The first commit adopts none: it starts reading every block of the outputs, on a
        # thread (the commit does not wait for it); the view still shows them.
        db.put(b"k000", b"new")
        model[b"k000"] = b"new"
        db.commit()
        assert len(db.manifest.l0) == 5 and not any(db.manifest.levels)
        assert [[r.info.id for r in lv.readers] for lv in db._view.levels] == shown
        check_reads(db, model)
        # Once checked, the next commit adopts it.
        assert db.wait_for_compaction(60)
        db.put(b"k001", b"new")
        model[b"k001"] = b"new"
        db.commit()
        assert [[s.id for s in run] for run in db.manifest.levels] == shown
        assert len(db.manifest.l0) == 2
        assert db.stats()["compactions_adopted"] == 1
        check_reads(db, model)
    store = silt.open_store(url)
    try:
        assert record_key not in {i.key for i in store.list(paths.COMPACTION_PREFIX)}
    finally:
        store.close()
    with silt.open(url, settings=SETTINGS) as again:
        check_reads(again, model)


def damage_a_block(url: str, record_key: str) -> None:
    """Flip a byte inside the first data block of the record's first output (its tail, which
    the check before showing reads, stays intact)."""
    store = silt.open_store(url)
    try:
        record = CompactionRecord.decode(store.get(record_key), record_key)
        key = paths.sst_key(record.outputs[0].id)
        data = bytearray(store.get(key))
        data[20] ^= 0xFF
        store.delete_many([key])
        store.put(key, bytes(data))
    finally:
        store.close()


def test_a_damaged_output_is_never_adopted(tmp_path) -> None:
    url = root("memory", tmp_path)
    model, record_key = leave_a_compaction(url, 2)
    damage_a_block(url, record_key)
    # (A trigger this handle never reaches: no compaction of its own redoes the work.)
    with silt.open(url, settings=SETTINGS.replace(l0_compaction_trigger=64)) as db:
        assert db.wait_for_compaction(60)
        assert l0_ids(db) == []  # shown: its tails check out
        db.put(b"k001", b"new")
        model[b"k001"] = b"new"
        db.commit()  # starts the check of every block
        assert db.wait_for_compaction(60)
        assert db.stats()["compactions_damaged"] == 1
        assert len(l0_ids(db)) == 5  # out of the view: the inputs serve reads
        check_reads(db, model)
        db.commit()  # refused: never adopted
        assert len(db.manifest.l0) == 5 and not any(db.manifest.levels)
        assert len(l0_ids(db)) == 5
        check_reads(db, model)


@pytest.mark.parametrize("tier", ["memory", "file"])
def test_a_read_of_a_damaged_output_fails_loudly_until_the_check_refuses_it(
        tier: str, tmp_path) -> None:
    """Before the check, a read that loads the damaged block raises ``CorruptionError`` naming
    the output (never a wrong answer), the same under both implementations; once a commit's
    check refused the leftover, every read is answered by the inputs."""
    url = root(tier, tmp_path)
    model, record_key = leave_a_compaction(url, 4)
    damage_a_block(url, record_key)
    store = silt.open_store(url)
    try:
        record = CompactionRecord.decode(store.get(record_key), record_key)
    finally:
        store.close()
    with silt.open(url, settings=SETTINGS.replace(l0_compaction_trigger=64)) as db:
        assert db.wait_for_compaction(60)
        assert l0_ids(db) == []  # shown: its tails check out
        with pytest.raises(CorruptionError) as caught:
            list(db.scan())  # every block of every output
        assert paths.sst_key(record.outputs[0].id) in str(caught.value)
        db.put(b"k002", b"new")
        model[b"k002"] = b"new"
        db.commit()  # starts the check of every block
        assert db.wait_for_compaction(60)
        assert db.stats()["compactions_damaged"] == 1
        check_reads(db, model)


def test_a_leftover_is_shown_only_while_younger_than_half_the_shortest_grace(tmp_path) -> None:
    clock = silt.ManualClock(T0)
    url = root("memory", tmp_path)
    model, _ = leave_a_compaction(url, 3, clock)
    born = T0  # the outputs are named at the clock's time
    # Another writer once announced a grace of 4 s: GC may use that when it is the greatest.
    # (The greatest is what GC uses; the uploader's own, 10 s here, is at least the shortest.)
    store = silt.open_store(url)
    try:
        Announcer(store, 4_000)()
    finally:
        store.close()
    longer = SETTINGS.replace(gc_grace_seconds=100)
    clock.advance(1_000)
    with silt.open(url, settings=longer, clock=clock) as db:
        assert db.wait_for_compaction(60)
        assert l0_ids(db) == []  # 1 s old: shown
        check_reads(db, model)
        # Past half of the shortest announced grace (4 s) after birth, it leaves the view.
        clock.set(born + 2_001)
        assert len(l0_ids(db)) == 4
        check_reads(db, model)
    with silt.open(url, settings=longer, clock=clock) as late:
        assert late.wait_for_compaction(60)
        assert len(l0_ids(late)) == 4 and late.stats().get("compactions_found", 0) == 0


def test_a_handle_that_only_reads_starts_no_compaction(tmp_path) -> None:
    url = root("memory", tmp_path)
    model, _ = leave_a_compaction(url, 4, settings=SETTINGS.replace(l0_compaction_trigger=4))
    # With a trigger of one SST, the tree shown (one L1 run) would start a compaction at once.
    with silt.open(url, settings=SETTINGS.replace(l0_compaction_trigger=1,
                                                  level1_bytes=1)) as db:
        assert db.wait_for_compaction(60)
        assert l0_ids(db) == []
        check_reads(db, model)
        assert db.stats().get("compactions_started", 0) == 0
        assert not db.stats()["compaction_running"]


def test_nothing_is_shown_without_a_policy_or_on_a_follower(tmp_path) -> None:
    url = root("memory", tmp_path)
    model, _ = leave_a_compaction(url, 5)
    with silt.open(url, settings=SETTINGS.replace(compaction="none")) as db:
        assert db.wait_for_compaction(60)
        assert len(l0_ids(db)) == 4
        check_reads(db, model)
    # A handle opened at the base, then moved to a version another writer made: that version
    # as committed.
    with silt.open(url, settings=SETTINGS) as follower:
        assert follower.wait_for_compaction(60)
        assert l0_ids(follower) == []
        with silt.open(url, settings=SETTINGS.replace(compaction="none")) as other:
            other.put(b"k002", b"other")
            model[b"k002"] = b"other"
            moved = other.commit()
        assert follower.advance(moved) == moved
        assert len(l0_ids(follower)) == 5
        check_reads(follower, model)


@pytest.mark.parametrize("tier", ["memory", "file"])
def test_close_while_the_blocks_are_checked_returns(tier: str, tmp_path) -> None:
    """A close right after the commit that started the check of every block: the check stops
    between two outputs and the close returns (it used to wait forever for the writer lock the
    close held)."""
    import threading

    url = root(tier, tmp_path)
    model, _ = leave_a_compaction(url, 6)
    for i in range(3):
        db = silt.open(url, settings=SETTINGS)
        assert db.wait_for_compaction(60)
        # Found again by each handle (none committed twice): only the new L0 SSTs are read.
        assert db.stats()["compactions_found"] == 1 and len(l0_ids(db)) == i
        db.put(b"k003", b"new")
        db.commit()  # starts the check on a thread
        closer = threading.Thread(target=db.close)
        closer.start()
        closer.join(60)
        assert not closer.is_alive()
        model[b"k003"] = b"new"
    with silt.open(url, settings=SETTINGS) as again:
        check_reads(again, model)


#: As SETTINGS, with the compaction subprocess (a ``file://`` root on the system clock).
BACKGROUND = SETTINGS.replace(compaction_mode="background")


@pytest.mark.parametrize("damaged", [False, True])
def test_the_block_check_runs_in_the_compaction_subprocess(damaged: bool, tmp_path) -> None:
    """``background`` mode on ``file://``: every block of the leftover's outputs is read and
    checked by the compaction subprocess, one request per output (not by a thread holding the
    writer's GIL after a restart's first commit); an intact record is adopted by the commit
    after the check, a damaged one is refused and its inputs serve reads."""
    url = root("file", tmp_path)
    model, record_key = leave_a_compaction(url, 7, settings=BACKGROUND)
    if damaged:
        damage_a_block(url, record_key)
    with silt.open(url, settings=BACKGROUND.replace(l0_compaction_trigger=64)) as db:
        assert db.wait_for_compaction(60)
        assert l0_ids(db) == [] and db.stats()["compactions_found"] == 1
        outputs = sum(len(lv.readers) for lv in db._view.levels)
        db.put(b"k004", b"new")
        model[b"k004"] = b"new"
        db.commit()  # starts the check
        assert db.wait_for_compaction(60)
        stats = db.stats()
        # Every output when intact; the damaged first output ends the check.
        assert stats["leftover_checks_in_subprocess"] == (1 if damaged else outputs)
        assert stats.get("compactions_damaged", 0) == damaged
        db.commit()
        if damaged:
            assert len(db.manifest.l0) == 5 and not any(db.manifest.levels)
            assert len(l0_ids(db)) == 5
        else:
            assert db.stats()["compactions_adopted"] == 1
            assert len(db.manifest.l0) == 1 and sum(map(len, db.manifest.levels)) == outputs
        check_reads(db, model)
    if not damaged:  # (a new handle would find the refused record again: GC collects it)
        with silt.open(url, settings=BACKGROUND) as again:
            check_reads(again, model)
