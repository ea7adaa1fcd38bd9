"""Uploads held in flight: a test decides when each frozen memtable's SST upload finishes.

:class:`HeldUploads` hooks a :class:`~silt.testing.FaultyStore`: while ``holding``, an SST upload
(``put_if_absent`` of ``sst/...``, made by the DB's upload pool when a full memtable freezes)
waits before it reaches the store, up to ``limit`` at once (the next ones go through), until the
test lets it go with :meth:`HeldUploads.release`, in any order and at any moment: from the test's
thread between two calls, or from inside a read (a callback on ``get_range``), so that an upload
finishes while a read is halfway through the parts.

A DB under test needs ``upload_parallelism`` above ``limit`` (a free upload thread always exists)
and ``max_pending_flushes`` above the parts it makes (the writer never waits for a held upload);
everything that waits for uploads (``flush``, ``commit``, ``close``) must come after
:meth:`HeldUploads.release_all` (leaving a ``with held:`` block does it).

White-box on purpose, here only: an upload is told from a compaction's output by the thread
that makes it, and whether it has finished is read from the DB's read view (``DB._view.parts``).
"""

from __future__ import annotations

import threading
import time

import silt
from silt import paths
from silt.testing import FaultyStore

#: The name of the threads that upload frozen memtables (:class:`silt.flush.Flusher`'s pool).
UPLOAD_THREADS = "silt-upload"
#: A held upload not released within this many seconds fails the test instead of hanging it.
PATIENCE = 20.0


class HeldUploads:
    """The SST uploads of one store, held until released (see the module docstring)."""

    def __init__(self, store: FaultyStore, limit: int = 4) -> None:
        self.holding = False
        self.limit = limit
        self._lock = threading.Lock()
        #: (key, its go signal), in the order the uploads arrived
        self.held: list[tuple[str, threading.Event]] = []
        store.on_call("put_if_absent", self._hold,
                      predicate=lambda k: k.startswith(paths.SST_PREFIX))

    def _hold(self, op: str, key: str) -> None:
        if not threading.current_thread().name.startswith(UPLOAD_THREADS):
            return  # a compaction's output, or a fold of inline deltas at a commit
        with self._lock:
            if not self.holding or len(self.held) >= self.limit:
                return
            go = threading.Event()
            self.held.append((key, go))
        if not go.wait(PATIENCE):
            raise AssertionError(f"held upload of {key} never released")

    def settle(self, db: silt.DB) -> None:
        """Wait until every upload of ``db`` in flight is a held one (the others finished)."""
        deadline = time.monotonic() + PATIENCE
        while in_flight(db) != len(self.held):
            if time.monotonic() > deadline:
                parts = [(p.future and p.future.done(), p.memtable is None,
                          p.info and p.info.id) for p in db._view.parts]
                raise AssertionError(f"{in_flight(db)} uploads in flight, {len(self.held)} held"
                                     f" {[k for k, _ in self.held]} {parts}")
            time.sleep(0.0005)

    def release(self, db: silt.DB, i: int) -> str:
        """Let the ``i``-th held upload (modulo their number) finish; return its key once the
        DB reads that part as its SST."""
        with self._lock:
            key, go = self.held.pop(i % len(self.held))
        go.set()
        deadline = time.monotonic() + PATIENCE
        while not uploaded(db, key):
            if time.monotonic() > deadline:
                raise AssertionError(f"the upload of {key} did not finish")
            time.sleep(0.0005)
        return key

    def release_all(self, db: silt.DB | None = None) -> None:
        """Stop holding and let every held upload go (and, given ``db``, wait for them)."""
        with self._lock:
            self.holding = False
            held, self.held = self.held, []
        for _, go in held:
            go.set()
        if db is not None:
            self.settle(db)


    def __enter__(self) -> HeldUploads:
        return self

    def __exit__(self, *exc: object) -> None:
        """Let every held upload go (a failed test's DB can then close)."""
        self.release_all()


def in_flight(db: silt.DB) -> int:
    """Frozen memtables of ``db`` whose upload has not finished."""
    return sum(1 for p in db._view.parts if p.future is not None and not p.future.done())


def uploaded(db: silt.DB, key: str) -> bool:
    """Whether ``db`` reads the part uploaded as ``key`` as that SST."""
    return any(p.memtable is None and p.info is not None and paths.sst_key(p.info.id) == key
               and p.future is not None and p.future.done() for p in db._view.parts)
