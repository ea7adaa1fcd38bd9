"""Flush: frozen memtables become uploaded SSTs (docs/architecture.md, "The commit path").

A :class:`Flusher` owns the upload thread pool. :meth:`Flusher.freeze` moves the active
memtable of a read view into a new :class:`~silt.view.Part` and starts its upload while writes
go on (blocking the writer only while more than ``Settings.max_pending_flushes`` uploads wait);
:meth:`Flusher.wait` waits for every upload of a view's parts (retrying a failed one once);
:meth:`Flusher.refresh_aged` copies uploaded-but-uncommitted SSTs that are getting old under
new ids, so a commit only ever publishes SSTs younger than half the GC grace period and younger
than every GC pass it knows of (the rule that makes GC safe beside writers: see :mod:`silt.gc`).
Before its first upload a flusher announces its writer's grace (:mod:`silt.graces`), so GC
never uses a shorter one.

Uploads are create-only. Nothing uploaded here is part of any version until a commit publishes
it; an SST nobody publishes is garbage that GC removes after the grace period.

Threading: ``freeze``, ``wait`` and ``refresh_aged`` are called by the DB's single writer
(under its lock); uploads run on the pool.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from . import paths
from .cache import BlockCache
from .clock import Clock
from .errors import NotFoundError, StoreError
from .graces import Announcer
from .memtable import Memtable
from .metrics import MeteredStore
from .settings import Settings
from .sst.builder import SstInfo, build_sst
from .sst.format import FOOTER_SIZE
from .sst.reader import SstReader
from .store import retrying
from .view import Part, Readers, ReadView


class Flusher:
    """Uploads the frozen memtables of one DB (see the module docstring)."""

    def __init__(self, store: MeteredStore, settings: Settings, clock: Clock,
                 cache: BlockCache, readers: Readers) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._cache = cache
        self._readers = readers
        self._pool: ThreadPoolExecutor | None = None
        #: Announces this writer's grace before its first upload (also called by compaction).
        self.announce = Announcer(store, int(settings.gc_grace_seconds * 1000))

    def freeze(self, view: ReadView, seq: int = 0) -> ReadView:
        """The view with its memtable frozen into a new part whose upload has started (the same
        view if the memtable is empty). ``seq`` is the DB's range-delete counter now (the
        part's SST carries it, :mod:`silt.rangedel`). Blocks while too many uploads wait."""
        mem = view.mem
        if not mem.data:
            return view
        part = Part(mem, seq)
        frozen = view.but(mem=Memtable(), parts=(*view.parts, part))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self._settings.upload_parallelism, thread_name_prefix="silt-upload"
            )
        part.future = self._pool.submit(self._upload, part)
        # Backpressure: block the writer while too many flushes wait.
        while True:
            pending = [p for p in frozen.parts if p.future is not None and not p.future.done()]
            if len(pending) <= self._settings.max_pending_flushes:
                break
            pending[0].future.exception()  # type: ignore[union-attr]
        return frozen

    def wait(self, parts: tuple[Part, ...]) -> None:
        """Wait for every upload of ``parts``; a failed one is retried once, here."""
        for part in parts:
            assert part.future is not None
            if part.future.exception() is not None and part.reader is None:
                self._upload(part)

    def upload(self, part: Part) -> None:
        """Upload ``part``'s memtable now, in the calling thread (a fold of inline deltas,
        :mod:`silt.inline`); the part is then done like one :meth:`freeze` uploaded."""
        done: Future[None] = Future()
        self._upload(part)
        done.set_result(None)
        part.future = done

    def _upload(self, part: Part) -> None:
        with self._store.metrics.purpose("flush"):
            self._upload_now(part)

    def _upload_now(self, part: Part) -> None:
        self.announce()
        mem = part.memtable
        assert mem is not None
        keys, records = mem.sorted_items()
        now = self._clock.now_ms()
        sst_id = paths.new_id(now)
        data, info = build_sst(sst_id, keys, records, self._settings, created_ms=now)
        if part.seq:
            info = replace(info, seq=part.seq)
        name = paths.sst_key(sst_id)
        self._store.metrics.add("flush_bytes", len(data))
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
        if not self._store.local:
            # What was just written is what the next batches read: on an object store, keep
            # its blocks in the cache now rather than fetch them back (RocksDB's
            # prepopulate_block_cache for flushes).
            reader.prefill(data)
        self._readers.add(reader)
        part.info = info
        part.reader = reader
        part.memtable = None

    def refresh_aged(self, parts: tuple[Part, ...], reach_ms: int = 0,
                     base: int | None = None) -> None:
        """Copy uploaded-but-unpublished SSTs that GC may collect to new ids: those older than
        half the GC grace period, and those older than ``reach_ms``, the newest cutoff of a GC
        pass the writer knows of (:meth:`silt.commit.Committer.gc_reach`: such a pass deleted
        them if it listed them, or may still delete them). A copy's id is younger than every
        pass begun so far.

        GC may delete an unreferenced SST once it is older than the grace period; publishing
        only young SSTs is what makes that safe (see :mod:`silt.gc`). After a commit was
        withdrawn because a GC pass may have collected its SSTs, this is what makes the next
        commit publish copies that pass cannot touch, or fail saying plainly that the writes
        are gone: raises :class:`~silt.errors.StoreError` when an SST to copy is missing (the
        writes it held, made since version ``base``, exist nowhere else), before anything is
        committed; every later commit of this DB fails the same way.
        """
        max_age = int(self._settings.gc_grace_seconds * 500)
        now = self._clock.now_ms()
        for part in parts:
            info = part.info
            if info is None or info.inline:
                continue
            born = paths.id_time_ms(info.id)
            if now - born <= max_age and born >= reach_ms:
                continue
            old_name = paths.sst_key(info.id)
            try:
                data = retrying(lambda old_name=old_name: self._store.get(old_name))
            except NotFoundError:
                since = "the start" if base is None else f"version {base}"
                raise StoreError(
                    f"the writes made since {since} and not committed are lost: SST "
                    f"{old_name!r}, uploaded {(now - born) // 1000}s ago, was deleted by "
                    "garbage collection before a commit published it (the commit stalled past "
                    "the GC grace period, or GC ran with a grace shorter than this writer's "
                    "Settings.gc_grace_seconds). Nothing was committed and no version number "
                    "was used. Close this DB, reopen the latest version (silt.open) and write "
                    "them again; commit more often than gc_grace_seconds/2, and give GC at "
                    "least the writers' grace"
                ) from None
            new_id = paths.new_id(now)
            new_name = paths.sst_key(new_id)
            if not retrying(lambda n=new_name, d=data: self._store.put_if_absent(n, d)):
                raise StoreError(f"SST name {new_name!r} already exists")
            part.info = SstInfo(**{**info.__dict__, "id": new_id})
            reader = SstReader(self._store, new_name, part.info, self._cache)
            self._readers.add(reader)
            part.reader = reader
            self._store.metrics.add("ssts_reuploaded")

    def close(self) -> None:
        """Wait for uploads in flight and stop the pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
