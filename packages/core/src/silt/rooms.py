"""The rooms of one open DB, wired once: what the :class:`silt.DB` facade works through.

:func:`furnish` builds them in the order they depend on each other (as Pebble's ``Open`` wires
its ``DB``), :meth:`Rooms.close` releases them in the order that leaves no thread touching the
store. Each room owns its state and never calls back into the DB:

* :mod:`silt.state` — the handle's mutable state (:class:`~silt.state.TreeState`: base
  manifest, read view, range-delete counter, references), changed only through its methods;
* :mod:`silt.view` — the immutable :class:`~silt.view.ReadView` (active memtable, frozen parts,
  L0, levels) with ``get``, ``multi_get`` and ``scan``, and the open SST readers
  (:class:`~silt.view.Readers`); :mod:`silt.fetch` — the block reads of planned reads,
  coalesced by the tier's rule (:class:`~silt.fetch.BlockFetcher`);
* :mod:`silt.budget` — the memtable's allowance (:class:`~silt.budget.MemtableAllowance`) and
  the memory budget whose block cache the DB shares; :mod:`silt.flush` — freezing the memtable
  and uploading SSTs; :mod:`silt.refill` — refilling the cache after adopted compactions;
* :mod:`silt.commit` — a commit's steps (:class:`~silt.commit.CommitSteps`) and the commit
  protocol (:class:`~silt.commit.Committer`, its checks after the PUT in :mod:`silt.postcheck`);
  :mod:`silt.inline` — freezing a commit's delta inline or folded;
* :mod:`silt.reopen` — following newer versions (:class:`~silt.reopen.Following`);
* :mod:`silt.siblings` — references to sibling DBs' SSTs; :mod:`silt.compaction` — compaction,
  :mod:`silt.compaction.early` — finished compactions serving reads before a commit, and
  :mod:`silt.compaction.leftovers` — those an earlier handle left uncommitted, for a new one.

Not thread-safe to build or close; the DB's writer lock (``lock``) serializes what uses them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

from .budget import MemoryBudget, MemtableAllowance, process_budget
from .cache import BlockCache
from .clock import Clock
from .commit import CommitSteps, Committer
from .compaction.driver import CompactionDriver
from .compaction.early import EarlyInstall
from .compaction.leftovers import LeftoverFinder
from .fetch import BlockFetcher
from .flush import Flusher
from .gather import gather_on
from .inline import DeltaFreezer
from .manifest import Manifest
from .metrics import MeteredStore, Metrics
from .refill import Refiller
from .reopen import Following
from .settings import Settings
from .siblings import SiblingStores
from .state import TreeState
from .view import Readers


@dataclass(eq=False)
class Rooms:
    """The components of one open DB (module docstring)."""

    store: MeteredStore
    metrics: Metrics
    #: The memory budget the memtables are charged to and whose cache the DB shares, or
    #: ``None`` with a private cache (``Settings.block_cache_bytes``): see silt.budget.
    budget: MemoryBudget | None
    cache: BlockCache
    allowance: MemtableAllowance
    readers: Readers
    fetch: BlockFetcher
    refiller: Refiller
    siblings: SiblingStores
    flusher: Flusher
    committer: Committer
    state: TreeState
    deltas: DeltaFreezer
    compaction: CompactionDriver
    early: EarlyInstall
    steps: CommitSteps
    following: Following
    #: Looks for an earlier handle's finished compactions once, at open (None: not here).
    leftovers: LeftoverFinder | None = None

    def stats(self) -> dict[str, Any]:
        """``DB.stats``: the state's shape, amplification, compaction, cache and requests."""
        m = self.metrics.snapshot()
        flushed = m.get("flush_bytes", 0)
        written = flushed + m.get("compaction_output_bytes", 0)
        manifest = self.state.manifest
        return {
            "version": manifest.version if manifest is not None else None,
            **self.state.shape(),
            "write_amplification": (written / flushed) if flushed else 0.0,
            "compaction_running": self.compaction.running,
            "cache_bytes": self.cache.used,
            "cache_hits": self.cache.hits,
            "cache_misses": self.cache.misses,
            "store": self.store.stats(),
            **m,
        }

    def close(self, owns_store: bool) -> None:
        """Stop the threads (waiting for uploads in progress), release the memory the DB holds
        in a shared budget (the shared cache keeps its blocks until evicted: a reopen finds
        them) or clear a private cache, and close the stores (the DB's own if it owns it)."""
        if self.leftovers is not None:
            self.leftovers.close()
        self.early.close()
        self.refiller.close()
        self.flusher.close()
        self.fetch.close()
        self.compaction.close()
        if self.budget is None:
            self.cache.clear()
        else:
            self.allowance.give_back()
            self.readers.unpin_all()
        self.state.clear()
        self.siblings.close()
        if owns_store:
            self.store.close()


def furnish(store: MeteredStore, url: str, pub: str, settings: Settings, clock: Clock,
            manifest: Manifest | None, metrics: Metrics, budget: MemoryBudget | None,
            lock: threading.RLock) -> Rooms:
    """The rooms of a DB at ``url`` (``pub``: as messages show it) over ``store`` (counted by
    ``metrics``), based on ``manifest``; ``budget`` (default: the process's) unless
    ``Settings.block_cache_bytes`` asks for a private cache."""
    if settings.block_cache_bytes is not None:
        budget, cache = None, BlockCache(settings.block_cache_bytes)
    else:
        budget = budget if budget is not None else process_budget()
        cache = budget.cache
    allowance = MemtableAllowance(budget, settings.memtable_bytes)
    readers = Readers(budget)
    fetch = BlockFetcher(settings.read_parallelism)
    refiller = Refiller(cache, settings.read_parallelism, metrics)
    siblings = SiblingStores(url, store, wrap=lambda raw: MeteredStore(raw, metrics))
    flusher = Flusher(store, settings, clock, cache, readers)
    gather = partial(gather_on, store, metrics, fetch)
    committer = Committer(store, pub, clock, int(settings.gc_grace_seconds * 1000), siblings,
                          gather)
    state = TreeState(lock, cache, readers, siblings, flusher, allowance, committer.based_on)
    deltas = DeltaFreezer(settings, clock, metrics, siblings.add_inline, state.reader,
                          flusher.upload, allowance.give_back_memtable)
    state.install(manifest)
    compaction = CompactionDriver(store, settings, clock, metrics, siblings=siblings,
                                  announce=flusher.announce, reach=committer.gc_reach)
    refill = settings.refill_after_compaction and not store.local
    early = EarlyInstall(state, compaction, committer, clock, metrics,
                         refiller if refill else None)
    compaction.finished = early.finished_soon
    steps = CommitSteps(committer, flusher, deltas, compaction, siblings, metrics, url,
                        refiller if refill else None, early)
    following = Following(state, pub, store, metrics, committer, gather, flusher.announce)
    leftovers = None
    if (manifest is not None and store.local and compaction.in_process
            and compaction.policy is not None):
        leftovers = LeftoverFinder(store, state, compaction, early, clock, metrics,
                                   manifest.version)
    rooms = Rooms(store, metrics, budget, cache, allowance, readers, fetch, refiller, siblings,
                  flusher, committer, state, deltas, compaction, early, steps, following,
                  leftovers)
    if leftovers is not None:
        leftovers.start()
    return rooms
