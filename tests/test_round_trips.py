"""What each operation costs on an object store, in sequential round trips and requests.

Every test opens its DB on a :class:`silt.testing.LatencyStore` (every request waits
:data:`DELAY`; the store is remote, not ``local``, so the DB issues independent requests at
once on its pools) and asserts the round trips (the longest chain of requests each started
after the one before had completed, counted structurally, never by the clock) and the
requests of one operation. The root is ``memory://`` and, as in tests/test_engine_on_tiers.py,
each tier's emulator (``SILT_TEST_TIERS`` narrows the tiers). docs/tuning.md lists the same
figures ("Round trips: what each operation costs on an object store").

Background work would add requests of its own to an operation: compaction is off, and the
handle under test commits once before a commit is measured when the subject is a warm commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import silt
from silt import coldopen, paths, plugins, readplan
from silt.errors import CommitConflict
from silt.plugins import open_store
from silt.sst.bloom import bloom_hash
from silt.testing import LatencyStore, Operation
from test_engine_on_tiers import TIERS, Tier, register_plugin

#: Seconds each request waits: long against a thread's start-up on a loaded machine.
DELAY = 0.12

#: Small blocks, compaction off, a private cache (a cold handle starts with nothing cached).
SETTINGS = silt.Settings(memtable_bytes=256 * 1024, block_bytes=512,
                         block_cache_bytes=1 << 20, compaction="none")

#: Every delta uploaded as an SST.
UPLOADED = SETTINGS.replace(inline_delta_bytes=0)


@dataclass
class Root:
    """A fresh root and what opens its store."""

    url: str

    def slow(self) -> LatencyStore:
        """A new store on the root, behind the latency."""
        return LatencyStore(open_store(self.url), DELAY)

    def open(self, **kwargs: object) -> tuple[silt.DB, LatencyStore]:
        store = self.slow()
        kwargs.setdefault("settings", SETTINGS)
        return silt.open(self.url, store=store, **kwargs), store  # type: ignore[arg-type]


@pytest.fixture(params=["memory", *TIERS])
def root(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Root]:
    """``memory://`` or a fresh bucket on a tier's emulator (started only when needed)."""
    if request.param == "memory":
        yield Root(f"memory://rt-{uuid.uuid4().hex}")
        return
    servers = {"s3": ("s3_bucket", "moto_server", "moto_admin"),
               "gs": ("gcs_bucket", "gcs_server", "gcs_admin"),
               "az": ("az_container", "azurite_server", "azurite_admin")}[request.param]
    tier = Tier(request.param, *(request.getfixturevalue(name) for name in servers))
    register_plugin(monkeypatch, tier.scheme)
    yield Root(tier.url())
    plugins.reset_registry()


def _keys(lo: int, hi: int) -> list[bytes]:
    return [b"k%05d" % i for i in range(lo, hi)]


def _two_versions(root: Root) -> None:
    """Versions 1 and 2, one uploaded SST each (keys 0-299, 300-599), by another writer."""
    with silt.open(root.url, settings=UPLOADED) as w:
        for lo in (0, 300):
            for k in _keys(lo, lo + 300):
                w.put(k, b"v" * 50)
            w.commit()


#: What a failure says when the only difference is MORE round trips than expected. A loaded
#: machine can start a pool thread after another request of the same wave has completed (a
#: scheduling delay longer than DELAY was seen at load 10), which counts as one more round trip;
#: it can never shorten a chain or change the requests. Only that failure is run again (at most
#: twice, as a benchmark takes the best of several runs); a real extra round trip fails every run,
#: and fewer round trips or other requests fail at once.
LONGER = "more round trips than expected"

pytestmark = pytest.mark.flaky(reruns=2, only_rerun=[LONGER])


def _check(op: Operation, round_trips: int, requests: dict[str, int]) -> None:
    assert dict(op.requests) == requests, op
    if op.round_trips > round_trips:
        raise AssertionError(f"{LONGER}: {op.round_trips}, expected {round_trips}: {op}")
    assert op.round_trips == round_trips, op


# --- opening ------------------------------------------------------------------------------------


