"""Range deletes (``DB.delete_range``): a model-based machine against a dict, and the edges.

The machine does puts, deletes, range deletes (alone and in write batches), flushes, commits,
compactions (an L0 suffix into a new run, or everything into one bottom run), compactions that
finish while later writes come and serve reads before a commit adopts them (installed early:
silt.compaction.early), reopens at the
latest version, reads of an older version (which must not see later range deletes) and moves
to a sibling DB that references the state by key range (a rescale), comparing every read
(get, multi_get, scan) with the model. It runs in both twins (the test session's twin).
"""

from __future__ import annotations

import json
import uuid

import hypothesis.strategies as st
import pytest
import silt
from hypothesis import HealthCheck, example, given, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from silt import paths
from silt.clock import Clock
from silt.compaction.compactor import run_compaction
from silt.compaction.task import CompactionTask
from silt.errors import CorruptionError, InvalidArgumentError, InvalidTypeError, StoreError
from silt.framing import FRAME_HEAD, encode_framed
from silt.manifest import MANIFEST_MAGIC, Manifest
from silt.rangedel import MAX_FRAGMENTS, Fragment, RangeTombstones, fragment
from silt.siblings import SiblingStores
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore

SETTINGS = silt.Settings(memtable_bytes=300, block_bytes=64, block_cache_bytes=4096,
                         compaction="none", compaction_mode="external",
                         compaction_poll_seconds=0)
#: For tests of the manifest's format 4 and crafted bodies: commits upload their deltas (a
#: manifest with inline deltas is format 5, whose body is followed by their bytes).
UPLOADED = SETTINGS.replace(inline_delta_bytes=0)
KEYS = [b"", b"a", b"a\x00", b"ab", b"abc", b"b", b"ba", b"c", b"k1", b"k2", b"k3", b"z",
        b"\xff"]
BOUNDS = sorted({*KEYS, b"aa", b"bb", b"k", b"k2\x00", b"y"})
keys = st.sampled_from(KEYS)
bounds = st.sampled_from(BOUNDS)
values = st.binary(min_size=1, max_size=24)


def _in_range(key: bytes, start: bytes, end: bytes) -> bool:
    return start <= key < end


class RangeDeleteModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.parent = f"memory://rangedel-{uuid.uuid4().hex}"
        self.n = 0
        self.url = f"{self.parent}/db0"
        self.db = silt.open(self.url, settings=SETTINGS)
        self.current: dict[bytes, bytes] = {}
        self.snapshots: dict[int, dict[bytes, bytes]] = {}

    def teardown(self) -> None:
        self.db.close()

    # -- writes -----------------------------------------------------------------------------
    @rule(key=keys, value=values)
    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value)
        self.current[key] = value

    @rule(key=keys)
    def delete(self, key: bytes) -> None:
        self.db.delete(key)
        self.current.pop(key, None)

    @rule(a=bounds, b=bounds)
    def delete_range(self, a: bytes, b: bytes) -> None:
        start, end = min(a, b), max(a, b)
        self.db.delete_range(start, end)
        self.current = {k: v for k, v in self.current.items() if not _in_range(k, start, end)}

    @rule(ops=st.lists(st.tuples(st.sampled_from(["put", "delete", "range"]), keys, bounds,
                                 values), max_size=6))
    def write_batch(self, ops: list[tuple[str, bytes, bytes, bytes]]) -> None:
        batch = silt.WriteBatch()
        for kind, key, bound, value in ops:
            if kind == "put":
                batch.put(key, value)
                self.current[key] = value
            elif kind == "delete":
                batch.delete(key)
                self.current.pop(key, None)
            else:
                start, end = min(key, bound), max(key, bound)
                batch.delete_range(start, end)
                self.current = {k: v for k, v in self.current.items()
                                if not _in_range(k, start, end)}
        self.db.write(batch)

    @rule()
    def flush(self) -> None:
        self.db.flush()

    @rule()
    def commit(self) -> None:
        v = self.db.commit()
        self.snapshots[v] = dict(self.current)

    @rule()
    def reopen_latest(self) -> None:
        self.db.close()
        self.db = silt.open(self.url, settings=SETTINGS)
        v = self.db.version
        self.current = dict(self.snapshots[v]) if v is not None else {}

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data())
    def read_old_version(self, data: st.DataObject) -> None:
        v = data.draw(st.sampled_from(sorted(self.snapshots)))
        with silt.open(self.url, version=v, settings=SETTINGS) as old:
            assert dict(old.scan()) == self.snapshots[v]
            assert old.multi_get(KEYS) == [self.snapshots[v].get(k) for k in KEYS]

    def _compact_committed(self, k: int, bottom: bool) -> bool:
        """Run the compaction of the committed version's oldest ``k`` L0 SSTs (with the first
        level) into a new run, or (``bottom``) of every SST into one bottom run, as ``silt
        compact`` would: its record waits for a commit to adopt it. ``False`` (nothing run)
        when the committed version has no L0 SST: the commit before it may have adopted a
        compaction whose output was empty (every entry under a dropped tombstone)."""
        m = self.db.manifest
        assert m is not None
        if not m.l0:
            return False
        if bottom:
            inputs = tuple(s.id for s in m.all_ssts())
        else:
            inputs = tuple(s.id for s in m.l0[-k:])
            if m.levels:
                inputs += tuple(s.id for s in m.levels[0])
        task = CompactionTask(inputs=inputs, mode="new_run",
                              drop_tombstones=bottom or len(m.levels) <= 1)
        run_compaction(self.db.store, m, task, SETTINGS, Clock(),
                       siblings=SiblingStores(self.url, self.db.store))
        return True

    @precondition(lambda self: self.db.manifest is not None and self.db.manifest.l0)
    @rule(k=st.integers(min_value=1, max_value=8), bottom=st.booleans())
    def compact(self, k: int, bottom: bool) -> None:
        """Compact the oldest ``k`` L0 SSTs into a new run, or (``bottom``) every SST into one
        bottom run that drops tombstones; the next commit adopts it. Pending writes are
        committed first, so that a bottom compaction leaves nothing a tombstone covers."""
        self.commit()
        if not self._compact_committed(k, bottom):
            return
        before = self.db.stats().get("compactions_adopted", 0)
        self.commit()
        assert self.db.stats().get("compactions_adopted", 0) == before + 1
        if bottom:
            mm = self.db.manifest
            assert mm is not None
            # Nothing older than a tombstone is left below it: the tombstones are gone.
            assert not mm.range_tombstones
            assert sum(s.tombstones for s in mm.all_ssts()) == 0

    @precondition(lambda self: self.db.manifest is not None and self.db.manifest.l0)
    @rule(k=st.integers(min_value=1, max_value=8), bottom=st.booleans())
    def compact_behind(self, k: int, bottom: bool) -> None:
        """Compact the committed version as ``silt compact`` would, leaving pending writes
        pending: the rules that follow (puts, deletes and range deletes made after its input
        version, flushes, commits, reopens) interleave with :meth:`install` and the commit
        that adopts or refuses it."""
        self._compact_committed(k, bottom)

    @rule()
    def install(self) -> None:
        """Finished compactions serve reads now, before any commit: L0 shrinks in the view
        when one of this handle's own base applies (the invariant checks every read)."""
        before = self.db.stats()["l0_ssts"]
        assert self.db.wait_for_compaction(10)
        assert self.db.stats()["l0_ssts"] <= before

    @rule(cut=bounds)
    def rescale(self, cut: bytes) -> None:
        """Commit, then continue in a sibling that references the state in two ranges."""
        self.commit()
        self.n += 1
        url = f"{self.parent}/db{self.n}"
        new = silt.open(url, settings=SETTINGS)
        new.reference(self.db, None, cut)
        new.reference(self.db, cut, None)
        self.db.close()
        self.db, self.url = new, url
        self.snapshots = {}
        self.commit()

    # -- reads ------------------------------------------------------------------------------
    @invariant()
    def reads_match(self) -> None:
        db, cur = self.db, self.current
        for k in KEYS:
            assert db.get(k) == cur.get(k), k
        assert db.multi_get(KEYS) == [cur.get(k) for k in KEYS]
        assert list(db.scan()) == sorted(cur.items())
        assert list(db.scan(b"a", b"k2")) == sorted(
            (k, v) for k, v in cur.items() if _in_range(k, b"a", b"k2"))


RangeDeleteModel.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRangeDeleteModel = RangeDeleteModel.TestCase


