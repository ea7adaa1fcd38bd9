"""Deterministic simulation: a writer, a stalled zombie writer, a compactor and GC, interleaved by
one seeded scheduler over ``memory://`` with injected failures, all in one thread.

Each seed builds a small world (random settings, policy and retention) and runs a few dozen steps
chosen by ``random.Random(seed)``:

* **writer**: random puts, deletes and TTL puts; flushes; commits; named checkpoints; and crashes
  (abandoned without commit after uploading, then a new writer opens the latest version). It runs
  with ``compaction_mode="external"`` and ``compaction_poll_seconds=0``, so it adopts at every
  commit whatever records the simulated compactor wrote.
* **zombie**: a writer that opened an older version and wakes up later to write and commit.
* **compactor**: picks a task from the latest version, and runs it (``run_compaction``) at a later
  step, so its records are often stale by then and must be refused.
* **early installation**: between steps, from a random source of its own (so the schedules stay
  as drawn), a writer looks for finished records and lets them serve its reads before any
  commit (``DB.wait_for_compaction`` in external mode, :mod:`silt.compaction.early`); they
  leave its view again at half its grace (a :class:`~silt.ManualClock` wake-up), when GC's
  markers say a pass may collect them, or when it moves to another version.
* **GC**: ``collect_garbage`` with a small grace period, on the same :class:`~silt.ManualClock`,
  which the scheduler advances (past half the grace period and past all of it).
* **faults** (:class:`~silt.testing.FaultyStore`, one per actor): a request that fails, a lost
  response after the store acted (retried, or not), on any operation.

After every step, every manifest under the root must be one the simulation knows (by its commit
token) and read back exactly as the dict model of that commit says at the current time, every
SST it references must exist, and the newest committed version and every checkpointed version
must exist. Each open writer (and the zombie) reads exactly its model (its base plus its pending
writes), or fails with an error (an injected fault, or its uncommitted uploads collected after
the grace), and every SST it shows for an installed compaction exists and is younger than half
its grace. The only
manifests allowed to be unknown are those a fenced zombie created and has not withdrawn yet
(they are below the GC horizon).

Uploads happen only in ``flush``/``commit`` (the memtable never fills), which wait for them, and
ids take their random bits from the seed, so a seed replays exactly. ``store.retrying`` does not
sleep here: time is simulated.

``SILT_SIM_SEEDS`` (default 500) sets the number of seeds and ``SILT_SIM_FIRST`` the first one;
``SILT_SIM_SEED=N`` runs seed N alone and prints its trace. By default the compiled run takes
seeds 0-499 and the pure-Python run the next 500, so the suite's two runs cover 1,000 different
worlds in the time of 500 each (a world is the same under both implementations: the twins behave
identically). The long sweep (tens of thousands of seeds, from any first seed) is a soak run, not
a test: ``nox -s soak`` (see noxfile.py).

A quarter as many seeds run again with an **advance** step more (the writer moves to the latest
version ``<= n`` with ``DB.advance``, or every other time with ``DB.advance_newer``, which must
land where a listing says, on a state the model knows, and say which versions are newer as the
listing does); ``SILT_SIM_ADVANCE=1`` replays a seed that way.
"""

from __future__ import annotations

import os
import random
import time
import types
import uuid
from collections.abc import Callable
from dataclasses import replace

import pytest
import silt
from silt import paths
from silt.compaction.compactor import run_compaction
from silt.compaction.task import make_policy
from silt.errors import (
    CommitConflict,
    CorruptionError,
    FencedError,
    InvalidArgumentError,
    NotFoundError,
    SiltError,
    StoreError,
    TransientStoreError,
    VersionNotFoundError,
    WithdrawnError,
)
from silt.gc import collect_garbage, horizon, read_checkpoints
from silt.manifest import Manifest
from silt.store import retrying
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore
from silt.versions import list_versions, read_fate

SEEDS = int(os.environ.get("SILT_SIM_SEEDS", "500"))
#: Which implementation runs (the replay command says it, and the default seed range follows it).
PURE = not any(silt.speedups().values())
FIRST = int(os.environ.get("SILT_SIM_FIRST", str(SEEDS if PURE else 0)))
ONE = os.environ.get("SILT_SIM_SEED")
#: Replay a seed of ``test_simulation_seeds_with_advance``.
ADVANCE = os.environ.get("SILT_SIM_ADVANCE") == "1"
T0 = 1_700_000_000_000
KEYS = [b"k%02d" % i for i in range(24)]
#: Ranges a reader reads with one ``multi_scan``: single keys, spans and a gap.
PROBES = [(b"k00", b"k03"), (b"k05", b"k05\x00"), (b"k07", b"k12"), (b"k2", b"k3")]

Records = dict[bytes, tuple[bytes, int | None]]  # key -> (value, expire_at_ms or None)


class SimFailure(AssertionError):
    pass


def live(records: Records, now_ms: int) -> dict[bytes, bytes]:
    return {k: v for k, (v, exp) in sorted(records.items()) if exp is None or now_ms < exp}


