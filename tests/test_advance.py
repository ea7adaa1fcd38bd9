"""``DB.advance``: a handle another writer moved past moves to the latest version ``<= at_most``
with GETs instead of a LIST when it can prove the answer, and always lands where a fresh
``silt.open(url, at_most=...)`` would, with the same reads.

A stream processor's cached shard handle calls it whenever another worker process committed the
shard since: a wrong answer would compute a batch from the wrong state.
"""

from __future__ import annotations

import time

import pytest
import roundtrips
import silt
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from silt import paths
from silt.errors import (
    CommitConflict,
    FencedError,
    InvalidArgumentError,
    InvalidTypeError,
    WithdrawnError,
)
from silt.gc import collect_garbage
from silt.metrics import KINDS
from silt.plugins import open_store
from silt.reopen import PROBES
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore
from silt.versions import WITHDRAWN, Fate


def _requests(db: silt.DB) -> dict[str, int]:
    """Without the leftovers search's requests: a thread's, at a moment a loaded machine moves
    (``roundtrips.foreground_requests``)."""
    return roundtrips.foreground_requests(db)


def _delta(db: silt.DB, before: dict[str, int]) -> dict[str, int]:
    now = _requests(db)
    return {k: now[k] - before[k] for k in KINDS if now[k] != before[k]}


def _commit(db: silt.DB, key: bytes, version: int | None = None) -> int:
    db.put(key, b"v%d" % (version or 0) + key)
    return db.commit(version)


def _elsewhere(url: str, key: bytes, version: int | None = None) -> int:
    """Another process opens the latest version and commits ``key`` (at ``version``, or the
    first number after it that it may use)."""
    with silt.open(url) as other:
        if version is not None:
            version = max(version, other.committer.next)
        return _commit(other, key, version)


def _withdraw(url: str, version: int) -> None:
    """Withdraw ``version`` as its writer would (the fate record with its commit token)."""
    store = open_store(url)
    try:
        token = silt.read_manifest(store, version).token
        fate = Fate(version, WITHDRAWN, "test", token)
        store.put_if_absent(paths.fate_key(version), fate.encode())
    finally:
        store.close()


def _nothing_above(url: str, version: int) -> bool:
    """Whether no manifest (live or withdrawn) above ``version`` exists (a listing, from
    outside the handle)."""
    store = open_store(url)
    try:
        return not any((paths.parse_manifest_key(i.key) or 0) > version
                       for i in store.list(paths.MANIFEST_PREFIX))
    finally:
        store.close()


def _same_as_fresh(db: silt.DB, url: str, at_most: int) -> None:
    with silt.open(url, at_most=at_most) as fresh:
        assert db.version == fresh.version
        assert list(db.scan()) == list(fresh.scan())
        assert db.meta == fresh.meta


@pytest.fixture(params=["file", "memory"])
def url(request, tmp_path):
    if request.param == "file":
        yield (tmp_path / "db").as_uri()
    else:
        name = f"advance-{time.monotonic_ns()}"
        yield f"memory://{name}"
        MemoryStore.drop(name)


def test_a_handle_passed_by_another_process_advances_with_three_gets(url: str) -> None:
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")  # a commit: the handle knows the GC markers
        a.get(b"a")
        _elsewhere(url, b"c")  # 3
        _elsewhere(url, b"d")  # 4
        before = _requests(a)
        assert a.advance(4) == 4
        # manifest/4, its (missing) fate record, the (missing) next GC epoch
        assert _delta(a, before) == {"GET": 3}
        assert a.stats()["advances"] == 1 and "advances_listed" not in a.stats()
        assert a.stats()["requests"]["open"]["GET"]["count"] >= 3
        _same_as_fresh(a, url, 4)
        # the next commit goes on from there
        assert _commit(a, b"e") == 5
        _same_as_fresh(a, url, 5)


def _opened(db: silt.DB) -> int:
    return sum(k["count"] for k in db.stats()["requests"].get("open", {}).values())


def _reads(delta: dict[str, int]) -> int:
    return delta.get("GET", 0) + delta.get("RANGE_GET", 0)