def test_cold_open_lists_then_reads_the_manifest_its_fate_record_and_the_gc_markers(
        root: Root) -> None:
    """LIST of manifest/ and of the GC epoch at once; then the manifest, its fate record and
    the LIST of gc/ at once (the listing showed the manifest before the record is read; the
    epoch was read before gc/ is listed). Before: 3 round trips, one GET after the other; then
    2 without the markers, which the handle's first commit listed after its PUT."""
    _two_versions(root)
    store = root.slow()
    for at_most in (None, 1):
        with store.operation() as op:
            db = silt.open(root.url, store=store, settings=SETTINGS, at_most=at_most)
        if at_most is None:
            _check(op, 2, {"list": 3, "get": 2})
            assert op.waves()[0] == [("list", "epoch/"), ("list", "manifest/")]
        else:  # manifest/1 guessed at once with the LIST; its SST's tail with its fate record
            _check(op, 2, {"list": 3, "get": 2, "get_range": 1})
            assert op.waves()[0] == [("get", "manifest/00000000000000000001"),
                                     ("list", "epoch/"), ("list", "manifest/")]
        assert ("list", "gc/") in op.waves()[1]
        assert db.version == (2 if at_most is None else 1) and db.warm
        assert db.get(b"k00001") == b"v" * 50
        db.close()


def test_open_at_a_version_reads_its_fate_record_and_the_gc_markers_at_once(root: Root) -> None:
    """``version=``: the manifest; then, once seen, its fate record and the listing of gc/ (the
    horizon and pins say whether it is retained; the GC epoch is not needed). Before: 4 round
    trips (the manifest, its fate record, the epoch, gc/), one after the other."""
    _two_versions(root)
    store = root.slow()
    with store.operation() as op:
        db = silt.open(root.url, store=store, settings=SETTINGS, version=1)
    _check(op, 2, {"get": 2, "list": 1})
    assert op.waves() == [[("get", "manifest/00000000000000000001")],
                          [("get", "manifest/00000000000000000001.fate"), ("list", "gc/")]]
    assert db.version == 1 and db.get(b"k00300") is None
    db.close()
    with pytest.raises(silt.errors.VersionNotFoundError, match="does not exist"):
        silt.open(root.url, store=store, version=7)


def test_open_of_an_empty_root_is_one_round_trip(root: Root) -> None:
    """The LIST of manifest/ and the LIST of the GC epoch at once; the root has no version, so
    the markers are not listed (the first commit reads them: a new root's first commit lists
    the versions after its PUT anyway)."""
    store = root.slow()
    with store.operation() as op:
        db = silt.open(root.url, store=store, settings=SETTINGS)
    _check(op, 1, {"list": 2})
    assert op.waves() == [[("list", "epoch/"), ("list", "manifest/")]]
    assert db.version is None and not db.warm
    db.close()


# --- commits ------------------------------------------------------------------------------------


def test_first_commit_of_a_handle_is_a_warm_commit_its_open_read_the_markers(
        root: Root) -> None:
    """A handle whose open read the GC markers: the manifest PUT, then the GET of the next GC
    epoch (missing: nothing changed since the open's listing). Before: 2 round trips and 3
    requests (PUT with the LIST of the newest epoch; LIST gc/). A handle opened at a version
    (its open lists gc/ without the epoch, so it knows no markers) still lists them at its
    first commit: the epoch at once with the PUT, then gc/."""
    _two_versions(root)
    db, store = root.open()
    db.put(b"x", b"1")
    with store.operation() as op:
        assert db.commit() == 3
    _check(op, 2, {"put_if_absent": 1, "get": 1})
    assert op.waves() == [[("put_if_absent", "manifest/00000000000000000003")],
                          [("get", paths.epoch_key(1))]]
    db.close()
    at_version, store = root.open(version=3)
    assert not at_version.warm
    at_version.put(b"x", b"2")
    with store.operation() as op:
        assert at_version.commit() == 4
    _check(op, 2, {"put_if_absent": 1, "list": 2})
    assert op.waves() == [[("list", "epoch/"), ("put_if_absent", "manifest/00000000000000000004")],
                          [("list", "gc/")]]
    at_version.close()


