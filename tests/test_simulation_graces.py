"""The deterministic simulation of tests/test_simulation.py with writers of **mixed GC graces**.

Each writer (the writer, each replacement after a crash or conflict, and the zombie) opens with
its own ``gc_grace_seconds``, drawn from 0, 2, 10 and 20 s, and every GC pass asks for one of
those graces too. Beside the invariants the simulation always checks (every version reads back
exactly as its commit's model, no version changes meaning or forks, the newest commit stays),
each world asserts:

* **GC respects every writer that may still commit**: a GC pass that ran (was not refused) used
  a grace at least that of every open writer holding uploaded, uncommitted SSTs, and a refused
  pass changed nothing. (Before writers announced their grace, GC read only the newest
  manifest's: a writer that committed it with grace 0 let GC with grace 0 delete another
  writer's flushed SSTs.)
* **A withdrawn commit's retry** (made at once, as a caller would) is never withdrawn again: it
  commits the writer's data (then checked like every commit), or fails saying plainly that the
  writes are lost, without creating any manifest (no version number burned), and the writer is
  replaced by a fresh open.

``SILT_SIM_SEEDS`` and ``SILT_SIM_FIRST`` set the seeds here too (a quarter of them run, from
the same first one as tests/test_simulation.py); ``SILT_SIM_SEED=N`` replays seed N with its
trace.
"""

from __future__ import annotations

import random

import pytest
import silt
from silt import paths
from silt.errors import InvalidArgumentError, SiltError, StoreError, WithdrawnError
from silt.gc import collect_garbage
from test_simulation import FIRST, ONE, SEEDS, SimFailure, World, Writer, run_world, seeded_ids
from test_simulation import simulated_time_and_ids as simulated_time_and_ids

#: The graces (seconds) writers and GC passes draw from.
GRACES = (0.0, 2.0, 10.0, 20.0)


class Killed(BaseException):
    """A GC process killed mid-pass (not an error any code catches)."""


