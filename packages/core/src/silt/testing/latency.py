"""``LatencyStore``: any object store made remote, with a fixed latency per request, and a count
of the requests and *sequential round trips* of what the engine does with it.

On an object store a request costs tens of milliseconds of latency, and requests issued at once
cost that latency once. What an operation costs is therefore first its **round trips**: the
longest chain of its requests in which each started after the one before it had ended. This
wrapper measures that structurally, not with a clock: when a request starts, it records which
requests had completed by then; its *depth* is one more than the greatest depth among those
(1 when none had). The round trips of an operation are the greatest depth of its requests,
counting only those made inside the operation (:meth:`LatencyStore.operation`)::

    from silt.testing import LatencyStore

    slow = LatencyStore(silt.plugins.open_store("s3://bucket/state"), delay=0.05)
    db = silt.open("s3://bucket/state", store=slow)
    with slow.operation() as op:
        db.commit()
    print(op.round_trips, op.requests)        # e.g. 2 {'put_if_absent': 1, 'get': 1}

Every request kind of :class:`~silt.store.ObjectStore` waits ``delay`` seconds before it goes
to the wrapped store: ``get``, ``get_range``, ``put``, ``put_if_absent``, ``delete_many`` (one
request per call) and ``list`` (one request per call: the listing is read whole inside the
timed request, so a lazy tier's pages count as one). ``direct_reader`` returns ``None``, so
block reads are ``get_range`` requests here. Requests that raise (a GET of a missing object)
count as well: they cost a round trip all the same.

The wrapper sets ``local = False`` whatever the wrapped store says, so a DB opened on it
treats it as remote (:class:`~silt.store.ObjectStore`'s ``local``): it fetches independent
blocks and manifests at once on its read pool, as it would on S3. That is what makes
``memory://`` a faithful stand-in for an object store in round-trip tests.

Why structural counting is robust on a loaded machine: requests the engine issues at once
start within a thread's start-up time of each other, long before any of them can complete
(``delay`` is chosen long against that: 0.1 s or more in tests), so none counts another as
its predecessor; requests issued one after the other always see the previous one completed.
A slow machine only delays starts, which can merge nothing and split nothing as long as the
start-up stays below ``delay``. On a heavily loaded machine it may not: a pool thread woken
more than ``delay`` late starts after another request of its wave completed and adds a round
trip (seen at load 10 with 0.12 s). The error is one-sided: load can lengthen a chain, never
shorten it or change the requests, so a test may take the fewest round trips of a few runs.

Thread safety: every method may be called from several threads at once; the bookkeeping is
guarded by a lock that is never held while sleeping or while the wrapped store runs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import InvalidArgumentError, InvalidTypeError
from ..store import ObjectInfo, ObjectStore

T = TypeVar("T")

#: The request kinds a :class:`LatencyStore` times (the :class:`ObjectStore` method names).
KINDS: tuple[str, ...] = ("get", "get_range", "put", "put_if_absent", "delete_many", "list")


@dataclass
class Request:
    """One request seen by a :class:`LatencyStore`.

    ``depth`` is its place in the longest chain of sequential requests of the operation it
    belongs to (1: nothing of that operation had completed when it started). ``after`` holds
    the numbers (``seq``) of the requests of the same operation that had completed when it
    started. ``done`` is set when it returned or raised.
    """

    seq: int
    kind: str
    key: str
    depth: int
    after: frozenset[int]
    done: bool = False


@dataclass
class Operation:
    """The requests made while one :meth:`LatencyStore.operation` block ran (from any
    thread). ``round_trips`` and ``requests`` may be read inside the block and after it."""

    log: list[Request] = field(default_factory=list)

    @property
    def round_trips(self) -> int:
        """The longest chain of requests each started after the one before had completed."""
        return max((r.depth for r in self.log), default=0)

    @property
    def requests(self) -> Counter[str]:
        """Requests by kind (:data:`KINDS`)."""
        return Counter(r.kind for r in self.log)

    @property
    def total(self) -> int:
        """All requests, of every kind."""
        return len(self.log)

    def waves(self) -> list[list[tuple[str, str]]]:
        """The requests grouped by depth, ``(kind, key)`` sorted in each wave: what went out at
        once in each round trip (for messages of failed assertions)."""
        out: list[list[tuple[str, str]]] = [[] for _ in range(self.round_trips)]
        for r in self.log:
            out[r.depth - 1].append((r.kind, r.key))
        return [sorted(w) for w in out]

    def __repr__(self) -> str:
        return (f"Operation(round_trips={self.round_trips}, requests={dict(self.requests)}, "
                f"waves={self.waves()})")


class _Timeline:
    """Where requests are recorded: the operation open now, and the numbering of requests;
    one per :class:`LatencyStore`, or shared by stores made with ``timeline=``."""

    __slots__ = ("lock", "seq", "operation")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0
        self.operation: Operation | None = None


class LatencyStore(ObjectStore):
    """Wraps ``inner``: every request waits ``delay`` seconds first, and is recorded (see the
    module docstring). ``delay`` is a number of seconds >= 0 (0 only counts).

    ``timeline``: another LatencyStore whose operations record this store's requests too, so
    that the requests of several stores of a process (a stream processor's task opens one on
    its operator's root and one on its shard) are timed as one operation: a request of one
    store that starts after a request of another completed follows it in the chain. Each
    store keeps its own :attr:`counts`."""

    def __init__(self, inner: ObjectStore, delay: float = 0.1, *,
                 timeline: LatencyStore | None = None) -> None:
        if not isinstance(inner, ObjectStore):
            raise InvalidTypeError(
                f"LatencyStore wraps an ObjectStore (silt.plugins.open_store(url)), got "
                f"{type(inner).__name__}")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not (
                0 <= delay < float("inf")):
            raise InvalidArgumentError(
                f"delay must be a finite number of seconds >= 0, got {delay!r}")
        if timeline is not None and not isinstance(timeline, LatencyStore):
            raise InvalidTypeError(
                f"timeline is another LatencyStore, got {type(timeline).__name__}")
        self.inner = inner
        self.delay = float(delay)
        self.url = inner.url
        self.coalesce_reads = inner.coalesce_reads
        self.local = False
        self.shared_across = inner.shared_across
        self._timeline = _Timeline() if timeline is None else timeline._timeline
        #: Requests by kind since the wrapper was made (every operation, and outside them).
        self.counts: Counter[str] = Counter()

    @contextmanager
    def operation(self) -> Iterator[Operation]:
        """Record the requests made inside the block (from every thread) as one operation.

        Operations do not nest. Requests still in flight from before the block (a background
        upload) are not part of it, and do not count as completed predecessors."""
        op = Operation()
        line = self._timeline
        with line.lock:
            if line.operation is not None:
                raise InvalidArgumentError("LatencyStore.operation() blocks do not nest")
            line.operation = op
        try:
            yield op
        finally:
            with line.lock:
                line.operation = None

    # -- timing -------------------------------------------------------------------------------
    def _timed(self, kind: str, key: str, call: Callable[[], T]) -> T:
        line = self._timeline
        with line.lock:
            line.seq += 1
            self.counts[kind] += 1
            op = line.operation
            request = None
            if op is not None:
                finished = [r for r in op.log if r.done]
                request = Request(line.seq, kind, key,
                                  1 + max((r.depth for r in finished), default=0),
                                  frozenset(r.seq for r in finished))
                op.log.append(request)
        try:
            if self.delay:
                time.sleep(self.delay)
            return call()
        finally:
            if request is not None:
                with line.lock:
                    request.done = True

    # -- the ObjectStore contract -------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self._timed("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._timed("get_range", key, lambda: self.inner.get_range(key, start, length))

    def put(self, key: str, data: bytes) -> None:
        self._timed("put", key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._timed("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        self._timed("delete_many", keys[0] if keys else "",
                    lambda: self.inner.delete_many(keys))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        return iter(self._timed("list", prefix,
                                lambda: list(self.inner.list(prefix, start_after))))

    def take_extra_reads(self) -> int:
        return self.inner.take_extra_reads()

    def remove_stale_temporaries(self, prefix: str, older_than_seconds: float) -> int:
        return self.inner.remove_stale_temporaries(prefix, older_than_seconds)

    def stats(self) -> dict[str, Any]:
        return self.inner.stats()

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"LatencyStore({self.inner!r}, delay={self.delay})"