def test_first_commit_on_an_empty_root_lists_versions_and_markers_at_once(root: Root) -> None:
    """On an empty root the checks after the PUT also list the versions (another writer may
    have committed meanwhile): at once with the LIST of gc/; the GC epoch was listed by the
    open. Before: 4 round trips; then 2 with 3 LISTs (the epoch again, with the PUT). The
    next commit is a warm one."""
    db, store = root.open()
    db.put(b"x", b"1")
    with store.operation() as op:
        assert db.commit() == 1
    _check(op, 2, {"put_if_absent": 1, "list": 2})
    assert op.waves() == [[("put_if_absent", "manifest/00000000000000000001")],
                          [("list", "gc/"), ("list", "manifest/")]]
    db.put(b"x", b"2")
    with store.operation() as op:
        assert db.commit() == 2
    _check(op, 2, {"put_if_absent": 1, "get": 1})
    db.close()


def test_warm_inline_commit_is_two_round_trips(root: Root) -> None:
    """The manifest PUT, then the GET of the next GC epoch (missing: the markers are as the
    handle knows them)."""
    _two_versions(root)
    db, store = root.open()
    for n in range(3):
        db.put(b"x", b"%d" % n)
        with store.operation() as op:
            db.commit()
        if n:
            _check(op, 2, {"put_if_absent": 1, "get": 1})
    db.close()
    with silt.open(root.url, settings=SETTINGS) as fresh:
        assert fresh.get(b"x") == b"2" and fresh.version == 5


def test_commit_after_gc_wrote_markers_lists_gc_once(root: Root) -> None:
    """The next GC epoch exists (a GC pass ran): the listing of gc/ follows at once, and the
    markers record that epoch (it existed before the listing). A GC pass bumps the epoch twice
    (as it begins, and when done), so the next commit finds the second bump and lists once
    more; then commits are back to 2 round trips. Before: two LISTs one after the other
    (epoch, then gc/), 4 round trips, then 2."""
    _two_versions(root)
    db, store = root.open()
    db.put(b"x", b"1")
    db.commit()  # warm now
    with silt.open(root.url, settings=SETTINGS) as other:
        other.gc()  # writes a pass marker: bumps the epoch as it begins and when done
    for n, cost in enumerate([(3, {"put_if_absent": 1, "get": 1, "list": 1})] * 2
                             + [(2, {"put_if_absent": 1, "get": 1})]):
        db.put(b"x", b"%d" % n)
        with store.operation() as op:
            db.commit()
        _check(op, *cost)
    db.close()


def test_commit_that_uploads_an_sst_is_three_round_trips(root: Root) -> None:
    """The SST's create-only upload; the manifest PUT; the GET of the next GC epoch: from a
    handle's first commit on, when its open's listing of gc/ showed its writer grace announced
    (silt.graces). Before: 4 round trips at a handle's first upload (the grace marker's PUT
    before it; the markers' LISTs after the manifest PUT)."""
    _two_versions(root)
    db, store = root.open(settings=UPLOADED)
    for n in range(3):
        for k in _keys(0, 50):
            db.put(k, b"w%d" % n)
        with store.operation() as op:
            db.commit()
        _check(op, 3, {"put_if_absent": 2, "get": 1})
        assert [kind for kind, _ in op.waves()[0]] == ["put_if_absent"], op
        assert op.waves()[0][0][1].startswith("sst/"), op
    assert db.get(b"k00007") == b"w2"
    db.close()


def test_a_writer_whose_grace_is_not_announced_announces_it_before_its_first_upload(
        root: Root) -> None:
    """A grace no writer of the DB announced yet (none in the open's listing of gc/): its
    marker is created before the first upload (GC's argument needs it to exist before any SST
    it may list), one round trip more, once per handle."""
    _two_versions(root)
    other = UPLOADED.replace(gc_grace_seconds=UPLOADED.gc_grace_seconds + 1)
    db, store = root.open(settings=other)
    for n in range(2):
        db.put(b"x", b"%d" % n)
        with store.operation() as op:
            db.commit()
        if n == 0:
            _check(op, 4, {"put_if_absent": 3, "get": 1})
            assert op.waves()[0] == [("put_if_absent", paths.grace_key(
                int(other.gc_grace_seconds * 1000)))], op
        else:
            _check(op, 3, {"put_if_absent": 2, "get": 1})
    db.close()


