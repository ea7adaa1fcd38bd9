"""Per-DB metrics: object-store requests and bytes by purpose, and engine counters.

:class:`MeteredStore` wraps the DB's store and counts every request by *purpose* (``write``,
``flush``, ``compaction``, ``gc``, ``read``, ``commit``, ``open``) and kind (``GET``,
``RANGE_GET``, ``PUT``, ``LIST``, ``DELETE``), with bytes moved. A request that fails (a GET of
a missing object) counts too: stores bill it. The purpose is a thread-local set by
:meth:`Metrics.purpose`, so background threads attribute their own requests. Counters are
approximate under concurrency (plain integer increments), which is all metrics need.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ._ext import accelerate
from .store import ObjectInfo, ObjectStore

KINDS = ("GET", "RANGE_GET", "PUT", "LIST", "DELETE")


class CountedReads:
    """``read(start, length)``: ``inner(start, length)`` (a store's direct reader), each call
    counted as one ``RANGE_GET`` of the bytes it returned into ``requests[(purpose,
    "RANGE_GET")]`` (``purpose``: the thread's ``local.purpose``, else ``"read"``), a failed one
    too (0 bytes), as :meth:`Metrics.count` would. Every block-cache miss of a get or a local
    ``multi_get`` goes through one: compiled (``silt._speedups.CountedReads``), the count is
    made in C and the compiled readers call it without a Python frame (nor one for ``inner``
    when it is the ``file://`` tier's compiled reader)."""

    __slots__ = ("inner", "requests", "local")

    def __init__(self, inner: Callable[[int, int], bytes | memoryview],
                 requests: dict[tuple[str, str], list[int]], local: threading.local) -> None:
        self.inner = inner
        self.requests = requests
        self.local = local

    def __call__(self, start: int, length: int) -> bytes | memoryview:
        data: bytes | memoryview = b""
        try:
            data = self.inner(start, length)
            return data
        finally:
            entry = self.requests[(getattr(self.local, "purpose", None) or "read", "RANGE_GET")]
            entry[0] += 1
            entry[1] += len(data)


class Metrics:
    """Counters of one DB. ``requests[(purpose, kind)] = [count, bytes]``."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.counters: dict[str, float] = defaultdict(float)
        self._local = threading.local()

    @contextmanager
    def purpose(self, name: str) -> Iterator[None]:
        """Attribute requests made by this thread inside the block to ``name``."""
        old = getattr(self._local, "purpose", None)
        self._local.purpose = name
        try:
            yield
        finally:
            self._local.purpose = old

    def current_purpose(self) -> str:
        return getattr(self._local, "purpose", None) or "read"

    def count(self, kind: str, nbytes: int = 0) -> None:
        entry = self.requests[(self.current_purpose(), kind)]
        entry[0] += 1
        entry[1] += nbytes

    def add(self, name: str, value: float = 1) -> None:
        self.counters[name] += value

    def totals(self) -> dict[str, int]:
        """Requests by kind, every purpose together: ``{kind: count}``."""
        out = dict.fromkeys(KINDS, 0)
        for (_purpose, kind), (n, _b) in list(self.requests.items()):
            out[kind] = out.get(kind, 0) + n
        return out

    def snapshot(self) -> dict[str, Any]:
        """Plain-data copy: ``{"requests": {purpose: {kind: {"count", "bytes"}}},
        "requests_by_kind": {kind: count}, counters...}``."""
        requests: dict[str, dict[str, dict[str, int]]] = {}
        for (purpose, kind), (n, b) in sorted(self.requests.items()):
            requests.setdefault(purpose, {})[kind] = {"count": n, "bytes": b}
        return {"requests": requests, "requests_by_kind": self.totals(),
                **dict(sorted(self.counters.items()))}


class MeteredStore(ObjectStore):
    """Counts requests to ``inner`` into ``metrics``; otherwise a transparent wrapper."""

    def __init__(self, inner: ObjectStore, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self.url = inner.url
        self.coalesce_reads = inner.coalesce_reads
        self.local = inner.local
        self.shared_across = inner.shared_across

    # A request that fails (a GET of a missing object, a refused write) is billed all the same:
    # each is counted whether it returns or raises.
    # A hedged read (silt.tierkit.hedge) sent a second request: both are billed.
    def get(self, key: str) -> bytes:
        data = b""
        try:
            data = self.inner.get(key)
            return data
        finally:
            self.metrics.count("GET", len(data))
            for _ in range(self.inner.take_extra_reads()):
                self.metrics.count("GET", 0)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        data = b""
        try:
            data = self.inner.get_range(key, start, length)
            return data
        finally:
            self.metrics.count("RANGE_GET", len(data))
            for _ in range(self.inner.take_extra_reads()):
                self.metrics.count("RANGE_GET", 0)

    def direct_reader(self, key: str) -> Callable[[int, int], bytes | memoryview] | None:
        """The inner store's direct reader of ``key``, each read counted as a ``RANGE_GET``
        (failed ones too), or ``None`` when the inner store has none."""
        read = self.inner.direct_reader(key)
        if read is None:
            return None
        return CountedReads(read, self.metrics.requests, self.metrics._local)

    def take_extra_reads(self) -> int:
        return self.inner.take_extra_reads()

    def put(self, key: str, data: bytes) -> None:
        try:
            self.inner.put(key, data)
        finally:
            self.metrics.count("PUT", len(data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            return self.inner.put_if_absent(key, data)
        finally:
            self.metrics.count("PUT", len(data))

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        try:
            self.inner.delete_many(keys)
        finally:
            self.metrics.count("DELETE", 0)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        self.metrics.count("LIST")
        return self.inner.list(prefix, start_after)

    def close(self) -> None:
        self.inner.close()

    def remove_stale_temporaries(self, prefix: str, older_than_seconds: float) -> int:
        return self.inner.remove_stale_temporaries(prefix, older_than_seconds)

    def stats(self) -> dict[str, Any]:
        return self.inner.stats()


#: The pure-Python twin stays reachable as ``CountedReads_py`` (tests compare both).
COMPILED = accelerate(globals(), ["CountedReads"])
