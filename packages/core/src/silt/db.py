"""DB: one LSM tree under one root of an object store.

Write path (DESIGN.md section 5): puts go to the active memtable; when it reaches
``Settings.memtable_bytes`` it is frozen and a background uploader turns it into an SST while
writes continue. ``commit`` freezes the memtable, waits for pending uploads and creates
``manifest/<version>`` with ``put_if_absent``; nothing is visible to other readers before that
manifest exists, and a version can be created by one writer only.

Read path (section 6): active memtable, frozen memtables / freshly flushed SSTs (newest first),
then the committed L0 SSTs newest first, then each level by key range. Each SST is probed through
its bloom filter and index; blocks come from the byte-bounded LRU block cache or a ranged GET.

Threading contract: one thread writes (put, delete, write, commit, flush) at a time; reads (get,
multi_get, scan) may run concurrently with it from other threads. Uploads and parallel block
fetches run in the DB's own thread pools. Durability: nothing is durable until ``commit`` returns;
``close`` without ``commit`` discards uncommitted writes (their uploaded SSTs are garbage).
"""

from __future__ import annotations

import re
import threading
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from . import paths
from .cache import BlockCache
from .checkpoints import decode_checkpoint, encode_checkpoint
from .clock import Clock
from .compaction.driver import CompactionDriver
from .errors import (
    AlreadyExistsError,
    ClosedError,
    CommitConflict,
    CorruptionError,
    FencedError,
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    ReferenceConflict,
    SiltError,
    StoreError,
    VersionNotFoundError,
    WithdrawnError,
)
from .gc import GcReport, check_grace, collect_garbage, horizon, read_checkpoints
from .manifest import Manifest, check_meta
from .markers import GcMarkers, read_markers
from .memtable import Memtable, apply_ops, check_ops, check_pairs, insert_pairs, split_found
from .merge import live, merge_newest_first, visible_many
from .metrics import MeteredStore, Metrics
from .record import MISSING, visible
from .settings import Settings
from .siblings import SiblingStores, clip_manifest, combine, mark_referrers, sibling_name
from .siblings import split_parent as _split_parent
from .sst.bloom import bloom_hash
from .sst.builder import SstInfo, build_sst
from .sst.format import FOOTER_SIZE, MAX_EXPIRY_MS
from .sst.reader import SstReader, get_from, lookup_groups, plan_probe
from .store import ObjectStore, retrying
from .versions import SETTLED, WITHDRAWN, Fate, list_versions, read_fate
from .writebatch import WriteBatch

_BYTES_LIKE = (bytearray, memoryview)
_BYTES_ONLY = {bytes}


class _Part:
    """A frozen memtable on its way to becoming an SST (or already uploaded, not yet committed).

    Readers look at ``memtable`` while it is set, else at ``reader``; the uploader sets ``reader``
    before it clears ``memtable``, so a reader always finds one of them.
    """

    __slots__ = ("memtable", "reader", "info", "future")

    def __init__(self, memtable: Memtable) -> None:
        self.memtable: Memtable | None = memtable
        self.reader: SstReader | None = None
        self.info: SstInfo | None = None
        self.future: Future[None] | None = None


class _Level:
    """A sorted run: SSTs with disjoint key ranges, ordered by key."""

    __slots__ = ("readers", "largest")

    def __init__(self, readers: list[SstReader]) -> None:
        self.readers = readers
        self.largest = [r.info.largest for r in readers]  # type: ignore[union-attr]

    def find(self, key: bytes) -> SstReader | None:
        i = bisect_left(self.largest, key)
        if i < len(self.readers) and self.readers[i].info.smallest <= key:  # type: ignore[union-attr]
            return self.readers[i]
        return None

    def overlapping(self, start: bytes | None, end: bytes | None) -> list[SstReader]:
        lo = bisect_left(self.largest, start) if start is not None else 0
        out = []
        for r in self.readers[lo:]:
            if end is not None and r.info.smallest >= end:  # type: ignore[union-attr]
                break
            out.append(r)
        return out


class _Reference:
    """One :meth:`DB.reference` call not committed yet."""

    __slots__ = ("source", "version", "start", "end", "l0", "levels")

    def __init__(self, source: str, version: int, start: bytes | None, end: bytes | None,
                 l0: list[SstInfo], levels: list[list[SstInfo]]) -> None:
        self.source = source
        self.version = version
        self.start = start
        self.end = end
        self.l0 = l0
        self.levels = levels


def _overlaps(info: SstInfo, start: bytes | None, end: bytes | None) -> bool:
    return (start is None or info.largest >= start) and (end is None or info.smallest < end)


