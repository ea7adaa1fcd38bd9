"""Cache refill after compaction (silt.refill): on a remote store, once the writer installs a
compaction for reads (silt.compaction.early) or, if it did not, adopts it, the blocks of its
outputs that hold what its inputs had cached are read into the block cache in the background,
so the hot keys are read without a request afterwards; keys that were not cached are not
refilled; a local store, or ``refill_after_compaction=False``, refills nothing; a failing
refill is counted, never raised; closing stops it."""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
import time

import pytest
import silt
from silt import refill
from silt.compaction.compactor import run_compaction
from silt.compaction.task import make_policy
from silt.errors import InvalidTypeError
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore


class RemoteMemory(MemoryStore):
    """A memory store that says it is remote (as S3, GCS or Azure do)."""

    local = False


KEYS = [b"k%06d" % i for i in range(6000)]


def settings(**kw) -> silt.Settings:
    return silt.Settings(**{
        "inline_delta_bytes": 0, "block_bytes": 1024, "block_cache_bytes": 32 << 20,
        "compaction_mode": "external", "compaction_poll_seconds": 0,
        "l0_compaction_trigger": 2, **kw})


def range_gets(db: silt.DB, purpose: str = "read") -> int:
    return db.stats()["requests"].get(purpose, {}).get("RANGE_GET", {}).get("count", 0)


def compacted_not_adopted(db: silt.DB, hot: list[bytes], *, install: bool = False) -> None:
    """Two overlapping L0 SSTs, compacted as ``silt compact`` would (the DB runs in external
    mode) while the cache holds only the blocks of ``hot`` (read after the compaction ran,
    before the DB installs or adopts it); with ``install``, the DB then installs it for reads
    (and refills then), else the next commit adopts it (and refills then)."""
    rng = random.Random(5)
    for round_ in range(2):
        db.put_many(KEYS, [b"%d-" % round_ + rng.randbytes(40) for _ in KEYS])
        db.commit()
    task = make_policy(db.settings.compaction, db.settings).pick(db.manifest, 0)
    assert task is not None
    run_compaction(db.store, db.manifest, task, db.settings, silt.Clock())
    db.cache.clear()  # uploads were prefilled: keep only what the hot reads bring in
    assert all(v is not None for v in db.multi_get(hot))
    if install:
        assert db.wait_for_compaction(30)
        assert not db._view.l0  # the outputs serve reads: the refill started now


def compacted_with_hot_keys(db: silt.DB, hot: list[bytes], *, install: bool = False) -> None:
    """:func:`compacted_not_adopted`, then a commit that adopts the compaction."""
    compacted_not_adopted(db, hot, install=install)
    db.put(b"zz-another-write", b"x")
    db.commit()  # adopts the compaction
    assert db.stats()["compactions_adopted"] >= 1


@pytest.mark.parametrize("when", ["adopted", "installed"])
def test_hot_keys_stay_cached_across_a_compaction(when: str) -> None:
    hot = KEYS[1000:1400] + KEYS[4000:4100]
    with silt.open(f"memory://refill-hot-{when}", store=RemoteMemory(None),
                   settings=settings()) as db:
        compacted_not_adopted(db, hot, install=when == "installed")
        if when == "installed":
            db.wait_for_refill()
            refilled = db.stats()["refill_blocks"]
            assert refilled > 0  # before any commit
        db.put(b"zz-another-write", b"x")
        db.commit()  # adopts the compaction
        assert db.stats()["compactions_adopted"] >= 1
        db.wait_for_refill()
        stats = db.stats()
        assert stats["refill_blocks"] > 0 and range_gets(db, "refill") > 0
        if when == "installed":
            assert stats["refill_blocks"] == refilled  # not refilled again by the commit
        before = range_gets(db)
        assert all(v.startswith(b"1-") for v in db.multi_get(hot))  # the compacted values
        assert range_gets(db) == before  # every hot block was refilled
        # bounded by what was cached: the cold keys' blocks were not read
        cold = KEYS[2000:2400]
        assert all(v is not None for v in db.multi_get(cold))
        assert range_gets(db) > before


def test_refill_reads_about_what_the_inputs_had_cached() -> None:
    hot = KEYS[3000:3050]
    with silt.open("memory://refill-bound", store=RemoteMemory(None),
                   settings=settings()) as db:
        compacted_with_hot_keys(db, hot)
        db.wait_for_refill()
        blocks = db.stats()["refill_blocks"]
        out = db.manifest.levels[-1] if db.manifest.levels else db.manifest.l0
        total = sum(db._reader(s).num_blocks for s in out)
        # the hot keys' blocks (and their neighbours at the edges), a small part of the output
        assert 0 < blocks <= total // 10