class Writer:
    """One writer DB (the writer or the zombie) with the model of its uncommitted state."""

    def __init__(self, db: silt.DB, records: Records) -> None:
        self.db = db
        self.records = dict(records)
        self.base = dict(records)  # the state of the version it is based on


class World:
    def __init__(self, seed: int, trace: Callable[[str], None], advance: bool = False) -> None:
        self.seed = seed
        #: Whether the schedule has ``advance`` steps (the seeds' schedules without it stay as
        #: they were: ``test_simulation_seeds``).
        self.advance = advance
        #: advances proved with GETs, and listed; those that also asked what is newer
        self.advanced = {"gets": 0, "listed": 0, "newer": 0}
        self.rng = rng = random.Random(seed)
        self.trace = trace
        self.name = f"sim-{seed}-{uuid.uuid4().hex[:8]}"
        self.url = f"memory://{self.name}"
        self.base = silt.open_store(self.url)
        self.clock = silt.ManualClock(T0)
        self.grace_ms = 10_000
        self.settings = silt.Settings(
            memtable_bytes=1 << 20,  # never fills: uploads only in flush/commit
            block_bytes=64,
            block_cache_bytes=2048,
            compaction=rng.choice(["leveled", "tiered", "ttl"]),
            compaction_mode="external",
            compaction_poll_seconds=0,
            target_sst_bytes=rng.choice([200, 600, 5000]),
            level1_bytes=rng.choice([300, 1000]),
            level_size_ratio=rng.choice([2, 3]),
            l0_compaction_trigger=rng.choice([1, 2, 3]),
            l0_stall_trigger=8,
            tiered_max_runs=rng.choice([2, 3]),
            retain_versions=rng.choice([1, 2, 3]),
            gc_grace_seconds=self.grace_ms / 1000,
        )
        # Inline deltas (silt.inline) from a random source of their own, so that the schedules
        # drawn from ``rng`` stay what they were: off, or a threshold and caps that keep some
        # deltas inline, upload others and fold them now and then.
        irng = random.Random(f"inline-{seed}")
        self.settings = self.settings.replace(
            inline_delta_bytes=irng.choice([0, 300, 1000, 8192]),
            inline_max_bytes=irng.choice([600, 2500, 65536]),
            inline_max_entries=irng.choice([1, 3, 16]),
        )
        self.policy = make_policy(self.settings.compaction, self.settings)
        self.stores = {a: FaultyStore(silt.open_store(self.url))
                       for a in ("writer", "zombie", "compactor", "gc", "reader")}
        self.tokens: dict[str, Records] = {}  # commit token -> the records it committed
        self.committed: set[int] = set()  # versions whose commit returned
        self.fenced: set[int] = set()  # versions a fenced zombie may not have withdrawn yet
        self.verified: set[tuple[str, int]] = set()
        self.writer: Writer | None = None
        self.zombie: Writer | None = None
        self.planned: tuple[Manifest, object] | None = None  # a compaction picked, not yet run
        self.checkpoints = 0
        self.pins: set[str] = set()  # checkpoints whose creation returned
        self.abandoned: set[str] = set()  # see unsettled()
        self.fates: set[tuple[int, str]] = set()  # (version, fate) records seen
        self.names: dict[int, str] = {}  # version -> the commit token it named when retained
        self.reader: tuple[silt.DB, Records | None] | None = None
        #: Early installation's own random source (the schedule's stays as drawn), and how
        #: many records writers installed for reads before a commit.
        self.irng = random.Random(f"install-{seed}")
        self.installed = 0

    # -- helpers ----------------------------------------------------------------------------------
    def open_writer(self, actor: str, version: int | None = None) -> Writer | None:
        try:
            db = silt.open(self.url, version=version, settings=self.writer_settings(actor),
                           clock=self.clock, store=self.stores[actor])
        except SiltError as exc:
            self.trace(f"  {actor} open failed: {exc!r}")
            return None
        records: Records | None = {}
        if db.manifest is not None:
            records = self.expected_state(db.manifest.version, db.manifest)
        if records is None:
            # A fenced zombie's manifest whose withdrawal failed: not a version to build on.
            assert db.version in self.fenced, f"opened unknown version {db.version}"
            db.close()
            return None
        self.trace(f"  {actor} opened at version {db.version}")
        return Writer(db, records)

    def writer_settings(self, actor: str) -> silt.Settings:
        """The settings a new writer DB of ``actor`` opens with."""
        return self.settings

    def ops(self, w: Writer) -> None:
        for _ in range(self.rng.randrange(1, 8)):
            k = self.rng.choice(KEYS)
            roll = self.rng.random()
            if roll < 0.2:
                w.db.delete(k)
                w.records.pop(k, None)
            elif roll < 0.4:
                v = b"t%d" % self.rng.randrange(1000)
                ttl = self.rng.choice([1, 5, 30])
                w.db.put(k, v, ttl=ttl)
                w.records[k] = (v, self.clock.now_ms() + ttl * 1000)
            else:
                v = b"v%d" % self.rng.randrange(1000) * self.rng.randrange(1, 6)
                w.db.put(k, v)
                w.records[k] = (v, None)

    def commit(self, actor: str, w: Writer, version: int | None = None) -> bool:
        """Commit (``version``: an explicit number, which may skip numbers); False when the
        writer must be replaced (conflict or fenced)."""
        attempt = version if version is not None else w.db.committer.next
        lineage = w.db.committer.lineage
        try:
            v = w.db.commit(version)
        except InvalidArgumentError as exc:  # an explicit number at or below what it may use
            self.trace(f"  {actor} commit refused: {str(exc)[:60]}")
            return True
        except CommitConflict as exc:
            self.trace(f"  {actor} commit conflict: {exc.version}")
            if w.db.committer.lineage != lineage:
                self.register_reservations(lineage, w.base)
            return False
        except FencedError as exc:
            self.trace(f"  {actor} fenced: {str(exc)[:60]}")
            self.fenced.add(attempt)
            return False
        except WithdrawnError as exc:
            return self.withdrawn(actor, w, exc, lineage)
        except StoreError as exc:
            return self.failed(actor, w, exc, lineage)
        self.tokens[w.db.manifest.token] = dict(w.records)  # type: ignore[union-attr]
        if w.db.manifest.parent != lineage:  # type: ignore[union-attr]
            self.register_reservations(lineage, w.base)
        w.base = dict(w.records)
        self.committed.add(v)
        self.trace(f"  {actor} committed {v}")
        return True

    def failed(self, actor: str, w: Writer, exc: StoreError, lineage: int | None) -> bool:
        """A commit raised ``exc``: the writer goes on (True) with its writes pending."""
        self.trace(f"  {actor} commit failed: {exc!r}"[:160])
        pending = w.db.committer.uncertain
        if pending is not None and pending[0].token not in self.tokens:
            self.tokens[pending[0].token] = dict(w.records)  # it may have landed
        if w.db.committer.lineage != lineage:
            self.register_reservations(lineage, w.base)
        return True

    def withdrawn(self, actor: str, w: Writer, exc: WithdrawnError, lineage: int | None) -> bool:
        """A commit was withdrawn (tests/test_simulation_graces.py retries it at once)."""
        return self.failed(actor, w, exc, lineage)

    # -- steps ------------------------------------------------------------------------------------
    def step_write(self) -> None:
        if self.writer is None:
            self.writer = self.open_writer("writer")
            return
        self.ops(self.writer)

    def step_flush(self) -> None:
        if self.writer is not None:
            try:
                self.writer.db.flush()
            except StoreError as exc:
                self.trace(f"  flush failed: {exc!r}"[:120])

    def step_commit(self) -> None:
        if self.writer is None:
            self.writer = self.open_writer("writer")
            return
        if not self.commit("writer", self.writer):
            self.abandon(self.writer)
            self.writer = self.open_writer("writer")

    def step_crash(self) -> None:
        """Upload, then crash before the commit: the DB is abandoned."""
        if self.writer is None:
            return
        try:
            self.writer.db.flush()
        except StoreError:
            pass
        self.abandon(self.writer)
        self.writer = self.open_writer("writer")

    def step_zombie(self) -> None:
        if self.zombie is None:
            versions = self.base_versions()
            if versions:
                self.zombie = self.open_writer("zombie", self.rng.choice(versions))
            return
        self.ops(self.zombie)
        if self.rng.random() < 0.5:
            # Half of its commits name a version past the latest (a stale base makes that a
            # fork attempt, which must fail; from the latest it skips numbers legally).
            latest = max(self.base_versions(), default=0)
            version = latest + self.rng.randrange(1, 4) if self.rng.random() < 0.5 else None
            if not self.commit("zombie", self.zombie, version):
                self.abandon(self.zombie)
                self.zombie = None

    def step_checkpoint(self) -> None:
        if self.writer is None or self.writer.db.version is None:
            return
        self.checkpoints += 1
        try:
            v = self.writer.db.checkpoint(f"c{self.checkpoints}")
            self.pins.add(f"c{self.checkpoints}")
            self.trace(f"  checkpoint c{self.checkpoints} -> {v}")
        except (StoreError, VersionNotFoundError) as exc:  # a fault, or GC passed the version
            self.trace(f"  checkpoint failed: {exc!r}"[:120])

    def step_pick(self) -> None:
        store = self.stores["compactor"]
        try:
            versions = silt._list_versions(store)
            if not versions:
                return
            m = silt.read_manifest(store, versions[-1])
        except SiltError as exc:
            self.trace(f"  compactor read failed: {exc!r}"[:120])
            return
        task = self.policy.pick(m, self.clock.now_ms())  # type: ignore[union-attr]
        if task is not None:
            self.planned = (m, task)
            self.trace(f"  picked {task.mode} of {len(task.inputs)} from {m.version}")

    def step_compact(self) -> None:
        if self.planned is None:
            return
        m, task = self.planned
        self.planned = None
        try:
            rec = run_compaction(self.stores["compactor"], m, task, self.settings,  # type: ignore[arg-type]
                                 self.clock)
            self.trace(f"  compacted -> {len(rec.outputs)} outputs, record {rec.id[-6:]}")
        except (SiltError, ValueError) as exc:  # inputs collected meanwhile, or a fault
            self.trace(f"  compaction failed: {exc!r}"[:120])

    def step_gc(self) -> None:
        try:
            r = collect_garbage(self.stores["gc"], retain_versions=self.settings.retain_versions,
                                grace_seconds=self.grace_ms / 1000, clock=self.clock)
            self.trace(f"  gc kept {r.kept_versions.get('')} deleted {len(r.deleted_ssts)} SSTs")
        except SiltError as exc:
            self.trace(f"  gc failed: {exc!r}"[:120])

    def step_gc_short(self) -> None:
        """GC with a grace shorter than the writers' must refuse before touching anything, even
        beside a writer holding flushed, uncommitted SSTs."""
        before = sorted(i.key for i in self.base.list(""))
        grace = self.rng.choice([0, self.grace_ms // 2000, -1])
        try:
            collect_garbage(self.stores["gc"], retain_versions=1, grace_seconds=grace,
                            clock=self.clock)
        except InvalidArgumentError as exc:
            self.trace(f"  short gc refused: {str(exc)[:50]}")
        except StoreError as exc:  # an injected fault: still nothing may have changed
            self.trace(f"  short gc failed: {exc!r}"[:120])
        else:
            if any(k.startswith((paths.MANIFEST_PREFIX, paths.SST_PREFIX)) for k in before):
                raise SimFailure(f"gc with grace {grace}s ran beside writers with a longer one")
        if sorted(i.key for i in self.base.list("")) != before:
            raise SimFailure("a refused gc changed the store")

    def step_advance(self) -> None:
        """The writer, with nothing uncommitted, moves to the latest version ``<= at_most``
        (``DB.advance``: GETs when it can prove the answer, a LIST otherwise), as a stream
        processor's cached handle does when another process committed: it must land where a
        listing says, on a state the model knows, and read it exactly."""
        w = self.writer
        if w is None:
            return
        committer = w.db.committer
        pending = (w.records != w.base or committer.uncertain is not None
                   or committer.withdrawing is not None)
        versions = self.base_versions()
        at_most = max(versions, default=0) + self.rng.randrange(-2, 2)
        if pending:
            return
        listed = w.db.stats().get("advances_listed", 0)
        # every other advance also asks what is newer (DB.advance_newer); the choice takes no
        # random bits, so the seeds' schedules stay as they were
        newer = w.db.stats().get("advances", 0) % 2 == 1
        try:
            if newer:
                got, after = w.db.advance_newer(at_most)
            else:
                got = w.db.advance(at_most)
        except InvalidArgumentError as exc:  # uncommitted range deletes or upload
            self.trace(f"  advance refused: {str(exc)[:60]}")
            return
        except StoreError as exc:
            self.trace(f"  advance failed: {exc!r}"[:120])
            return
        self.advanced["listed" if w.db.stats().get("advances_listed", 0) > listed
                      else "gets"] += 1
        versions = self.base_versions()
        want = max((v for v in versions if v <= at_most), default=None)
        if got != want:
            raise SimFailure(f"advance({at_most}) landed on {got}, a listing says {want}")
        if newer:
            self.advanced["newer"] += 1
            if after != [v for v in versions if got is None or v > got]:
                raise SimFailure(f"advance_newer({at_most}) says {after} are newer than {got}, "
                                 f"a listing says {versions}")
        records = {} if got is None else self.expected_state(got, w.db.manifest)
        if records is None:
            raise SimFailure(f"advance landed on unknown version {got}")
        w.records, w.base = dict(records), dict(records)
        self.trace(f"  writer advanced to {got} (at most {at_most})")
        try:
            if dict(w.db.scan()) != live(records, self.clock.now_ms()):
                raise SimFailure(f"the writer advanced to {got} reads wrong")
        except NotFoundError as exc:
            if "garbage collection" not in str(exc).lower():
                raise SimFailure(f"an advanced writer's NotFoundError: {exc}") from exc
            self.trace("  advanced writer: version collected")
        except StoreError as exc:
            self.trace(f"  advanced writer read failed: {exc!r}"[:120])

    def step_reader(self) -> None:
        """A reader holds an old version open, reads it later, and sometimes checkpoints it:
        reads are exact or fail saying GC removed the version; a checkpoint of a version its
        writer may still withdraw is refused, and one that succeeds keeps it (check())."""
        if self.reader is None:
            versions = self.base_versions()
            if not versions:
                return
            v = self.rng.choice(versions)
            try:
                db = silt.open(self.url, version=v, settings=self.settings.replace(
                    compaction="none"), clock=self.clock, store=self.stores["reader"])
            except SiltError as exc:
                self.trace(f"  reader open failed: {exc!r}"[:120])
                return
            want = self.expected_state(v, db.manifest)
            self.reader = (db, want)
            self.trace(f"  reader opened version {v}")
            return
        db, want = self.reader
        if self.rng.random() < 0.3:
            self.checkpoints += 1
            try:
                db.checkpoint(f"r{self.checkpoints}")
                self.pins.add(f"r{self.checkpoints}")
                self.trace(f"  reader checkpointed {db.version}")
            except (StoreError, VersionNotFoundError) as exc:
                self.trace(f"  reader checkpoint refused: {exc!r}"[:120])
        try:
            got = dict(db.scan())
            probes = db.multi_scan(PROBES)  # as the stream-stream join reads
        except NotFoundError as exc:
            if "garbage collection" not in str(exc).lower():
                raise SimFailure(f"a reader's NotFoundError does not say why: {exc}") from exc
            self.trace("  reader: version collected")
        except StoreError as exc:
            self.trace(f"  reader read failed: {exc!r}"[:120])
        else:
            if want is not None and got != live(want, self.clock.now_ms()):
                raise SimFailure(f"reader at version {db.version} reads wrong")
            if probes != [(k, v) for s, e in PROBES for k, v in got.items() if s <= k < e]:
                raise SimFailure(f"reader at version {db.version}: multi_scan differs from scan")
        if self.rng.random() < 0.5:
            db.close()
            self.reader = None

    def step_stall(self) -> None:
        """The writer stalls between checking its SSTs' ages and creating its manifest, past
        the grace period, while GC runs; then, between creating it and its checks, a reader
        may open and checkpoint the new version. The commit is withdrawn (its number never
        used again) unless the checkpoint settled it first; either way nothing is lost."""
        if self.writer is None:
            return
        store = self.stores["writer"]
        active = [True]

        def stall(op: str, key: str) -> None:
            if active[0]:
                self.clock.advance(self.grace_ms + 1)
                self.trace("  (stalled past the grace period; gc runs)")
                self.step_gc()

        def race(op: str, key: str) -> None:
            if active[0] and self.rng.random() < 0.5:
                active[0] = False
                self.checkpoint_latest()

        store.on_call("put_if_absent", stall, times=1, predicate=lambda k: (
            k.startswith(paths.MANIFEST_PREFIX) and not k.endswith(paths.FATE_SUFFIX)))
        store.on_call("list", race, times=1,
                      predicate=lambda k: k.startswith(paths.GC_PREFIX))
        try:
            if not self.commit("writer", self.writer):
                self.abandon(self.writer)
                self.writer = self.open_writer("writer")
        finally:
            active[0] = False

    def checkpoint_latest(self) -> None:
        """Another handle opens the latest version and checkpoints it."""
        try:
            with silt.open(self.url, settings=self.settings.replace(compaction="none"),
                           clock=self.clock, store=self.stores["reader"]) as db:
                if db.version is None:
                    return
                self.checkpoints += 1
                db.checkpoint(f"s{self.checkpoints}")
                self.pins.add(f"s{self.checkpoints}")
                self.trace(f"  another handle checkpointed {db.version}")
        except (StoreError, VersionNotFoundError) as exc:
            self.trace(f"  another handle's checkpoint refused: {exc!r}"[:120])

    def step_crafted(self) -> None:
        """A hostile or broken writer puts a manifest whose SSTs name a crafted sibling or id
        (``..``, percent-encoded separators, look-alike slashes) as the newest version. Every
        reader and GC must call it corruption, touch nothing, and read nothing outside the
        root; the operator then removes it and the world goes on."""
        versions = self.base_versions()
        if not versions:
            return
        newest = Manifest.decode(self.base.get(paths.manifest_key(versions[-1])),
                                 paths.manifest_key(versions[-1]))
        ssts = list(newest.all_ssts())
        if not ssts:
            return
        crafted_name = self.rng.choice(["..", "../other", "%2e%2e", "%2e%2e%2fother", "a/b",
                                        "\u2215other", ".", "x\x00y"])
        field = self.rng.choice(["db", "id"])
        bad = replace(ssts[0], **({"db": crafted_name} if field == "db"
                                  else {"id": crafted_name}))
        v = versions[-1] + 1
        crafted = replace(newest, version=v, parent=versions[-1], token="crafted",
                          l0=(bad, *newest.l0[1:]) if newest.l0 else (bad,),
                          levels=newest.levels if newest.l0 else (),
                          # an inline delta's bytes go with its crafted id
                          inline={**newest.inline, bad.id: newest.inline.get(ssts[0].id, b"")})
        name = paths.manifest_key(v)
        if not self.base.put_if_absent(name, crafted.encode()):
            return
        before = sorted(i.key for i in self.base.list(""))
        self.trace(f"  crafted {field} {crafted_name!r} at version {v}")
        try:
            try:
                silt.open(self.url, store=self.base, clock=self.clock,
                          settings=self.settings.replace(compaction="none")).close()
            except CorruptionError:
                pass
            else:
                raise SimFailure(f"a crafted {field} {crafted_name!r} was not corruption")
            try:
                collect_garbage(self.base, retain_versions=1, grace_seconds=self.grace_ms / 1000,
                                clock=self.clock)
            except CorruptionError:
                pass
            else:
                raise SimFailure("GC ran over a crafted manifest")
            if sorted(i.key for i in self.base.list("")) != before:
                raise SimFailure("a crafted manifest made something change the store")
        finally:
            self.base.delete_many([name])  # the operator removes the damage

    def step_clock(self) -> None:
        ms = self.rng.choice([1, 300, 1500, self.grace_ms // 2 + 1, self.grace_ms + 1])
        self.clock.advance(ms)
        self.trace(f"  clock +{ms}")

    def step_fault(self) -> None:
        actor = self.rng.choice(list(self.stores))
        store = self.stores[actor]
        op = self.rng.choice(["put_if_absent", "put_if_absent", "get", "get_range", "list",
                              "delete_many"])
        kind = self.rng.choice(["fail", "fail-hard", "lost", "lost-hard"])
        error = TransientStoreError if kind in ("fail", "lost") else StoreError
        if kind.startswith("fail"):
            store.fail_next(op, error=error)
        else:
            store.lose_response_next(op, error=error)
        self.trace(f"  fault {kind} on {actor}.{op}")

    STEPS = (
        ("write", 24), ("flush", 6), ("commit", 18), ("crash", 3), ("zombie", 6),
        ("checkpoint", 2), ("pick", 7), ("compact", 7), ("gc", 8), ("clock", 9), ("fault", 10),
        ("gc_short", 2), ("reader", 4), ("stall", 2), ("crafted", 1),
    )

    # -- the invariant ----------------------------------------------------------------------------
    def base_versions(self) -> list[int]:
        return silt._list_versions(self.base)

    def register_reservations(self, lineage: int | None, base: Records) -> None:
        """After a commit attempt from ``lineage`` (state ``base``): the reservations it made
        (versions that skip numbers, with the base's state) are known states from now on."""
        same = {lineage}
        changed = True
        while changed:
            changed = False
            for info in self.base.list(paths.MANIFEST_PREFIX):
                if paths.parse_manifest_key(info.key) is None:
                    continue
                try:
                    m = Manifest.decode(self.base.get(info.key), info.key)
                except NotFoundError:
                    continue
                if m.parent not in same or m.version in same:
                    continue
                if m.skip_to is not None and m.token not in self.tokens:
                    self.tokens[m.token] = dict(base)
                    same.add(m.version)
                    changed = True
                elif (fate := read_fate(self.base, m.version)) and fate.withdraws(m):
                    same.add(m.version)  # a withdrawn version on this lineage stands for it
                    changed = True

    def unsettled(self) -> set[str]:
        """Tokens of commits that stalled past the grace period while GC ran and whose writer
        has not finished withdrawing them (a fault interrupted it, or the writer then crashed):
        they may reference collected SSTs. Reads of them must still never return wrong data."""
        out = set(self.abandoned)
        for w in (self.writer, self.zombie):
            if w is not None:
                for pending in (w.db.committer.uncertain, w.db.committer.withdrawing):
                    if pending is not None:
                        out.add(pending[0].token)
        return out

    def abandon(self, w: Writer) -> None:
        """``w`` is dropped (crash or replacement): its unfinished commit stays as it is."""
        for pending in (w.db.committer.uncertain, w.db.committer.withdrawing):
            if pending is not None:
                self.abandoned.add(pending[0].token)
        w.db.close()

    def expected_state(self, v: int, m: Manifest) -> Records | None:
        """The model of version ``v``: the records its commit (or reservation) stands for."""
        return self.tokens.get(m.token)

    def check(self) -> None:
        now = self.clock.now_ms()
        listing = list_versions(self.base)
        for v, fate in listing.fates.items():
            self.fates.add((v, fate.fate))
        versions = listing.versions
        h = horizon(self.base)
        pinned = set(read_checkpoints(self.base).values())
        ssts = {i.key for i in self.base.list(paths.SST_PREFIX)}
        for v in versions:
            name = paths.manifest_key(v)
            try:
                m = Manifest.decode(self.base.get(name), name)
            except NotFoundError:
                continue
            retained = v >= h or v in pinned
            if retained:
                # Invariant 8: a number names one state forever, and no version is built
                # beside a newer one (nothing live between a version and its parent).
                if self.names.setdefault(v, m.token) != m.token:
                    raise SimFailure(f"version {v} changed meaning")
                between = [u for u in versions if m.parent is not None and m.parent < u < v]
                if between:
                    raise SimFailure(f"version {v} (parent {m.parent}) forks past {between}")
            expected = self.expected_state(v, m)
            if expected is None:
                if v < h and m.token not in self.tokens:
                    continue  # a fenced zombie's manifest, withdrawn at its next commit or by GC
                if m.token not in self.tokens and m.skip_to is None:
                    raise SimFailure(f"version {v} has a manifest nobody committed")
            missing = [s.id for s in m.objects() if paths.sst_key(s.id) not in ssts]
            if missing:
                if m.token not in self.unsettled():
                    raise SimFailure(f"version {v} references deleted SSTs {missing[:3]}")
                try:
                    with silt.open(self.url, version=v, store=self.base, clock=self.clock,
                                   settings=self.settings.replace(compaction="none")) as db:
                        dict(db.scan())
                except (NotFoundError, VersionNotFoundError):
                    continue  # never wrong data: its reads fail
                raise SimFailure(f"version {v} reads without its deleted SSTs {missing[:3]}")
            if expected is None or (m.token, now) in self.verified:
                continue
            try:
                db = silt.open(self.url, version=v, store=self.base, clock=self.clock,
                               settings=self.settings.replace(compaction="none"))
            except VersionNotFoundError as exc:
                if retained or "garbage collection" not in str(exc):
                    raise
                continue  # below the horizon and not pinned: GC may be collecting it
            with db:
                got = dict(db.scan())
            want = live(expected, now)
            if got != want:
                diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want)
                        if got.get(k) != want.get(k)}
                raise SimFailure(f"version {v} reads back wrong: key: (got, model) {diff}")
            self.verified.add((m.token, now))
        # The newest commit that returned is still there, unless a newer one landed (a commit
        # that failed after its manifest was created is committed all the same).
        if self.committed and max(self.committed) not in versions and (
            not versions or versions[-1] < max(self.committed)
        ):
            raise SimFailure(f"the newest committed version {max(self.committed)} is gone")
        # Checkpoints whose creation returned (a refused one whose removal failed may dangle;
        # `silt verify` reports those).
        for name, v in read_checkpoints(self.base).items():
            if name in self.pins and v not in versions:
                raise SimFailure(f"checkpoint {name} pins version {v}, which is gone")

    def maybe_install(self) -> None:
        """Now and then a writer installs the finished records it finds for its reads."""
        for actor, w in (("writer", self.writer), ("zombie", self.zombie)):
            if w is None or self.irng.random() >= 0.3:
                continue
            before = w.db.stats().get("compactions_installed", 0)
            try:
                w.db.wait_for_compaction(10)
            except StoreError as exc:  # an injected fault while it looked for records
                self.trace(f"  {actor} install failed: {exc!r}"[:120])
                continue
            got = int(w.db.stats().get("compactions_installed", 0) - before)
            if got:
                self.installed += got
                self.trace(f"  {actor} installed {got} compaction(s) for reads")

    def check_writers(self) -> None:
        """Each open writer reads its model exactly (see the module docstring)."""
        now = self.clock.now_ms()
        ssts = {i.key for i in self.base.list(paths.SST_PREFIX)}
        for actor, w in (("writer", self.writer), ("zombie", self.zombie)):
            if w is None:
                continue
            view, base = w.db._view, w.db.manifest
            shown = ({r.info.id for r in view.l0}
                     | {r.info.id for lv in view.levels for r in lv.readers})
            shown -= {s.id for s in base.all_ssts()} if base is not None else set()
            # What it shows must exist, whatever its block cache still holds of it, and be
            # younger than half its grace (what keeps it from GC: silt.compaction.early).
            gone = [i for i in shown if paths.sst_key(i) not in ssts]
            if gone:
                raise SimFailure(f"the {actor} shows SSTs GC collected: {gone[:3]}")
            half = int(w.db.settings.gc_grace_seconds * 500)
            old = [i for i in shown if now - paths.id_time_ms(i) > half]
            if old:
                raise SimFailure(f"the {actor} shows SSTs older than half its grace: {old[:3]}")
            try:
                got = dict(w.db.scan())
            except StoreError as exc:
                if isinstance(exc, NotFoundError) and any(i in str(exc) for i in shown):
                    raise SimFailure(f"the {actor} lost an installed compaction's SST: {exc}"
                                     ) from exc
                self.trace(f"  {actor} read failed: {exc!r}"[:120])
                continue
            want = live(w.records, now)
            if got != want:
                diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want)
                        if got.get(k) != want.get(k)}
                raise SimFailure(f"the {actor} reads wrong: key: (got, model) {diff}")

    def run(self, steps: int) -> None:
        table = self.STEPS + ((("advance", 8),) if self.advance else ())
        names = [n for n, _ in table]
        weights = [w for _, w in table]
        self.trace(f"seed {self.seed}: {self.settings.compaction}, retain "
                   f"{self.settings.retain_versions}, L0 trigger "
                   f"{self.settings.l0_compaction_trigger}")
        self.writer = self.open_writer("writer")
        for i in range(steps):
            step = self.rng.choices(names, weights)[0]
            self.trace(f"{i}: {step}")
            getattr(self, f"step_{step}")()
            self.maybe_install()
            self.check()
            self.check_writers()

    def close(self) -> None:
        for w in (self.writer, self.zombie):
            if w is not None:
                w.db.close()
        if self.reader is not None:
            self.reader[0].close()
        MemoryStore.drop(self.name)