def test_advance_newer_proves_nothing_is_newer_in_three_round_trips(url: str) -> None:
    """A handle one version behind (a shard whose last batch ran in another worker process):
    advance, then newer_versions, took 5 GETs one after the other; advance_newer takes 4, in
    3 round trips: manifest/3; its fate record and manifest/4 at once; the GC epoch."""
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")  # 2: the handle knows the GC markers
        _elsewhere(url, b"c")  # 3
        before, opened = _requests(a), _opened(a)
        with roundtrips.timed(a) as reads:
            assert a.advance_newer(3) == (3, [])
        delta = _delta(a, before)
        assert "LIST" not in delta and _reads(delta) == 4, delta
        assert reads.round_trips() == 3, reads.spans
        assert _opened(a) - opened == 4  # all under "open", those made on the read pool too
        assert a.stats()["advances"] == 1 and "advances_listed" not in a.stats()
        _same_as_fresh(a, url, 3)
        # what it replaces: 5 sequential GETs
        _elsewhere(url, b"d")  # 4
        before = _requests(a)
        with roundtrips.timed(a) as reads:
            assert a.advance(4) == 4
            assert a.newer_versions() == []
        assert _reads(_delta(a, before)) == 5 and reads.round_trips() == 5
        assert _commit(a, b"e") == 5


def test_catch_up_reads_the_successor_once(url: str) -> None:
    """DB.catch_up, a shard task's question: nothing newer, 2 GETs (as proved_latest); another
    process committed the next version: its manifest read by the first GET is the advance's
    first read, so 4 GETs in 3 round trips (proved_latest then advance_newer: 5 in 4)."""
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")  # 2
        before = _requests(a)
        with roundtrips.timed(a) as reads:
            assert a.catch_up(3) == (2, [])  # nobody moved on
        assert _reads(_delta(a, before)) == 2 and reads.round_trips() == 2
        assert "advances" not in a.stats()
        _elsewhere(url, b"c")  # 3
        before = _requests(a)
        with roundtrips.timed(a) as reads:
            assert a.catch_up(3) == (3, [])
        delta = _delta(a, before)
        assert "LIST" not in delta and _reads(delta) == 4, delta
        assert reads.round_trips() == 3, reads.spans
        assert a.stats()["advances"] == 1 and "advances_listed" not in a.stats()
        _same_as_fresh(a, url, 3)
        # what it replaces
        _elsewhere(url, b"d")  # 4
        before = _requests(a)
        with roundtrips.timed(a) as reads:
            assert not a.proved_latest()
            assert a.advance_newer(4) == (4, [])
        assert _reads(_delta(a, before)) == 5 and reads.round_trips() == 4
        # a replay: the version after at_most exists, a LIST says which
        _elsewhere(url, b"e")  # 5
        _elsewhere(url, b"f")  # 6
        before = _requests(a)
        assert a.catch_up(5) == (5, [6])
        assert _delta(a, before).get("LIST") == 1
        _same_as_fresh(a, url, 5)
        # a handle above at_most: advance_newer (a LIST: it goes backwards)
        assert a.catch_up(4) == (4, [5, 6])


def test_advance_newer_lists_what_is_newer_only_when_a_name_after_exists(url: str) -> None:
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")  # 2
        _elsewhere(url, b"c")  # 3
        _elsewhere(url, b"d")  # 4
        before = _requests(a)
        assert a.advance_newer(3) == (3, [4])  # a replay of 4
        delta = _delta(a, before)
        assert delta.get("LIST") == 1 and "advances_listed" not in a.stats()
        _same_as_fresh(a, url, 3)
        # the handle's own version, nothing above it up to at_most: its fate record, no probe
        # of its successor's name twice (round 1 saw it missing)
        _elsewhere(url, b"e")  # 5
        assert a.advance(5) == 5
        before = _requests(a)
        with roundtrips.timed(a) as reads:
            assert a.advance_newer(7) == (5, [])
        delta = _delta(a, before)
        # manifest/7; manifest/6 at once with the next, none found: 5's fate record; epoch
        assert "LIST" not in delta and _reads(delta) == 4, delta
        assert reads.round_trips() == 4
        # a withdrawn version above the answer: proved where, then a LIST for what is newer
        _elsewhere(url, b"f")  # 6
        _withdraw(url, 6)
        before = _requests(a)
        assert a.advance_newer(6) == (5, [])
        assert _delta(a, before).get("LIST") == 1
        _same_as_fresh(a, url, 6)