# --- catching up --------------------------------------------------------------------------------


def _warm_at(root: Root, version: int) -> tuple[silt.DB, LatencyStore]:
    """A handle that committed ``version`` (so it knows the GC markers)."""
    db, store = root.open()
    while (db.version or 0) < version:
        db.put(b"h", b"%d" % (db.version or 0))
        db.commit()
    return db, store


def test_warm_handle_at_the_latest_version_proves_it_with_two_gets(root: Root) -> None:
    """catch_up(b - 1) on the handle that committed b - 1: the name of version b (missing),
    then the next GC epoch (missing). The GETs depend on each other's order (the epoch GET must
    follow every other read it vouches for): 2 round trips."""
    db, store = _warm_at(root, 2)
    with store.operation() as op:
        assert db.catch_up(2) == (2, [])
    _check(op, 2, {"get": 2})
    db.close()


def test_a_warm_handle_at_b_minus_1_runs_batch_b_with_no_request_before_its_commit(
        root: Root) -> None:
    """The handle committed b - 1: its state is batch b's base, so the batch asks nothing
    (its reads are cached), and its commit is 2 round trips. Had another attempt of batch b
    committed first, the commit's create-only PUT says so (a replay): nothing was lost by not
    asking before."""
    db, store = _warm_at(root, 2)
    with store.operation() as op:
        assert db.version == 2 and db.get(b"h") == b"1"
        db.put(b"h", b"2")
    _check(op, 0, {})
    with store.operation() as op:
        assert db.commit(3) == 3
    _check(op, 2, {"put_if_absent": 1, "get": 1})
    with silt.open(root.url, settings=SETTINGS, at_most=3) as attempt:
        attempt.put(b"h", b"other")
        assert attempt.commit(4) == 4
    db.put(b"h", b"3")
    with pytest.raises(CommitConflict):
        db.commit(4)
    db.close()
    with silt.open(root.url) as fresh:
        assert (fresh.version, fresh.get(b"h")) == (4, b"other")


def test_moved_handle_catches_up_in_three_round_trips(root: Root) -> None:
    """Another process committed b - 1: its manifest; its fate record and the name after it at
    once; the GC epoch."""
    db, store = _warm_at(root, 2)
    with silt.open(root.url, settings=SETTINGS) as other:
        other.put(b"o", b"1")
        assert other.commit() == 3
    with store.operation() as op:
        assert db.catch_up(3) == (3, [])
    _check(op, 3, {"get": 3, "get_range": 1})
    assert db.get(b"o") == b"1"
    db.close()


def test_a_handle_handed_over_at_b_minus_1_runs_batch_b_with_no_request_before_its_commit(
        root: Root) -> None:
    """Another process committed b - 1 and left its handle's record (DB.handoff): a process
    with no handle resumes it (silt.resume), one with an older handle moves it there
    (DB.take_handoff), each with no request, and each commit is a warm commit's 2 round trips.
    Before: a cold open (2 round trips, a LIST) or a catch-up (3 round trips, 4 GETs), and a
    cold handle's first commit listed the GC markers."""
    older, store = _warm_at(root, 2)
    committer, _ = _warm_at(root, 3)  # another process, which commits b - 1 = 4
    committer.put(b"h", b"b - 1")
    assert committer.commit() == 4
    record = committer.handoff("q/1")
    assert record is not None
    with store.operation() as op:
        resumed = silt.resume(root.url, record, 4, scope="q/1", store=store,
                              settings=SETTINGS)
        assert resumed is not None and resumed.warm and resumed.get(b"h") == b"b - 1"
        assert older.take_handoff(record, 4, "q/1") and older.version == 4
        assert older.get(b"h") == b"b - 1"
    _check(op, 0, {})
    resumed.put(b"h", b"b")
    with store.operation() as op:
        assert resumed.commit(5) == 5
    _check(op, 2, {"put_if_absent": 1, "get": 1})
    older.put(b"h", b"other attempt")
    with pytest.raises(CommitConflict):  # the create-only PUT: batch b is committed already
        older.commit(5)
    for db in (older, resumed, committer):
        db.close()
    with silt.open(root.url) as fresh:
        assert (fresh.version, fresh.get(b"h")) == (5, b"b")