class DB:
    """An open silt database. Create it with :func:`silt.open`, not directly."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        url: str,
        settings: Settings,
        clock: Clock,
        manifest: Manifest | None,
        owns_store: bool = True,
    ) -> None:
        self._metrics = Metrics()
        self._store = MeteredStore(store, self._metrics)
        self._url = url
        self._settings = settings
        self._clock = clock
        self._owns_store = owns_store
        self._cache = BlockCache(settings.block_cache_bytes)
        self._writer_id = uuid.uuid4().hex
        self._lock = threading.RLock()
        self._closed = False
        self._mem = Memtable()
        self._parts: tuple[_Part, ...] = ()  # oldest first
        self._readers: dict[str, SstReader] = {}
        self._uploader: ThreadPoolExecutor | None = None
        self._read_pool: ThreadPoolExecutor | None = None
        self._uncertain: tuple[Manifest, list, list] | None = None
        self._fenced: str | None = None  # why this writer is stale, once GC fenced it
        #: A withdrawal decided but whose fate record is not created yet (retried by commit).
        self._withdrawing: tuple[Manifest, str] | None = None
        self._withdrawing_result = True
        #: The version the next commit names as its parent (the base, or a reservation or
        #: withdrawn version standing for it) and the smallest number it may create.
        self._lineage: int | None = None
        self._next = 1
        #: The last version this DB committed itself (its post-commit checks passed).
        self._confirmed: int | None = None
        self._max_key = settings.max_key_bytes
        self._max_value = settings.max_value_bytes
        self._memtable_limit = settings.memtable_bytes
        self._manifest: Manifest | None = None
        self._l0: tuple[SstReader, ...] = ()
        self._levels: tuple[_Level, ...] = ()
        #: Stores of sibling DBs whose SSTs the manifests reference (silt.siblings).
        self._siblings = SiblingStores(
            url, self._store, wrap=lambda raw: MeteredStore(raw, self._metrics)
        )
        #: References made by :meth:`reference` and not committed yet.
        self._refs: list[_Reference] = []
        self._ref_base: tuple[tuple[SstInfo, ...], tuple[tuple[SstInfo, ...], ...]] = ((), ())
        self._install(manifest)
        self._compaction = CompactionDriver(
            self._store, settings, clock, self._metrics, siblings=self._siblings
        )

    # -- properties ---------------------------------------------------------------------------
    @property
    def version(self) -> int | None:
        """The committed version this DB is based on (``None`` for a root with no versions)."""
        return self._manifest.version if self._manifest is not None else None

    @property
    def manifest(self) -> Manifest | None:
        """The manifest of :attr:`version`."""
        return self._manifest

    @property
    def meta(self) -> dict[str, str]:
        """The ``meta`` map of the base version (a copy)."""
        return dict(self._manifest.meta) if self._manifest is not None else {}

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

    def __repr__(self) -> str:
        return f"<silt.DB {self._url!r} version={self.version}>"

    def __enter__(self) -> DB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- validation ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the database {self._url!r} is closed; open it again with silt.open")

    def _check_key(self, key: Any) -> bytes:
        if isinstance(key, _BYTES_LIKE):
            key = bytes(key)
        elif not isinstance(key, bytes):
            hint = ": encode it first, e.g. key.encode()" if isinstance(key, str) else ""
            raise InvalidTypeError(f"keys must be bytes, got {type(key).__name__}{hint}")
        if len(key) > self._max_key:
            raise InvalidArgumentError(
                f"key of {len(key)} bytes exceeds Settings.max_key_bytes={self._max_key}; "
                "use shorter keys (for example a hash of the long key) or raise the limit"
            )
        return key

    def _check_value(self, value: Any) -> bytes:
        if isinstance(value, _BYTES_LIKE):
            value = bytes(value)
        elif not isinstance(value, bytes):
            hint = ": encode it first, e.g. value.encode()" if isinstance(value, str) else ""
            if value is None:
                hint = ": use DB.delete(key) to remove a key"
            raise InvalidTypeError(f"values must be bytes, got {type(value).__name__}{hint}")
        if len(value) > self._max_value:
            raise InvalidArgumentError(
                f"value of {len(value)} bytes exceeds Settings.max_value_bytes="
                f"{self._max_value}; split it over several keys or raise the limit"
            )
        return value

    def _expiry(self, ttl: Any) -> int:
        """The expiry time (ms) of an entry written now with ``ttl`` seconds to live; refuses a
        ttl that is not a positive finite number or whose expiry does not fit the u64 the SST
        format stores it in (``MAX_EXPIRY_MS``)."""
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
            raise InvalidTypeError(f"ttl must be a number of seconds, got {type(ttl).__name__}")
        now = self._clock.now_ms()
        max_ttl = (MAX_EXPIRY_MS - now) // 1000
        if 0 < ttl <= max_ttl:  # false for nan and inf
            expiry = now + max(1, int(ttl * 1000))
            if expiry <= MAX_EXPIRY_MS:  # a float ttl near the limit may round up
                return expiry
        raise InvalidArgumentError(
            f"ttl must be a positive, finite number of seconds, at most {max_ttl} (expiry times "
            f"are stored as u64 milliseconds), got {ttl!r}; omit ttl for entries that never expire"
        )

    # -- writes -------------------------------------------------------------------------------
    def put(self, key: bytes, value: bytes, *, ttl: float | None = None) -> None:
        """Set ``key`` to ``value``; with ``ttl`` (seconds) the entry expires after that time.

        Visible to this DB's reads at once; durable and visible to others after :meth:`commit`.
        """
        if self._closed:
            self._check_open()
        if key.__class__ is not bytes or len(key) > self._max_key:
            key = self._check_key(key)
        if value.__class__ is not bytes or len(value) > self._max_value:
            value = self._check_value(value)
        mem = self._mem
        if ttl is None:
            mem.data[key] = value
            mem.approx_bytes += len(key) + len(value) + 16
            mem._sorted = None
        else:
            mem.put(key, (value, self._expiry(ttl)))
        if mem.approx_bytes >= self._memtable_limit:
            with self._lock:
                if self._mem is mem:
                    self._freeze()

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (a tombstone that shadows older values until compacted away)."""
        self._check_open()
        key = self._check_key(key)
        mem = self._mem
        mem.put(key, None)
        if mem.approx_bytes >= self._memtable_limit:
            with self._lock:
                if self._mem is mem:
                    self._freeze()

    def write(self, batch: WriteBatch) -> None:
        """Apply every operation of ``batch``, in order, after validating all of them."""
        self._check_open()
        if not isinstance(batch, WriteBatch):
            raise InvalidTypeError(f"DB.write takes a silt.WriteBatch, got {type(batch).__name__}")
        if check_ops(batch.ops, self._max_key, self._max_value):
            # Every op is a plain put or delete of valid bytes: apply without a call per op.
            with self._lock:
                mem = self._mem
                mem.approx_bytes += apply_ops(mem.data, batch.ops)
                mem._sorted = None
                if mem.approx_bytes >= self._memtable_limit:
                    self._freeze()
            return
        ops = []
        for key, value, ttl in batch.ops:
            key = self._check_key(key)
            if value is None:
                ops.append((key, None))
            else:
                value = self._check_value(value)
                ops.append((key, value if ttl is None else (value, self._expiry(ttl))))
        with self._lock:
            mem = self._mem
            for key, record in ops:
                mem.put(key, record)
            if mem.approx_bytes >= self._memtable_limit:
                self._freeze()

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Set ``keys[i]`` to ``values[i]`` for every ``i``, like ``put`` in a loop but without a
        Python call per item (compiled hot path). Later duplicates win.

        All pairs are validated before any is applied. A memtable that fills up is frozen and
        flushed in the background between items, as with ``put``.
        """
        self._check_open()
        if isinstance(keys, (bytes, str)) or isinstance(values, (bytes, str)):
            raise InvalidTypeError("put_many takes two sequences (keys, values), not single items")
        if len(keys) != len(values):
            raise InvalidArgumentError(
                f"put_many got {len(keys)} keys but {len(values)} values; pass one value per key"
            )
        if check_pairs(keys, values, self._max_key, self._max_value) >= 0:
            keys = [self._check_key(k) for k in keys]
            values = [self._check_value(v) for v in values]
        i, n = 0, len(keys)
        with self._lock:
            while i < n:
                mem = self._mem
                i, mem.approx_bytes = insert_pairs(
                    mem.data, keys, values, i, mem.approx_bytes, self._memtable_limit
                )
                mem._sorted = None
                if mem.approx_bytes >= self._memtable_limit:
                    self._freeze()

    # -- flush --------------------------------------------------------------------------------
    def _freeze(self) -> None:
        """Hand the active memtable to the uploader (caller holds ``_lock``)."""
        mem = self._mem
        if not mem.data:
            return
        part = _Part(mem)
        self._parts = (*self._parts, part)  # readers look at _mem before _parts
        self._mem = Memtable()
        if self._uploader is None:
            self._uploader = ThreadPoolExecutor(
                self._settings.upload_parallelism, thread_name_prefix="silt-upload"
            )
        part.future = self._uploader.submit(self._flush_part, part)
        # Backpressure: block the writer while too many flushes wait.
        while True:
            pending = [p for p in self._parts if p.future is not None and not p.future.done()]
            if len(pending) <= self._settings.max_pending_flushes:
                break
            pending[0].future.exception()  # type: ignore[union-attr]

    def _flush_part(self, part: _Part) -> None:
        with self._metrics.purpose("flush"):
            self._flush_part_now(part)

    def _flush_part_now(self, part: _Part) -> None:
        mem = part.memtable
        assert mem is not None
        keys, records = mem.sorted_items()
        now = self._clock.now_ms()
        sst_id = paths.new_id(now)
        data, info = build_sst(sst_id, keys, records, self._settings, created_ms=now)
        name = paths.sst_key(sst_id)
        self._metrics.add("flush_bytes", len(data))
        if not retrying(lambda: self._store.put_if_absent(name, data)):
            # A lost response whose retry found our own upload, or (never seen in practice) an
            # id collision: only our bytes may stand under this name.
            tail = retrying(
                lambda: self._store.get_range(name, len(data) - FOOTER_SIZE, FOOTER_SIZE)
            )
            if tail != data[-FOOTER_SIZE:]:
                raise StoreError(f"SST name {name!r} already holds another object; retry the flush")
        reader = SstReader(
            self._store, name, info, self._cache,
            tail=data[info.tail_offset:], tail_start=info.tail_offset,
        )
        self._readers[sst_id] = reader
        part.info = info
        part.reader = reader
        part.memtable = None

    def _wait_uploads(self) -> None:
        """Wait for every pending flush; a failed one is retried once, here, in this thread."""
        for part in self._parts:
            assert part.future is not None
            if part.future.exception() is not None and part.reader is None:
                self._flush_part(part)

    def flush(self) -> None:
        """Freeze the memtable and wait until every frozen memtable is an uploaded SST.

        Uploaded SSTs are not part of any version until :meth:`commit`.
        """
        with self._lock:
            self._check_open()
            self._freeze()
            self._wait_uploads()

    # -- commit -------------------------------------------------------------------------------
    def commit(self, version: int | None = None, *, meta: dict[str, str] | None = None) -> int:
        """Make every write so far durable as a new version and return its number.

        ``version`` defaults to the next free number after the base version (1 for an empty
        root). An explicit version may skip numbers: the commit then first creates a version
        that reserves the skipped numbers (its state is the base's), so two writers from one
        base always race for the same object name and a version is never built beside a
        newer one (DESIGN.md invariant 8). ``meta`` entries (str -> str) are merged into the
        base version's meta map.

        Raises :class:`~silt.errors.CommitConflict` when another writer committed on top of
        this DB's base first (the version, or a version this one would skip, exists): this
        DB's writes stay pending and nothing of this attempt is visible. Cost is proportional
        to the changes since the last commit, not to the total state.
        """
        with self._lock:
            self._check_open()
            self._finish_withdrawal()
            self._check_fenced()
            self._resolve_uncertain()
            auto = version is None
            if version is None:
                version = self._next
            self._check_version(version)
            if version < self._next:
                self._refuse_skipped(version)
            merged_meta = self.meta
            if meta is not None and check_meta(meta):
                for k, v in meta.items():
                    if not isinstance(k, str) or not isinstance(v, str):
                        raise InvalidTypeError("commit meta must map str to str")
                    merged_meta[k] = v
            self._freeze()
            self._wait_uploads()
            self._refresh_aged_parts()
            old = self._manifest
            new_l0 = tuple(p.info for p in reversed(self._parts))  # type: ignore[misc]
            base_l0, base_levels = (old.l0, old.levels) if old is not None else self._ref_base
            l0 = new_l0 + base_l0
            levels = base_levels
            records = self._compaction.gather(old, len(l0))
            l0, levels, adopted, refused = self._compaction.apply(l0, levels, records)
            with self._metrics.purpose("commit"):
                if old is None and self._refs:
                    # Before the manifest exists: the owners' GC must know it may be referenced.
                    mark_referrers(self._siblings, [*l0, *(s for run in levels for s in run)],
                                   _split_parent(self._url)[1])
                while True:
                    if version > self._next:
                        self._reserve(version)
                        continue
                    manifest = Manifest(
                        version=version,
                        parent=self._lineage,
                        writer_id=self._writer_id,
                        token=uuid.uuid4().hex,
                        created_ms=self._clock.now_ms(),
                        l0=l0,
                        levels=levels,
                        meta=merged_meta,
                        gc_grace_ms=self._grace_ms,
                    )
                    try:
                        created = self._create_manifest(manifest)
                    except StoreError:
                        # The manifest may exist: resolved by reading back on the next commit.
                        self._uncertain = (manifest, adopted, refused)
                        raise
                    if created:
                        break
                    placeholder = self._adopt_placeholder(version)
                    if placeholder and auto:
                        version = self._next
                        continue
                    if placeholder == "withdrawn":
                        why = "was withdrawn by its writer and is never committed again"
                    elif placeholder == "reserved":
                        why = (f"is reserved by a commit that skipped to version {self._next} "
                               "from the same base")
                    else:
                        why = "was already committed by another writer"
                    raise CommitConflict(
                        f"version {version} of {self._url!r} {why}; reopen the latest version "
                        "(silt.open) and redo the work from there",
                        version=version, withdrawn=placeholder == "withdrawn",
                    )
                try:
                    self._post_commit(manifest)
                except (CommitConflict, FencedError, CorruptionError, WithdrawnError):
                    raise
                except StoreError:
                    # Checks after the PUT failed: resolved on the next commit.
                    self._uncertain = (manifest, adopted, refused)
                    raise
            self._landed(manifest, adopted, refused)
            return version

    @property
    def _grace_ms(self) -> int:
        return int(self._settings.gc_grace_seconds * 1000)

    def _refuse_skipped(self, version: int) -> None:
        base = self.version
        if base is not None and version <= base:
            raise InvalidArgumentError(
                f"cannot commit version {version}: this DB is at version {base}; commit a "
                "greater version (or leave version=None for the next one)"
            )
        raise InvalidArgumentError(
            f"cannot commit version {version} of {self._url!r}: the versions before "
            f"{self._next} were skipped (reserved by a commit that skipped them, or withdrawn) "
            f"and are never created; commit version {self._next} or later"
        )

    def _create_manifest(self, manifest: Manifest) -> bool:
        """Create ``manifest``'s object; True if it now exists as ours (a lost response whose
        retry found our own object counts), False if another object has that name."""
        name = paths.manifest_key(manifest.version)
        data = manifest.encode()
        return retrying(lambda: self._store.put_if_absent(name, data)) or self._is_ours(manifest)

    def _reserve(self, target: int) -> None:
        """Create the version at :attr:`_next` that reserves the numbers up to ``target``.

        Its state is the base's (same SSTs and meta). If another object holds that name, it is
        taken as the base when it stands for the same state (a reservation or a withdrawn
        version on this same base, e.g. from an earlier attempt); anything else means another
        writer committed on this base: :class:`CommitConflict`.
        """
        n = self._next
        old = self._manifest
        reservation = Manifest(
            version=n,
            parent=self._lineage,
            writer_id=self._writer_id,
            token=uuid.uuid4().hex,
            created_ms=self._clock.now_ms(),
            l0=old.l0 if old is not None else (),
            levels=old.levels if old is not None else (),
            meta=dict(old.meta) if old is not None else {},
            skip_to=target,
            gc_grace_ms=self._grace_ms,
        )
        if self._create_manifest(reservation):
            self._lineage, self._next = n, target
            return
        if not self._adopt_placeholder(n):
            raise CommitConflict(
                f"cannot commit version {target} of {self._url!r} from base {self.version}: "
                f"version {n} was committed by another writer meanwhile; reopen the latest "
                "version (silt.open) and redo the work from there",
                version=target,
            )
        if self._next > target:
            raise CommitConflict(
                f"cannot commit version {target} of {self._url!r}: another commit from the same "
                f"base reserved the versions up to {self._next - 1}",
                version=target,
            )

    def _adopt_placeholder(self, version: int) -> str:
        """If ``manifest/<version>`` is no competing state, move past it and say why:
        ``"reserved"`` for a reservation made from this DB's own lineage (it stands for the
        base state), ``"withdrawn"`` for a withdrawn version (dead for everyone: its number is
        skipped, whoever made it); ``""`` when it is another writer's live commit."""
        name = paths.manifest_key(version)
        try:
            existing = Manifest.decode(retrying(lambda: self._store.get(name)), name)
        except NotFoundError:
            return ""  # deleted meanwhile (GC below its horizon): a plain conflict
        fate = read_fate(self._store, version)
        if fate is not None and fate.withdraws(existing):
            if existing.parent == self._lineage:
                self._lineage = version  # it stands for our base: the lineage goes through it
            self._next = version + 1
            return "withdrawn"
        if existing.parent != self._lineage or existing.skip_to is None:
            return ""
        self._lineage, self._next = version, existing.next_version
        return "reserved"

    def _landed(self, manifest: Manifest, adopted: list, refused: list) -> None:
        """Bookkeeping once ``manifest`` is committed: install it, settle compactions."""
        self._install(manifest)
        self._confirmed = manifest.version
        self._refs = []
        self._ref_base = ((), ())
        self._metrics.add("commits")
        self._compaction.resolved(adopted, refused)
        self._compaction.schedule(manifest)

    def _post_commit(self, manifest: Manifest, *, resolving: bool = False) -> None:
        """The checks after creating ``manifest`` (one LIST of ``gc/``, more only on the rare
        paths): withdraw it if this writer turned out to be a zombie, if the root was rolled
        back, or if garbage collection may have collected an SST it publishes."""
        markers = read_markers(self._store)
        self._check_horizon(manifest, markers)
        self._check_rollback(manifest, markers)
        self._check_age(manifest, markers, resolving=resolving)
        if self._refs and self._manifest is None:
            self._check_sources(manifest)

    def _check_horizon(self, manifest: Manifest, markers: GcMarkers) -> None:
        """Withdraw ``manifest`` if GC's horizon passed it (this writer is a zombie).

        A fenced DB stays fenced: every later commit raises :class:`FencedError` (and first
        retries the withdrawal if creating its fate record failed).
        """
        h = markers.horizon
        base = manifest.parent
        if manifest.version >= h and (base is None or base >= h):
            return
        if manifest.version == h:
            # The marker names this very version: the GC pass that wrote it listed this
            # manifest and kept everything it references (e.g. a commit whose response was lost
            # and that GC saw before this writer resolved it). Withdrawing it would lose data.
            return
        if base is not None and base < h <= manifest.version:
            if base in read_checkpoints(self._store).values():
                return  # the base is pinned: its SSTs are kept
        self._fence(manifest, (
            f"version {manifest.version} (from base {base}) of {self._url!r} is below the "
            f"garbage-collection horizon {h}: newer versions exist and GC has removed older "
            "ones, so this writer is stale. The commit was withdrawn; reopen the latest version "
            "(silt.open) and redo the work from there"
        ))

    def _check_rollback(self, manifest: Manifest, markers: GcMarkers) -> None:
        """Withdraw ``manifest`` if a checkpoint once pinned a version at or above it that is
        not this commit: its number was seen before, so the root was rolled back."""
        v = manifest.version
        seen = [p for p in markers.pins if p[0] > v or (p[0] == v and p[1] != manifest.token)]
        if not seen:
            return
        pinned, _ = max(seen)
        detail = (
            f"a checkpoint pinned version {pinned} of {self._url!r}, but the newest version "
            f"found was {self.version}: the root was rolled back (newer manifests deleted or "
            f"restored from an older copy). Version {v} would reuse a number already seen, so "
            "the commit was withdrawn. Restore the missing manifests, or run `silt verify` to "
            "see what is missing"
        )
        self._fence(manifest, detail, error=CorruptionError(
            paths.manifest_key(pinned), None, detail))

    def _check_age(self, manifest: Manifest, markers: GcMarkers, *,
                   resolving: bool = False) -> None:
        """Withdraw ``manifest`` if garbage collection may collect an SST it newly publishes.

        A GC pass deletes only unreferenced objects older than its cutoff, and writes its
        ``gc/pass`` marker before its last listing of manifests. So when no marker of a pass
        with a cutoff past this commit's oldest new SST is visible now (after the manifest
        exists), every pass that could collect those SSTs sees the manifest and keeps them:
        the usual case, decided without a request more. Otherwise: if the passes are done and
        every new SST is still there, nothing was collected; if a pass is still running, it may
        yet delete them, and the version is withdrawn (unless a checkpoint settled it first,
        or GC already kept it as its horizon).
        """
        old = {s.id for s in self._manifest.all_ssts()} if self._manifest is not None else set()
        # References to siblings' SSTs are protected by the sources' horizons instead.
        ids = [s.id for s in manifest.all_ssts() if s.id not in old and not s.db]
        if not ids:
            return
        oldest = min(paths.id_time_ms(i) for i in ids)
        running, done = markers.passes_after(oldest)
        if not running and not done:
            return
        if markers.horizon == manifest.version:
            return  # a GC pass listed this manifest and kept it (see _check_horizon)
        try:
            present = self._all_exist(ids)
        except StoreError:
            present = False  # cannot tell: in danger, withdraw rather than risk it
        if present and (not running or resolving):
            # Every pass that could collect them has finished and they are all there; or a
            # commit whose outcome was unknown, resolved late, whose SSTs GC has not deleted:
            # passes that ran since the PUT listed the manifest.
            return
        age = self._clock.now_ms() - oldest
        why = (
            f"the commit stalled until an SST it publishes was {age // 1000}s old and a garbage"
            f"-collection pass (cutoff {max(running + done)}) "
            + ("deleted one of them" if not present else "that may delete them is running")
        )
        if self._withdraw(manifest, why):
            raise WithdrawnError(
                f"version {manifest.version} of {self._url!r} was withdrawn: {why}. Its number "
                "is never used again. Commit again (young SSTs are re-uploaded) or reopen and "
                "redo the work"
            )

    def _check_sources(self, manifest: Manifest) -> None:
        """Withdraw ``manifest`` if GC of a referenced source passed the referenced version."""
        for r in self._refs:
            h = horizon(self._siblings.named(r.source))
            if r.version >= h:
                continue
            self._fence(manifest, (
                f"version {manifest.version} of {self._url!r} references version {r.version} of "
                f"sibling {r.source!r}, which garbage collection has passed (horizon {h}): its "
                "SSTs may be gone. The commit was withdrawn; reopen the source at its latest "
                "version and reference it again from a new DB"
            ))

    def _fence(self, manifest: Manifest, why: str, error: SiltError | None = None) -> None:
        """Withdraw ``manifest`` and fence this DB: it never commits again. Raises ``error``
        (default :class:`FencedError`) unless a checkpoint settled the version first."""
        self._fenced = why
        if not self._withdraw(manifest, why):
            self._fenced = None  # pinned and settled by a checkpoint: it stands
            return
        raise error if error is not None else FencedError(why)

    def _withdraw(self, manifest: Manifest, why: str) -> bool:
        """Withdraw this writer's ``manifest``: create its fate record (``withdrawn``), which
        keeps its number from ever being committed again; the manifest itself stays until GC.

        Returns False when a checkpoint had settled the version first (it then stands). When
        the record cannot be created, the next commit retries it and raises meanwhile.
        """
        self._withdrawing = (manifest, why)
        self._finish_withdrawal()
        return self._withdrawing_result

    def _finish_withdrawal(self) -> None:
        """Create the fate record of a withdrawal decided earlier (retried by every commit)."""
        if self._withdrawing is None:
            return
        manifest, why = self._withdrawing
        v = manifest.version
        fate = Fate(v, WITHDRAWN, why, manifest.token)
        name = paths.fate_key(v)
        try:
            created = retrying(lambda: self._store.put_if_absent(name, fate.encode()))
            existing = None if created else read_fate(self._store, v)
        except StoreError as exc:
            raise FencedError(
                f"{why}. Recording the withdrawal of version {v} ({name!r}) failed ({exc}); "
                "the next commit of this DB retries it"
            ) from exc
        self._withdrawing = None
        # A record settling another manifest of this number (a rollback's reuse) withdraws it.
        self._withdrawing_result = existing is None or existing.withdraws(manifest)
        if self._withdrawing_result and manifest.parent == self._lineage:
            self._lineage, self._next = v, manifest.next_version  # skip the withdrawn number

    def _check_fenced(self) -> None:
        if self._fenced is not None:
            raise FencedError(self._fenced)

    def _all_exist(self, sst_ids: list[str]) -> bool:
        """Whether every SST in ``sst_ids`` is still in the store (one ranged GET each)."""
        for sst_id in sst_ids:
            name = paths.sst_key(sst_id)
            try:
                retrying(lambda name=name: self._store.get_range(name, 0, 1))
            except NotFoundError:
                return False
        return True

    def _refresh_aged_parts(self) -> None:
        """Copy uploaded-but-unpublished SSTs older than half the GC grace period to new ids.

        GC may delete an unreferenced SST once it is older than the grace period; publishing
        only young SSTs is what makes that safe (see :mod:`silt.gc`).
        """
        max_age = int(self._settings.gc_grace_seconds * 500)
        now = self._clock.now_ms()
        for part in self._parts:
            info = part.info
            if info is None or now - paths.id_time_ms(info.id) <= max_age:
                continue
            old_name = paths.sst_key(info.id)
            try:
                data = retrying(lambda old_name=old_name: self._store.get(old_name))
            except NotFoundError:
                raise StoreError(
                    f"an SST uploaded {(now - paths.id_time_ms(info.id)) // 1000}s ago and never "
                    "committed was garbage-collected; its writes are lost to this DB. Reopen "
                    "and redo them, and commit more often than Settings.gc_grace_seconds/2"
                ) from None
            new_id = paths.new_id(now)
            new_name = paths.sst_key(new_id)
            if not retrying(lambda n=new_name, d=data: self._store.put_if_absent(n, d)):
                raise StoreError(f"SST name {new_name!r} already exists")
            part.info = SstInfo(**{**info.__dict__, "id": new_id})
            reader = SstReader(self._store, new_name, part.info, self._cache)
            self._readers[new_id] = reader
            part.reader = reader
            self._metrics.add("ssts_reuploaded")

    def _is_ours(self, manifest: Manifest) -> bool:
        """Read back the manifest of ``manifest.version`` and compare the commit token."""
        name = paths.manifest_key(manifest.version)
        try:
            existing = Manifest.decode(retrying(lambda: self._store.get(name)), name)
        except NotFoundError:
            return False
        return existing.token == manifest.token

    def _resolve_uncertain(self) -> None:
        """After a commit whose outcome was unknown, find out whether it happened."""
        if self._uncertain is None:
            return
        manifest, adopted, refused = self._uncertain
        ours = self._is_ours(manifest)
        self._uncertain = None
        if not ours:
            return
        try:
            self._post_commit(manifest, resolving=True)
        except (CommitConflict, FencedError, CorruptionError, WithdrawnError):
            raise
        except StoreError:
            self._uncertain = (manifest, adopted, refused)
            raise
        self._landed(manifest, adopted, refused)

    @staticmethod
    def _check_version(version: Any) -> None:
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidTypeError(f"a version must be an int, got {type(version).__name__}")
        if not 0 <= version <= paths.MAX_VERSION:
            raise InvalidArgumentError(
                f"a version must be between 0 and {paths.MAX_VERSION}, got {version}"
            )

    def _reader(self, info: SstInfo) -> SstReader:
        reader = self._readers.get(info.id)
        if reader is None or (reader.info is not info and reader.info != info):
            # New, or a reference whose clip range changed (references to one SST unified)
            reader = self._siblings.reader(info, self._cache)
            self._readers[info.id] = reader
        return reader

    def _install(self, manifest: Manifest | None) -> None:
        """Make ``manifest`` the base version; committed parts move into L0."""
        self._manifest = manifest
        if manifest is None:
            self._lineage, self._next = None, 1
            return
        self._lineage, self._next = manifest.version, manifest.next_version
        live_ids = {s.id for s in manifest.all_ssts()}
        self._l0 = tuple(self._reader(s) for s in manifest.l0)
        self._levels = tuple(_Level([self._reader(s) for s in lv]) for lv in manifest.levels)
        self._parts = tuple(p for p in self._parts if p.info is None or p.info.id not in live_ids)
        for sst_id in [i for i in self._readers if i not in live_ids]:
            if not any(p.info is not None and p.info.id == sst_id for p in self._parts):
                del self._readers[sst_id]

    # -- references to siblings --------------------------------------------------------------
    def reference(
        self, source: DB, start: bytes | None = None, end: bytes | None = None
    ) -> int:
        """Take keys ``[start, end)`` of sibling ``source``'s committed version as this DB's
        state **by reference**: the next commit's manifest lists ``source``'s SSTs clipped to the
        range, so nothing is read or written but at most two blocks per SST at each boundary
        the range cuts (see :mod:`silt.siblings`). Returns the number of SST entries referenced.

        This is how a rescaled Spark operator's new shard starts from its old shards' state. The
        DB must be new: no committed version and no writes yet (writes made after the call are
        newer than the referenced state, as usual). Call it once per source, with disjoint
        ranges; ``source`` must be open at a committed version (its uncommitted writes are not
        part of the reference) in the same parent folder as this DB, with the same tier options.
        Reads see the referenced state at once; it becomes durable with :meth:`commit`, which
        then fails with :class:`~silt.errors.FencedError` if garbage collection of ``source``
        passed the referenced version meanwhile. Compaction later rewrites the referenced SSTs
        into this DB's own; run GC on the common parent folder, so that it sees every
        reference (GC of the source alone keeps all of the source's SSTs from then on).

        Raises :class:`~silt.errors.ReferenceConflict` when the ranges overlap or a sibling SST
        cannot be listed once with one clip range (copy such a range instead).
        """
        with self._lock:
            self._check_open()
            if not isinstance(source, DB):
                raise InvalidTypeError(
                    f"reference() takes an open silt.DB, got {type(source).__name__}"
                )
            source._check_open()
            if start is not None:
                start = self._check_key(start)
            if end is not None:
                end = self._check_key(end)
            if start is not None and end is not None and start >= end:
                raise InvalidArgumentError(f"empty range: start {start!r} >= end {end!r}")
            if self._manifest is not None or self._parts or len(self._mem) or self._uncertain:
                raise InvalidArgumentError(
                    f"{self._url!r} already has state (a committed version or writes): "
                    "reference() starts a new DB; open a new root next to the source instead"
                )
            name = sibling_name(self._url, source.url)
            if name == _split_parent(self._url)[1]:
                raise InvalidArgumentError("a DB cannot reference itself")
            for r in self._refs:
                if (r.end is None or start is None or start < r.end) and (
                    end is None or r.start is None or r.start < end
                ):
                    raise ReferenceConflict(
                        f"range [{start!r}, {end!r}) overlaps the range [{r.start!r}, "
                        f"{r.end!r}) already referenced from {r.source!r}"
                    )
            manifest = source.manifest
            if manifest is None:
                return 0
            with self._metrics.purpose("read"):
                l0, levels = clip_manifest(manifest, name, start, end, self._siblings)
            ref = _Reference(name, manifest.version, start, end, l0, levels)
            base = combine([(r.l0, r.levels) for r in [*self._refs, ref]])
            seen: set[tuple[str, str]] = set()
            for s in (*base[0], *(s for run in base[1] for s in run)):
                if (s.db, s.id) in seen:
                    raise ReferenceConflict(
                        f"SST {s.id} of {s.db!r} would be listed twice (in L0 and a level); "
                        "copy this range instead"
                    )
                seen.add((s.db, s.id))
            self._refs.append(ref)
            self._ref_base = base
            self._l0 = tuple(self._reader(s) for s in base[0])
            self._levels = tuple(_Level([self._reader(s) for s in run]) for run in base[1])
            return len(l0) + sum(len(run) for run in levels)

    # -- reads --------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or ``None`` if it is absent, deleted or expired."""
        if key.__class__ is not bytes or len(key) > self._max_key:
            key = self._check_key(key)
        if self._closed:
            self._check_open()
        r = self._mem.data.get(key, MISSING)
        if r is MISSING:
            if self._parts or self._levels:
                r = self._get_below(key)
            elif self._l0:  # everything below the memtable is in L0: one call, no frame more
                r = get_from(self._l0, key)
        if r.__class__ is bytes:
            return r  # type: ignore[return-value]
        if r is MISSING or r is None:
            return None
        return visible(r, self._clock.now_ms())

    def _get_below(self, key: bytes) -> object:
        h = -1  # bloom_hash(key), computed once for all SSTs when the first one needs it
        for part in reversed(self._parts):
            mem = part.memtable
            if mem is not None:
                r = mem.data.get(key, MISSING)
            else:
                if h < 0:
                    h = bloom_hash(key)
                r = part.reader.get(key, h)  # type: ignore[union-attr]
            if r is not MISSING:
                return r
        if self._l0:
            r = get_from(self._l0, key, h)
            if r is not MISSING:
                return r
        for level in self._levels:
            reader = level.find(key)
            if reader is not None:
                if h < 0:
                    h = bloom_hash(key)
                r = reader.get(key, h)
                if r is not MISSING:
                    return r
        return MISSING

    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values for many keys at once (``None`` where absent), in the order given.

        Keys are sorted and deduplicated; each SST is probed for the keys still unresolved, and
        each needed block is read once, missing blocks fetched in parallel
        (``Settings.read_parallelism``).
        """
        self._check_open()
        if isinstance(keys, (bytes, str)):
            raise InvalidTypeError("multi_get takes a sequence of keys, not a single key")
        limit = self._max_key
        keys = list(keys)
        # C loops over the keys; the per-key check (which also converts bytes-like) only when
        # some key is not plain bytes within the limit.
        if keys and (set(map(type, keys)) != _BYTES_ONLY or max(map(len, keys)) > limit):
            keys = [
                k if k.__class__ is bytes and len(k) <= limit else self._check_key(k) for k in keys
            ]
        found: dict[bytes, object] = {}
        mem = self._mem.data
        parts = self._parts
        l0 = self._l0
        levels = self._levels
        remaining = split_found(sorted(set(keys)), mem, found)
        # Parts newest first, each as a memtable or (once uploaded) as an SST: uploads finish
        # out of order (parallel uploads, a failed upload retried at commit), so an older part
        # may still be a memtable while a newer one is already an SST.
        for part in reversed(parts):
            if not remaining:
                break
            pm = part.memtable
            if pm is not None:
                remaining = split_found(remaining, pm.data, found)
            else:
                remaining = self._probe(part.reader, remaining, found)  # type: ignore[arg-type]
        for reader in l0:
            if not remaining:
                break
            remaining = self._probe(reader, remaining, found)
        for level in levels:
            if not remaining:
                break
            still: list[bytes] = []
            pos = 0
            for reader in level.readers:
                info = reader.info
                lo = bisect_left(remaining, info.smallest, pos)  # type: ignore[union-attr]
                hi = bisect_right(remaining, info.largest, lo)  # type: ignore[union-attr]
                still.extend(remaining[pos:lo])
                if lo < hi:
                    still.extend(self._probe(reader, remaining[lo:hi], found))
                pos = hi
            still.extend(remaining[pos:])
            remaining = still
        return visible_many(keys, found, self._clock.now_ms())

    def _probe(
        self, reader: SstReader, keys: list[bytes], found: dict[bytes, object]
    ) -> list[bytes]:
        """Look ``keys`` (sorted) up in one SST; fill ``found``; return the unresolved keys."""
        info = reader.info
        lo = bisect_left(keys, info.smallest)  # type: ignore[union-attr]
        hi = bisect_right(keys, info.largest)  # type: ignore[union-attr]
        if lo >= hi:
            return keys
        tail = reader.tail
        # One pass of the sorted keys against the bloom filter and the index (compiled: a merge).
        unresolved, block_ids, groups = plan_probe(keys, lo, hi, tail.bloom, tail.last_keys)
        lookup_groups(self._fetch_blocks(reader, block_ids), groups, found, unresolved)
        unresolved.extend(keys[hi:])
        unresolved.sort()
        return unresolved

    def _fetch_blocks(self, reader: SstReader, indexes: list[int]) -> list[Any]:
        """Blocks ``indexes`` of ``reader`` (a list in the same order): cached ones from the
        cache, the others read in parallel (``Settings.read_parallelism``) and cached."""
        out = reader.cached_blocks(indexes)
        if None not in out:
            return out
        where = {i: j for j, (i, blk) in enumerate(zip(indexes, out)) if blk is None}
        missing = list(where)
        if len(missing) == 1:
            out[where[missing[0]]] = reader.block(missing[0])
        elif missing:
            if self._read_pool is None:
                with self._lock:
                    if self._read_pool is None:
                        self._read_pool = ThreadPoolExecutor(
                            self._settings.read_parallelism, thread_name_prefix="silt-read"
                        )
            for i, raw in zip(missing, self._read_pool.map(reader.read_raw_block, missing)):
                blk = reader.decode_block(i, raw)
                reader.put_cached(i, blk)
                out[where[i]] = blk
        return out

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` for live keys in ``[start, end)`` (and with ``prefix``), in order.

        The scan sees the state as of the call: later writes are not included. Blocks read by a
        scan are not added to the block cache, so a full scan does not evict hot blocks.
        """
        self._check_open()
        if start is not None:
            start = self._check_key(start)
        if end is not None:
            end = self._check_key(end)
        if prefix is not None:
            prefix = self._check_key(prefix)
            if start is None or start < prefix:
                start = prefix
            upper = _prefix_end(prefix)
            if upper is not None and (end is None or end > upper):
                end = upper
        if start is not None and end is not None and start >= end:
            return iter(())
        sources: list[Iterator[tuple[bytes, object]]] = [self._mem.iter_range(start, end)]
        for part in reversed(self._parts):
            mem = part.memtable
            if mem is not None:
                sources.append(mem.iter_range(start, end))
            elif _overlaps(part.info, start, end):  # type: ignore[arg-type]
                sources.append(part.reader.iter_range(start, end))  # type: ignore[union-attr]
        for reader in self._l0:
            if _overlaps(reader.info, start, end):  # type: ignore[arg-type]
                sources.append(reader.iter_range(start, end))
        for level in self._levels:
            readers = level.overlapping(start, end)
            if readers:
                sources.append(_chain_range(readers, start, end))
        return live(merge_newest_first(sources), self._clock.now_ms())

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
        sources: list[Iterator[tuple[bytes, object]]] = []
        for reader in self._l0:
            if _overlaps(reader.info, start, end):  # type: ignore[arg-type]
                sources.append(reader.iter_range(start, end))
        for level in self._levels:
            readers = level.overlapping(start, end)
            if readers:
                sources.append(_chain_range(readers, start, end))
        return merge_newest_first(sources) if sources else iter(())

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Release threads, caches and the store. Uncommitted writes are discarded.

        Idempotent. Waits for uploads in progress so no thread touches the store afterwards.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for pool in (self._uploader, self._read_pool):
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
            self._uploader = self._read_pool = None
            self._compaction.close()
            self._cache.clear()
            self._mem = Memtable()
            self._parts = ()
            self._siblings.close()
            if self._owns_store:
                self._store.close()

    def stats(self) -> dict[str, Any]:
        """Counters for inspection: memtable, SSTs per level, amplification, cache, requests.

        ``read_amplification`` is the number of SSTs a point read may probe (L0 SSTs plus one per
        non-empty level); ``write_amplification`` is bytes written to SSTs (flushes and
        compaction outputs) per byte flushed from memtables; ``requests`` counts object-store
        requests and bytes by purpose (write, flush, commit, compaction, gc, read) and kind.
        """
        m = self._metrics.snapshot()
        flushed = m.get("flush_bytes", 0)
        written = flushed + m.get("compaction_output_bytes", 0)
        manifest = self._manifest
        return {
            "version": self.version,
            "memtable_bytes": self._mem.approx_bytes,
            "memtable_entries": len(self._mem),
            "pending_parts": len(self._parts),
            "l0_ssts": len(self._l0),
            "levels": [len(lv.readers) for lv in self._levels],
            "level_bytes": [sum(s.size for s in run) for run in manifest.levels]
            if manifest is not None else [],
            "read_amplification": len(self._l0) + sum(1 for lv in self._levels if lv.readers),
            "write_amplification": (written / flushed) if flushed else 0.0,
            "compaction_running": self._compaction.running,
            "cache_bytes": self._cache.used,
            "cache_hits": self._cache.hits,
            "cache_misses": self._cache.misses,
            "store": self._store.stats(),
            **m,
        }

    def wait_for_compaction(self, timeout: float | None = None) -> bool:
        """Block until the background compaction in flight (if any) has finished.

        Its result is adopted by the next :meth:`commit`. Returns False if ``timeout`` seconds
        passed first. Useful before measuring, and in tests.
        """
        self._check_open()
        return self._compaction.wait(timeout)

    def newer_versions(self) -> list[int]:
        """Committed versions greater than this DB's base version (one LIST), ascending.

        A non-empty answer means another writer (or an earlier run) has moved on. Withdrawn
        versions are not listed.
        """
        self._check_open()
        base = self.version
        return [v for v in list_versions(self._store).versions if base is None or v > base]

    # -- retention ----------------------------------------------------------------------------
    def checkpoint(self, name: str) -> int:
        """Pin the committed version under ``name`` so GC keeps it; returns the version.

        Checkpoint objects are create-only: naming a version twice is fine, re-pointing a name
        at another version is an error. A version below the GC horizon cannot be checkpointed
        (``VersionNotFoundError``): GC may be deleting it. A version this DB did not commit
        itself is **settled** first (its fate record says so), so that its writer, if it is
        still finishing that commit, can no longer withdraw it; a version whose writer withdrew
        it, or whose SSTs a running GC pass may still collect, cannot be checkpointed.
        """
        with self._lock:
            self._check_open()
            if not isinstance(name, str) or not _CHECKPOINT_NAME.fullmatch(name):
                raise InvalidArgumentError(
                    f"checkpoint names are 1-128 characters of letters, digits, '.', '_' and '-'"
                    f", got {name!r}"
                )
            manifest = self._manifest
            if manifest is None:
                raise InvalidArgumentError("nothing is committed yet: commit before checkpointing")
            version = manifest.version
            # Rollback detection: once pinned, this number (with this token) was seen.
            pin = paths.pin_key(version, manifest.token)
            retrying(lambda: self._store.put_if_absent(pin, b""))
            key = paths.checkpoint_key(name)
            token = uuid.uuid4().hex
            body = encode_checkpoint(version, self._clock.now_ms(), token)
            created = retrying(lambda: self._store.put_if_absent(key, body))
            if not created:
                pinned = read_checkpoints(self._store).get(name)
                if pinned != version:
                    raise AlreadyExistsError(
                        f"checkpoint {name!r} already pins version {pinned} of {self._url!r}; "
                        "choose another name"
                    )
                try:  # a lost response whose retry found our own object?
                    existing = decode_checkpoint(retrying(lambda: self._store.get(key)), key)
                    created = existing.token == token
                except (NotFoundError, CorruptionError):
                    created = False
            if not created:
                return version
            markers = read_markers(self._store)
            refusal = None
            if version < markers.horizon:
                # GC has passed this version (it may already be deleted, or be deleted by a GC
                # pass that read the checkpoints before this one existed).
                refusal = (
                    f"version {version} of {self._url!r} is below the garbage-collection "
                    f"horizon {markers.horizon} and may be collected, so it cannot be "
                    "checkpointed; checkpoint a newer version"
                )
            elif version != self._confirmed:
                refusal = self._settle(manifest, markers)
            if refusal is not None:
                retrying(lambda: self._store.delete_many([key]))
                raise VersionNotFoundError(refusal)
            return version

    def _settle(self, manifest: Manifest, markers: GcMarkers) -> str | None:
        """Create ``manifest``'s fate record saying ``settled`` (so its writer cannot withdraw
        it any more), after checking that no GC pass may collect what it newly published.
        Returns why it cannot be settled, or None."""
        version = manifest.version
        ids = self._new_ssts(manifest)
        if ids:
            running, done = markers.passes_after(min(paths.id_time_ms(i) for i in ids))
            if running:
                return (
                    f"version {version} of {self._url!r} cannot be checkpointed yet: its commit "
                    f"may still be withdrawn, as a garbage-collection pass (cutoff {running[-1]}) "
                    "that may collect its SSTs is running. Retry when GC is done, or checkpoint "
                    "a newer version"
                )
            if done and not self._all_exist(ids):
                return (
                    f"version {version} of {self._url!r} lost SSTs to garbage collection (its "
                    "commit stalled past the grace period) and is being withdrawn; checkpoint "
                    "another version"
                )
        fate = Fate(version, SETTLED, "pinned by a checkpoint", manifest.token)
        name = paths.fate_key(version)
        if retrying(lambda: self._store.put_if_absent(name, fate.encode())):
            return None
        existing = read_fate(self._store, version)
        if existing is not None and existing.withdraws(manifest):
            return (
                f"version {version} of {self._url!r} was withdrawn by its writer "
                f"({existing.reason}); checkpoint another version"
            )
        return None

    def _new_ssts(self, manifest: Manifest) -> list[str]:
        """Ids of the SSTs ``manifest`` published itself (not in its parent's state, not
        references). Reads the parent manifests it needs (a reservation or a withdrawn
        version stands for its own parent)."""
        own = {s.id for s in manifest.all_ssts() if not s.db}
        parent = manifest.parent
        for _ in range(8):
            if parent is None or not own:
                return sorted(own)
            name = paths.manifest_key(parent)
            try:
                pm = Manifest.decode(retrying(lambda name=name: self._store.get(name)), name)
            except NotFoundError:
                return sorted(own)  # collected: count every SST as new
            fate = read_fate(self._store, parent)
            if pm.skip_to is None and (fate is None or not fate.withdraws(pm)):
                return sorted(own - {s.id for s in pm.all_ssts()})
            parent = pm.parent
        return sorted(own)

    def gc(self, *, retain_versions: int | None = None, grace_seconds: float | None = None,
           dry_run: bool = False) -> GcReport:
        """Run garbage collection on this DB's root (see :mod:`silt.gc`).

        Defaults come from :class:`Settings` (``retain_versions``, ``gc_grace_seconds``). A
        grace shorter than this DB's own ``Settings.gc_grace_seconds`` is refused: GC could
        then delete SSTs this writer uploaded and has not committed yet.
        """
        self._check_open()
        if retain_versions is None:
            retain_versions = self._settings.retain_versions
        if grace_seconds is None:
            grace_seconds = self._settings.gc_grace_seconds
        else:
            check_grace(grace_seconds)
            if grace_seconds < self._settings.gc_grace_seconds:
                raise InvalidArgumentError(
                    f"grace_seconds={grace_seconds!r} is shorter than this DB's "
                    f"Settings.gc_grace_seconds={self._settings.gc_grace_seconds}: GC could "
                    "delete SSTs this writer uploaded and has not committed yet. Use a grace "
                    "at least that long, or open the DB with a shorter gc_grace_seconds"
                )
        with self._metrics.purpose("gc"):
            return collect_garbage(
                self._store,
                retain_versions=retain_versions,
                grace_seconds=grace_seconds,
                clock=self._clock,
                dry_run=dry_run,
            )


_CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _chain_range(
    readers: Iterable[SstReader], start: bytes | None, end: bytes | None
) -> Iterator[tuple[bytes, object]]:
    for reader in readers:
        yield from reader.iter_range(start, end)


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)