def test_advance_newer_without_markers_lists_once(url: str) -> None:
    _elsewhere(url, b"a")
    _elsewhere(url, b"b")
    with silt.open(url, at_most=1) as a:  # never committed: knows no GC markers
        _elsewhere(url, b"c")  # 3
        before = _requests(a)
        assert a.advance_newer(2) == (2, [3])
        assert _delta(a, before).get("LIST") == 1 and a.stats()["advances_listed"] == 1
        assert a.advance_newer(-1) == (None, [1, 2, 3])
        assert a.advance_newer(5) == (3, [])


def test_sst_readers_of_both_versions_are_kept(url: str) -> None:
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")
        kept = {s.id: a._readers.by_id[s.id] for s in a.manifest.all_ssts()}
        _elsewhere(url, b"c")
        a.advance(3)
        assert all(a._readers.by_id[i] is r for i, r in kept.items())
        assert len(a._readers.by_id) == len(list(a.manifest.all_ssts()))


def test_gaps_and_a_reservation_are_probed_like_a_listing(url: str) -> None:
    """Idle batches leave gaps; a commit that skips numbers reserves the next one (a version
    with its base's state) and nothing inside the skipped range can exist."""
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")  # 2
        _elsewhere(url, b"x", 7)  # reservation 3 (skip_to 7), then 7
        for at_most in (2, 3, 5, 6):
            before = _requests(a)
            a.advance(at_most)
            assert "LIST" not in _delta(a, before), at_most
            _same_as_fresh(a, url, at_most)
            assert a.version == (2 if at_most == 2 else 3)
        before = _requests(a)
        assert a.advance(7) == 7
        assert "LIST" not in _delta(a, before)
        _same_as_fresh(a, url, 7)


def test_a_gap_wider_than_the_probes_lists(url: str) -> None:
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")  # 2
        _elsewhere(url, b"x", 3)
        at_most = 3 + PROBES
        before = _requests(a)
        assert a.advance(at_most) == 3
        assert _delta(a, before).get("LIST") == 1
        assert a.stats()["advances_listed"] == 1
        _same_as_fresh(a, url, at_most)


def test_withdrawn_versions_are_skipped(url: str) -> None:
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")  # 2
        _elsewhere(url, b"x")  # 3
        _elsewhere(url, b"y")  # 4
        _withdraw(url, 4)
        before = _requests(a)
        assert a.advance(4) == 3
        assert "LIST" not in _delta(a, before)
        _same_as_fresh(a, url, 4)
        # the handle's own version withdrawn since: never kept
        _withdraw(url, 3)
        assert a.advance(4) == 2
        _same_as_fresh(a, url, 4)
        # and the next commit skips the withdrawn numbers
        assert _commit(a, b"z") == 5


def test_a_gc_pass_in_between_is_seen_through_the_epoch(url: str) -> None:
    """Another writer commits and GC deletes versions meanwhile: the epoch moved, so the handle
    lists, and lands where a fresh open does."""
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")
        for i in range(6):
            _elsewhere(url, b"k%d" % i)  # 3..8
        grace = silt.Settings().gc_grace_seconds
        later = silt.ManualClock(int(time.time() * 1000) + int(grace * 1000) + 1000)
        report = collect_garbage(a.store, retain_versions=2, grace_seconds=grace, clock=later)
        assert report.deleted_manifests
        before = _requests(a)
        assert a.advance(8) == 8
        assert _delta(a, before).get("LIST")
        _same_as_fresh(a, url, 8)


class _Killed(BaseException):
    """A GC process killed mid-pass (no code catches it)."""


#: Where a GC pass is killed: before its horizon marker (its pass marker written, the epoch not
#: bumped yet), at its first deletion, or before it writes ``.done`` (everything deleted).
_KILL_POINTS = {
    "horizon": ("put_if_absent", lambda k: k.startswith(paths.HORIZON_PREFIX)),
    "deleting": ("delete_many", None),
    "done": ("put_if_absent", lambda k: k.endswith(paths.PASS_DONE_SUFFIX)),
}


