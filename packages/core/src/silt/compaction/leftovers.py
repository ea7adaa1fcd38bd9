"""Leftovers: compactions an earlier handle finished but never committed serve a new handle.

A background compaction writes its outputs and its record (``compaction/<id>``) before the
writer's next commit adopts it. A writer that closes or stops before that commit leaves both
behind, and a handle opened afterwards read the committed tree as the load left it: right after
a bulk load of 5M keys, every get of a fresh process probed 13 overlapping L0 SSTs (their
filters, their tails to load) although the compaction of all of them into level 1 had finished.
Now a DB that compacts in its own process (``background`` or ``thread`` mode, a compaction
policy set) and opens a committed version of a local store starts :class:`LeftoverFinder`, a
thread that lists ``compaction/`` once and hands the records it finds to the driver
(:meth:`.driver.CompactionDriver.add_leftovers`); :mod:`.early` then shows them to reads by the
rules it shows the writer's own finished compactions by, and a commit adopts them as it adopts
an external compactor's records. :meth:`silt.DB.wait_for_compaction` waits for the finder.

Checks. Before a leftover serves reads, its record must decode (its own checksum), name itself,
and every output must pass the check of its tail against the record (size, entry counts, key
range: :func:`.driver.check_outputs` without ``blocks``), as the writer's own compactions do
before they are shown; its data blocks are then checked as every block is, by their checksum
when a read loads them, so a damaged output fails a read with ``CorruptionError`` and never
answers wrongly. Before a commit adopts it (after which GC may remove the inputs and the outputs
are the only copy), every block of every output is read and checked, exactly as for an external
compactor's record: the first commit that finds leftovers unchecked
(:meth:`.driver.CompactionDriver.gather`) adopts none of them and starts that read on a thread
(:meth:`LeftoverFinder.check_soon`), and a later commit adopts those that passed; one that fails
leaves the view and is never adopted. So a process that only reads never pays that read (a
second of CPU for the outputs of a 5M-key compaction), and no commit waits for it. A refused
leftover's record object is not deleted (it may be another live writer's): GC collects it.
Where the DB's compactions may run in the compaction subprocess (``background`` mode, a
``file://`` root: :func:`.worker.can_check_elsewhere`), so does that read, output by output, at
the subprocess's lower priority and outside the writer's GIL: after a restart it would otherwise
take the writer's process for a second of CPU per 5M keys, beside the stream's next tasks.

Age, and why GC cannot take the outputs from under a reader. A leftover's outputs are referenced
by no manifest: GC may delete them once they are older than GC's grace, which is never shorter
than the grace the writer that uploaded them announced (:mod:`silt.graces`: the marker exists
before the upload), and so never shorter than the shortest grace announced. A leftover is shown
only while its oldest output is younger than half of the shortest of that grace and this
handle's own (:meth:`.driver.CompactionDriver.refusal` with the record's own limit), and
:mod:`.early`'s wake-up takes it out of the view at that age; the inputs stay in the base
manifest all along. A DB with no grace marker (written before the markers) has no leftovers.

Which base. Only the version the handle opened, and then versions it commits itself, show
leftovers (:attr:`.early.EarlyInstall.opened`): a follower moved to another writer's version
shows that version as committed. Adoption keeps every key's answer whatever the base
(:mod:`.adopt`), so a record built from another version than the one opened is applied when its
inputs are there and refused otherwise.

The first reads. The search runs on a thread so that open is not slower, and a read that came
before it was done probed the opened version's L0 SSTs (right after a 5M-key load: 14 filters
and 14 tails to load per get, for the first ~100 ms of a fresh process). When the opened
version has L0 SSTs, the handle's view waits for the search before its first read below the
memtable (:meth:`LeftoverFinder.view_for_reads`, :attr:`silt.view.ReadView.waits`): the
reads wait for it at most :data:`FIRST_READS_WAIT_SECONDS` all together (counted from the
first read that waited), then read the opened view as before, and the search shows what it
found to the reads after it. The wait changes when reads see the leftovers, never whether:
the rules above (the checks before a leftover is shown, adoption only after every block was
read and checked, the age limit) are the same.

Why local stores only. On object storage, adopting a leftover means downloading every output
first (the full check above): at a restart after a large load, gigabytes for a saving of a few
tail reads and filter probes per get. Remote stores keep ignoring leftovers (GC collects them).

Thread safety: the finder and the check read outside the DB's writer lock and take it only to
hand their results over; :meth:`LeftoverFinder.close` (under the lock, from ``DB.close``) stops
them between two requests and waits for them. :meth:`silt.DB.wait_for_compaction` waits for
both.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import paths
from ..clock import Clock
from ..errors import CorruptionError, NotFoundError, StoreError
from ..graces import announced
from ..metrics import Metrics
from ..sst.builder import SstInfo
from ..sst.check import check_sst
from ..store import ObjectStore, retrying
from .record import CompactionRecord
from .worker import can_check_elsewhere, check_elsewhere

if TYPE_CHECKING:
    from ..sst.reader import SstReader
    from ..state import TreeState
    from ..view import ReadView
    from .driver import CompactionDriver
    from .early import EarlyInstall

log = logging.getLogger("silt.compaction")

#: How long the reads of a handle whose opened version has L0 SSTs wait, at most and all
#: together, for the search to show what it found (module docstring, "The first reads").
FIRST_READS_WAIT_SECONDS = 1.0


def find(store: ObjectStore, known: set[str], now_ms: int, own_limit_ms: int,
         stop: threading.Event, make_reader: Callable[[SstInfo], SstReader],
         ) -> tuple[list[CompactionRecord], int, list[SstReader]]:
    """The records under ``compaction/`` (not in ``known``) that may serve reads now: decoded,
    named right, every output younger than the age limit and passing its tail check; that limit
    (ms): half of the shortest grace announced, at most ``own_limit_ms``; and the outputs'
    readers (``make_reader``) whose tails the check loaded. Nothing when no grace was announced.
    Store errors propagate; ``stop`` set ends the search early."""
    graces = announced(store)
    if not graces:
        return [], 0, []
    limit = min(own_limit_ms, graces[0] // 2)
    found: list[CompactionRecord] = []
    loaded: list[SstReader] = []
    for info in retrying(lambda: list(store.list(paths.COMPACTION_PREFIX))):
        if stop.is_set():
            return [], limit, []
        rid = info.key[len(paths.COMPACTION_PREFIX):]
        if rid in known:
            continue
        try:
            data = retrying(lambda key=info.key: store.get(key))
            record = CompactionRecord.decode(data, info.key)
            if record.id != rid:
                raise CorruptionError(info.key, None, f"the record names itself {record.id}")
        except NotFoundError:
            continue  # adopted, refused or collected since the listing
        except CorruptionError as exc:
            log.warning("ignoring compaction record %s: %s", info.key, exc)
            continue
        born = [paths.id_time_ms(s.id) for s in record.outputs]
        if born and now_ms - min(born) > limit:
            continue  # too old to show: GC may consider its outputs garbage
        readers = [make_reader(out) for out in record.outputs]
        why = check_tails(store, record, readers)
        if why is not None:
            log.warning("compaction record %s is not shown: %s", info.key, why)
            continue
        found.append(record)
        loaded += readers
    return found, limit, loaded


def check_tails(store: ObjectStore, record: CompactionRecord,
                readers: list[SstReader]) -> str | None:
    """:func:`.driver.check_outputs` without ``blocks``, loading each output's tail into its
    reader (``readers``, in the order of ``record.outputs``): the reads that follow find them
    loaded."""
    for out, reader in zip(record.outputs, readers, strict=True):
        key = paths.sst_key(out.id)
        try:
            check_sst(store, key, out, blocks=False, reader=reader)
        except NotFoundError:
            return f"output {key!r} does not exist"
        except CorruptionError as exc:
            return str(exc)
    return None


class LeftoverFinder:
    """Finds an opened base's leftover compactions once, on a thread of its own (module
    docstring), and hands them to ``driver``; ``early`` shows them. :meth:`check_soon` reads
    every block of their outputs, on another thread, before a commit may adopt them."""

    def __init__(self, store: ObjectStore, state: TreeState, driver: CompactionDriver,
                 early: EarlyInstall, clock: Clock, metrics: Metrics, version: int) -> None:
        self._store = store
        self._state = state
        self._driver = driver
        self._early = early
        self._lock = state.lock
        self._clock = clock
        self._metrics = metrics
        self._version = version
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="silt-leftovers", daemon=True)
        self._checker: threading.Thread | None = None
        self._deadline: float | None = None
        self._unwaited: tuple[ReadView, ReadView] | None = None
        driver.check_leftovers = self.check_soon

    def start(self) -> None:
        """Start the search. When the opened version has L0 SSTs (a load's, which a leftover
        compaction would replace), the view reads go to waits for it first (boundedly:
        :meth:`view_for_reads`), so they do not probe those L0 SSTs while it runs. Called by
        open before the handle is returned: no read or write has begun."""
        view = self._state.view
        if view.l0 and view.waits is None:
            self._state.view = view.waiting(self.view_for_reads)
        self._thread.start()

    def view_for_reads(self) -> ReadView:
        """The view a read of the opened view takes instead: the one installed once the search
        is over (it showed the leftovers it found, or found none), waiting for it at most until
        :data:`FIRST_READS_WAIT_SECONDS` after the first read that waited; after that, the
        opened view as it is (without the wait: the search goes on, and shows its result to
        the reads that come after it)."""
        deadline = self._deadline
        if deadline is None:
            deadline = self._deadline = time.monotonic() + FIRST_READS_WAIT_SECONDS
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - time.monotonic()))
        view = self._state.view
        if view.waits is None:
            return view
        # The search outlasted the wait: the opened view without it, made once (a copy per
        # read would build its key bounds again for every get until the search is over).
        copy = self._unwaited
        if copy is None or copy[0] is not view:
            copy = self._unwaited = (view, view.but())
        return copy[1]

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the leftovers found (if any) serve reads and a check of their blocks a
        commit started is over; False if ``timeout`` passed first."""
        self._thread.join(timeout)
        checker = self._checker
        if checker is not None and not self._thread.is_alive():
            checker.join(timeout)
            return not checker.is_alive()
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stop (the DB closes) and wait for the threads: they stop between two requests."""
        self._stop.set()
        for t in (self._thread, self._checker):
            if t is not None and t.is_alive() and threading.current_thread() is not t:
                t.join()

    def _under_lock(self, fn: Callable[[], None]) -> None:
        """``fn()`` under the writer lock, unless the DB closes first (a close holds the lock
        while it waits for these threads)."""
        while not self._stop.is_set():
            if self._lock.acquire(timeout=0.05):
                try:
                    if not self._stop.is_set():
                        fn()
                finally:
                    self._lock.release()
                return

    def _run(self) -> None:
        try:
            self._search()
        finally:
            self._under_lock(self._stop_waiting)

    def _stop_waiting(self) -> None:
        """The reads of the opened view stop waiting (a view installed since has no wait)."""
        view = self._state.view
        if view.waits is not None:
            self._state.view = view.but()

    def _search(self) -> None:
        try:
            with self._metrics.purpose("compaction"):
                records, limit, readers = find(
                    self._store, self._driver.known(), self._clock.now_ms(),
                    self._driver.max_age_ms, self._stop, self._state.new_reader)
        except (StoreError, OSError) as exc:  # only a saving: reads go to the base as before
            log.warning("could not look for finished compactions to read: %s", exc)
            return
        if not records:
            return

        def hand_over() -> None:
            self._state.keep_readers(readers)
            self._metrics.add("compactions_found", self._driver.add_leftovers(records, limit))
            self._early.opened = self._version
            self._early.settle()

        self._under_lock(hand_over)

    def check_soon(self, records: list[CompactionRecord]) -> None:
        """Read and check every block of ``records``' outputs on a thread (a commit found them
        unchecked: it adopts none of them, and a later commit adopts those that pass); one check
        at a time. Under the writer lock."""
        if self._stop.is_set() or (self._checker is not None and self._checker.is_alive()):
            return
        self._checker = threading.Thread(target=self._check, args=(records,),
                                         name="silt-leftovers-check", daemon=True)
        self._checker.start()

    def _check(self, records: list[CompactionRecord]) -> None:
        for record in records:
            try:
                why = self._check_blocks(record)
            except (StoreError, OSError) as exc:  # left unchecked: a later commit retries
                log.warning("could not check compaction %s (retried later): %s", record.id, exc)
                continue
            if self._stop.is_set():
                return
            self._under_lock(lambda r=record, w=why: self._driver.checked(r.id, w))
        # Show what changed (a damaged record leaves the view) and let compaction go on (under
        # the lock through _under_lock: EarlyInstall.finished would wait for a closing DB).
        self._under_lock(self._early.settle)

    def _check_blocks(self, record: CompactionRecord) -> str | None:
        """:func:`.driver.check_outputs` with ``blocks``, stopping early when the DB closes;
        one output at a time in the compaction subprocess where the DB qualifies."""
        elsewhere = self._driver.mode == "background" and can_check_elsewhere(self._store,
                                                                              self._clock)
        for out in record.outputs:
            if self._stop.is_set():
                return None
            key = paths.sst_key(out.id)
            try:
                with self._metrics.purpose("compaction"):
                    if elsewhere:
                        self._metrics.add("leftover_checks_in_subprocess")
                        check_elsewhere(self._store, key, out, self._metrics)
                    else:
                        check_sst(self._store, key, out, blocks=True)
            except NotFoundError:
                return f"output {key!r} does not exist"
            except CorruptionError as exc:
                return str(exc)
        return None
