"""GC respects every writer that may still commit, whatever grace the others use
(:mod:`silt.graces`), and a withdrawn commit's retry either commits the writer's data or says
plainly that it is lost, without using a version number.

The case that lost writes: writer B committed the newest version with ``gc_grace_seconds=0``;
GC with a grace of 0 was then accepted (only the newest manifest's grace was read) and deleted
writer A's flushed, uncommitted SST (A uses a longer grace). A's commit was withdrawn, and every
retry was withdrawn again (only SSTs older than half A's grace were copied), burning a version
number each time, while A's writes were gone.
"""

from __future__ import annotations

import uuid

import pytest
import silt
from silt import paths
from silt.errors import InvalidArgumentError, StoreError, WithdrawnError
from silt.gc import collect_garbage
from silt.graces import announced, lower_grace
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore

T0 = 1_700_000_000_000
GRACE = 100.0
SETTINGS = silt.Settings(memtable_bytes=2000, block_bytes=256, compaction="none",
                         gc_grace_seconds=GRACE, retain_versions=1, inline_delta_bytes=0)


@pytest.fixture
def mem():
    name = f"graces-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStore.drop(name)


def _all(url: str) -> list[str]:
    return sorted(i.key for i in silt.open_store(url).list(""))


def _newest_by_zero_grace_writer(url: str, clock: silt.ManualClock) -> None:
    with silt.open(url, settings=SETTINGS.replace(gc_grace_seconds=0), clock=clock) as b:
        b.put(b"b", b"1")
        b.commit()


@pytest.mark.parametrize("ahead_ms", [1, 10_000, 49_000, 99_000])
@pytest.mark.parametrize("gc_grace", [0, 1.0, 50.0, 99.0])
def test_gc_respects_a_writer_that_has_not_committed_yet(mem: str, ahead_ms: int,
                                                         gc_grace: float) -> None:
    """A writer with the longer grace opens the version a zero-grace writer committed, and
    flushes: any GC with a grace shorter than its own is refused before it touches anything,
    however old the SST; then the writer commits its data."""
    clock = silt.ManualClock(T0)
    _newest_by_zero_grace_writer(mem, clock)
    a = silt.open(mem, settings=SETTINGS, clock=clock)
    a.put(b"a", b"2")
    a.flush()  # uploaded, not committed
    clock.advance(ahead_ms)
    before = _all(mem)
    with pytest.raises(InvalidArgumentError, match=r"shorter than the 100s .* that a writer"):
        collect_garbage(silt.open_store(mem), retain_versions=1, grace_seconds=gc_grace,
                        clock=clock)
    assert _all(mem) == before
    assert a.commit() == 2
    a.close()
    with silt.open(mem, clock=clock) as r:
        assert dict(r.scan()) == {b"a": b"2", b"b": b"1"}


def test_the_writer_announces_its_grace_before_its_first_upload(mem: str) -> None:
    clock = silt.ManualClock(T0)
    store = FaultyStore(silt.open_store(mem))
    with silt.open(mem, settings=SETTINGS, clock=clock, store=store) as db:
        db.put(b"a", b"1")
        db.commit()  # an inline-free commit: its SST is this handle's first upload
        db.put(b"b", b"2")
        db.commit()
    puts = [c.key for c in store.log if c.op == "put_if_absent"]
    first_sst = next(i for i, k in enumerate(puts) if k.startswith(paths.SST_PREFIX))
    assert puts[:first_sst] == [paths.grace_key(int(GRACE * 1000))]
    assert puts.count(paths.grace_key(int(GRACE * 1000))) == 1  # once per handle
    assert announced(silt.open_store(mem)) == [int(GRACE * 1000)]
    # GC with the writers' grace runs; lowering the grace is refused until it is forgotten
    collect_garbage(silt.open_store(mem), retain_versions=1, grace_seconds=GRACE, clock=clock)
    with pytest.raises(InvalidArgumentError):
        collect_garbage(silt.open_store(mem), retain_versions=1, grace_seconds=10, clock=clock)
    assert lower_grace(silt.open_store(mem), 10) == [paths.grace_key(int(GRACE * 1000))]
    # (the newest manifest still records 100 s: GC accepts 10 s once a writer commits with it)
    with silt.open(mem, settings=SETTINGS.replace(gc_grace_seconds=10), clock=clock) as db:
        db.put(b"c", b"3")
        db.commit()
    collect_garbage(silt.open_store(mem), retain_versions=1, grace_seconds=10, clock=clock)
    with pytest.raises(InvalidArgumentError, match="grace_seconds must be"):
        lower_grace(silt.open_store(mem), -1)