class MixedWorld(World):
    """A :class:`~test_simulation.World` whose writers and GC passes use mixed graces."""

    STEPS = (*((n, w) for n, w in World.STEPS if n != "gc_short"), ("gc", 4), ("gc_killed", 3))

    def __init__(self, seed: int, trace, advance: bool = False) -> None:
        # The graces come from a random source of their own, so the schedule's stays as drawn.
        self.grng = random.Random(f"graces-{seed}")
        super().__init__(seed, trace, advance)
        self.retrying = False
        self.stats = {"gc_ran": 0, "gc_refused": 0, "gc_killed": 0, "withdrawn": 0,
                      "retried": 0, "lost": 0, "retry_landed": 0}

    def writer_settings(self, actor: str) -> silt.Settings:
        grace = self.grng.choice(GRACES)
        self.trace(f"  {actor} opens with a grace of {grace:g}s")
        return self.settings.replace(gc_grace_seconds=grace)

    def pending_uploads(self, w: Writer) -> list[str]:
        """The SST objects ``w`` uploaded and has not committed."""
        return [paths.sst_key(p.info.id) for p in w.db._view.parts
                if p.info is not None and not p.info.inline]

    def step_gc(self) -> None:
        grace = self.grng.choice(GRACES)
        before = sorted(i.key for i in self.base.list(""))
        holders = [(w.db.settings.gc_grace_seconds, self.pending_uploads(w))
                   for w in (self.writer, self.zombie) if w is not None]
        try:
            r = collect_garbage(self.stores["gc"], retain_versions=self.settings.retain_versions,
                                grace_seconds=grace, clock=self.clock)
        except Killed as exc:
            # killed after its grace was accepted (while deleting, or before writing .done):
            # its pass marker stays without .done (a crashed pass)
            self.stats["gc_killed"] += 1
            self.trace(f"  gc with grace {grace:g}s: {exc}")
            r = None
        except InvalidArgumentError as exc:
            self.stats["gc_refused"] += 1
            self.trace(f"  gc with grace {grace:g}s refused: {str(exc)[:60]}")
            if sorted(i.key for i in self.base.list("")) != before:
                raise SimFailure("a refused gc changed the store") from exc
            return
        except SiltError as exc:
            self.trace(f"  gc failed: {exc!r}"[:120])
            return
        self.stats["gc_ran"] += 1
        if r is not None:
            self.trace(f"  gc with grace {grace:g}s kept {r.kept_versions.get('')} deleted "
                       f"{len(r.deleted_ssts)} SSTs")
        for writer_grace, pending in holders:
            if pending and writer_grace > grace:
                raise SimFailure(f"gc ran with a grace of {grace:g}s beside a writer whose grace "
                                 f"is {writer_grace:g}s and who holds uncommitted SSTs")

    def step_gc_killed(self) -> None:
        """A GC pass killed while it deletes, or before it writes ``.done`` (the next pass that
        gets that far, if this one is refused first)."""
        where = self.grng.choice(["delete_many", "put_if_absent"])

        def kill(op: str, key: str) -> None:
            raise Killed(f"killed at {op} {key}")

        self.stores["gc"].on_call(where, kill, times=1, predicate=None if where == "delete_many"
                                  else lambda k: k.endswith(paths.PASS_DONE_SUFFIX))
        self.step_gc()

    def step_stall(self) -> None:
        """As the simulation's stall (the writer stalls past the grace period while GC runs),
        and half the time that GC pass is killed once it has begun deleting: its pass marker
        stays without ``.done``, and the stalled commit is withdrawn with its SSTs all there."""
        if self.grng.random() < 0.5:
            def kill(op: str, key: str) -> None:
                raise Killed(f"killed at {op} {key}")

            self.stores["gc"].on_call("delete_many", kill, times=1)
        super().step_stall()

    def manifests(self) -> list[str]:
        return sorted(i.key for i in self.base.list(paths.MANIFEST_PREFIX))

    def withdrawn(self, actor: str, w: Writer, exc: WithdrawnError, lineage: int | None) -> bool:
        super().failed(actor, w, exc, lineage)
        if self.retrying:
            raise SimFailure(f"the retry of a withdrawn commit was withdrawn again: {exc}")
        self.stats["withdrawn"] += 1
        if w.db.committer.fenced is not None:
            return True  # its base lost an SST: the next commit says it is fenced
        self.retrying = True
        self.before_retry = self.manifests()
        try:
            self.trace(f"  {actor} commits again")
            self.stats["retried"] += 1
            landed = len(self.committed)
            ok = self.commit(actor, w)
            self.stats["retry_landed"] += len(self.committed) > landed
            return ok
        finally:
            self.retrying = False

    def failed(self, actor: str, w: Writer, exc: StoreError, lineage: int | None) -> bool:
        if isinstance(exc, WithdrawnError) or "not committed are lost" not in str(exc):
            return super().failed(actor, w, exc, lineage)
        self.trace(f"  {actor}: writes lost: {str(exc)[:80]}")
        if "since version" not in str(exc) or "reopen" not in str(exc):
            raise SimFailure(f"a loss that does not say what is lost and what to do: {exc}")
        if self.retrying and self.manifests() != self.before_retry:
            raise SimFailure("a retry whose writes were lost created a manifest")
        self.stats["lost"] += 1
        return False  # the writer is replaced: its uncommitted writes are gone


def simulate_mixed(seed: int, steps: int = 40, verbose: bool = False) -> MixedWorld:
    return run_world(  # type: ignore[return-value]
        lambda trace: MixedWorld(seed, trace), seed, steps, verbose, " (mixed graces)",
        f"SILT_SIM_SEED={seed} pytest tests/test_simulation_graces.py -s")


@pytest.mark.skipif(ONE is not None, reason="SILT_SIM_SEED replays one seed")
def test_simulation_seeds_with_mixed_graces(monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = max(1, SEEDS // 4)
    totals: dict[str, int] = {}
    for seed in range(FIRST, FIRST + seeds):
        seeded_ids(monkeypatch, seed)
        world = simulate_mixed(seed)
        for k, n in world.stats.items():
            totals[k] = totals.get(k, 0) + n
    print(f"\n{seeds} seeds with mixed graces: {totals}")
    # the worlds reach what they are about: passes run and refused, withdrawn commits retried
    assert totals["gc_ran"] and totals["gc_refused"] and totals["gc_killed"], totals
    assert totals["retry_landed"] and totals["lost"], totals


def test_simulation_replay_with_mixed_graces(monkeypatch: pytest.MonkeyPatch) -> None:
    seed = int(ONE) if ONE is not None else 3
    seeded_ids(monkeypatch, seed)
    world = simulate_mixed(seed, verbose=True)
    assert world.committed, "the replayed seed committed nothing"
