"""Writer grace markers: every writer of a DB tells garbage collection the grace period it needs
before it uploads anything, so that GC honours every writer that may still commit.

A writer uploads SSTs before a commit publishes them, and GC deletes an unreferenced SST once it
is older than GC's grace period. A writer publishes only SSTs younger than half of its own grace
(``Settings.gc_grace_seconds``; older ones are copied first), so its flushed, uncommitted SSTs
are safe exactly when GC's grace is at least the writer's. The grace GC uses must therefore be
at least that of *every* writer that may still publish an SST it uploaded, not only that of the
writer of the newest manifest: a writer that committed the newest version with a grace of 0
would otherwise let GC with a grace of 0 delete what another writer, with the default grace,
had flushed and not committed yet.

``gc/grace/<grace_ms:020d>`` (empty, create-only; name in :mod:`silt.paths`): some writer of the
DB uses a grace of ``grace_ms``. A writer creates the marker of its own grace before its first
upload (:class:`Announcer`: once per DB handle, before the first flush and the first compaction
output; a marker that exists already is left as it is, and a handle that listed ``gc/`` before
its first upload and saw its own grace's marker there creates nothing: :meth:`Announcer.seen`).
GC lists a DB's markers *after* its listing of candidates (:func:`silt.gc.collect_garbage`, step
2) and refuses, before it writes or deletes anything, a grace shorter than the greatest
(:func:`required_grace`). Why that order is
enough: an SST the candidate listing saw was uploaded before that listing, so its writer's
marker existed before it, and the later listing of markers sees the marker.

GC never deletes these markers: a writer that may still commit cannot be told from one that is
gone (a process may stall for any time). So a DB's grace only grows, one marker per distinct
value, until an operator lowers it with :func:`lower_grace` after stopping every writer that
uses a longer one. A DB written before these markers existed has none; GC then applies its
earlier rule alone (the grace the newest manifest records, or the default of
``Settings.gc_grace_seconds``), which it applies besides the markers in every case.

Thread safety: :class:`Announcer` may be called from the upload and compaction threads at once.
"""

from __future__ import annotations

import math
import threading

from . import paths
from .errors import InvalidArgumentError, InvalidTypeError
from .store import ObjectStore, retrying


class Announcer:
    """Creates the grace marker of one writer before its first upload (see the module
    docstring). Call it before every upload: after the first success it costs nothing."""

    def __init__(self, store: ObjectStore, grace_ms: int) -> None:
        self._store = store
        self.grace_ms = grace_ms
        self._lock = threading.Lock()
        self._done = False

    def seen(self, graces: tuple[int, ...]) -> None:
        """A listing of ``gc/`` (:func:`silt.markers.read_markers`) showed the markers of
        ``graces``: when this writer's is among them, it exists and stays (nothing deletes it
        while a writer with that grace may still commit, module docstring), so no upload of
        this handle needs to create it."""
        if self.grace_ms in graces:
            self._done = True

    @property
    def announced(self) -> bool:
        """Whether this writer's marker is known to exist (created by this handle, or shown by
        a listing :meth:`seen` was given): no upload of this handle creates it again."""
        return self._done

    def __call__(self) -> None:
        """Make sure the marker exists (one create-only PUT, the first time); raises
        :class:`~silt.errors.StoreError` when it cannot be written (then nothing is uploaded)."""
        if self._done:
            return
        with self._lock:
            if self._done:
                return
            name = paths.grace_key(self.grace_ms)
            retrying(lambda: self._store.put_if_absent(name, b""))
            self._done = True


def check_grace(grace_seconds: object) -> float:
    """Validate a GC grace period given by a caller: a finite number of seconds >= 0."""
    if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, (int, float)):
        raise InvalidTypeError(
            f"grace_seconds must be a number of seconds, got {type(grace_seconds).__name__}"
        )
    if not math.isfinite(grace_seconds) or grace_seconds < 0:
        raise InvalidArgumentError(
            f"grace_seconds must be a finite number of seconds >= 0, got {grace_seconds!r}"
        )
    return float(grace_seconds)


def announced(store: ObjectStore, db: str = "") -> list[int]:
    """The graces (ms) the writers of the DB at prefix ``db`` announced, ascending (one LIST)."""
    base = db + paths.GRACE_PREFIX
    out = []
    for info in retrying(lambda: list(store.list(base))):
        ms = paths.parse_grace_key(info.key[len(db):])
        if ms is not None:
            out.append(ms)
    return sorted(out)


def required_grace(store: ObjectStore, db: str, recorded_ms: int) -> int:
    """The shortest grace (ms) GC may use on the DB at prefix ``db``: the greatest grace its
    writers announced, and at least ``recorded_ms`` (what the newest manifest records, or the
    default; the rule for writers older than the markers). List after the candidates."""
    return max([recorded_ms, *announced(store, db)])


def lower_grace(store: ObjectStore, grace_seconds: float) -> list[str]:
    """Forget the writer graces longer than ``grace_seconds`` in every DB under ``store``'s
    root, so that GC accepts that grace again; returns the markers deleted.

    Run it only after every writer that used a longer grace stopped (closed or died) and its
    uncommitted SSTs may go: a writer still running with a longer grace would have SSTs GC may
    now delete before it commits them (its commit then fails saying its writes are lost); a
    stream query is such a writer until it stops, whichever process runs its next batch (a
    handle handed between processes carries its grace as announced: :mod:`silt.handoff`).
    Start the writers again with the shorter ``Settings.gc_grace_seconds``. Raises
    :class:`~silt.errors.InvalidArgumentError` for a grace that is not a finite number >= 0.
    """
    limit = int(check_grace(grace_seconds) * 1000)
    doomed = []
    for info in retrying(lambda: list(store.list(""))):
        ms = paths.parse_grace_key(paths.split_db(info.key)[1])
        if ms is not None and ms > limit:
            doomed.append(info.key)
    if doomed:
        retrying(lambda: store.delete_many(doomed))
    return doomed