def test_a_root_without_announcements_keeps_the_newest_manifest_rule(mem: str) -> None:
    """A root written before writers announced their grace (no ``gc/grace/`` objects): GC
    applies the rule it had, the newest manifest's recorded grace, or the default."""
    clock = silt.ManualClock(T0)
    with silt.open(mem, settings=SETTINGS, clock=clock) as db:
        db.put(b"a", b"1")
        db.commit()
    store = silt.open_store(mem)
    store.delete_many([k for k in _all(mem) if k.startswith(paths.GRACE_PREFIX)])
    clock.advance(200_000)
    with pytest.raises(InvalidArgumentError, match="shorter than the 100s"):
        collect_garbage(store, retain_versions=1, grace_seconds=50, clock=clock)
    collect_garbage(store, retain_versions=1, grace_seconds=GRACE, clock=clock)
    assert silt.versions(mem) == [1]


def _collect_unannounced(url: str, clock: silt.ManualClock, grace: float, *,
                         kill_before_deleting: bool = False) -> None:
    """A GC pass that ignores the writers' announcements (an older silt's GC, or an operator
    who forgot a grace while a writer ran): their markers are gone when it runs."""
    lower_grace(silt.open_store(url), grace)
    store = FaultyStore(silt.open_store(url))
    if kill_before_deleting:
        def kill(op: str, key: str) -> None:
            raise KeyboardInterrupt("GC killed")

        store.on_call("delete_many", kill, times=1)
    try:
        collect_garbage(store, retain_versions=1, grace_seconds=grace, clock=clock)
    except KeyboardInterrupt:
        pass


def test_a_retry_after_a_withdrawal_commits_the_writers_data(mem: str) -> None:
    """A GC pass (that ignored the writer's grace) was killed after writing its markers: the
    writer's young SSTs are older than its cutoff, so the commit is withdrawn (the pass, never
    done, may still delete them). Committing again copies them first and lands."""
    clock = silt.ManualClock(T0)
    _newest_by_zero_grace_writer(mem, clock)
    a = silt.open(mem, settings=SETTINGS, clock=clock)
    a.put(b"a", b"2")
    a.flush()
    clock.advance(5_000)  # young for a's grace (100 s), older than the pass's cutoff
    _collect_unannounced(mem, clock, 1.0, kill_before_deleting=True)
    with pytest.raises(WithdrawnError, match="Commit again"):
        a.commit()
    assert a.commit() == 3  # 2 was withdrawn
    a.close()
    assert silt.versions(mem) == [1, 3]
    with silt.open(mem, clock=clock) as r:
        assert dict(r.scan()) == {b"a": b"2", b"b": b"1"}


def test_a_retry_whose_sst_was_deleted_says_the_writes_are_lost(mem: str) -> None:
    """The pass did delete the writer's young SST: the withdrawn commit's retries each fail
    saying what is lost and what to do, and use no version number."""
    clock = silt.ManualClock(T0)
    _newest_by_zero_grace_writer(mem, clock)
    a = silt.open(mem, settings=SETTINGS, clock=clock)
    a.put(b"a", b"2")
    a.flush()
    clock.advance(5_000)
    _collect_unannounced(mem, clock, 1.0)
    with pytest.raises(WithdrawnError):
        a.commit()
    manifests = [k for k in _all(mem) if k.startswith(paths.MANIFEST_PREFIX)]
    for _ in range(3):
        with pytest.raises(StoreError, match=r"writes made since version 1 and not committed "
                           r"are lost.*Nothing was committed and no version number was used.*"
                           r"reopen the latest version"):
            a.commit()
    assert [k for k in _all(mem) if k.startswith(paths.MANIFEST_PREFIX)] == manifests
    a.close()
    with silt.open(mem, clock=clock) as r:  # the committed state is intact
        assert r.version == 1 and dict(r.scan()) == {b"b": b"1"}