# -- edges ------------------------------------------------------------------------------------
def test_delete_range_covers_committed_ssts_and_not_later_writes(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=UPLOADED) as db:
        for i in range(50):
            db.put(b"k%03d" % i, b"v%d" % i)
        v1 = db.commit()
        db.delete_range(b"k010", b"k040")
        db.put(b"k020", b"again")
        v2 = db.commit()
        m = db.manifest
        assert m is not None and m.seq == 1 and len(m.range_tombstones) == 1
    with silt.open(url, settings=UPLOADED) as db:
        assert db.version == v2
        live = dict(db.scan())
        assert sorted(live) == [b"k%03d" % i for i in [*range(10), 20, *range(40, 50)]]
        assert live[b"k020"] == b"again"
        assert db.get(b"k015") is None
        assert db.multi_get([b"k009", b"k010", b"k039", b"k040"]) == [b"v9", None, None, b"v40"]
    with silt.open(url, version=v1, settings=UPLOADED) as db:
        assert len(dict(db.scan())) == 50
    # The manifest with a range tombstone is format 4 (older readers refuse it); the one
    # before is not.
    fmts = [FRAME_HEAD.unpack_from((tmp_path / "db" / paths.manifest_key(v)).read_bytes())[2]
            for v in (v1, v2)]
    assert fmts == [1, 4]


def test_delete_range_on_memtable_only_writes_no_tombstone(tmp_path) -> None:
    with silt.open((tmp_path / "db").as_uri(), settings=SETTINGS) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"2")
        db.delete_range(b"a", b"b")
        assert list(db.scan()) == [(b"b", b"2")]
        db.commit()
        assert db.manifest is not None and db.manifest.seq == 0  # still format 1


def test_delete_range_arguments_are_checked(tmp_path) -> None:
    with silt.open((tmp_path / "db").as_uri(), settings=SETTINGS) as db:
        db.put(b"a", b"1")
        db.commit()
        with pytest.raises(InvalidArgumentError, match="after end"):
            db.delete_range(b"b", b"a")
        with pytest.raises(InvalidTypeError, match="bytes"):
            db.delete_range("a", b"b")  # type: ignore[arg-type]
        batch = silt.WriteBatch().put(b"x", b"1").delete_range(b"z", b"y")
        with pytest.raises(InvalidArgumentError):
            db.write(batch)
        assert db.get(b"x") is None  # nothing of the bad batch was applied
        db.delete_range(b"a", b"a")  # empty: deletes nothing
        assert db.get(b"a") == b"1"


def test_fragments_are_canonical_and_later_tombstones_subsume_earlier() -> None:
    t = RangeTombstones()
    for i in range(1, 65):
        t = t.add(b"kg", b"kg%03d" % i, i)  # a growing evicted prefix: one fragment
    assert t.fragments == ((b"kg", b"kg064", 64),)
    assert fragment([(b"a", b"c", 1), (b"b", b"d", 2)]) == ((b"a", b"b", 1), (b"b", b"d", 2))
    assert fragment([(b"a", b"d", 3), (b"b", b"c", 2)]) == ((b"a", b"d", 3),)
    assert t.seq_at(b"kg") == 64 and t.seq_at(b"kg064") == 0 and t.seq_at(b"a") == 0


_spans = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12), st.integers(1, 9)),
                  max_size=8)


@settings(max_examples=200, deadline=None)
@given(spans=_spans, start=st.integers(0, 55), width=st.integers(0, 15),
       seq=st.integers(0, 10))
@example(spans=[(0, 2, 1)], start=1, width=0, seq=0)  # an empty range meets nothing
def test_newer_within_is_whether_masking_a_range_can_change_it(spans, start, width,
                                                               seq) -> None:
    """``newer_within(start, end, seq)`` (multi_scan masks a source only where it is true)
    equals: some key of ``[start, end)`` is deleted by a tombstone newer than ``seq``."""
    def k(i: int) -> bytes:
        return b"%03d" % i

    t = RangeTombstones()
    for a, n, sq in spans:
        t = t.add(k(a), k(a + n), sq)
    end = start + width
    want = any(t.seq_at(k(i)) > seq for i in range(start, end))
    assert t.newer_within(k(start), k(end), seq) == want