@pytest.mark.parametrize("why", ["setting", "local"])
def test_no_refill_when_off_or_local(why: str) -> None:
    hot = KEYS[1000:1400]
    store = RemoteMemory(None) if why == "setting" else MemoryStore(None)
    s = settings(refill_after_compaction=False) if why == "setting" else settings()
    with silt.open(f"memory://refill-off-{why}", store=store, settings=s) as db:
        compacted_with_hot_keys(db, hot)
        db.wait_for_refill()
        assert db.stats().get("refill_blocks", 0) == 0
        before = range_gets(db)
        assert all(v.startswith(b"1-") for v in db.multi_get(hot))
        assert range_gets(db) > before  # read on demand, as before


def test_a_failing_refill_is_counted_and_reads_still_work(caplog) -> None:
    faulty = FaultyStore(RemoteMemory(None))
    hot = KEYS[500:900]
    with silt.open("memory://refill-fail", store=faulty, settings=settings()) as db:
        compacted_not_adopted(db, hot)
        # from here every ranged read of an SST the refill makes fails
        faulty.fail_matching(
            "get_range", lambda k: k.startswith("sst/") and threading.current_thread().name
            .startswith("silt-refill"), times=None)
        db.put(b"zz", b"x")
        db.commit()
        db.wait_for_refill()
        assert db.stats()["refill_failures"] >= 1
        assert "cache refill after compaction failed" in caplog.text
        faulty.clear_faults()
        assert all(v.startswith(b"1-") for v in db.multi_get(hot))


def test_close_stops_a_refill_in_flight() -> None:
    store = FaultyStore(RemoteMemory(None))
    hot = KEYS
    db = silt.open("memory://refill-close", store=store, settings=settings())
    compacted_not_adopted(db, hot)
    started = threading.Event()

    def slow(op: str, key: str) -> None:
        if threading.current_thread().name.startswith("silt-refill"):
            started.set()
            time.sleep(0.05)

    store.on_call("get_range", slow)
    db.put(b"zz", b"x")
    db.commit()
    assert started.wait(10)
    t0 = time.monotonic()
    db.close()
    assert time.monotonic() - t0 < 5  # stopped between runs, not after the whole refill
    calls = store.calls["get_range"]
    time.sleep(0.2)
    assert store.calls["get_range"] == calls  # no refill thread reads after close


def test_hot_ranges_and_blocks_over_on_real_ssts() -> None:
    """Every key of a cached block of the inputs lies in a block blocks_over gives."""
    with silt.open("memory://refill-unit", store=RemoteMemory(None),
                   settings=settings(l0_compaction_trigger=100)) as db:
        # values long (and incompressible) enough that the two picked spans lie more than the
        # remote gap rule's COALESCE_GAP_BYTES apart in each SST: no GET reads the blocks
        # between them
        def value(k: bytes) -> bytes:
            return hashlib.sha256(k).digest() * 4

        db.put_many(KEYS[::2], [value(k) for k in KEYS[::2]])
        db.commit()
        db.put_many(KEYS[1::3], [value(k + b"b") for k in KEYS[1::3]])
        db.commit()
        readers = [db._reader(s) for s in db.manifest.l0]
        db.cache.clear()
        picked = KEYS[100:130] + KEYS[5000:5010]
        db.multi_get(picked)
        ranges = refill.hot_ranges(readers, db.cache)
        assert ranges == sorted(ranges)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))  # merged, disjoint
        for key in picked:
            assert any(lo <= key <= hi for lo, hi in ranges)
        assert not any(lo <= KEYS[3000] <= hi for lo, hi in ranges)
        for reader in readers:
            wanted = set(refill.blocks_over(reader, ranges))
            for key in picked:
                i = reader.block_index_for(key)
                if i >= 0 and reader.info.smallest <= key:
                    assert i in wanted
        hits = db.cache.hits
        db.cache.holds([("x", 1)])
        assert db.cache.hits == hits  # a look, not a read


def test_the_setting_is_checked() -> None:
    with pytest.raises(InvalidTypeError, match="refill_after_compaction"):
        silt.Settings(refill_after_compaction="yes")
