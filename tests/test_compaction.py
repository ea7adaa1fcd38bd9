"""Compaction: policies as pure functions, adoption rules, and end-to-end runs on real roots.

* Policies (``leveled``, ``tiered``, ``ttl``) are called on hand-built manifests, with no I/O.
* Adoption (:func:`silt.compaction.adopt.adopt`) is checked rule by rule on hand-built trees, and
  records made by the real compactor are adopted by real writers whose data must equal a model.
* End to end, on ``file://`` and ``memory://``: every policy under random overwrites, deletes
  and TTL puts keeps L0 bounded and the data equal to a dict model, and drops tombstones at the
  bottom; a third-party policy is installed through a real entry point (examples/policy-plugin);
  ``silt compact`` runs as a separate process beside an ``external``-mode writer.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys
import time
import tomllib
import uuid

import pytest
import silt
from silt import paths
from silt.compaction import CompactionTask
from silt.compaction.adopt import Refused, adopt
from silt.compaction.compactor import run_compaction
from silt.compaction.leveled import LeveledPolicy
from silt.compaction.record import CompactionRecord
from silt.compaction.task import make_policy
from silt.compaction.tiered import TieredPolicy
from silt.compaction.ttl import TtlPolicy
from silt.manifest import Manifest
from silt.plugins import build_registry, reset_registry
from silt.sst.builder import SstInfo
from silt.tiers.memory import MemoryStore

REPO = pathlib.Path(__file__).resolve().parents[1]
#: Where this process imported silt from (the installed build, or packages/core/src):
#: subprocesses must run the same implementation.
CORE_SRC = pathlib.Path(silt.__file__).resolve().parents[1]
PLUGIN = REPO / "examples" / "policy-plugin"
T0 = 1_700_000_000_000
NOW = T0 + 10_000_000

# --- hand-built manifests -------------------------------------------------------------------------

_seq = iter(range(1, 1 << 30))


def sst(lo: str, hi: str, size: int = 100, *, age_ms: int = 0, entries: int = 10,
        tombstones: int = 0, expiring: int = 0, max_expiry_ms: int = 0) -> SstInfo:
    """An SST covering ``[lo, hi]`` whose id says it was made ``age_ms`` before ``NOW``."""
    n = next(_seq)
    return SstInfo(
        id=paths.new_id(NOW - age_ms, n.to_bytes(10, "big")), size=size, tail_offset=size - 60,
        smallest=lo.encode(), largest=hi.encode(), entries=entries, tombstones=tombstones,
        expiring=expiring, min_expiry_ms=max_expiry_ms and 1, max_expiry_ms=max_expiry_ms,
    )


def manifest(l0: list[SstInfo] = (), *levels: list[SstInfo]) -> Manifest:  # type: ignore[assignment]
    return Manifest(version=7, parent=6, writer_id="w", token="t", created_ms=NOW, l0=tuple(l0),
                    levels=tuple(tuple(run) for run in levels))


def ids(*ssts: SstInfo) -> set[str]:
    return {s.id for s in ssts}


def record(task: CompactionTask, outputs: list[SstInfo] = ()) -> CompactionRecord:  # type: ignore[assignment]
    return CompactionRecord(id=paths.new_id(NOW), base_version=7, created_ms=NOW, task=task,
                            outputs=tuple(outputs))


POLICY_SETTINGS = silt.Settings(l0_compaction_trigger=4, level1_bytes=1000, level_size_ratio=10,
                                tiered_max_runs=5)


# --- leveled ------------------------------------------------------------------------------------


def test_leveled_waits_for_the_l0_trigger() -> None:
    policy = LeveledPolicy(POLICY_SETTINGS)
    l0 = [sst("a", "c"), sst("b", "d"), sst("c", "e")]
    assert policy.pick(manifest(l0, [sst("a", "z", 500)]), NOW) is None


def test_leveled_l0_into_l1_with_every_overlapping_l1_sst() -> None:
    policy = LeveledPolicy(POLICY_SETTINGS)
    l0 = [sst("d", "f"), sst("c", "e"), sst("e", "g"), sst("d", "d")]
    a, b, c, d = sst("a", "b"), sst("c", "d"), sst("e", "h"), sst("i", "k")
    task = policy.pick(manifest(l0, [a, b, c, d]), NOW)
    assert task is not None and task.mode == "into_level" and task.target_level == 1
    assert set(task.inputs) == ids(*l0, b, c)  # a and d do not overlap [c, g]
    assert task.drop_tombstones  # nothing below L1


def test_leveled_keeps_tombstones_when_data_lies_below() -> None:
    policy = LeveledPolicy(POLICY_SETTINGS)
    l0 = [sst("d", "f") for _ in range(4)]
    l1 = [sst("c", "e")]
    below = manifest(l0, l1, [sst("f", "m")])  # L2 overlaps the output range [c, f]
    assert not policy.pick(below, NOW).drop_tombstones  # type: ignore[union-attr]
    apart = manifest(l0, l1, [sst("x", "z")])
    assert policy.pick(apart, NOW).drop_tombstones  # type: ignore[union-attr]


def test_leveled_pushes_the_oldest_sst_of_an_overfull_level_down() -> None:
    policy = LeveledPolicy(POLICY_SETTINGS)
    old = sst("f", "h", 600, age_ms=5000)
    l1 = [sst("a", "c", 600, age_ms=100), old, sst("m", "p", 600, age_ms=200)]  # 1800 > 1000
    l2 = [sst("a", "e", 10), sst("g", "g", 10), sst("h", "k", 10), sst("q", "z", 10)]
    task = policy.pick(manifest([], l1, l2), NOW)
    assert task is not None and task.mode == "into_level" and task.target_level == 2
    assert set(task.inputs) == ids(old, l2[1], l2[2])
    assert task.drop_tombstones  # L2 is the bottom
    l3 = [sst("g", "g", 10)]
    task = policy.pick(manifest([], l1, l2, l3), NOW)
    assert task is not None and not task.drop_tombstones


def test_leveled_picks_the_most_overfull_level() -> None:
    policy = LeveledPolicy(POLICY_SETTINGS)
    l1 = [sst("a", "c", 1100)]  # 1.1x of 1000
    l2 = [sst("a", "m", 15000, age_ms=9), sst("n", "z", 15000, age_ms=1)]  # 3x of 10000
    task = policy.pick(manifest([], l1, l2), NOW)
    assert task is not None and task.target_level == 3 and task.inputs == (l2[0].id,)
    assert policy.pick(manifest([], [sst("a", "c", 900)]), NOW) is None


def test_leveled_scores_l0_against_the_levels() -> None:
    """A steady stream of flushes must not starve level pushes (L1 would grow without bound),
    and L0 wins again once it holds half the stall trigger."""
    policy = LeveledPolicy(POLICY_SETTINGS.replace(l0_stall_trigger=12))
    l1 = [sst("a", "m", 2000, age_ms=5), sst("n", "z", 1000, age_ms=1)]  # 3x its target
    l0 = [sst("a", "z") for _ in range(5)]  # score 1.25
    task = policy.pick(manifest(l0, l1), NOW)
    assert task is not None and task.target_level == 2 and task.inputs == (l1[0].id,)
    l0 = [sst("a", "z") for _ in range(6)]  # half the stall trigger
    task = policy.pick(manifest(l0, l1), NOW)
    assert task is not None and task.target_level == 1


def test_leveled_pushes_dead_ssts_to_the_bottom() -> None:
    policy = LeveledPolicy(POLICY_SETTINGS)
    dead = sst("c", "f", entries=10, tombstones=6)
    alive = sst("g", "k", entries=10, tombstones=1)
    below = [sst("a", "e"), sst("f", "z")]
    task = policy.pick(manifest([], [dead, alive], below), NOW)
    assert task is not None and set(task.inputs) == ids(dead, *below)
    assert task.target_level == 2 and task.drop_tombstones
    # Expired entries count once all of an SST's expiring entries have expired.
    stale = sst("c", "f", entries=10, tombstones=1, expiring=5, max_expiry_ms=NOW - 1)
    assert policy.pick(manifest([], [stale], below), NOW) is not None
    assert policy.pick(manifest([], [stale], below), NOW - 2) is None
    # Nothing below (the data it shadowed has gone since): rewritten in place without the dead.
    task = policy.pick(manifest([], [dead]), NOW)
    assert task is not None and task.inputs == (dead.id,)
    assert task.target_level == 1 and task.drop_tombstones
    # ... and mostly live SSTs are left alone.
    assert policy.pick(manifest([], [alive]), NOW) is None


# --- tiered -------------------------------------------------------------------------------------


def test_tiered_flushes_l0_into_a_new_run() -> None:
    policy = TieredPolicy(POLICY_SETTINGS)
    l0 = [sst("a", "c") for _ in range(4)]
    task = policy.pick(manifest(l0), NOW)
    assert task is not None and task.mode == "new_run" and set(task.inputs) == ids(*l0)
    assert task.drop_tombstones  # there is no run below
    big = [sst("a", "z", 100_000)]
    task = policy.pick(manifest(l0, big), NOW)
    assert set(task.inputs) == ids(*l0) and not task.drop_tombstones  # type: ignore[union-attr]
    assert policy.pick(manifest(l0[:3], big), NOW) is None


def test_tiered_merges_runs_of_similar_size() -> None:
    policy = TieredPolicy(POLICY_SETTINGS)
    runs = [[sst("a", "z", 100)], [sst("a", "z", 120)], [sst("a", "z", 150)],
            [sst("a", "z", 300)], [sst("a", "z", 1_000_000)]]
    task = policy.pick(manifest([], *runs), NOW)
    assert task is not None and task.mode == "new_run"
    assert set(task.inputs) == ids(*(r[0] for r in runs[:4]))
    assert not task.drop_tombstones  # the big run lies below
    # Three similar runs are not enough on their own...
    assert policy.pick(manifest([], *runs[:3], runs[4]), NOW) is None
    # ... but they join an L0 flush, and the flush then merges them.
    l0 = [sst("a", "z", 40) for _ in range(4)]
    task = policy.pick(manifest(l0, *runs[:3], runs[4]), NOW)
    assert set(task.inputs) == ids(*l0, *(r[0] for r in runs[:3]))  # type: ignore[union-attr]


def test_tiered_merges_everything_when_there_are_too_many_runs() -> None:
    policy = TieredPolicy(POLICY_SETTINGS)  # tiered_max_runs=5
    runs = [[sst("a", "z", 10 ** (i + 2))] for i in range(6)]  # sizes too far apart to group
    task = policy.pick(manifest([], *runs), NOW)
    assert task is not None and set(task.inputs) == ids(*(r[0] for r in runs))
    assert task.drop_tombstones
    # At the limit, an L0 flush takes every run with it rather than add one more.
    l0 = [sst("a", "z", 1) for _ in range(4)]
    task = policy.pick(manifest(l0, *runs[:5]), NOW)
    assert set(task.inputs) == ids(*l0, *(r[0] for r in runs[:5]))  # type: ignore[union-attr]
    assert task.drop_tombstones  # type: ignore[union-attr]


# --- ttl ------------------------------------------------------------------------------------------


def expired(lo: str, hi: str, when: int = NOW - 1) -> SstInfo:
    return sst(lo, hi, entries=5, expiring=5, max_expiry_ms=when)


def test_ttl_drops_only_fully_expired_ssts() -> None:
    policy = TtlPolicy(POLICY_SETTINGS)
    gone = expired("a", "c")
    later = expired("d", "f", when=NOW + 1)  # expires in a millisecond
    partly = sst("g", "i", entries=5, expiring=4, max_expiry_ms=NOW - 1)  # one entry never expires
    task = policy.pick(manifest([], [gone, later, partly]), NOW)
    assert task is not None and task.mode == "drop" and task.inputs == (gone.id,)
    task = policy.pick(manifest([], [gone, later, partly]), NOW + 1)
    assert task is not None and set(task.inputs) == ids(gone, later)


def test_ttl_never_drops_an_sst_that_shadows_unexpired_older_data() -> None:
    policy = TtlPolicy(POLICY_SETTINGS)
    top = expired("c", "f")
    older = sst("e", "k")  # an older live value of a key in [e, f] would come back
    assert policy.pick(manifest([top], [older]), NOW) is None
    older_expired = expired("e", "k")
    task = policy.pick(manifest([top], [older_expired]), NOW)
    assert task is not None and set(task.inputs) == ids(top, older_expired)
    # Not overlapping: fine. And an L0 SST need not be the oldest to be dropped.
    newer = sst("x", "z")
    task = policy.pick(manifest([newer, top], [sst("m", "p")]), NOW)
    assert task is not None and task.inputs == (top.id,)


def test_ttl_falls_back_to_leveled() -> None:
    policy = TtlPolicy(POLICY_SETTINGS)
    l0 = [sst("a", "c") for _ in range(4)]
    task = policy.pick(manifest(l0), NOW)
    assert task is not None and task.mode == "into_level"


# --- adoption rules -----------------------------------------------------------------------------


def test_adopt_refuses_when_an_input_is_gone() -> None:
    a, b = sst("a", "c"), sst("d", "f")
    task = CompactionTask((a.id, b.id), "into_level", target_level=1)
    with pytest.raises(Refused, match="no longer live"):
        adopt((a,), (), record(task, [sst("a", "f")]))


def test_adopt_refuses_l0_inputs_that_are_not_the_oldest() -> None:
    new, mid, old = sst("a", "c"), sst("a", "c"), sst("a", "c")
    task = CompactionTask((new.id, mid.id), "into_level", target_level=1)
    with pytest.raises(Refused, match="oldest"):
        adopt((new, mid, old), (), record(task, [sst("a", "c")]))
    # The oldest two are fine, and newer L0 SSTs added since stay on top.
    task = CompactionTask((mid.id, old.id), "into_level", target_level=1)
    out = sst("a", "c")
    l0, levels = adopt((new, mid, old), (), record(task, [out]))
    assert l0 == (new,) and levels == ((out,),)


def test_adopt_refuses_outputs_overlapping_what_stayed_in_the_target() -> None:
    x = sst("a", "c")
    stay = sst("d", "f")
    task = CompactionTask((x.id,), "into_level", target_level=1)
    with pytest.raises(Refused, match="overlap"):
        adopt((x,), ((stay,),), record(task, [sst("a", "e")]))  # output runs into `stay`
    # An SST that appeared in the target since the pick and overlaps the inputs: refused too.
    late = sst("b", "b")
    with pytest.raises(Refused, match="overlap"):
        adopt((x,), ((late,),), record(task, [sst("a", "c")]))
    l0, levels = adopt((x,), ((stay,),), record(task, [out := sst("a", "c")]))
    assert l0 == () and levels == ((out, stay),)


def test_adopt_refuses_dropped_tombstones_over_data_below() -> None:
    x, below = sst("a", "c"), sst("b", "z")
    task = CompactionTask((x.id,), "into_level", target_level=1, drop_tombstones=True)
    with pytest.raises(Refused, match="tombstones"):
        adopt((x,), ((), (below,)), record(task, [sst("a", "c")]))
    # Without dropping tombstones the same record is fine.
    keep = CompactionTask((x.id,), "into_level", target_level=1)
    adopt((x,), ((), (below,)), record(keep, [sst("a", "c")]))
    # new_run: dropped tombstones with an older run below: refused.
    task = CompactionTask((x.id,), "new_run", drop_tombstones=True)
    with pytest.raises(Refused, match="tombstones"):
        adopt((x,), ((below,),), record(task, [sst("a", "c")]))


def test_adopt_drop_mode() -> None:
    new, gone, old = sst("x", "z"), expired("a", "c"), sst("m", "p")
    task = CompactionTask((gone.id,), "drop")
    l0, _levels = adopt((new, gone, old), ((sst("q", "r"),),), record(task))
    assert l0 == (new, old)  # any L0 SST may be dropped, the others keep their order
    with pytest.raises(Refused, match="expose"):
        adopt((new, gone), ((sst("b", "b"),),), record(task))
    with pytest.raises(Refused, match="no outputs"):
        adopt((gone,), (), record(task, [sst("a", "c")]))


def test_adopt_new_run_rules() -> None:
    r1, r2, r3 = sst("a", "z", 10), sst("a", "z", 20), sst("a", "z", 30)
    l0 = (sst("a", "c"), sst("b", "d"))
    out = sst("a", "z")
    task = CompactionTask((r1.id, r3.id), "new_run")
    with pytest.raises(Refused, match="adjacent"):
        adopt((), ((r1,), (r2,), (r3,)), record(task, [out]))
    # Empty runs (a leveled tree leaves some) do not separate runs.
    assert adopt((), ((r1,), (), (r3,)), record(task, [out])) == ((), ((out,),))
    task = CompactionTask((*(s.id for s in l0), r2.id), "new_run")
    with pytest.raises(Refused, match="newest runs"):
        adopt(l0, ((r1,), (r2,)), record(task, [out]))
    part = sst("a", "b")
    task = CompactionTask((part.id,), "new_run")
    with pytest.raises(Refused, match="partly"):
        adopt((), ((part, sst("c", "d")),), record(task, [out]))
    task = CompactionTask((*(s.id for s in l0), r1.id), "new_run")
    assert adopt(l0, ((r1,), (r2,)), record(task, [out])) == ((), ((out,), (r2,)))


# --- real data: records adopted by real writers keep every key's value ------------------------


def settings_small(**changes: object) -> silt.Settings:
    base = silt.Settings(
        memtable_bytes=1500, block_bytes=256, block_cache_bytes=64 * 1024,
        target_sst_bytes=3000, level1_bytes=6000, level_size_ratio=3,
        l0_compaction_trigger=2, l0_stall_trigger=5, tiered_max_runs=4,
        inline_delta_bytes=0,  # every delta an SST: compaction is the subject here
    )
    return base.replace(**changes)


class Model:
    """Key -> (value, expire_at_ms or None), with random operations applied to DB and model."""

    def __init__(self, rng: random.Random, clock: silt.ManualClock, keys: int = 300) -> None:
        self.rng = rng
        self.clock = clock
        self.keys = keys
        self.data: dict[bytes, tuple[bytes, int | None]] = {}

    def key(self) -> bytes:
        return b"key-%05d" % self.rng.randrange(self.keys)

    def step(self, db: silt.DB, n: int, ttl_share: float = 0.2, delete_share: float = 0.2) -> None:
        for _ in range(n):
            k = self.key()
            roll = self.rng.random()
            if roll < delete_share:
                db.delete(k)
                self.data.pop(k, None)
            elif roll < delete_share + ttl_share:
                v = b"t%d" % self.rng.randrange(1 << 30)
                ttl = self.rng.choice([0.5, 2, 30])
                db.put(k, v, ttl=ttl)
                self.data[k] = (v, self.clock.now_ms() + int(ttl * 1000))
            else:
                v = b"v%d-" % self.rng.randrange(1 << 30) * self.rng.randrange(1, 4)
                db.put(k, v)
                self.data[k] = (v, None)

    def live(self) -> dict[bytes, bytes]:
        now = self.clock.now_ms()
        return {k: v for k, (v, exp) in self.data.items() if exp is None or now < exp}


def check(db: silt.DB, model: Model) -> None:
    expected = model.live()
    assert dict(db.scan()) == expected
    sample = model.rng.sample([*sorted(model.data), b"absent"], min(20, len(model.data) + 1))
    assert db.multi_get(sample) == [expected.get(k) for k in sample]


def entries(m: Manifest | None) -> tuple[int, int]:
    ssts = list(m.all_ssts()) if m is not None else []
    return sum(s.entries for s in ssts), sum(s.tombstones for s in ssts)


@pytest.mark.parametrize("policy", ["leveled", "tiered", "ttl"])
def test_policy_end_to_end(url: str, policy: str) -> None:
    """Random overwrites, deletes and TTL puts; L0 bounded; data == model; tombstones go."""
    clock = silt.ManualClock(T0)
    rng = random.Random(f"e2e-{policy}")
    settings = settings_small(compaction=policy)
    model = Model(rng, clock)
    with silt.open(url, settings=settings, clock=clock) as db:
        for _ in range(60):
            model.step(db, rng.randrange(20, 120))
            db.commit()
            clock.advance(rng.randrange(0, 700))
            l0 = len(db.manifest.l0)  # type: ignore[union-attr]
            assert l0 <= settings.l0_stall_trigger + 3, f"L0 grew to {l0}"
            check(db, model)
        stats = db.stats()
        assert stats["compactions_adopted"] > 0
        assert stats["write_amplification"] > 1
        # Delete everything and let every entry expire: compaction into the bottom level must
        # shed the tombstones and expired entries, so entries shrink.
        for k in list(model.data):
            db.delete(k)
        model.data.clear()
        db.commit()
        peak = entries(db.manifest)[0]
        clock.advance(60_000)
        for _ in range(300):  # victims are chosen by random id bits: allow unlucky orders
            for i in range(7):  # a little new data keeps L0 moving
                db.put(b"filler-%03d" % i, b"x" * 50)
            db.flush()
            db.commit()
            if entries(db.manifest)[0] <= 7 * 3:
                break
            db.wait_for_compaction()  # so that each commit adopts one
        left = entries(db.manifest)[0]
        assert left < peak / 4, (left, peak)
        assert dict(db.scan()) == {b"filler-%03d" % i: b"x" * 50 for i in range(7)}
    with silt.open(url, settings=settings, clock=clock) as db:
        assert dict(db.scan()) == {b"filler-%03d" % i: b"x" * 50 for i in range(7)}


def test_ttl_policy_drops_expired_ssts_without_rewriting(url: str) -> None:
    clock = silt.ManualClock(T0)
    settings = settings_small(compaction="ttl", compaction_mode="external",
                              compaction_poll_seconds=0)
    with silt.open(url, settings=settings, clock=clock) as db:
        for batch in range(4):  # disjoint key ranges, each its own SSTs
            for i in range(50):
                db.put(b"b%d-%03d" % (batch, i), b"v" * 40, ttl=10 * (batch + 1))
            db.flush()
        db.commit()
        store = db.store
        clock.advance(25_000)  # batches 0 and 1 have expired
        m = db.manifest
        task = make_policy("ttl", settings).pick(m, clock.now_ms())  # type: ignore[union-attr, arg-type]
        assert task is not None and task.mode == "drop"
        rec = run_compaction(store, m, task, settings, clock)  # type: ignore[arg-type]
        assert rec.outputs == ()
        before = {s.id for s in m.all_ssts()}  # type: ignore[union-attr]
        db.commit()
        after = {s.id for s in db.manifest.all_ssts()}  # type: ignore[union-attr]
        assert after == before - set(task.inputs) and after
        assert db.stats()["compactions_adopted"] == 1
        assert dict(db.scan()) == {b"b%d-%03d" % (b, i): b"v" * 40 for b in (2, 3)
                                   for i in range(50)}


def test_records_from_older_versions_keep_every_value(url: str) -> None:
    """Hand-run compactions picked from old versions, adopted (or refused) many commits later."""
    clock = silt.ManualClock(T0)
    for policy in ("leveled", "tiered", "ttl"):
        rng = random.Random(f"late-{policy}")
        settings = settings_small(compaction=policy, compaction_mode="external",
                                  compaction_poll_seconds=0)
        model = Model(rng, clock, keys=150)
        pick = make_policy(policy, settings)
        root = f"{url}/{policy}" if url.startswith("memory") else url + "-" + policy
        with silt.open(root, settings=settings, clock=clock) as db:
            adopted = refused = 0
            for _ in range(40):
                model.step(db, rng.randrange(10, 80))
                db.commit()
                clock.advance(rng.randrange(0, 900))
                for _ in range(rng.randrange(0, 3)):
                    m = db.manifest
                    task = pick.pick(m, clock.now_ms())  # type: ignore[union-attr, arg-type]
                    if task is not None:
                        run_compaction(db.store, m, task, settings, clock)  # type: ignore[arg-type]
                check(db, model)
                s = db.stats()
                adopted, refused = s.get("compactions_adopted", 0), s.get("compactions_refused", 0)
            assert adopted > 0 and refused > 0
        with silt.open(root, settings=settings, clock=clock) as db:
            check(db, model)


# --- a third-party policy through a real entry point --------------------------------------------


@pytest.fixture
def policy_plugin(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch):
    """examples/policy-plugin made importable as an installed distribution would be: its src
    folder on sys.path and a ``.dist-info`` whose entry_points.txt comes from its pyproject."""
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    site = tmp_path / "site"
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    eps = project["entry-points"]["silt"]
    (info / "entry_points.txt").write_text(
        "[silt]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
    )
    monkeypatch.syspath_prepend(str(PLUGIN / "src"))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SILT_DISABLE_PLUGIN_AUTOLOAD", "0")
    import importlib

    importlib.invalidate_caches()
    reset_registry()
    yield project
    sys.modules.pop("silt_policy_example", None)
    reset_registry()


def test_third_party_policy_from_an_entry_point(policy_plugin, url: str) -> None:
    registry = build_registry()
    assert "everything-into-one-run" in registry.compaction_policies
    info = registry.plugins["example_policy"]
    assert (info.distribution, info.provides) == (
        "silt-policy-example", ["compaction_policy everything-into-one-run"])
    assert "everything-into-one-run" not in build_registry(autoload=False).compaction_policies

    clock = silt.ManualClock(T0)
    rng = random.Random("plugin")
    model = Model(rng, clock)
    settings = settings_small(compaction="everything-into-one-run")
    with silt.open(url, settings=settings, clock=clock) as db:
        assert type(db._compaction.policy).__module__ == "silt_policy_example"
        for _ in range(30):
            model.step(db, rng.randrange(20, 100))
            db.commit()
            clock.advance(300)
            check(db, model)
            assert len([r for r in db.manifest.levels if r]) <= 1  # type: ignore[union-attr]
        assert db.stats()["compactions_adopted"] > 0


# --- external mode: `silt compact` as a separate process ----------------------------------------


def silt_process(*argv: str, **kwargs: object) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CORE_SRC), *filter(None, [env.get("PYTHONPATH")])])
    env["SILT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.Popen([sys.executable, "-m", "silt", *argv], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]


SET_ARGS = [
    "--set", "target_sst_bytes=3000", "--set", "level1_bytes=6000", "--set", "level_size_ratio=3",
    "--set", "l0_compaction_trigger=2", "--set", "block_bytes=256",
]


def test_silt_compact_process_beside_an_external_writer(file_url: str) -> None:
    clock = silt.ManualClock(int(time.time() * 1000))  # the compactor uses the wall clock
    rng = random.Random("external")
    settings = settings_small(compaction_mode="external", compaction_poll_seconds=0)
    # No TTL puts here: the compactor drops expired entries by its own (wall) clock, while the
    # writer's manual clock stands still.
    model = Model(rng, clock, keys=200)
    with silt.open(file_url, settings=settings, clock=clock) as db:
        model.step(db, 100, ttl_share=0)
        db.commit()
        proc = silt_process("compact", file_url, "--loop", "--interval", "0.05", "--json",
                            *SET_ARGS)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                model.step(db, rng.randrange(20, 80), ttl_share=0)
                db.commit()
                check(db, model)
                if db.stats().get("compactions_adopted", 0) >= 5 and db.version >= 30:  # type: ignore[operator]
                    break
                time.sleep(0.05)
        finally:
            proc.terminate()
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        passes = [json.loads(line) for line in out.splitlines()]
        assert any(p["status"] == "compacted" for p in passes)
        assert db.stats()["compactions_adopted"] >= 5
        writer = db.committer.writer_id
    # The compactor never wrote a manifest: every version is the writer's.
    store = silt.open_store(file_url)
    try:
        for v in silt._list_versions(store):
            assert silt.read_manifest(store, v).writer_id == writer
    finally:
        store.close()
    with silt.open(file_url, settings=settings, clock=clock) as db:
        check(db, model)


def test_silt_compact_once_and_a_stale_record_is_refused_and_deleted(file_url: str) -> None:
    clock = silt.ManualClock(int(time.time() * 1000))
    settings = settings_small(compaction_mode="external", compaction_poll_seconds=0)
    rng = random.Random("stale")
    model = Model(rng, clock, keys=200)
    with silt.open(file_url, settings=settings, clock=clock) as db:
        for _ in range(4):
            model.step(db, 60, ttl_share=0)
            db.commit()
        # The same task twice (as two compactors would): the second record is stale once the
        # first is adopted.
        m = db.manifest
        task = make_policy("leveled", settings).pick(m, clock.now_ms())  # type: ignore[union-attr, arg-type]
        assert task is not None
        run_compaction(db.store, m, task, settings, clock)  # type: ignore[arg-type]
        proc = silt_process("compact", file_url, *SET_ARGS)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        # The CLI saw the pending record with the same inputs and waited for the writer.
        assert "waiting for the writer to adopt" in out
        run_compaction(db.store, m, task, settings, clock)  # type: ignore[arg-type]
        assert len(list(db.store.list(paths.COMPACTION_PREFIX))) == 2
        db.commit()
        stats = db.stats()
        assert (stats["compactions_adopted"], stats["compactions_refused"]) == (1, 1)
        assert list(db.store.list(paths.COMPACTION_PREFIX)) == []  # both resolved and deleted
        check(db, model)
        # Now the CLI finds fresh work (or none) and writes its record; the writer adopts it.
        for _ in range(3):
            model.step(db, 60, ttl_share=0)
            db.commit()
        proc = silt_process("compact", file_url, "--json", *SET_ARGS)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert json.loads(out)["status"] == "compacted"
        db.commit()
        assert db.stats()["compactions_adopted"] == 2
        check(db, model)


def test_inspect_shows_compaction_state(file_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from silt.cli import main

    clock = silt.ManualClock(T0)
    settings = settings_small(compaction_mode="external", compaction_poll_seconds=0)
    with silt.open(file_url, settings=settings, clock=clock) as db:
        for i in range(3):
            for j in range(100):
                db.put(b"k%03d" % j, b"v%d" % i)
            db.commit()
        m = db.manifest
        task = make_policy("leveled", settings).pick(m, clock.now_ms())  # type: ignore[union-attr, arg-type]
        rec = run_compaction(db.store, m, task, settings, clock)  # type: ignore[arg-type]
        db.checkpoint("nightly")
    assert main(["inspect", file_url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    c = out["compaction"]
    assert c["l0_ssts"] == len(m.l0) and c["read_amplification"] >= len(m.l0)  # type: ignore[union-attr]
    assert [r["id"] for r in c["pending_records"]] == [rec.id]
    assert out["checkpoints"] == {"nightly": 3} and out["gc_horizon"] == 0
    assert main(["inspect", file_url]) == 0
    text = capsys.readouterr().out
    assert "compaction: L0" in text and "pending compaction records: 1" in text
    assert rec.id in text and "checkpoints: nightly=3" in text and "gc horizon: -" in text


def test_inspect_of_a_root_with_several_dbs(capsys: pytest.CaptureFixture[str]) -> None:
    from silt.cli import main

    name = f"multi-{uuid.uuid4().hex}"
    try:
        for shard in ("kg-0-127", "kg-128-255"):
            with silt.open(f"memory://{name}/{shard}", settings=settings_small()) as db:
                for j in range(50):
                    db.put(b"k%03d" % j, b"v")
                db.commit()
                db.commit()
        assert main(["inspect", f"memory://{name}", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert [d["db"] for d in out["dbs"]] == ["kg-0-127", "kg-128-255"]
        assert all(d["version"] == 2 and d["versions"] == 2 for d in out["dbs"])
        assert main(["inspect", f"memory://{name}"]) == 0
        assert "2 DBs" in capsys.readouterr().out
    finally:
        MemoryStore.drop(name)


# --- damaged compaction outputs are never adopted -------------------------------------------------


def _flip(path: pathlib.Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["block", "tail", "footer", "truncate", "extend", "record",
                                    "missing"])
def test_an_external_writer_refuses_a_damaged_compaction_and_gc_loses_nothing(
    file_url: str, damage: str
) -> None:
    """A compaction whose output SST (or record) was damaged before adoption is refused: the
    inputs stay live, GC removes the damaged outputs, every read stays correct, and the task
    can be done again and adopted."""
    root = pathlib.Path(file_url.removeprefix("file://"))
    clock = silt.ManualClock(T0)
    settings = settings_small(compaction_mode="external", compaction_poll_seconds=0,
                              gc_grace_seconds=60)
    model = Model(random.Random(f"damaged-{damage}"), clock, keys=200)
    policy = make_policy("leveled", settings)
    with silt.open(file_url, settings=settings, clock=clock) as db:
        for _ in range(4):
            model.step(db, 60, ttl_share=0)
            db.commit()
        m = db.manifest
        task = policy.pick(m, clock.now_ms())  # type: ignore[union-attr, arg-type]
        assert task is not None
        rec = run_compaction(db.store, m, task, settings, clock)  # type: ignore[arg-type]
        out = max(rec.outputs, key=lambda s: s.size)
        sst_file = root / paths.sst_key(out.id)
        if damage == "block":
            _flip(sst_file, out.tail_offset // 2)  # inside a data block: the tail is intact
        elif damage == "tail":
            _flip(sst_file, out.tail_offset + 2)
        elif damage == "footer":
            _flip(sst_file, out.size - 30)
        elif damage == "truncate":
            sst_file.write_bytes(sst_file.read_bytes()[:-1])
        elif damage == "extend":
            sst_file.write_bytes(sst_file.read_bytes() + b"\0")
        elif damage == "record":
            _flip(root / paths.compaction_key(rec.id), 40)
        else:
            sst_file.unlink()
        db.commit()  # sees the record, checks it, refuses it
        stats = db.stats()
        assert stats.get("compactions_adopted", 0) == 0
        assert stats["compactions_damaged"] == 1
        assert set(task.inputs) <= {s.id for s in db.manifest.all_ssts()}  # type: ignore[union-attr]
        check(db, model)
        # Past the grace period, GC removes the refused outputs (and every old version).
        clock.advance(120_000)
        model.step(db, 30, ttl_share=0)
        db.commit()
        report = db.gc(retain_versions=1)
        gone = {paths.sst_key(o.id) for o in rec.outputs if o is not out or damage != "missing"}
        assert gone <= set(report.deleted_ssts)
        assert not list(db.store.list(paths.COMPACTION_PREFIX))
        check(db, model)
        # The task can be done again, and a sound result is adopted.
        task = policy.pick(db.manifest, clock.now_ms())  # type: ignore[union-attr, arg-type]
        assert task is not None
        run_compaction(db.store, db.manifest, task, settings, clock)  # type: ignore[arg-type]
        db.commit()
        assert db.stats()["compactions_adopted"] == 1
        clock.advance(120_000)
        db.commit()
        db.gc(retain_versions=1)
    with silt.open(file_url, settings=settings, clock=clock) as db:
        check(db, model)


def test_check_outputs_reads_the_tail_or_every_block(url: str) -> None:
    """The check a writer runs before adopting: the tail, size and properties always; every
    data block when asked (external records)."""
    from silt.compaction.driver import check_outputs

    clock = silt.ManualClock(T0)
    settings = settings_small(compaction="none")
    with silt.open(url, settings=settings, clock=clock) as db:
        for i in range(3):
            for j in range(100):
                db.put(b"k%03d" % j, b"v%d" % i)
            db.commit()
        m = db.manifest
        task = CompactionTask(inputs=tuple(s.id for s in m.l0), mode="into_level",  # type: ignore[union-attr]
                              target_level=1)
        rec = run_compaction(db.store, m, task, settings, clock)  # type: ignore[arg-type]
        store = db.store
        assert check_outputs(store, rec, blocks=True) is None
        out = rec.outputs[0]
        key = paths.sst_key(out.id)
        data = bytearray(store.get(key))
        # Objects are immutable: build the damaged twins under new names, same record fields.
        for offset, blocks, caught in [(10, False, False), (10, True, True),
                                       (out.tail_offset + 1, False, True)]:
            damaged = bytearray(data)
            damaged[offset] ^= 1
            twin = SstInfo(**{**out.__dict__, "id": paths.new_id(T0 + offset + blocks)})
            store.put_if_absent(paths.sst_key(twin.id), bytes(damaged))
            bad = CompactionRecord(id=rec.id, base_version=rec.base_version,
                                   created_ms=rec.created_ms, task=rec.task, outputs=(twin,))
            why = check_outputs(store, bad, blocks=blocks)
            assert (why is not None) == caught, (offset, blocks)
            if caught:
                assert paths.sst_key(twin.id) in why  # type: ignore[operator]
        wrong = SstInfo(**{**out.__dict__, "entries": out.entries + 1})
        why = check_outputs(store, CompactionRecord(
            id=rec.id, base_version=1, created_ms=T0, task=rec.task, outputs=(wrong,)),
            blocks=False)
        assert why is not None and "entries" in why
        gone = SstInfo(**{**out.__dict__, "id": paths.new_id(T0 - 1)})
        why = check_outputs(store, CompactionRecord(
            id=rec.id, base_version=1, created_ms=T0, task=rec.task, outputs=(gone,)),
            blocks=False)
        assert why is not None and "does not exist" in why


def test_background_compaction_runs_in_the_subprocess_on_file_roots(file_url: str) -> None:
    """By default a file:// DB with the system clock merges in the compaction subprocess (so
    the merge never holds the writer's GIL), and what it adopts keeps every value; the
    worker's requests are counted as compaction's."""
    rng = random.Random("subprocess")
    settings = settings_small()
    model: dict[bytes, bytes | None] = {}
    with silt.open(file_url, settings=settings) as db:
        for round_ in range(12):
            for _ in range(80):
                k = b"k%04d" % rng.randrange(400)
                if rng.random() < 0.2:
                    db.delete(k)
                    model[k] = None
                else:
                    v = b"v%d-%d" % (round_, rng.randrange(1 << 30))
                    db.put(k, v)
                    model[k] = v
            db.commit()
            db.wait_for_compaction()
        db.commit()
        stats = db.stats()
        assert stats["compactions_in_subprocess"] > 0
        assert stats["compactions_adopted"] > 0
        assert stats["requests"]["compaction"]["PUT"]["count"] > 0
        # the worker yields the CPU to the writer: a lower priority (higher nice value)
        from silt.compaction import worker

        proc = worker._proc
        assert proc is not None and proc.poll() is None
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == min(19, ours + worker.NICE)
        live = {k: v for k, v in model.items() if v is not None}
        assert dict(db.scan()) == live
        keys = sorted(model)
        assert db.multi_get(keys) == [model[k] for k in keys]
    with silt.open(file_url, settings=settings) as db:
        assert dict(db.scan()) == live


def test_a_manual_clock_keeps_compaction_in_the_writers_thread(file_url: str) -> None:
    """Only this process knows a ManualClock's time: its DB compacts in the driver's thread."""
    clock = silt.ManualClock(T0)
    settings = settings_small()
    with silt.open(file_url, settings=settings, clock=clock) as db:
        for round_ in range(8):
            for i in range(60):
                db.put(b"k%04d" % i, b"v%d" % round_)
            db.commit()
            db.wait_for_compaction()
        db.commit()
        stats = db.stats()
        assert stats["compactions_adopted"] > 0
        assert stats.get("compactions_in_subprocess", 0) == 0
        assert dict(db.scan()) == {b"k%04d" % i: b"v7" for i in range(60)}