def _crafted(tmp_path, body_changes: dict) -> str:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=UPLOADED) as db:
        db.put(b"a", b"1")
        db.commit()
        db.delete_range(b"a", b"b")
        v = db.commit()
        body = json.loads(Manifest.encode(db.manifest)[16:])  # type: ignore[arg-type]
    body.update(body_changes)
    path = tmp_path / "db" / paths.manifest_key(v + 1)
    body["version"], body["parent"] = v + 1, v
    path.write_bytes(encode_framed(MANIFEST_MAGIC, 4, body))
    return url


@pytest.mark.parametrize("changes", [
    {"range_tombstones": [["62", "61", 1]]},                  # start > end
    {"range_tombstones": [["61", "61", 1]]},                  # empty
    {"range_tombstones": [["61", "63", 1], ["62", "64", 1]]},  # overlapping
    {"range_tombstones": [["63", "64", 1], ["61", "62", 1]]},  # unsorted
    {"range_tombstones": [["61", "62", 2]]},                  # seq above the counter
    {"range_tombstones": [["61", "62", 0]]},                  # seq 0
    {"range_tombstones": [["zz", "62", 1]]},                  # not hex
    {"range_tombstones": [["61", "62"]]},                     # no seq
    {"range_tombstones": {"61": "62"}},                       # not a list
    {"range_tombstones": [["61", "62", 1]] * (MAX_FRAGMENTS + 1)},  # huge count
    {"seq": -1},
    {"seq": True},
])
def test_crafted_range_tombstones_are_corruption(tmp_path, changes) -> None:
    url = _crafted(tmp_path, changes)
    with pytest.raises(CorruptionError):
        silt.open(url, settings=UPLOADED)
    report = silt.verify(url)
    assert not report.ok


def test_an_sst_entry_newer_than_the_counter_is_corruption(tmp_path) -> None:
    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=UPLOADED) as db:
        db.put(b"a", b"1")
        db.commit()
        db.delete_range(b"a", b"b")
        db.put(b"c", b"1")
        v = db.commit()
        body = json.loads(Manifest.encode(db.manifest)[16:])  # type: ignore[arg-type]
    body["l0"][0]["seq"] = 5
    body["version"], body["parent"] = v + 1, v
    (tmp_path / "db" / paths.manifest_key(v + 1)).write_bytes(
        encode_framed(MANIFEST_MAGIC, 4, body))
    with pytest.raises(CorruptionError, match="seq"):
        silt.open(url, settings=UPLOADED)


def test_rescale_two_sources_with_their_own_counters(tmp_path) -> None:
    """Shards with different range-delete counters are merged into one by reference, then
    split again: every tombstone keeps deleting exactly its keys."""
    parent = tmp_path.as_uri()
    a = silt.open(f"{parent}/a", settings=SETTINGS)
    b = silt.open(f"{parent}/b", settings=SETTINGS)
    for i in range(40):
        a.put(b"a%02d" % i, b"x")
        b.put(b"b%02d" % i, b"y")
    a.commit()
    b.commit()
    for i in range(5):  # a's counter runs ahead of b's
        a.delete_range(b"a%02d" % (i * 2), b"a%02d" % (i * 2 + 1))
    b.delete_range(b"b10", b"b30")
    a.commit()
    b.commit()
    expected = {**dict(a.scan()), **dict(b.scan())}
    assert len(expected) == 35 + 20
    c = silt.open(f"{parent}/c", settings=SETTINGS)
    c.reference(a, None, b"b")
    c.reference(b, b"b", None)
    c.commit()
    assert dict(c.scan()) == expected
    c.delete_range(b"a30", b"b05")  # newer than everything either source wrote
    c.put(b"b15", b"new")
    c.commit()
    expected = {k: v for k, v in expected.items() if not b"a30" <= k < b"b05"}
    expected[b"b15"] = b"new"
    assert dict(c.scan()) == expected
    d = silt.open(f"{parent}/d", settings=SETTINGS)
    d.reference(c, b"a20", b"b20")
    d.commit()
    assert dict(d.scan()) == {k: v for k, v in expected.items() if b"a20" <= k < b"b20"}
    assert d.multi_get([b"a31", b"b12", b"b15"]) == [None, None, b"new"]
    for db in (a, b, c, d):
        db.close()
    assert silt.verify(parent).ok