def _crashed_gc(url: str, at: str, retain: int = 2) -> None:
    """A GC pass killed at ``at``: its pass marker stays without ``.done``, as after a crash,
    until a pass a week later drops it. (It deletes manifests below its horizon, no SST: none
    is older than the grace period.)"""
    grace = silt.Settings().gc_grace_seconds
    store = FaultyStore(open_store(url))
    op, predicate = _KILL_POINTS[at]

    def kill(op: str, key: str) -> None:
        raise _Killed(f"GC killed at {op} {key}")

    store.on_call(op, kill, predicate=predicate, times=1)
    try:
        collect_garbage(store, retain_versions=retain, grace_seconds=grace)
    except _Killed:
        pass
    finally:
        store.close()


@pytest.mark.parametrize("commits", [False, True], ids=["idle", "committing"])
@pytest.mark.parametrize("at", sorted(_KILL_POINTS))
def test_a_crashed_gc_pass_costs_one_listing(url: str, at: str, commits: bool) -> None:
    """A GC pass killed mid-way leaves its pass marker without ``.done``. A shard handle that
    another process moves past every batch (and that commits in between, or stays idle) pays
    one listing for it, the advance that finds the GC epoch moved (which reads the markers
    again), and then answers with GETs again: not a LIST per batch until the marker is dropped
    a week later."""
    with silt.open(url) as a:
        for key in (b"a", b"b", b"c", b"d", b"e"):
            _commit(a, key)
        _crashed_gc(url, at)
        store = open_store(url)
        try:
            passes = [i.key for i in store.list(paths.PASS_PREFIX)]
        finally:
            store.close()
        assert passes and not any(k.endswith(paths.PASS_DONE_SUFFIX) for k in passes)
        lists = []
        for batch in range(6):
            latest = _elsewhere(url, b"x%d" % batch)
            before = _requests(a)
            if batch % 2:
                assert a.advance(latest) == latest
            else:
                assert a.catch_up(latest) == (latest, [])
            lists.append(_delta(a, before).get("LIST", 0))
            _same_as_fresh(a, url, latest)
            if commits:
                _commit(a, b"m%d" % batch)
        # the recovery: the GC markers (2 LISTs) and the versions (1), once
        assert lists[0] <= 3 and lists[1:] == [0] * 5, lists


def test_a_concurrent_writer_still_conflicts(url: str) -> None:
    """After advancing, a commit races other writers from the same base as usual."""
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")
        _elsewhere(url, b"c")  # 3
        a.advance(3)
        _elsewhere(url, b"d")  # 4, from 3, before a commits
        a.put(b"e", b"1")
        with pytest.raises(silt.CommitConflict):
            a.commit()
        assert silt.versions(url) == [1, 2, 3, 4]


def test_advancing_backwards_and_to_nothing_lists(url: str) -> None:
    with silt.open(url) as a:
        _commit(a, b"a", 2)
        _commit(a, b"b")  # 3
        assert a.advance(2) == 2
        _same_as_fresh(a, url, 2)
        assert a.advance(1) is None and list(a.scan()) == [] and a.manifest is None
        _same_as_fresh(a, url, 1)
        assert a.advance(3) == 3
        _same_as_fresh(a, url, 3)


def test_uncommitted_writes_are_refused(url: str) -> None:
    with silt.open(url) as a:
        _commit(a, b"a")
        a.put(b"x", b"1")
        with pytest.raises(InvalidArgumentError, match="uncommitted writes"):
            a.advance(5)
        a.commit()
        _commit(a, b"y")
        a.delete_range(b"a", b"b")  # a pending range delete leaves the memtable empty
        with pytest.raises(InvalidArgumentError, match="uncommitted writes"):
            a.advance(5)
        for bad, err in ((-2, InvalidArgumentError), ("3", InvalidTypeError),
                         (True, InvalidTypeError)):
            with pytest.raises(err):
                a.advance(bad)


