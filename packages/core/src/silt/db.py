"""DB: one LSM tree under one root of an object store — the public facade.

``DB`` validates arguments (with :mod:`silt.arguments`), holds the writer lock, and delegates:
the handle's mutable state is a :class:`~silt.state.TreeState` (base manifest, read view,
range-delete counter, references); the work is done by rooms wired once by
:func:`silt.rooms.furnish` (flush, commit, compaction, caches), which own their state and never
call back into the DB.

Following a key: :meth:`DB.get` (the view's memtable) ->
:meth:`ReadView.get_below <silt.view.ReadView.get_below>` (parts, then
:func:`silt.sst.reader.get_levels`: L0, then one SST per level) -> the SST's bloom filter, index
and block (:mod:`silt.sst.reader`). Following a commit: :meth:`DB.commit` ->
:meth:`CommitSteps.commit <silt.commit.CommitSteps.commit>` (prepare, plan, freeze, publish
with :meth:`Committer.publish <silt.commit.Committer.publish>`, then install the manifest as
the state's new base: :meth:`TreeState.install <silt.state.TreeState.install>`).

Threading contract: one thread writes (put, delete, write, commit, flush) at a time; reads (get,
multi_get, scan) may run concurrently with it from other threads. Uploads and parallel block
fetches run in the DB's own thread pools. Durability: nothing is durable until ``commit`` returns;
``close`` without ``commit`` discards uncommitted writes (their uploaded SSTs are garbage).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from . import arguments as args
from .budget import MemoryBudget
from .cache import BlockCache
from .changes import changed_keys
from .clock import Clock
from .commit import Committer, check_version
from .cost import user_meta
from .errors import ClosedError
from .gc import GcReport, collect_for
from .manifest import Manifest
from .markers import GcMarkers
from .memtable import check_ops
from .metrics import MeteredStore, Metrics
from .pin import checkpoint
from .record import ENTRY_OVERHEAD, MISSING, visible
from .rooms import furnish
from .settings import Settings
from .sst.builder import SstInfo
from .sst.reader import SstReader, get_levels
from .store import ObjectStore
from .tierkit import public_url
from .view import ReadView
from .writebatch import WriteBatch


class DB:
    """An open silt database. Create it with :func:`silt.open`, not directly."""

    #: Whether writes are refused (``silt.open(url, read_only=True)``: :mod:`silt.readonly`).
    read_only = False

    def __init__(self, store: ObjectStore, *, url: str, settings: Settings, clock: Clock,
                 manifest: Manifest | None, owns_store: bool = True,
                 metrics: Metrics | None = None, budget: MemoryBudget | None = None,
                 listed: list[int] | None = None, markers: GcMarkers | None = None,
                 epoch: int | None = None,
                 tails: dict[str, tuple[bytes, int]] | None = None) -> None:
        #: The live versions opening listed (see :attr:`listed_at_open`).
        self._listed = listed
        #: Request counters; ``metrics`` carries on the counts of opening this DB.
        self._metrics = Metrics() if metrics is None else metrics
        self._store = MeteredStore(store, self._metrics)
        self._url = url
        #: The URL as messages and repr show it: no query (tier options may hold a secret).
        self._pub = public_url(url)
        self._settings = settings
        self._clock = clock
        self._owns_store = owns_store
        self._lock = threading.RLock()
        self._closed = False
        self._max_key = settings.max_key_bytes
        self._max_value = settings.max_value_bytes
        self._rooms = rooms = furnish(self._store, url, self._pub, settings, clock, manifest,
                                      self._metrics, budget, self._lock)
        #: The rooms the hot paths and white-box tests reach by name.
        self._state, self._cache, self._fetch = rooms.state, rooms.cache, rooms.fetch
        self._allowance, self._readers = rooms.allowance, rooms.readers
        self._committer, self._compaction = rooms.committer, rooms.compaction
        if markers is not None:  # read by opening (silt.open), before any request of ours
            rooms.committer.markers = markers
            rooms.flusher.announce.seen(markers.graces)
        rooms.committer.epoch_listed = epoch  # listed by opening (markers not read)
        for sst_id, (tail, start) in (tails or {}).items():  # prefetched (silt.coldopen)
            reader = self._readers.by_id.get(sst_id)
            if reader is not None:
                reader.preload_tail(tail, start)
        if rooms.budget is not None:  # a DB dropped unclosed gives its reservation back
            weakref.finalize(self, self._allowance.give_back_soon)

    # -- properties ---------------------------------------------------------------------------
    @property
    def version(self) -> int | None:
        """The committed version this DB is based on (``None`` for a root with no versions)."""
        manifest = self._state.manifest
        return manifest.version if manifest is not None else None

    @property
    def manifest(self) -> Manifest | None:
        """The manifest of :attr:`version`."""
        return self._state.manifest

    @property
    def meta(self) -> dict[str, str]:
        """The ``meta`` map of the base version (a copy): what callers committed, without silt's
        own entries (keys starting with ``silt.``, such as :data:`silt.cost.META_REQUESTS`)."""
        manifest = self._state.manifest
        return user_meta(manifest.meta) if manifest is not None else {}

    @property
    def warm(self) -> bool:
        """Whether this DB knows the GC markers (read by its open on a remote store, else by
        its first commit): then :meth:`proved_latest` and :meth:`advance` can answer with GETs,
        where a DB that does not know them lists."""
        return self._committer.markers is not None

    @property
    def listed_at_open(self) -> list[int] | None:
        """The live versions (ascending) that the LIST :func:`silt.open` made found, or
        ``None`` when opening did not list (``version=``). A snapshot of that moment, for a
        caller that would otherwise list again at once: :meth:`newer_versions` asks anew."""
        return None if self._listed is None else list(self._listed)

    @property
    def url(self) -> str:
        return self._url

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def cache(self) -> BlockCache:
        return self._cache

    @property
    def committer(self) -> Committer:
        """The commit protocol's state (lineage, an unresolved commit, a pending withdrawal):
        for inspection and tests."""
        return self._committer

    @property
    def _view(self) -> ReadView:
        """The read view (white-box tests read it; :class:`~silt.state.TreeState` owns it)."""
        return self._state.view

    def __repr__(self) -> str:
        return f"<silt.DB {self._pub!r} version={self.version}>"

    def __enter__(self) -> DB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the database {self._pub!r} is closed; open it again with silt.open")

    # -- writes -------------------------------------------------------------------------------
    def put(self, key: bytes, value: bytes, *, ttl: float | None = None) -> None:
        """Set ``key`` to ``value``; with ``ttl`` (seconds) the entry expires after that time.

        Visible to this DB's reads at once; durable and visible to others after :meth:`commit`.
        """
        if self._closed:
            self._check_open()
        if key.__class__ is not bytes or len(key) > self._max_key:
            key = args.check_key(key, self._max_key)
        if value.__class__ is not bytes or len(value) > self._max_value:
            value = args.check_value(value, self._max_value)
        mem = self._state.view.mem
        if ttl is None:
            # Memtable.put_value without the call (the memtable's contract allows it).
            mem.data[key] = value
            mem.approx_bytes += len(key) + len(value) + ENTRY_OVERHEAD
        else:
            mem.put(key, (value, args.expiry(ttl, self._clock.now_ms())))
        if mem.approx_bytes >= self._allowance.limit:
            self._state.freeze_full(mem)

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (a tombstone that shadows older values until compacted away)."""
        self._check_open()
        key = args.check_key(key, self._max_key)
        mem = self._state.view.mem
        mem.put(key, None)
        if mem.approx_bytes >= self._allowance.limit:
            self._state.freeze_full(mem)

    def delete_range(self, start: bytes, end: bytes) -> None:
        """Remove every key ``k`` with ``start <= k < end`` (the bounds of :meth:`scan`).

        One range tombstone, whatever the number of keys: reads, scans and compaction honour it
        (see :mod:`silt.rangedel`); keys written after the call are visible as usual. Visible to
        this DB's reads at once; durable with :meth:`commit`. ``start == end`` deletes nothing;
        ``start > end`` raises :class:`~silt.errors.InvalidArgumentError`.
        """
        self._check_open()
        start, end = args.check_range(start, end, self._max_key)
        with self._lock:
            self._state.delete_range(start, end)

    def write(self, batch: WriteBatch) -> None:
        """Apply every operation of ``batch``, in order, after validating all of them."""
        self._check_open()
        args.check_instance(batch, WriteBatch, "DB.write batch", "a silt.WriteBatch")
        if check_ops(batch.ops, self._max_key, self._max_value):
            with self._lock:
                self._state.apply(batch.ops, plain=True)
            return
        ops = args.check_batch(batch.ops, self._max_key, self._max_value, self._clock.now_ms)
        with self._lock:
            self._state.apply(ops, plain=False)

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Set ``keys[i]`` to ``values[i]`` for every ``i``, like ``put`` in a loop but without a
        Python call per item (compiled hot path). Later duplicates win.

        All pairs are validated before any is applied. A memtable that fills up is frozen and
        flushed in the background between items, as with ``put``.
        """
        self._check_open()
        keys, values = args.check_put_many(keys, values, self._max_key, self._max_value)
        with self._lock:
            self._state.put_pairs(keys, values)

    def flush(self) -> None:
        """Freeze the memtable and wait until every frozen memtable is an uploaded SST (which is
        part of no version until :meth:`commit`)."""
        with self._lock:
            self._check_open()
            self._state.freeze()
            self._rooms.flusher.wait(self._state.view.parts)

    # -- commit and references ----------------------------------------------------------------
    def commit(self, version: int | None = None, *, meta: dict[str, str] | None = None) -> int:
        """Make every write so far durable as a new version and return its number.

        ``version`` defaults to the next free number after the base version (1 for an empty
        root). An explicit version may skip numbers: the commit then first creates a version
        that reserves the skipped numbers (its state is the base's), so two writers from one
        base always race for the same object name and a version is never built beside a
        newer one (invariant 8). ``meta`` entries (str -> str) are merged into the
        base version's meta map.

        Raises :class:`~silt.errors.CommitConflict` when another writer committed on top of
        this DB's base first (the version, or a version this one would skip, exists): this
        DB's writes stay pending and nothing of this attempt is visible. See
        :mod:`silt.commit` for :class:`~silt.errors.FencedError`,
        :class:`~silt.errors.WithdrawnError` and the rollback's
        :class:`~silt.errors.CorruptionError`. Cost is proportional to the changes since the
        last commit, not to the total state.
        """
        with self._lock:
            self._check_open()
            return self._rooms.steps.commit(self._state, version, meta)

    def _reader(self, info: SstInfo) -> SstReader:
        return self._state.reader(info)

    def reference(self, source: DB, start: bytes | None = None, end: bytes | None = None) -> int:
        """Take keys ``[start, end)`` of sibling ``source``'s committed version as this DB's
        state **by reference**: the next commit's manifest lists ``source``'s SSTs clipped to the
        range, so nothing is read or written but at most two blocks per SST at each boundary
        the range cuts. Returns the number of SST entries referenced. This is how a rescaled
        Spark operator's new shard starts from its old shards' state.

        The DB must be new: no committed version and no writes yet (later writes are newer than
        the referenced state, as usual). Call it once per source, with disjoint ranges;
        ``source`` must be open at a committed version (its uncommitted writes are not part of
        the reference) in the same parent folder as this DB, with the same tier options. Reads
        see the referenced state at once; :meth:`commit` makes it durable, or fails with
        :class:`~silt.errors.FencedError` if GC of ``source`` passed the referenced version
        meanwhile. Run GC on the common parent folder (:mod:`silt.siblings`: GC of the source
        alone keeps all its SSTs from then on; compaction rewrites them into this DB's own).

        Raises :class:`~silt.errors.ReferenceConflict` when the ranges overlap or a sibling SST
        cannot be listed once with one clip range (copy such a range instead).
        """
        with self._lock:
            self._check_open()
            args.check_instance(source, DB, "reference() source", "an open silt.DB")._check_open()
            start, end = args.check_span(start, end, self._max_key)
            return self._state.reference(self._url, self._pub, source.url, source.manifest,
                                         start, end, self._metrics,
                                         self._committer.uncertain is not None)

    # -- reads --------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or ``None`` if it is absent, deleted or expired."""
        if key.__class__ is not bytes or len(key) > self._max_key:
            key = args.check_key(key, self._max_key)
        if self._closed:
            self._check_open()
        # The view's memtable first, here: point reads are the hot path (a frame more: ~8%).
        view = self._state.view
        r = view.mem.data.get(key, MISSING)
        if r is MISSING:
            if not view.plain:
                r = view.get_below(key)
            elif view.bounds is not None:  # all below the memtable is in SSTs: one call
                r = get_levels(view.l0, view.levels, key, -1, view.bounds)
        if r.__class__ is bytes:
            return r  # type: ignore[return-value]
        if r is MISSING or r is None:
            return None
        return visible(r, self._clock.now_ms())

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values for many keys at once (``None`` where absent), in the order given.

        Keys are sorted and deduplicated; each SST is probed for the keys still unresolved, and
        each needed block is read once, missing blocks fetched in parallel
        (``Settings.read_parallelism``).
        """
        self._check_open()
        keys = args.check_keys(keys, self._max_key, "multi_get keys")
        return self._state.view.multi_get(keys, self._fetch, self._clock.now_ms())

    def multi_scan(self, ranges: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """Every live ``(key, value)`` in any of ``ranges`` (``(start, end)`` pairs, each
        ``[start, end)``, sorted by start and not overlapping), in key order.

        The same as ``scan(start, end)`` of each range, concatenated, but cheaper for many
        small ranges (a stream-stream join probing one key prefix per key): the blocks every
        range needs are found first, and each is read once for the whole call, the missing ones
        as runs of adjacent blocks (one ranged GET per run) and kept in the block cache.
        Unlike ``scan`` the result is a list, built at once.
        """
        self._check_open()
        checked = args.check_ranges(ranges, self._max_key, "multi_scan ranges")
        if not checked:
            return []
        return self._state.view.multi_scan(checked, self._fetch, self._clock.now_ms())

    def scan(self, start: bytes | None = None, end: bytes | None = None, *,
             prefix: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` for live keys in ``[start, end)`` (and with ``prefix``), in order.

        The scan sees the state as of the call: later writes are not included. Blocks read by a
        scan are not added to the block cache, so a full scan does not evict hot blocks.
        """
        self._check_open()
        bounds = args.check_scan(start, end, prefix, self._max_key)
        if bounds is None:
            return iter(())
        return self._state.view.scan(*bounds, self._clock.now_ms())

    def committed_records(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[tuple[bytes, object]]:
        """``(key, record)`` of the base version's SSTs in ``[start, end)``, newest record per key
        in key order, **including** tombstones (record ``None``) and expired entries (records
        ``(value, expire_at_ms)``); plain values are ``bytes``. Uncommitted writes are not
        included. For tools that must keep expiry times or see deletions (a copy that keeps
        TTLs, state inspection); applications want :meth:`scan`.
        """
        self._check_open()
        start, end = args.check_bounds(start, end, self._max_key)
        return self._state.committed_view().committed_records(start, end)

    def changed_keys(self, since: Sequence[DB], start: bytes | None = None,
                     end: bytes | None = None) -> list[bytes]:
        """Keys in ``[start, end)`` whose committed value may differ between ``since`` (DBs of
        the same state opened at an older version: one, or the sources a rescaled shard was
        made from) and this DB's base version, sorted, found from the manifests' deltas
        (:mod:`silt.changes`: only the SSTs one side lists and the other does not are read, and
        ``since``'s keys under range deletes made after it). A superset of the changed keys (a
        compaction rewrites unchanged keys into new SSTs): compare both sides' values to be sure.
        """
        self._check_open()
        since = args.check_instances(since, DB, "changed_keys since")
        start, end = args.check_bounds(start, end, self._max_key)
        for old in since:
            old._check_open()
        return changed_keys(self._state, [old._state for old in since], start, end)

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Release threads, caches and the store. Uncommitted writes are discarded.

        Idempotent. Waits for uploads in progress so no thread touches the store afterwards.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._rooms.close(self._owns_store)

    def stats(self) -> dict[str, Any]:
        """Counters for inspection: memtable, SSTs per level, amplification, cache, requests.

        ``read_amplification`` is the number of SSTs a point read may probe (L0 SSTs plus one per
        non-empty level); ``write_amplification`` is bytes written to SSTs (flushes and
        compaction outputs) per byte flushed from memtables; ``requests`` counts object-store
        requests and bytes by purpose (write, flush, commit, compaction, gc, read, open,
        refill) and kind, ``requests_by_kind`` the requests of each kind (failed ones included).
        """
        return self._rooms.stats()

    def wait_for_compaction(self, timeout: float | None = None) -> bool:
        """Block until the background compaction in flight (if any) has finished and serves
        reads (:mod:`silt.compaction.early`; with ``compaction_mode="external"``, records
        ``silt compact`` wrote are looked for and installed), and the compactions an earlier
        handle finished and left uncommitted, found at open, serve reads too
        (:mod:`silt.compaction.leftovers`). The next :meth:`commit` publishes them. Returns
        False if ``timeout`` seconds passed first. Useful before measuring, and in tests.
        """
        self._check_open()
        timeout = args.check_timeout(timeout)
        leftovers = self._rooms.leftovers
        if leftovers is not None and not leftovers.wait(timeout):
            return False
        if not self._compaction.wait(timeout):
            return False
        with self._lock:
            self._check_open()
            self._rooms.early.refresh(poll=True)
        return True

    def wait_for_refill(self) -> None:
        """Block until the cache refills started by adopted compactions so far are done (see
        :mod:`silt.refill`; only remote stores refill). Useful before measuring, and in tests.
        """
        self._check_open()
        self._rooms.refiller.wait()

    def newer_versions(self) -> list[int]:
        """Committed versions greater than this DB's base version, ascending.

        A non-empty answer means another writer (or an earlier run) has moved on. Withdrawn
        versions are not listed. Cost: one LIST; or, on a DB that committed before (so it knows
        the GC markers), two GETs of objects that do not exist when no writer moved on (the
        name the next version takes, and the next GC epoch: see
        :meth:`silt.commit.Committer.nothing_after`), and the LIST only when one exists.
        """
        self._check_open()
        return self._rooms.following.newer_versions()

    def proved_latest(self) -> bool:
        """Whether two GETs prove that no version newer than this DB's base exists (``False``:
        maybe not; a DB that never committed knows no GC markers and cannot prove it)."""
        self._check_open()
        return self._rooms.following.proved_latest()

    def advance(self, at_most: int) -> int | None:
        """Move this handle to the latest committed version ``<= at_most``, the one
        ``silt.open(url, at_most=at_most)`` would open now, and return it (``None``: there is
        none), keeping the open readers of the SSTs both versions share; with GETs instead of
        a LIST where :mod:`silt.reopen` can prove the answer (costs there). The handle must hold
        no uncommitted writes, references or unresolved commit
        (:class:`~silt.errors.InvalidArgumentError`); its commit lineage moves with it."""
        return self._advance(at_most, newer=False)[0]

    def advance_newer(self, at_most: int) -> tuple[int | None, list[int]]:
        """:meth:`advance`, then :meth:`newer_versions`, in one step (fewer round trips: see
        :mod:`silt.reopen`): the version the handle moved to and the committed versions after
        it, ascending. The preconditions are :meth:`advance`'s.

        >>> version, newer = db.advance_newer(batch - 1)  # doctest: +SKIP
        """
        version, newer = self._advance(at_most, newer=True)
        assert newer is not None
        return version, newer

    def catch_up(self, at_most: int) -> tuple[int | None, list[int]]:
        """:meth:`advance_newer`, unless :meth:`proved_latest` proves the handle's version
        (``<= at_most``) is still the newest: then the handle stays and the answer is
        ``(version, [])``. Costs in :mod:`silt.reopen`; the preconditions are :meth:`advance`'s.

        >>> version, newer = db.catch_up(batch - 1)  # doctest: +SKIP
        """
        version, newer = self._advance(at_most, newer=True, stay=True)
        assert newer is not None
        return version, newer

    def handoff(self, scope: str = "") -> bytes | None:
        """This handle's warm state as a record another process of the same machine installs
        with :func:`silt.resume` or :meth:`take_handoff`, with no request, when it asks for
        exactly this version (:mod:`silt.handoff` proves that a commit from there is as safe
        as one from this handle). ``None`` unless this handle committed its base version
        itself and holds nothing pending. ``scope`` names what identifies this incarnation of
        the root for the caller (as its cache of open handles does); the taker must give the
        same. The caller stores it (a private local file, replaced atomically)."""
        args.check_instance(scope, str, "DB.handoff scope", "a str")
        with self._lock:
            self._check_open()
            return self._rooms.following.handoff(self._url, scope)

    def take_handoff(self, data: bytes, version: int, scope: str = "") -> bool:
        """Move this handle to version ``version`` from a record :meth:`handoff` wrote in
        another process, with no request, keeping the readers of the SSTs both versions share;
        ``False`` (the handle unchanged: take the remote path, e.g. :meth:`catch_up`) when the
        record is not an intact one of exactly this URL, ``scope`` and version, this handle
        is fenced, or the GC markers it knows put the version below the horizon. The
        preconditions are :meth:`advance`'s."""
        check_version(version)
        args.check_instance(scope, str, "DB.take_handoff scope", "a str")
        with self._lock:
            self._check_open()
            return self._rooms.following.take_handoff(self._url, data, version, scope)

    def _advance(self, at_most: int, *, newer: bool,
                 stay: bool = False) -> tuple[int | None, list[int] | None]:
        with self._lock:
            self._check_open()
            after = self._rooms.following.advance(at_most, newer=newer, stay=stay)
            return self.version, after if newer else None

    # -- retention ----------------------------------------------------------------------------
    def checkpoint(self, name: str) -> int:
        """Pin the committed version under ``name`` so GC keeps it; returns the version.

        Checkpoint objects are create-only: naming a version twice is fine, re-pointing a name
        at another version is an error. A version below the GC horizon cannot be checkpointed
        (``VersionNotFoundError``): GC may be deleting it. A version this DB did not commit
        itself is **settled** first, so that its writer, if it is still finishing that commit,
        can no longer withdraw it; a version whose writer withdrew it, or whose SSTs a running
        GC pass may still collect, cannot be checkpointed (see :mod:`silt.pin`).
        """
        with self._lock:
            self._check_open()
            return checkpoint(self._store, self._pub, self._state.manifest, name, self._clock,
                              self._committer.confirmed)

    def gc(self, *, retain_versions: int | None = None, grace_seconds: float | None = None,
           dry_run: bool = False) -> GcReport:
        """Run garbage collection on this DB's root (see :mod:`silt.gc`).

        Defaults come from :class:`Settings` (``retain_versions``, ``gc_grace_seconds``). A
        grace shorter than this DB's own ``Settings.gc_grace_seconds`` is refused: GC could
        then delete SSTs this writer uploaded and has not committed yet.
        """
        self._check_open()
        return collect_for(self._store, self._settings, self._clock, self._metrics,
                           retain_versions, grace_seconds, dry_run)