def test_inspect_and_verify_show_range_tombstones(tmp_path, capsys) -> None:
    from silt.cli import main

    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        for i in range(30):
            db.put(b"k%02d" % i, b"v")
        db.commit()
        db.delete_range(b"k05", b"k10")
        db.delete_range(b"k20", b"k25")
        db.commit()
    assert main(["inspect", url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["range_deletes"]["seq"] == 2
    assert [(t["start_text"], t["end_text"], t["seq"])
            for t in out["range_deletes"]["tombstones"]] == [("k05", "k10", 1), ("k20", "k25", 2)]
    assert main(["inspect", url]) == 0
    text = capsys.readouterr().out
    assert "2 range tombstones, counter 2" in text and "[k20 .. k25)  seq 2" in text
    assert main(["verify", url]) == 0


def test_range_delete_after_an_uncertain_commit_that_landed_stays() -> None:
    """A commit fails with its manifest created; range deletes made before the next commit
    (which adopts the landed version first) still delete."""
    faulty = FaultyStore(MemoryStore())
    with silt.open("memory://unused", settings=SETTINGS, store=faulty) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"v")
        db.commit()
        db.delete_range(b"k00", b"k05")
        db.put(b"x", b"1")
        faulty.lose_response_next("put_if_absent", error=StoreError,
                                  predicate=lambda key: key.startswith(paths.MANIFEST_PREFIX))
        with pytest.raises(StoreError):
            db.commit()
        db.delete_range(b"k10", b"k15")
        assert db.commit() == 3
        expected = [b"k%02d" % i for i in [*range(5, 10), *range(15, 20)]] + [b"x"]
        assert [k for k, _ in db.scan()] == expected
    with silt.open("memory://unused", store=faulty) as db:
        assert [k for k, _ in db.scan()] == expected
        assert db.manifest is not None and db.manifest.seq == 2


def test_background_compaction_drops_covered_records_and_then_the_tombstones(tmp_path) -> None:
    """With the leveled policy compacting in the background, a stream of range deletes over a
    sliding prefix (window eviction) reads right at every version, a checkpointed version
    survives GC, and once everything is compacted no tombstone is left."""
    clock = silt.ManualClock(1_000_000)
    settings = silt.Settings(memtable_bytes=2000, block_bytes=256, l0_compaction_trigger=2,
                             level1_bytes=4000, gc_grace_seconds=60, inline_delta_bytes=0)
    url = (tmp_path / "db").as_uri()
    model: dict[bytes, bytes] = {}
    with silt.open(url, settings=settings, clock=clock) as db:
        for batch in range(12):
            for kg in range(4):
                for t in range(batch * 10, batch * 10 + 10):
                    k = b"%02d-%06d" % (kg, t)
                    db.put(k, b"v%d" % t)
                    model[k] = b"v%d" % t
                cut = b"%02d-%06d" % (kg, batch * 10 - 5)
                db.delete_range(b"%02d-" % kg, cut)
                model = {k: v for k, v in model.items() if not b"%02d-" % kg <= k < cut}
            db.wait_for_compaction()
            v = db.commit()
            assert len(db.manifest.range_tombstones) <= 4  # type: ignore[union-attr]
            assert dict(db.scan()) == model
            if batch == 6:
                db.checkpoint("mid")
                pinned, pinned_model = v, dict(model)
            clock.advance(10_000)
        assert db.stats()["compactions_adopted"] > 0
        db.wait_for_compaction()
    # Everything into one bottom run (adopted by a writer that polls for records): covered
    # records and then the tombstones go.
    settings = settings.replace(compaction="none", compaction_mode="external",
                                compaction_poll_seconds=0)
    with silt.open(url, settings=settings, clock=clock) as db:
        m = db.manifest
        assert m is not None
        task = CompactionTask(inputs=tuple(s.id for s in m.all_ssts()), mode="new_run",
                              drop_tombstones=True)
        run_compaction(db.store, m, task, settings, clock)
        db.commit()
        assert not db.manifest.range_tombstones  # type: ignore[union-attr]
        assert sum(s.entries for s in db.manifest.all_ssts()) == len(model)  # type: ignore[union-attr]
        assert dict(db.scan()) == model
        clock.advance(120_000)
        db.commit()
        db.gc(retain_versions=1)
    with silt.open(url, version=pinned, settings=settings, clock=clock) as old:
        assert dict(old.scan()) == pinned_model
    assert silt.verify(url).ok


def test_a_compaction_record_claiming_a_newer_counter_is_refused(tmp_path) -> None:
    """Outputs whose ``seq`` is above the writer's counter would make a manifest no reader
    accepts (and hide later range deletes): the writer refuses the record."""
    from dataclasses import replace

    url = (tmp_path / "db").as_uri()
    with silt.open(url, settings=SETTINGS) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"v")
        db.commit()
        db.delete_range(b"k00", b"k05")
        db.commit()
        m = db.manifest
        assert m is not None and m.seq == 1
        task = CompactionTask(inputs=tuple(s.id for s in m.all_ssts()), mode="new_run",
                              drop_tombstones=True)
        run_compaction(db.store, replace(m, seq=7), task, SETTINGS, Clock())
        db.commit()
        assert db.stats()["compactions_refused"] == 1
        assert db.manifest.range_tombstones  # type: ignore[union-attr]
    with silt.open(url, settings=SETTINGS) as db:
        assert [k for k, _ in db.scan()] == [b"k%02d" % i for i in range(5, 20)]