def run_world(make: Callable[[Callable[[str], None]], World], seed: int, steps: int,
              verbose: bool, what: str, replay: str) -> World:
    """Run the world ``make(trace)`` builds for ``steps`` steps; a failure is a
    :class:`SimFailure` with the last steps and the command that replays it (``replay``)."""
    lines: list[str] = []

    def trace(line: str) -> None:
        lines.append(line)
        if verbose:
            print(line)

    world = make(trace)
    try:
        world.run(steps)
    except Exception as exc:
        tail = "\n".join(lines[-40:])
        raise SimFailure(
            f"simulation seed {seed}{what} failed: {exc!r}\n--- last steps ---\n{tail}\n"
            f"replay: {'SILT_NO_EXTENSIONS=1 ' if PURE else ''}{replay}"
        ) from exc
    finally:
        world.close()
    return world


def simulate(seed: int, steps: int = 40, verbose: bool = False, advance: bool = False) -> World:
    return run_world(
        lambda trace: World(seed, trace, advance), seed, steps, verbose, "",
        f"SILT_SIM_SEED={seed}{' SILT_SIM_ADVANCE=1' if advance else ''} "
        "pytest tests/test_simulation.py -s")


@pytest.fixture(autouse=True)
def simulated_time_and_ids(monkeypatch: pytest.MonkeyPatch):
    """``retrying`` must not sleep, and ids must come from the seed (set per seed below)."""
    monkeypatch.setitem(retrying.__kwdefaults__, "sleep", lambda _s: None)
    monkeypatch.setitem(retrying.__kwdefaults__, "rng", random.Random(0))