def test_an_advance_that_must_list_reads_the_gc_markers_beside_the_listing(root: Root) -> None:
    """A GC pass ran since the handle's last commit: catch_up's GETs cannot prove the answer
    (the epoch moved), so it lists; the markers are read again at once with that LIST (the
    next advance needs them read before its own requests only). Before: 9 round trips (the
    epoch GET, LIST epoch/, LIST gc/ one after the other before the LIST of manifest/)."""
    db, store = _warm_at(root, 2)
    with silt.open(root.url, settings=SETTINGS) as other:
        other.gc()
        other.put(b"o", b"1")
        assert other.commit() == 3
    with store.operation() as op:
        assert db.catch_up(3) == (3, [])
    # manifest/3; its fate record and manifest/4; the epoch (moved). Then the markers' epoch
    # GET (moved), LIST epoch/ and LIST gc/, beside the LIST of manifest/ and then manifest/3
    # with its fate record
    _check(op, 6, {"get": 6, "get_range": 1, "list": 3})
    assert db.get(b"o") == b"1"
    other_commit = silt.open(root.url, settings=SETTINGS)
    other_commit.put(b"o", b"2")
    assert other_commit.commit() == 4
    other_commit.close()
    with store.operation() as op:  # the markers are known again: GETs prove it
        assert db.catch_up(4) == (4, [])
    assert "list" not in op.requests, op
    db.close()


# --- reads --------------------------------------------------------------------------------------


def test_reads_on_a_cold_and_a_warm_handle(root: Root) -> None:
    """A cold handle reads an SST's tail (index, filter) before its blocks; a warm one has
    them cached. A cold multi_get/multi_scan reads the tails of every SST it may probe in one
    wave, then the coalesced runs of every SST in one more. Before: per SST the tail, then its
    first run of blocks alone (whose time told the DB the store was remote), then the other
    runs: 5 round trips and 11 and 10 GETs; then multi_get read each SST's runs SST after
    SST: 3 round trips."""
    _two_versions(root)
    keys = _keys(0, 600)[::37]
    ranges = [(b"k%05d" % i, b"k%05d" % (i + 3)) for i in range(0, 600, 41)]
    cases = [
        ("get", lambda db: db.get(b"k00010"), (2, {"get_range": 2})),
        ("multi_get", lambda db: db.multi_get(keys), (2, {"get_range": 4})),
        ("multi_scan", lambda db: db.multi_scan(ranges), (2, {"get_range": 4})),
    ]
    for name, read, (cold_rt, cold_requests) in cases:
        db, store = root.open()
        with store.operation() as op:
            expected = read(db)
        _check(op, cold_rt, cold_requests)
        with store.operation() as op:
            assert read(db) == expected, name
        _check(op, 0, {})
        db.close()
    with silt.open(root.url) as plain:
        assert expected == plain.multi_scan(ranges)


#: A pool that takes a wave of 2 x 11 SSTs' requests at once (the default, 8 threads and the
#: calling one, would queue the 11 tails in two rounds).
WIDE = SETTINGS.replace(read_parallelism=16)


def _levels_and_l0(root: Root) -> int:
    """Keys 0-2999 compacted into one level of several SSTs, then 3 overlapping L0 SSTs, each
    updating every 7th key (from 0, 1, 2): 11 SSTs a multi_get of the whole range probes,
    each of several blocks. Returns the SSTs' count."""
    loading = UPLOADED.replace(compaction="leveled", compaction_mode="thread",
                               target_sst_bytes=16 * 1024, l0_compaction_trigger=2)
    with silt.open(root.url, settings=loading) as w:
        for lo in (0, 1000, 2000):
            for k in _keys(lo, lo + 1000):
                w.put(k, b"v" * 40)
            w.commit()
        assert w.wait_for_compaction(60)
        w.commit()  # publishes the compaction
    with silt.open(root.url, settings=UPLOADED) as w:
        for n in range(3):
            for i in range(n, 3000, 7):
                w.put(b"k%05d" % i, b"u%d" % n)
            w.commit()
        stats = w.stats()
    assert stats["l0_ssts"] >= 3 and len(stats["levels"]) == 1 and stats["levels"][0] >= 5
    return stats["l0_ssts"] + sum(stats["levels"])