tombstone_lists = st.lists(st.tuples(bounds, bounds, st.integers(1, 9)), max_size=8)


@given(ts=tombstone_lists, seq=st.integers(0, 9))
@settings(max_examples=200, deadline=None)
def test_fragments_answer_like_the_tombstones_they_come_from(ts, seq) -> None:
    """For every key, the fragments give the greatest number of the tombstones containing it;
    masking, clipping and adding one tombstone at a time agree with that."""
    ts = [(min(a, b), max(a, b), t) for a, b, t in ts]
    tombs = RangeTombstones(fragment(ts))
    one_by_one = RangeTombstones()
    for start, end, t in ts:
        one_by_one = one_by_one.add(start, end, t)
    assert one_by_one == tombs
    probe = sorted({*KEYS, *BOUNDS, b"a\x00\x00", b"zz"})
    for key in probe:
        assert tombs.seq_at(key) == max((t for s, e, t in ts if s <= key < e), default=0)
    items = [(k, b"v") for k in probe]
    kept = [k for k, _ in tombs.mask(iter(items), seq, True)]
    assert kept == [k for k in probe if tombs.seq_at(k) <= seq]
    masked = dict(tombs.mask(iter(items), seq, False))
    assert [k for k, r in masked.items() if r is None] == [k for k in probe if k not in kept]
    clipped = tombs.clip(b"ab", b"k2")
    for key in probe:
        inside = b"ab" <= key < b"k2"
        assert clipped.seq_at(key) == (tombs.seq_at(key) if inside else 0)
    again = RangeTombstones.from_json(json.loads(json.dumps(tombs.to_json())), 9)
    assert again == tombs


# -- many disjoint ranges: adding one costs O(log N) ------------------------------------------
class _Small(RangeTombstones):
    """Chunks of four fragments, so that a few dozen tombstones cross many chunk bounds."""

    __slots__ = ()
    CHUNK = 4


def _k(i: int) -> bytes:
    return b"%03d" % i


_adds = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 14), st.integers(1, 40)),
                 max_size=60)


@settings(max_examples=300, deadline=None)
@given(adds=_adds, newer=st.booleans(), cls=st.sampled_from([_Small, RangeTombstones]))
def test_adding_one_at_a_time_answers_like_a_naive_model(adds, newer, cls) -> None:
    """Tombstones added one by one (each newer than the last, as the DB adds them, or in any
    order) answer every read like the plain list of tombstones, their fragments are those of
    the whole list, and every earlier set (an older read view) still answers as it did."""
    made: list[tuple[RangeTombstones, list[Fragment]]] = []
    t = cls()
    ts: list[Fragment] = []
    for n, (a, width, sq) in enumerate(adds, 1):
        tomb = (_k(a), _k(a + width), n if newer else sq)
        t = t.add(*tomb)
        ts.append(tomb)
        made.append((t, list(ts)))
    probe = [_k(i) for i in range(-1, 78)]
    for tombs, model in made[-3:] + made[::7]:
        assert tombs.fragments == fragment(model)
        assert len(tombs) == len(fragment(model)) and bool(tombs) == bool(fragment(model))
        for key in probe:
            assert tombs.seq_at(key) == max((q for s, e, q in model if s <= key < e), default=0)
        for lo, hi in [(0, 0), (3, 9), (10, 40), (0, 77), (55, 76), (20, 21)]:
            meet = [q for s, e, q in model if s <= _k(hi) and e > _k(lo) and s < e]
            assert tombs.newest_over(_k(lo), _k(hi)) == max(meet, default=0)
            within = [q for s, e, q in model if s < _k(hi) and e > _k(lo) and s < e]
            for seq in (0, 5, 20):
                assert tombs.newer_within(_k(lo), _k(hi), seq) == any(q > seq for q in within)
        items = [(k, b"v") for k in probe]
        for seq in (0, 7, 30):
            kept = [k for k, _ in tombs.mask(iter(items), seq, True)]
            assert kept == [k for k in probe if tombs.seq_at(k) <= seq]
            hidden = [k for k, r in tombs.mask(iter(items), seq, False) if r is None]
            assert hidden == [k for k in probe if tombs.seq_at(k) > seq]