def seeded_ids(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    ids = random.Random(f"ids-{seed}")
    monkeypatch.setattr(paths, "os", types.SimpleNamespace(urandom=ids.randbytes))


@pytest.mark.skipif(ONE is not None, reason="SILT_SIM_SEED replays one seed")
def test_simulation_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    start = time.monotonic()
    stats = {"commits": 0, "fenced": 0, "withdrawn": 0, "settled": 0, "installed": 0}
    for seed in range(FIRST, FIRST + SEEDS):
        seeded_ids(monkeypatch, seed)
        world = simulate(seed)
        stats["commits"] += len(world.committed)
        stats["fenced"] += bool(world.fenced)
        stats["withdrawn"] += any(f == "withdrawn" for _, f in world.fates)
        stats["settled"] += any(f == "settled" for _, f in world.fates)
        stats["installed"] += world.installed
    elapsed = time.monotonic() - start
    print(f"\n{SEEDS} seeds in {elapsed:.1f}s: {stats}")
    assert stats["commits"] > SEEDS  # the scheduler really commits
    # ... and reaches the withdrawals and the checkpoints that settle a version, and
    # compactions that serve reads before a commit
    assert stats["withdrawn"] and stats["settled"] and stats["installed"], stats


@pytest.mark.skipif(ONE is not None, reason="SILT_SIM_SEED replays one seed")
def test_simulation_seeds_with_advance(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same worlds with a writer that also advances (``DB.advance``) between commits; a
    quarter of the seeds (``SILT_SIM_SEEDS``), from the same first one."""
    seeds = max(1, SEEDS // 4)
    advanced = {"gets": 0, "listed": 0, "newer": 0}
    for seed in range(FIRST, FIRST + seeds):
        seeded_ids(monkeypatch, seed)
        world = simulate(seed, advance=True)
        for how, n in world.advanced.items():
            advanced[how] += n
    print(f"\n{seeds} seeds with advance: {advanced}")
    # both ways are reached: proved with GETs, and listed
    assert advanced["gets"] and advanced["listed"] and advanced["newer"], advanced


def test_simulation_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replays one seed with its trace printed: ``SILT_SIM_SEED=N`` (seed 24, a past bug, else)."""
    seed = int(ONE) if ONE is not None else 24
    seeded_ids(monkeypatch, seed)
    world = simulate(seed, verbose=True, advance=ADVANCE)
    assert world.committed, "the replayed seed committed nothing"


def test_a_seed_replays_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(seed: int) -> list[str]:
        seeded_ids(monkeypatch, seed)
        lines: list[str] = []
        world = World(seed, lines.append)
        try:
            world.run(40)
            # Pin markers carry the pinned manifest's commit token, which is random.
            objects = sorted(k.key.split(".")[0] if k.key.startswith(paths.PIN_PREFIX) else k.key
                             for k in world.base.list(""))
        finally:
            world.close()
        # Each world's root has a unique name, which messages in the trace may quote.
        return [line.replace(world.name, "<root>") for line in lines] + objects

    assert run(7) == run(7)
