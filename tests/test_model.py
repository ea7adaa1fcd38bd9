"""Model-based test: silt against a plain dict, driven by hypothesis' stateful testing.

The machine does random puts (a small key alphabet, so overwrites and deletes hit existing keys),
deletes, TTL puts on an injected ``ManualClock``, write batches, flushes, commits, background
compactions that finish and serve reads before the next commit, reopens at the
latest or at an earlier committed version, and compares every read (get, multi_get, scan with
ranges and prefixes, multi_scan) with the model. The same machine runs on ``file://`` and
``memory://``, and on ``memory://`` with uploads in flight (:mod:`heldupload`): frozen memtables
whose uploads the machine lets finish in any order, between reads or inside a ``multi_scan``.

The model keeps a *record* per key: ``(value, expire_at_ms or None)``; a snapshot of the records
is taken at each commit, so reopening at version ``v`` resets the model to that snapshot.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import hypothesis.strategies as st
import pytest
import silt
from heldupload import HeldUploads
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from silt import paths
from silt.errors import CommitConflict, InvalidArgumentError
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore

#: Tiny sizes: a handful of puts freezes the memtable, every SST has several blocks, and the
#: block cache evicts constantly.
MODEL_SETTINGS = silt.Settings(
    memtable_bytes=600,
    block_bytes=64,
    block_cache_bytes=2048,
    bloom_bits_per_key=10,
)

KEYS = [b"", b"a", b"ab", b"abc", b"b", b"ba", b"c", b"\x00", b"\x00\x01", b"\xff", b"\xff\xff",
        b"k-1", b"k-2", b"k-10"]
PREFIXES = [b"", b"a", b"ab", b"b", b"k-", b"k-1", b"\x00", b"\xff", b"zz"]

keys = st.sampled_from(KEYS)
values = st.one_of(
    st.binary(max_size=8),
    st.binary(min_size=40, max_size=120),  # bigger than a block: one entry per block
)
ttls_ms = st.integers(min_value=1, max_value=5000)

Record = tuple[bytes, int | None]


class SiltModel(RuleBasedStateMachine):
    """The machine; subclasses pick the tier."""

    tier = "memory"
    #: The store the DB is opened on: the tier's own (``None``) unless a subclass wraps it.
    store: silt.ObjectStore | None = None

    def __init__(self) -> None:
        super().__init__()
        if self.tier == "file":
            self.tmpdir: str | None = tempfile.mkdtemp(prefix="silt-model-")
            self.url = Path(self.tmpdir, "root").as_uri()
            self.mem_name = None
        else:
            self.tmpdir = None
            self.mem_name = f"model-{uuid.uuid4().hex}"
            self.url = f"memory://{self.mem_name}"
        self.clock = silt.ManualClock()
        self.store: silt.ObjectStore | None = None  # the tier's own, unless a subclass wraps it
        self.db = silt.open(self.url, settings=self.db_settings, clock=self.clock)
        self.start_model()

    db_settings = MODEL_SETTINGS

    def uploads_done(self) -> None:
        """Before anything that waits for uploads (a subclass holds some in flight)."""

    def start_model(self) -> None:
        """The model of an empty root (subclasses for other tiers call this too)."""
        #: The state this DB should show: committed base plus pending writes.
        self.current: dict[bytes, Record] = {}
        #: version -> the records committed at it.
        self.snapshots: dict[int, dict[bytes, Record]] = {}
        self.parents: dict[int, int | None] = {}
        self.nexts: dict[int, int] = {}
        self.reserved: dict[int, bool] = {}
        self.base: int | None = None
        #: The DB's lineage: the parent its next commit names, and its next free number.
        self.lineage: int | None = None
        self.nxt = 1

    # -- helpers --------------------------------------------------------------------------------
    def expire_at(self, ttl_s: float) -> int:
        return self.clock.now_ms() + max(1, int(ttl_s * 1000))

    def visible(self, key: bytes) -> bytes | None:
        rec = self.current.get(key)
        if rec is None:
            return None
        value, expire = rec
        if expire is not None and self.clock.now_ms() >= expire:
            return None
        return value

    def live_items(self, state: dict[bytes, Record] | None = None) -> list[tuple[bytes, bytes]]:
        now = self.clock.now_ms()
        state = self.current if state is None else state
        return sorted(
            (k, v) for k, (v, exp) in state.items() if exp is None or now < exp
        )

    @property
    def latest(self) -> int | None:
        return max(self.snapshots) if self.snapshots else None

    def reopen(self, version: int | None) -> None:
        self.uploads_done()
        self.db.close()
        self.db = silt.open(self.url, version=version, settings=self.db_settings, clock=self.clock,
                            store=self.store)
        self.base = self.latest if version is None else version
        self.current = dict(self.snapshots[self.base]) if self.base is not None else {}
        self.lineage, self.nxt = self.base, self.next_after(self.base)
        assert self.db.version == self.base

    # -- writes ---------------------------------------------------------------------------------
    @rule(key=keys, value=values)
    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value)
        self.current[key] = (value, None)

    @rule(key=keys)
    def delete(self, key: bytes) -> None:
        self.db.delete(key)
        self.current.pop(key, None)

    @rule(key=keys, value=values, ttl_ms=ttls_ms)
    def put_ttl(self, key: bytes, value: bytes, ttl_ms: int) -> None:
        ttl = ttl_ms / 1000
        self.db.put(key, value, ttl=ttl)
        self.current[key] = (value, self.expire_at(ttl))

    @rule(ms=st.integers(min_value=0, max_value=3000))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(
        ops=st.lists(
            st.tuples(
                st.sampled_from(["put", "delete", "ttl"]), keys, values, ttls_ms
            ),
            max_size=12,
        )
    )
    def write_batch(self, ops: list[tuple[str, bytes, bytes, int]]) -> None:
        batch = silt.WriteBatch()
        for kind, key, value, ttl_ms in ops:
            if kind == "put":
                batch.put(key, value)
            elif kind == "delete":
                batch.delete(key)
            else:
                batch.put(key, value, ttl=ttl_ms / 1000)
        self.db.write(batch)
        for kind, key, value, ttl_ms in ops:
            if kind == "put":
                self.current[key] = (value, None)
            elif kind == "delete":
                self.current.pop(key, None)
            else:
                self.current[key] = (value, self.expire_at(ttl_ms / 1000))

    @rule(n=st.integers(min_value=1, max_value=60), seed=st.integers(0, 2**16))
    def put_many(self, n: int, seed: int) -> None:
        """A burst of puts: several memtable freezes while uploads are still in flight."""
        for i in range(n):
            key = KEYS[(seed + i * 7) % len(KEYS)]
            value = b"%d-%d" % (seed, i) * (1 + i % 5)
            self.db.put(key, value)
            self.current[key] = (value, None)

    @rule()
    def compaction_finishes(self) -> None:
        """The background compaction a commit started finishes and serves reads at once
        (silt.compaction.early): the reads that follow must not change."""
        assert self.db.wait_for_compaction(60)

    @rule()
    def flush(self) -> None:
        self.uploads_done()
        self.db.flush()

    # -- commits and reopens --------------------------------------------------------------------
    # Versions are never forked (invariant 8): a commit from base b whose number skips
    # the next free number first creates a *reservation* there (a version with b's state whose
    # next number is the target), so every writer from b races for the same name. A writer
    # that finds a reservation made from its own lineage moves past it. The model tracks each
    # version's parent, next free number and whether it is a reservation, and the DB's own
    # lineage (which moves past reservations even when the commit then conflicts).
    def next_after(self, version: int | None) -> int:
        return 1 if version is None else self.nexts[version]

    def expect_commit(self, target: int | None) -> int | None:
        """Apply the commit protocol to the model; the committed version, or None (conflict)."""
        auto = target is None
        if target is None:
            target = self.nxt
        base_state = dict(self.snapshots[self.base]) if self.base is not None else {}
        while True:
            if target > self.nxt and self.lineage is not None:
                n = self.nxt
                if n not in self.snapshots:  # our reservation
                    self.snapshots[n] = base_state
                    self.parents[n], self.nexts[n], self.reserved[n] = self.lineage, target, True
                    self.lineage, self.nxt = n, target
                    continue
                if self.parents[n] != self.lineage or not self.reserved[n]:
                    return None
                self.lineage, self.nxt = n, self.nexts[n]
                if self.nxt > target:
                    return None
                continue
            if target not in self.snapshots:
                self.snapshots[target] = dict(self.current)
                self.parents[target], self.nexts[target] = self.lineage, target + 1
                self.reserved[target] = False
                self.base = self.lineage = target
                self.nxt = target + 1
                return target
            if self.parents[target] == self.lineage and self.reserved[target]:
                self.lineage, self.nxt = target, self.nexts[target]
                if auto:
                    target = self.nxt
                    continue
            return None

    def check_commit(self, target: int | None) -> None:
        self.uploads_done()
        expected = self.expect_commit(target)
        if expected is None:
            with pytest.raises(CommitConflict):
                self.db.commit(target)
        else:
            assert self.db.commit(target) == expected
        assert self.db.version == self.base

    @rule()
    def commit_next(self) -> None:
        self.check_commit(None)

    @rule(gap=st.integers(min_value=1, max_value=3))
    def commit_after_latest(self, gap: int) -> None:
        """From the latest version this skips numbers; from an older base it is a fork."""
        self.check_commit(max((self.latest or 0) + gap, self.nxt))

    @precondition(lambda self: self.base is not None and self.latest != self.base)
    @rule(data=st.data())
    def commit_existing_version(self, data: st.DataObject) -> None:
        """A version above the base that another commit already created: CommitConflict."""
        taken = sorted(v for v in self.snapshots if v >= self.nxt)
        if not taken:
            return
        self.check_commit(data.draw(st.sampled_from(taken)))

    @precondition(lambda self: self.base is not None)
    @rule(data=st.data())
    def commit_not_above_base(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(min_value=0, max_value=self.nxt - 1))
        self.uploads_done()
        with pytest.raises(InvalidArgumentError,
                           match="greater" if target <= self.base else "or later"):
            self.db.commit(target)
        assert self.db.version == self.base

    @rule()
    def reopen_latest(self) -> None:
        """Uncommitted writes are lost."""
        self.reopen(None)

    @precondition(lambda self: bool(self.snapshots))
    @rule(data=st.data())
    def reopen_at_version(self, data: st.DataObject) -> None:
        version = data.draw(st.sampled_from(sorted(self.snapshots)))
        self.reopen(version)

    @rule()
    def versions_listed(self) -> None:
        assert silt.versions(self.url) == sorted(self.snapshots)

    # -- reads ----------------------------------------------------------------------------------
    @rule(key=keys)
    def get(self, key: bytes) -> None:
        assert self.db.get(key) == self.visible(key)

    @rule(ks=st.lists(st.one_of(keys, st.binary(max_size=4)), max_size=20))
    def multi_get(self, ks: list[bytes]) -> None:
        assert self.db.multi_get(ks) == [self.visible(k) for k in ks]

    @rule()
    def multi_get_all_with_duplicates(self) -> None:
        ks = KEYS + KEYS[::-1] + [b"missing", b"a\x00"]
        assert self.db.multi_get(ks) == [self.visible(k) for k in ks]

    @rule(
        start=st.one_of(st.none(), keys, st.binary(max_size=3)),
        end=st.one_of(st.none(), keys, st.binary(max_size=3)),
    )
    def scan_range(self, start: bytes | None, end: bytes | None) -> None:
        expected = [
            (k, v) for k, v in self.live_items()
            if (start is None or k >= start) and (end is None or k < end)
        ]
        assert list(self.db.scan(start, end)) == expected

    @rule(prefix=st.sampled_from(PREFIXES))
    def scan_prefix(self, prefix: bytes) -> None:
        expected = [(k, v) for k, v in self.live_items() if k.startswith(prefix)]
        assert list(self.db.scan(prefix=prefix)) == expected

    @rule(prefix=st.sampled_from(PREFIXES), start=st.sampled_from(KEYS), end=st.sampled_from(KEYS))
    def scan_prefix_and_range(self, prefix: bytes, start: bytes, end: bytes) -> None:
        expected = [
            (k, v) for k, v in self.live_items()
            if k.startswith(prefix) and start <= k < end
        ]
        assert list(self.db.scan(start, end, prefix=prefix)) == expected

    @rule(bounds=st.lists(st.one_of(keys, st.binary(max_size=3)), min_size=2, max_size=12,
                          unique=True))
    def multi_scan(self, bounds: list[bytes]) -> None:
        """Ranges between sorted distinct bounds, every other gap: sorted and disjoint."""
        bounds.sort()
        ranges = list(zip(bounds[::2], bounds[1::2]))
        expected = [(k, v) for s, e in ranges for k, v in self.live_items() if s <= k < e]
        assert self.db.multi_scan(ranges) == expected

    @invariant()
    def full_scan_matches(self) -> None:
        assert list(self.db.scan()) == self.live_items()

    def teardown(self) -> None:
        self.uploads_done()
        self.db.close()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        if self.mem_name is not None:
            MemoryStore.drop(self.mem_name)


MODEL_RUN = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class FileModel(SiltModel):
    tier = "file"


class MemoryModel(SiltModel):
    tier = "memory"


class UploadsInFlightModel(SiltModel):
    """``memory://`` with SST uploads held in flight (:mod:`heldupload`) until a rule lets
    one finish (any of them: uploads finish out of order), from the machine or from inside a
    ``multi_scan``'s first block read; flushes, commits and reopens let them all go first and
    hold none until a rule holds them again."""

    tier = "memory"
    db_settings = MODEL_SETTINGS.replace(upload_parallelism=8, max_pending_flushes=1000,
                                      block_cache_bytes=0)

    def __init__(self) -> None:
        super().__init__()
        self.db.close()
        self.store = FaultyStore(MemoryStore(self.mem_name))
        self.held = HeldUploads(self.store, limit=6)
        self.held.holding = True
        self.db = silt.open(self.url, settings=self.db_settings, clock=self.clock, store=self.store)

    def uploads_done(self) -> None:
        self.held.release_all(self.db)  # and holds no more until hold_uploads

    @rule()
    def hold_uploads(self) -> None:
        self.held.holding = True

    @rule(n=st.integers(min_value=1, max_value=60), seed=st.integers(0, 2**16))
    def put_many(self, n: int, seed: int) -> None:
        """A burst of puts whose freezes are held (the machine's most common way to them)."""
        self.held.holding = True
        super().put_many(n, seed)

    @rule(i=st.integers(0, 1 << 16))
    def finish_an_upload(self, i: int) -> None:
        self.held.settle(self.db)
        if self.held.held:
            self.held.release(self.db, i)

    @rule(bounds=st.lists(st.one_of(keys, st.binary(max_size=3)), min_size=2, max_size=12,
                          unique=True), picks=st.lists(st.integers(0, 1 << 16), max_size=4))
    def multi_scan_while_uploads_finish(self, bounds: list[bytes], picks: list[int]) -> None:
        self.held.settle(self.db)
        armed = [True]

        def finish(op: str, key: str) -> None:
            if armed[0]:
                armed[0] = False
                for i in picks[:len(self.held.held)]:
                    self.held.release(self.db, i)

        self.store.on_call("get_range", finish, times=1,
                           predicate=lambda k: k.startswith(paths.SST_PREFIX))
        try:
            self.multi_scan(bounds)
        finally:
            armed[0] = False


TestModelFile = FileModel.TestCase
TestModelFile.settings = MODEL_RUN
TestModelMemory = MemoryModel.TestCase
TestModelMemory.settings = MODEL_RUN
TestModelUploadsInFlight = UploadsInFlightModel.TestCase
TestModelUploadsInFlight.settings = MODEL_RUN


# --- a large, deterministic round trip ---------------------------------------------------------


def test_twenty_thousand_keys_round_trip(url: str, small: silt.Settings) -> None:
    n = 20_000
    expected = {b"key:%08d" % i: b"value-%d-" % i * (1 + i % 3) for i in range(n)}
    deleted = {b"key:%08d" % i for i in range(0, n, 97)}
    with silt.open(url, settings=small) as db:
        for k, v in expected.items():
            db.put(k, v)
        # Overwrites and deletes after the first flushes: newer SSTs must shadow older ones.
        for i in range(0, n, 13):
            k = b"key:%08d" % i
            expected[k] = b"overwritten-%d" % i
            db.put(k, expected[k])
        for k in deleted:
            db.delete(k)
            expected.pop(k, None)
        assert db.commit() == 1

    with silt.open(url, settings=small) as db:
        assert db.version == 1
        assert len(db.manifest.l0) >= 5, "the small memtable should have produced several SSTs"
        for k, v in expected.items():
            assert db.get(k) == v
        for k in deleted:
            assert db.get(k) is None
        all_keys = [b"key:%08d" % i for i in range(n)] + [b"key:", b"nope", b"key:99999999"]
        assert db.multi_get(all_keys) == [expected.get(k) for k in all_keys]
        assert list(db.scan()) == sorted(expected.items())
        lo, hi = b"key:00005000", b"key:00007500"
        assert list(db.scan(lo, hi)) == sorted(
            (k, v) for k, v in expected.items() if lo <= k < hi
        )
        assert list(db.scan(prefix=b"key:0001")) == sorted(
            (k, v) for k, v in expected.items() if k.startswith(b"key:0001")
        )
