"""The mutable state of one open DB, changed in one place.

A :class:`TreeState` holds what an open :class:`silt.DB` changes as it writes, commits and
follows versions: the **base** manifest, the **read view** (:class:`~silt.view.ReadView`: active
memtable, frozen parts, L0, levels, range tombstones), the **range-delete counter** and the
**references** to siblings' SSTs not committed yet. Every change goes through a method here:
:meth:`~TreeState.install` (a committed manifest becomes the base), :meth:`~TreeState.move_to`
(another committed version, for :mod:`silt.reopen`), :meth:`~TreeState.apply` and
:meth:`~TreeState.put_pairs` (writes), :meth:`~TreeState.freeze` (the memtable to the
uploader), :meth:`~TreeState.freeze_delta` (a commit's), :meth:`~TreeState.delete_range`,
:meth:`~TreeState.reference`, :meth:`~TreeState.references_landed` and
:meth:`~TreeState.show` (finished compactions serve reads before a commit publishes them,
:mod:`silt.compaction.early`). As mini-lsm's
``LsmStorageState``, the view is replaced whole, never edited but for its active memtable, so a
read that takes ``state.view`` once sees one state throughout.

Thread safety: the DB's writer lock (``lock``) serializes every method; reading ``view`` and
``manifest`` needs no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import paths
from .budget import MemtableAllowance, memtable_charge
from .cache import BlockCache
from .errors import InvalidArgumentError
from .manifest import Manifest
from .memtable import Memtable
from .metrics import Metrics
from .rangedel import MAX_FRAGMENTS, RangeTombstones
from .siblings import Base, Reference, SiblingStores, take_reference
from .sst.builder import SstInfo
from .sst.reader import SstReader
from .view import Level, Readers, ReadView

if TYPE_CHECKING:
    from .flush import Flusher
    from .inline import DeltaFreezer


class TreeState:
    """The base manifest, read view, range-delete counter and uncommitted references of one DB
    (module docstring), and the rooms that keep them consistent: the open SST readers, the
    siblings' stores, the uploader and the memtable's allowance."""

    def __init__(self, lock: threading.RLock, cache: BlockCache, readers: Readers,
                 siblings: SiblingStores, flusher: Flusher, allowance: MemtableAllowance,
                 based_on: Callable[[Manifest | None], None]) -> None:
        self.lock = lock
        self._cache = cache
        self.readers = readers
        self._siblings = siblings
        self._flusher = flusher
        self._allowance = allowance
        #: Told each new base (the commit protocol's lineage follows it).
        self._based_on = based_on
        #: The committed version the DB is based on (``None``: a root with no versions).
        self.manifest: Manifest | None = None
        #: What reads consult; replaced whole (never edited) but for its active memtable.
        self.view = ReadView(Memtable())
        #: The range-delete counter (silt.rangedel): the newest range tombstone's number.
        self.seq = 0
        #: References made by :meth:`reference` and not committed yet, and the state they give.
        self.refs: list[Reference] = []
        self.ref_base: Base = ((), ())

    def reader(self, info: SstInfo) -> SstReader:
        """The open reader of the SST ``info`` (opened once, kept while a version lists it)."""
        return self.readers.open(info, lambda i: self._siblings.reader(i, self._cache))

    def new_reader(self, info: SstInfo) -> SstReader:
        """A reader of ``info`` made as :meth:`reader` makes it, not kept (any thread): for a
        tail to load before a view lists the SST; :meth:`keep_readers` keeps it then."""
        return self._siblings.reader(info, self._cache)

    def keep_readers(self, readers: list[SstReader]) -> None:
        """Keep readers :meth:`new_reader` made (their tails loaded), so that :meth:`reader`
        returns them, unless a reader of that SST is open already. Under the writer lock."""
        for r in readers:
            if r.info.id not in self.readers.by_id:  # type: ignore[union-attr]
                self.readers.add(r)

    # -- versions -----------------------------------------------------------------------------
    def install(self, manifest: Manifest | None) -> None:
        """Make ``manifest`` the base version: a new read view in which the parts it committed
        moved into L0 (parts still pending stay parts)."""
        self.manifest = manifest
        self._based_on(manifest)
        if manifest is None:
            return
        self.seq = max(self.seq, manifest.seq)
        self._siblings.add_inline(manifest.inline, paths.manifest_key(manifest.version))
        live_ids = {s.id for s in manifest.all_ssts()}
        view = self.view
        parts = tuple(p for p in view.parts if p.info is None or p.info.id not in live_ids)
        # Range deletes made after the manifest was built (after an uncertain commit that
        # landed) have greater numbers than its counter: they stay in force. Tombstones it
        # pruned were older than every part it does not hold.
        pending = [f for f in view.tombs.fragments if f[2] > manifest.seq]
        tombs = manifest.range_tombstones.union(RangeTombstones(pending))
        self.view = view.but(
            parts=parts,
            l0=tuple(self.reader(s) for s in manifest.l0),
            levels=tuple(Level([self.reader(s) for s in run]) for run in manifest.levels),
            tombs=tombs,
        )
        pending_ids = {p.info.id for p in parts if p.info is not None}
        self.readers.retain(live_ids | pending_ids)
        self._siblings.retain_inline(live_ids | pending_ids)

    def move_to(self, found: Manifest | None) -> None:
        """Base a settled state (no uncommitted writes) on another committed version ``found``:
        the old base's SSTs and range deletes go, readers of SSTs both share stay open."""
        self.seq = found.seq if found is not None else 0
        self.view = ReadView(self.view.mem)
        self.install(found)
        if found is None:
            self.readers.retain(set())

    def clear(self) -> None:
        """Drop the read view (a closed DB reads nothing)."""
        self.view = ReadView(Memtable())

    def show(self, tree: tuple[tuple[SstInfo, ...], tuple[tuple[SstInfo, ...], ...]] | None
             ) -> None:
        """Let reads consult the committed SSTs ``tree`` (L0, levels) in place of the base's:
        the base's tree with finished compactions applied that no commit published yet
        (:mod:`silt.compaction.early`, which says why that is safe); ``None``: the base's own.
        The memtable, parts and range tombstones stay; the view keeps the base's tree as
        ``committed``. Readers of the base's SSTs stay open."""
        view = self.view
        l0, levels = view.committed or (view.l0, view.levels)
        keep = {r.info.id for r in l0} | {r.info.id for lv in levels for r in lv.readers}
        if tree is None:
            new = view.but(l0=l0, levels=levels)
        else:
            new = view.but(l0=tuple(self.reader(s) for s in tree[0]),
                           levels=tuple(Level([self.reader(s) for s in run]) for run in tree[1]),
                           committed=(l0, levels))
            keep |= {s.id for s in tree[0]} | {s.id for run in tree[1] for s in run}
        if view.l0 == new.l0 and [lv.readers for lv in view.levels] == [
                lv.readers for lv in new.levels]:
            return
        self.view = new
        keep |= {p.info.id for p in view.parts if p.info is not None}
        self.readers.retain(keep)  # type: ignore[arg-type]

    def committed_view(self) -> ReadView:
        """The read view with the base's own committed SSTs, without what :meth:`show` added
        (what :meth:`silt.DB.committed_records` and :meth:`silt.DB.changed_keys` read)."""
        return self.view.committed_only()

    def shape(self) -> dict[str, Any]:
        """The memtable, parts, SSTs per level and read amplification, for ``DB.stats``."""
        view, manifest = self.view, self.manifest
        return {
            "memtable_bytes": view.mem.approx_bytes,
            "memtable_entries": len(view.mem),
            "pending_parts": len(view.parts),
            "l0_ssts": len(view.l0),
            "levels": [len(lv.readers) for lv in view.levels],
            "level_bytes": [sum(s.size for s in run) for run in manifest.levels]
            if manifest is not None else [],
            "read_amplification": view.read_amplification,
        }

    # -- writes -------------------------------------------------------------------------------
    def freeze_full(self, mem: Memtable) -> None:
        """The memtable ``mem`` reached its allowance's limit (a write without the lock)."""
        with self.lock:
            if self.view.mem is mem:
                self.grow_or_freeze()

    def grow_or_freeze(self) -> None:
        """The active memtable reached its allowance's limit: grow the reservation, or freeze it
        when the budget refuses (:meth:`MemtableAllowance.grow`)."""
        if not self._allowance.grow(self.view.mem):
            self.freeze()

    def freeze(self) -> None:
        """Hand the active memtable to the uploader."""
        self.view = self.frozen(self.view)

    def frozen(self, view: ReadView) -> ReadView:
        """``view`` with its memtable handed to the uploader; with a budget, the frozen
        memtable keeps its reservation (at least its size) until its upload is done."""
        size = memtable_charge(view.mem.approx_bytes, len(view.mem))
        frozen = self._flusher.freeze(view, self.seq)
        if frozen is not view:
            self._allowance.frozen(size, frozen.parts[-1].future)
        return frozen

    def apply(self, ops: list[tuple[Any, ...]], *, plain: bool) -> None:
        """Apply a write batch's checked ``ops`` in order (:func:`silt.arguments.check_batch`
        forms; ``plain``: every op a put or delete of valid bytes, as a WriteBatch holds them,
        applied without a call per op), then grow or freeze a full memtable."""
        if plain:
            self.view.mem.apply(ops)
        else:
            for op in ops:
                if len(op) == 3:
                    self.delete_range(op[0], op[1])
                else:
                    self.view.mem.put(*op)
        if self.view.mem.approx_bytes >= self._allowance.limit:
            self.grow_or_freeze()

    def put_pairs(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Set ``keys[i]`` to ``values[i]`` (checked) in order, freezing each memtable that
        fills up between items."""
        i, n = 0, len(keys)
        while i < n:
            mem = self.view.mem
            i = mem.put_pairs(keys, values, i, self._allowance.limit)
            if mem.approx_bytes >= self._allowance.limit:
                self.grow_or_freeze()

    def freeze_delta(self, deltas: DeltaFreezer, base_l0: tuple[SstInfo, ...]) -> None:
        """Freeze what a commit makes durable, inline, folded or uploaded
        (:meth:`silt.inline.DeltaFreezer.freeze_delta` over the base's L0 ``base_l0``)."""
        self.view = deltas.freeze_delta(self.view, base_l0, self.seq, self.frozen)

    def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete the checked range ``[start, end)``: point tombstones in the memtable, and a
        range tombstone when older data lies below it."""
        if start == end:
            return
        view = self.view
        view.mem.delete_range(start, end)
        if not (view.parts or view.l0 or view.levels):
            return  # nothing older to cover: the memtable's point tombstones were enough
        tombs = view.tombs.add(start, end, self.seq + 1)
        if len(tombs) > MAX_FRAGMENTS:
            raise InvalidArgumentError(
                f"{len(tombs)} range tombstones would exceed the limit of {MAX_FRAGMENTS} a "
                "manifest holds: commit and let compaction rewrite what they delete, or delete "
                "fewer, wider ranges"
            )
        self.seq += 1
        self.view = view.but(tombs=tombs)

    # -- references to siblings --------------------------------------------------------------
    def reference(self, url: str, pub: str, source_url: str, source: Manifest | None,
                  start: bytes | None, end: bytes | None, metrics: Metrics,
                  unresolved: bool) -> int:
        """Take keys ``[start, end)`` of the sibling version ``source`` by reference
        (:func:`silt.siblings.take_reference`) into a new DB's state; returns the number of SST
        entries referenced. Refuses a DB with state of its own (``pub`` names it), or with a
        commit whose outcome is not known yet (``unresolved``)."""
        view = self.view
        if self.manifest is not None or view.parts or len(view.mem) or unresolved:
            raise InvalidArgumentError(
                f"{pub!r} already has state (a committed version or writes): "
                "reference() starts a new DB; open a new root next to the source instead"
            )
        with metrics.purpose("read"):
            taken = take_reference(url, source_url, source, start, end, self.refs,
                                   self._siblings)
        if taken is None:
            return 0
        ref, base = taken
        self.refs.append(ref)
        self.ref_base = base
        # The sources' counters continue here, so later range deletes cover their SSTs.
        self.seq = max(self.seq, ref.seq)
        self.view = view.but(
            l0=tuple(self.reader(s) for s in base[0]),
            levels=tuple(Level([self.reader(s) for s in run]) for run in base[1]),
            tombs=view.tombs.union(ref.tombs),
        )
        return len(ref.l0) + sum(len(run) for run in ref.levels)

    def references_landed(self) -> None:
        """A commit made the references durable: nothing is pending any more."""
        self.refs = []
        self.ref_base = ((), ())