# -- equivalence with a fresh open over random histories -----------------------------------------
_STEP = st.one_of(
    st.tuples(st.just("commit"), st.integers(0, 3)),  # another process commits, skipping n
    st.tuples(st.just("mine"), st.integers(0, 1)),  # the handle itself commits
    st.tuples(st.just("withdraw"), st.integers(0, 2)),  # withdraw the latest - n
    st.tuples(st.just("gc"), st.integers(1, 3)),  # a GC pass retaining n versions
    st.tuples(st.just("crash"), st.integers(0, 2)),  # a GC pass killed at a _KILL_POINTS entry
    st.tuples(st.just("advance"), st.integers(-2, 5)),  # advance to the latest + n
    st.tuples(st.just("newer"), st.integers(-3, 3)),  # advance_newer to the latest + n
    st.tuples(st.just("task"), st.integers(-3, 3)),  # catch_up, as a Spark shard task
)
#: What a commit in these histories may meet: GC runs with a clock past every grace period, so a
#: commit it overlaps is withdrawn or fenced, and a number withdrawn here is never committed.
_LOST = (CommitConflict, FencedError, WithdrawnError)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEP, min_size=1, max_size=14))
@example([("commit", 0), ("commit", 0), ("newer", -1)])  # a replay: the name after exists
@example([("commit", 0), ("withdraw", 0), ("task", 1)])  # a withdrawn version above
@example([("commit", 0), ("commit", 1), ("withdraw", 0), ("newer", 0)])
@example([("withdraw", 0), ("mine", 0), ("withdraw", 0), ("newer", 2)])  # the handle's own
@example([("commit", 0), ("gc", 1), ("task", 0)])
@example([("commit", 0), ("commit", 0), ("commit", 0), ("gc", 1), ("task", 0)])  # successor gone
@example([("mine", 0), ("withdraw", 0), ("gc", 1), ("task", 1)])  # own version withdrawn, gone
@example([("mine", 0), ("commit", 0), ("crash", 1), ("commit", 0), ("task", 0),
          ("commit", 0), ("newer", 0)])  # a crashed pass: probes again after one listing
def test_advance_lands_where_a_fresh_open_does(steps) -> None:
    name = f"advance-eq-{time.monotonic_ns()}"
    url = f"memory://{name}"
    grace = silt.Settings().gc_grace_seconds
    n = 0
    try:
        with silt.open(url) as a:
            _commit(a, b"start")
            for kind, arg in steps:
                latest = (silt.versions(url) or [0])[-1]
                n += 1
                key = b"k%d" % n
                if kind == "commit":
                    try:
                        _elsewhere(url, key, latest + 1 + arg)
                    except _LOST:
                        pass  # a withdrawn number, or a commit GC's future cutoff withdrew
                elif kind == "mine":
                    try:
                        a.advance(latest)
                        _commit(a, key, max(latest + 1 + arg, a.committer.next) if arg else None)
                    except _LOST:
                        a.close()
                        a = silt.open(url)
                elif kind == "withdraw":
                    live = silt.versions(url)
                    if len(live) > arg + 1:
                        _withdraw(url, live[-1 - arg])
                elif kind == "gc":
                    later = silt.ManualClock(int(time.time() * 1000) + int(grace * 1000) + 1000)
                    store = open_store(url)
                    try:
                        collect_garbage(store, retain_versions=arg, grace_seconds=grace,
                                        clock=later)
                    finally:
                        store.close()
                elif kind == "crash":
                    _crashed_gc(url, sorted(_KILL_POINTS)[arg], retain=1)
                elif kind == "advance":
                    at_most = max(-1, latest + arg)
                    try:
                        a.advance(at_most)
                    except silt.NotFoundError:
                        continue  # reading a version GC is deleting: a fresh open fails too
                    _same_as_fresh(a, url, at_most)
                else:
                    at_most = max(-1, latest + arg)
                    # as a stream processor's shard task: when nothing is after the handle's
                    # version, it may stay (as proved_latest: its own fate record is not read;
                    # unless GC ran since, then it lists and lands as a fresh open does)
                    stays = (kind == "task" and a.version is not None and a.version <= at_most
                             and _nothing_above(url, a.version))
                    version = a.version
                    try:
                        answer = (a.catch_up if kind == "task" else a.advance_newer)(at_most)
                    except silt.NotFoundError:
                        continue
                    if stays and answer == (version, []):
                        continue
                    _same_as_fresh(a, url, at_most)
                    with silt.open(url, at_most=at_most) as fresh:
                        assert answer == (fresh.version, fresh.newer_versions())
            a.close()
    finally:
        MemoryStore.drop(name)
