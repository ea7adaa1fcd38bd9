"""One memory budget per process (silt.budget): a block cache shared by every DB, memtables
charged to the same bytes, early freezes when memtables have their share."""

from __future__ import annotations

import contextlib
import threading
import uuid

import pytest
import silt
from silt import budget as budget_mod
from silt.errors import InvalidArgumentError, InvalidTypeError
from silt.tiers.memory import MemoryStore

KiB = 1024
MiB = 1024 * KiB
#: Small blocks and memtables, no private cache: the DBs use whichever budget they are given.
SHARED = silt.Settings(memtable_bytes=256 * KiB, block_bytes=1024, compaction="none")


@pytest.fixture
def urls():
    names = [f"budget-{uuid.uuid4().hex}" for _ in range(16)]
    yield [f"memory://{n}" for n in names]
    for n in names:
        MemoryStore.drop(n)


def _fill(db: silt.DB, n: int, tag: bytes = b"") -> None:
    for i in range(n):
        db.put(b"%s%08d" % (tag, i), b"v" * 100)


def test_dbs_share_one_cache_by_default(urls) -> None:
    a = silt.open(urls[0])
    b = silt.open(urls[1])
    try:
        assert a.cache is b.cache is silt.memory_budget().cache
        assert a.settings.block_cache_bytes is None
    finally:
        a.close()
        b.close()


def test_blocks_of_many_dbs_stay_within_one_budget(urls) -> None:
    budget = silt.MemoryBudget(2 * MiB)
    dbs = [silt.open(u, settings=SHARED, budget=budget) for u in urls]
    try:
        for db in dbs:
            _fill(db, 3000)
            db.commit()
        assert budget.memtable_bytes == 0  # every memtable uploaded: reservations given back
        for _ in range(2):
            for db in dbs:
                for i in range(0, 3000, 7):
                    assert db.get(b"%08d" % i) == b"v" * 100
                assert budget.cache.used <= budget.capacity
        # 16 DBs read ~5 MiB of blocks in all: one cache of 2 MiB held them, evicting.
        assert budget.cache.evictions > 0
        assert all(db.cache is budget.cache for db in dbs)
    finally:
        for db in dbs:
            db.close()


def test_memtables_take_from_the_cache_and_freeze_early_at_their_share(urls) -> None:
    budget = silt.MemoryBudget(2 * MiB)  # memtables: 1 MiB together, chunks of 64 KiB
    chunk = budget.chunk
    assert chunk == 64 * KiB
    dbs = [silt.open(u, settings=SHARED, budget=budget) for u in urls[:8]]
    try:
        for db in dbs:  # a full cache first
            _fill(db, 2000, b"c")
            db.commit()
            for i in range(0, 2000, 3):
                db.get(b"c%08d" % i)
        assert budget.cache.used > 1 * MiB
        peak = 0
        for i in range(1500):
            for db in dbs:  # 8 writers, 256 KiB memtables each: 2 MiB wanted, 1 MiB allowed
                db.put(b"w%08d" % i, b"x" * 100)
            # What the active memtables hold reserved (a frozen one keeps its reservation until
            # its upload is done, however long that takes: memory really held, so counted, but
            # not what the share limits).
            peak = max(peak, sum(db._allowance.reserved for db in dbs))
            # Frozen memtables still uploading keep their reservations, and on a loaded
            # machine they can hold more than the whole budget: the cache then has none.
            assert budget.cache.capacity == max(0, budget.capacity - budget.memtable_bytes
                                                - budget.pinned_bytes)
            assert budget.cache.used <= budget.cache.capacity
        # Over the share by at most one chunk per writing DB plus one entry each.
        assert peak <= budget.memtable_limit + 8 * (chunk + 256)
        assert budget.refusals > 0
        # Each DB wrote ~200 KiB, below Settings.memtable_bytes: only the budget froze them.
        assert sum(db.stats()["pending_parts"] for db in dbs) > 0
        for db in dbs:
            db.commit()
            assert db.get(b"w%08d" % 1499) == b"x" * 100
        assert budget.memtable_bytes == 0
    finally:
        for db in dbs:
            db.close()


def test_a_lone_memtable_grows_to_memtable_bytes(urls) -> None:
    budget = silt.MemoryBudget(64 * MiB)
    with silt.open(urls[0], settings=SHARED, budget=budget) as db:
        assert budget.memtable_bytes == 0  # nothing reserved before the first write
        _fill(db, 1000)
        stats = db.stats()
        charge = budget_mod.memtable_charge(stats["memtable_bytes"], stats["memtable_entries"])
        assert charge < budget.memtable_bytes <= charge + budget.chunk
        assert not db._view.parts  # 1000 puts of ~130 bytes fit: no early freeze
    assert budget.memtable_bytes == 0  # close gives the reservation back