class _Budget:
    """Comparisons left before :class:`_Counted` keys fail the test (``left``)."""

    left = 0


class _Counted(bytes):
    """A key that counts every ordering comparison made with it against :class:`_Budget`."""

    def _spend(self) -> None:
        _Budget.left -= 1
        if _Budget.left < 0:
            raise AssertionError("more comparisons of keys than the budget allows")

    def __lt__(self, other: bytes) -> bool:
        self._spend()
        return bytes.__lt__(self, other)

    def __le__(self, other: bytes) -> bool:
        self._spend()
        return bytes.__le__(self, other)

    def __gt__(self, other: bytes) -> bool:
        self._spend()
        return bytes.__gt__(self, other)

    def __ge__(self, other: bytes) -> bool:
        self._spend()
        return bytes.__ge__(self, other)

    __hash__ = bytes.__hash__


def test_adding_a_tombstone_to_many_costs_log_n_comparisons() -> None:
    """With 16,384 fragments, one more (anywhere, newer than all) costs at most 8 log2 N
    comparisons of keys (re-fragmenting them all cost N log N)."""
    n = 1 << 14
    t = RangeTombstones([(_Counted(b"%06d" % (2 * i)), _Counted(b"%06d" % (2 * i + 1)), i + 1)
                         for i in range(n)])
    for at in (b"", b"%06d" % (n + 1), b"%06d" % (2 * n - 1), b"999999"):  # in gaps
        _Budget.left = 8 * 14
        t2 = t.add(_Counted(at + b"\x00"), _Counted(at + b"\x01"), n + 1)
        assert len(t2) == len(t) + 1 and t2.seq_at(at + b"\x00") == n + 1
        assert t.seq_at(at + b"\x00") == 0  # the set it was added to is unchanged
    _Budget.left = 8 * 14
    wide = t.add(_Counted(b"000100"), _Counted(b"030000"), n + 1)  # covers 14,950 fragments
    assert len(wide) == 50 + 1 + (n - 15000)
    assert wide.seq_at(b"000101") == n + 1 and wide.seq_at(b"000099") == 0


def test_65536_disjoint_range_deletes_then_the_limit(tmp_path) -> None:
    """DB.delete_range of 65,536 disjoint ranges, in random order, over committed state: each
    call costs O(log N) key comparisons (the whole run stays within 65,536 x 200 of them: one
    re-fragmenting of all pending tombstones per call went past that before the 2,000th call),
    reads see every range deleted, and the next range is refused at the manifest's limit."""
    import random

    n = MAX_FRAGMENTS
    keys = [_Counted(b"k%06d" % i) for i in range(2 * n + 2)]
    with silt.open((tmp_path / "db").as_uri(), settings=UPLOADED) as db:
        db.put(b"k000000", b"first")
        db.put(b"k%06d" % (2 * n - 1), b"between")
        db.commit()
        order = list(range(n))
        random.Random(7).shuffle(order)
        _Budget.left = 200 * n
        for i in order:
            db.delete_range(keys[2 * i], keys[2 * i + 1])
        spent = 200 * n - _Budget.left
        _Budget.left = 1 << 40
        assert db.get(b"k000000") is None and db.get(b"k%06d" % (2 * n - 1)) == b"between"
        with pytest.raises(InvalidArgumentError, match="exceed the limit"):
            db.delete_range(keys[2 * n], keys[2 * n + 1])
        db.commit()
        assert db.manifest is not None and len(db.manifest.range_tombstones) == n
        db.delete_range(keys[0], keys[2 * n])  # one wider range replaces them all
        assert list(db.scan()) == []
        db.commit()
        assert len(db.manifest.range_tombstones) == 1
    assert spent < 200 * n