def test_a_cold_multi_get_across_many_ssts_reads_tails_then_blocks_in_two_waves(
        root: Root) -> None:
    """A cold handle's multi_get of keys spread over the whole range, over L0 SSTs that
    overlap and a level of several SSTs: the tails of every SST in one wave, then the blocks
    every SST must give in one more (the plan assumes a key is found in the newest SST whose
    filter and index send it to a block), each SST's blocks one coalesced ranged GET. Before:
    the tails' wave, then one wave per SST reached, newest first: 1 + 11 round trips."""
    ssts = _levels_and_l0(root)
    keys = _keys(0, 3000)[::3]
    with silt.open(root.url) as plain:
        expected = plain.multi_get(keys)
    assert expected.count(None) == 0 and b"u1" in expected and b"v" * 40 in expected
    db, store = root.open(settings=WIDE)
    with store.operation() as op:
        assert db.multi_get(keys) == expected
    _check(op, 2, {"get_range": 2 * ssts})
    tails, blocks = op.waves()
    assert len({name for _, name in tails}) == ssts, op  # each SST's tail once
    assert len({name for _, name in blocks}) == ssts, op  # each SST's blocks: one GET
    with store.operation() as op:  # warm: every block cached
        assert db.multi_get(keys) == expected
    _check(op, 0, {})
    db.close()


