"""Running a round of independent requests: at once where that saves time, in order otherwise.

A :data:`Gather` takes calls that do not depend on each other (the reads of one round of a
protocol: a manifest and a fate record, a PUT and a listing) and returns their results in
order, raising the first error after all have finished. :func:`serially` runs them one after
the other in the calling thread; :func:`at_once` on threads of their own (before a DB's pool
exists); :func:`gather_on` on an open DB's read pool, counted under the caller's purpose, or
serially on a local store. Used by the commit protocol (:mod:`silt.commit`,
:mod:`silt.postcheck`), by :func:`silt.open` and by version following (:mod:`silt.reopen`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fetch import BlockFetcher
    from .metrics import Metrics
    from .store import ObjectStore

#: Runs independent calls (at once where it can) and returns their results in order.
Gather = Callable[[Sequence[Callable[[], Any]]], list[Any]]


def serially(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """A :data:`Gather` that runs the calls one after the other, in the calling thread."""
    return [call() for call in calls]


def gather_on(store: ObjectStore, metrics: Metrics, fetch: BlockFetcher,
              calls: Sequence[Any]) -> list[Any]:
    """The :data:`Gather` of an open DB: run independent requests at once on its read pool
    ``fetch``, counted under the caller's purpose (see :meth:`BlockFetcher.gather
    <silt.fetch.BlockFetcher.gather>`); one after the other in this thread on a local store
    (``ObjectStore.local``: a request costs microseconds, less than handing it to a thread;
    and a single-threaded caller, such as the deterministic simulation, stays
    single-threaded)."""
    if store.local:
        return serially(calls)
    purpose = metrics.current_purpose()

    def counted(call: Any) -> Any:
        with metrics.purpose(purpose):
            return call()

    return fetch.gather([partial(counted, call) for call in calls])


def at_once(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """A :data:`Gather` for a remote store with no pool at hand (:func:`silt.open`, before
    the DB and its read pool exist): the first call in this thread, each other on a thread of
    its own; waits for all, then returns their results in order or raises the first error."""
    if len(calls) <= 1:
        return [call() for call in calls]
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # handed to the caller below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,), name="silt-open", daemon=True)
               for i in range(1, len(calls))]
    for t in threads:
        t.start()
    try:
        run(0)
    finally:
        for t in threads:
            t.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return results