def test_close_keeps_shared_blocks_for_a_reopen(urls) -> None:
    budget = silt.MemoryBudget(8 * MiB)
    with silt.open(urls[0], settings=SHARED, budget=budget) as db:
        _fill(db, 2000)
        db.commit()
        for i in range(2000):
            db.get(b"%08d" % i)
    cached = budget.cache.used
    assert cached > 0
    with silt.open(urls[0], settings=SHARED, budget=budget) as db:
        misses = budget.cache.misses
        assert db.get(b"%08d" % 5) == b"v" * 100
        assert budget.cache.misses == misses  # served from the blocks the first handle cached


def test_private_cache_is_outside_the_budget(urls) -> None:
    budget = silt.MemoryBudget(4 * MiB)
    private = SHARED.replace(block_cache_bytes=128 * KiB)
    with silt.open(urls[0], settings=private) as db:
        assert db.cache is not silt.memory_budget().cache
        assert db.cache.capacity == 128 * KiB
        before = silt.memory_budget().memtable_bytes
        _fill(db, 500)
        assert silt.memory_budget().memtable_bytes == before
    with pytest.raises(InvalidArgumentError, match="not both"):
        silt.open(urls[1], settings=private, budget=budget)


def test_set_memory_budget_resizes_the_process_budget(urls) -> None:
    budget = silt.memory_budget()
    old = budget.capacity
    try:
        with silt.open(urls[0], settings=SHARED) as db:
            _fill(db, 12000)
            db.commit()
            for i in range(12000):
                db.get(b"%08d" % i)
            assert budget.cache.used > 1 * MiB
            assert silt.set_memory_budget(1 * MiB) is budget
            assert budget.cache.used <= 1 * MiB  # evicted down at once
            assert db.get(b"%08d" % 7) == b"v" * 100
    finally:
        silt.set_memory_budget(old, memtable_share=budget_mod.DEFAULT_MEMTABLE_SHARE)


def test_concurrent_writers_leave_the_budget_balanced(urls) -> None:
    budget = silt.MemoryBudget(1 * MiB)
    dbs = [silt.open(u, settings=SHARED, budget=budget) for u in urls[:4]]
    errors: list[BaseException] = []

    def write(db: silt.DB) -> None:
        try:
            for r in range(3):
                _fill(db, 1500, b"%d" % r)
                db.commit()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(db,)) for db in dbs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert budget.memtable_bytes == 0
    assert budget.cache.capacity == budget.capacity - budget.pinned_bytes  # the SSTs' tails
    for db in dbs:
        assert db.get(b"2%08d" % 1499) == b"v" * 100
        db.close()
    assert budget.pinned_bytes == 0
    assert budget.cache.capacity == budget.capacity


@pytest.mark.parametrize("value, error", [
    ("1GB", InvalidTypeError), (1.5e9, InvalidTypeError), (True, InvalidTypeError),
    (0, InvalidArgumentError), (MiB - 1, InvalidArgumentError), (-5, InvalidArgumentError),
])
def test_bad_budgets_are_refused(value, error) -> None:
    before = silt.memory_budget().capacity
    with pytest.raises(error, match="memory budget"):
        silt.set_memory_budget(value)
    with pytest.raises(error, match="memory budget"):
        silt.MemoryBudget(value)
    assert silt.memory_budget().capacity == before


@pytest.mark.parametrize("share", [0, 1, 1.5, -0.1, float("nan"), "half"])
def test_bad_memtable_shares_are_refused(share) -> None:
    with pytest.raises((InvalidArgumentError, InvalidTypeError), match="memtable_share"):
        silt.MemoryBudget(4 * MiB, memtable_share=share)


def test_open_refuses_what_is_not_a_budget(urls) -> None:
    with pytest.raises(InvalidTypeError, match=r"silt\.MemoryBudget"):
        silt.open(urls[0], budget=4 * MiB)


def test_block_cache_bytes_setting() -> None:
    assert silt.Settings().block_cache_bytes is None
    s = silt.Settings(block_cache_bytes=1024)
    assert silt.Settings.from_dict(s.to_dict()) == s
    assert silt.Settings.from_dict(silt.Settings().to_dict()).block_cache_bytes is None
    with pytest.raises(InvalidTypeError, match="or None"):
        silt.Settings(block_cache_bytes="big")
    with pytest.raises(InvalidArgumentError):
        silt.Settings(block_cache_bytes=-1)