def test_a_planned_wave_stops_at_its_byte_limit(root: Root, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """A plan reads at most readplan.PLAN_MAX_BYTES of blocks at once; the SSTs past it are
    planned when the call reaches them. At a limit below one SST's blocks each SST is its own
    wave (the requests and answers unchanged)."""
    ssts = _levels_and_l0(root)
    keys = _keys(0, 3000)[::3]
    with silt.open(root.url) as plain:
        expected = plain.multi_get(keys)
    monkeypatch.setattr(readplan, "PLAN_MAX_BYTES", 1)
    db, store = root.open(settings=WIDE)
    with store.operation() as op:
        assert db.multi_get(keys) == expected
    _check(op, 1 + ssts, {"get_range": 2 * ssts})
    db.close()


def test_keys_a_bloom_filter_misleads_cost_one_wave_more_for_all_of_them(root: Root) -> None:
    """Keys held only by the level whose newest L0 SST's bloom filter says "maybe" (false
    positives): the plan assumes them found there and reads that SST's blocks only; probed,
    they are not there, and the first level SST that needs a block for one plans again from
    there, for every such key and every SST left: one wave more in all. Before: one wave per
    SST reached (the level's SSTs that hold them, one after the other)."""
    _levels_and_l0(root)
    with silt.open(root.url, settings=WIDE) as probe:
        newest = probe._state.view.l0[0]  # updates every 7th key from 2
        bloom, info = newest.tail.bloom, newest.info
        level = probe._state.view.levels[0].readers
        misled = [k for k in _keys(0, 3000) if int(k[1:]) % 7 > 2
                  and info.smallest <= k <= info.largest
                  and bloom.may_contain_hash(bloom_hash(k))]
        ssts = {id(r) for k in misled for r in level if r.info.smallest <= k <= r.info.largest}
        expected = probe.multi_get(misled)
    assert len(misled) >= 3 and len(ssts) >= 2, (misled, len(ssts))  # (a fixed data set)
    assert expected == [b"v" * 40] * len(misled)
    db, store = root.open(settings=WIDE)
    with store.operation() as op:
        assert db.multi_get(misled) == expected
    _check(op, 3, dict(op.requests))
    assert {name for _, name in op.waves()[1]} == {newest.name}, op
    db.close()


def test_a_cold_open_at_most_b_minus_1_prefetches_the_tails_so_a_batch_reads_in_one_wave(
        root: Root) -> None:
    """A stream processor's cold open (``at_most=b - 1``): manifest/<b - 1> is read at once with
    the LIST, and the tails of its SSTs at once with its fate record and the LIST of gc/ (2
    round trips, as before without them); the batch's multi_get over every SST then reads
    only blocks, in one wave. Before: the open's 2 round trips, then the multi_get's 2 (the
    tails' wave, then the blocks')."""
    ssts = _levels_and_l0(root)
    keys = _keys(0, 3000)[::3]
    with silt.open(root.url) as plain:
        expected, latest = plain.multi_get(keys), plain.version
    store = root.slow()
    with store.operation() as op:
        db = silt.open(root.url, store=store, settings=WIDE, at_most=latest)
    _check(op, 2, {"list": 3, "get": 2, "get_range": ssts})
    tails = [name for kind, name in op.waves()[1] if kind == "get_range"]
    assert len(set(tails)) == len(tails) == ssts, op  # each SST's tail once
    with store.operation() as op:
        assert db.multi_get(keys) == expected
    _check(op, 1, {"get_range": ssts})
    db.put(b"k00001", b"new")
    with store.operation() as op:  # and its first commit is a warm one (the markers known)
        assert db.commit(latest + 1) == latest + 1
    _check(op, 2, {"put_if_absent": 1, "get": 1})
    db.close()


def test_a_wrong_guess_costs_one_get_of_a_missing_manifest_and_no_round_trip(
        root: Root) -> None:
    """``at_most`` past the latest version (a batch after versions that were skipped): the
    guessed manifest does not exist; the latest below it is read after the LIST as before,
    and nothing is prefetched."""
    _two_versions(root)
    store = root.slow()
    with store.operation() as op:
        db = silt.open(root.url, store=store, settings=SETTINGS, at_most=7)
    _check(op, 2, {"list": 3, "get": 3})
    assert ("get", "manifest/00000000000000000007") in op.waves()[0]
    assert ("get", "manifest/00000000000000000002") in op.waves()[1]
    assert db.version == 2 and db.get(b"k00301") == b"v" * 50
    db.close()


def test_the_prefetch_stops_at_its_limits(root: Root, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most coldopen.MAX_TAILS tails (and MAX_TAIL_BYTES), the first in read order: the
    reads load the others in a wave of their own, as a cold handle's reads do."""
    ssts = _levels_and_l0(root)
    keys = _keys(0, 3000)[::3]
    with silt.open(root.url) as plain:
        expected, latest = plain.multi_get(keys), plain.version
    monkeypatch.setattr(coldopen, "MAX_TAILS", 2)
    store = root.slow()
    with store.operation() as op:
        db = silt.open(root.url, store=store, settings=WIDE, at_most=latest)
    _check(op, 2, {"list": 3, "get": 2, "get_range": 2})
    with store.operation() as op:
        assert db.multi_get(keys) == expected
    _check(op, 2, {"get_range": 2 * ssts - 2})
    db.close()
    monkeypatch.setattr(coldopen, "MAX_TAIL_BYTES", 0)
    with store.operation() as op:
        db = silt.open(root.url, store=store, settings=WIDE, at_most=latest)
    _check(op, 2, {"list": 3, "get": 2})
    db.close()


def test_a_damaged_tail_the_open_prefetched_is_reported_by_the_read_not_the_open(
        root: Root) -> None:
    """A prefetched tail that does not decode is not taken: the open succeeds, and the first
    read of that SST fetches the tail again and reports the damage, as without a prefetch."""
    _two_versions(root)
    with silt.open(root.url) as plain:
        newest = plain.manifest.l0[0]  # keys 300-599
    raw = open_store(root.url)
    key = paths.sst_key(newest.id)
    data = bytearray(raw.get(key))
    data[newest.tail_offset + 1] ^= 0xFF
    raw.put(key, bytes(data))
    db, _ = root.open(at_most=2)
    assert db.get(b"k00001") == b"v" * 50  # the other SST reads
    with pytest.raises(silt.errors.CorruptionError):
        db.get(b"k00301")
    db.close()