def test_a_db_dropped_without_close_gives_its_memtable_back(urls) -> None:
    import gc

    budget = silt.MemoryBudget(8 * MiB)
    db = silt.open(urls[0], settings=SHARED, budget=budget)
    _fill(db, 500)
    assert budget.memtable_bytes > 0
    del db
    gc.collect()
    assert budget.stats()["memtable_bytes"] == 0  # (applied by the next budget call)


def test_sst_tails_are_pinned_in_the_budget_from_first_read_to_close(urls) -> None:
    # An open SST's index and bloom filter stay in memory: the budget counts them and the cache
    # gives up as much, from the SST's first read (not at open) until the DB closes.
    settings = silt.Settings(memtable_bytes=64 * KiB, block_bytes=1024, compaction="none")
    with silt.open(urls[0], settings=settings) as db:
        _fill(db, 3000)
        db.commit()
    budget = silt.MemoryBudget(4 * MiB)
    db = silt.open(urls[0], settings=settings, budget=budget)
    try:
        readers = [*db._view.l0, *(r for lv in db._view.levels for r in lv.readers)]
        assert len(readers) > 3
        assert budget.pinned_bytes == 0  # nothing read yet: no tail loaded, nothing pinned
        assert db.get(b"%08d" % 5) == b"v" * 100
        loaded = [r for r in readers if r.loaded_tail is not None]
        assert loaded and len(loaded) < len(readers)
        assert budget.pinned_bytes == sum(r.loaded_tail.charge for r in loaded)
        for i in range(0, 3000, 50):
            db.get(b"%08d" % i)
        pinned = sum(r.loaded_tail.charge for r in readers if r.loaded_tail is not None)
        assert budget.pinned_bytes == pinned > 0
        assert budget.cache.capacity == budget.capacity - budget.memtable_bytes - pinned
        assert budget.stats()["pinned_bytes"] == pinned
    finally:
        db.close()
    assert budget.pinned_bytes == 0
    assert budget.cache.capacity == budget.capacity


def test_a_db_dropped_without_close_unpins_its_tails(urls) -> None:
    import gc

    with silt.open(urls[0], settings=SHARED) as db:
        _fill(db, 2000)
        db.commit()
    budget = silt.MemoryBudget(8 * MiB)
    db = silt.open(urls[0], settings=SHARED, budget=budget)
    assert db.get(b"%08d" % 7) == b"v" * 100
    assert budget.pinned_bytes > 0
    del db
    gc.collect()
    assert budget.stats()["pinned_bytes"] == 0  # (applied by the next budget call)


def test_open_reads_no_sst_tail(urls) -> None:
    # Opening is O(manifest): the tails (index, bloom) of the SSTs load on their first read.
    settings = silt.Settings(memtable_bytes=64 * KiB, block_bytes=1024, compaction="none")
    with silt.open(urls[0], settings=settings) as db:
        _fill(db, 3000)
        db.commit()
    with silt.open(urls[0], settings=settings) as db:
        assert db.stats()["l0_ssts"] > 3
        assert db.stats()["requests_by_kind"].get("RANGE_GET", 0) == 0
        assert db.get(b"%08d" % 3) == b"v" * 100
        # one key: the tails of the SSTs whose key range holds it, and one block
        assert 2 <= db.stats()["requests_by_kind"]["RANGE_GET"] < db.stats()["l0_ssts"]


def test_finalizers_give_back_without_taking_a_lock() -> None:
    """A DB or SST reader collected unclosed gives its memory back from a garbage-collection
    finalizer, which may run inside any allocation, even one made while this thread holds the
    cache's or the budget's lock: it only queues the amount, applied by the next budget call
    (this once deadlocked a Spark worker inside BlockCache.get_many)."""
    budget = silt.MemoryBudget(64 * 2**20)
    assert budget.reserve(2**20) and budget.stats()["memtable_bytes"] == 2**20
    budget.pin(4096)
    cache_lock = getattr(budget.cache, "_lock", None)  # the pure twin's cache has one
    with budget._lock, (cache_lock or contextlib.nullcontext()):  # a finalizer runs in here
        budget.release_soon(2**20)
        budget.unpin_soon(4096)
    stats = budget.stats()
    assert stats["memtable_bytes"] == 0 and stats["pinned_bytes"] == 0
    assert budget.cache.capacity == budget.capacity
