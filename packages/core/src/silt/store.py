"""The object-store contract every tier implements.

A tier stores immutable objects under a root (a folder, a bucket prefix, a container prefix).
Object keys are relative to that root, use ``/`` as separator, and are plain ASCII names made by
:mod:`silt.paths`. The contract is object-shaped, not file-shaped:

``get``, ``get_range``, ``put``, ``put_if_absent``, ``delete_many``, ``list``.

Contract shared by every method:

* Thread safety: every method may be called from several threads at once.
* Errors: a missing object raises :class:`~silt.errors.NotFoundError`; a failure that a retry may
  fix raises :class:`~silt.errors.TransientStoreError` (the engine retries it with backoff, see
  :func:`retrying`), or :class:`~silt.errors.RetriesExhaustedError` once the tier has retried
  it itself (its SDK's retries: the engine does not retry it again; the policy is in
  :mod:`silt.tierkit.retry`); anything else raises :class:`~silt.errors.StoreError`. SDK
  exceptions never escape a tier, and messages never carry credentials.
* Durability: when ``put`` or ``put_if_absent`` returns, the object is durable and complete; a
  reader never sees a partial object.

The conformance suite in :mod:`silt.testing` checks all of this for any tier.
"""

from __future__ import annotations

import abc
import importlib
import random
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, TypeVar

from .errors import RetriesExhaustedError, TransientStoreError

T = TypeVar("T")

#: How often :func:`retrying` tries a store call whose tier did not retry it itself.
ENGINE_ATTEMPTS = 6


class ObjectInfo(NamedTuple):
    """One listed object: its key under the root and its size in bytes."""

    key: str
    size: int


class ObjectStore(abc.ABC):
    """Abstract object store rooted at one URL. See the module docstring for the contract.

    A tier sets these attributes (on the class, or on the instance in ``__init__``); a wrapper
    (metering, a cache, fault injection) copies the values of the store it wraps:

    ``url`` (str)
        The URL the store was opened with, without query options or credentials, such that
        opening it again (with the same options) gives the same objects. Messages, ``repr`` and
        ``silt ls`` show it. :class:`silt.tierkit.TierStore` sets ``scheme://root/prefix``.
    ``local`` (bool, default ``False``)
        Whether reads are served by this host (``file://``, ``memory://``, a SQLite file): a
        block read costs microseconds. Set it ``True`` for a tier on a local disk. A remote store
        (``False``) gets the blocks of the SSTs this process uploads put into its block cache as
        they are uploaded (so the next reads of fresh state make no request), its reads of
        several blocks run concurrently, and compaction's output is read back into the cache
        (``Settings.refill_after_compaction``); a local store skips all that.
    ``coalesce_reads`` (bool, default ``True``)
        Whether a reader may read adjacent byte ranges of an object with one ``get_range``
        (scans and ``multi_get`` do, to save requests). A store that caches exactly the ranges
        it is asked for (silt-cache-ssd) sets ``False``, so that reads keep asking for those
        ranges. Leave it ``True`` otherwise.
    ``shared_across`` (str, default ``"hosts"``)
        Who sees this store's objects and races on ``put_if_absent`` with exactly one winner:
        ``"hosts"``, processes on any host (object stores' conditional requests, ``file://``
        on a local or NFS file system); ``"host"``, the processes of one host only (a SQLite
        file, a lock taken with ``fcntl``: such locks do not hold across network file systems);
        ``"process"``, the threads of one process only (``memory://``). The conformance suite
        races ``put_if_absent`` between processes unless it is ``"process"``. A store that is
        not ``"hosts"`` must not be written from two hosts (two Spark executors, a writer and
        ``silt compact`` on another machine); say so in the tier's documentation.
    """

    url: str = ""
    coalesce_reads: bool = True
    local: bool = False
    shared_across: str = "hosts"

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Return the whole object. Raises ``NotFoundError`` if it does not exist."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Return ``length`` bytes from ``start``; fewer only when the object ends first.

        ``start`` and ``length`` are non-negative. A range wholly past the end returns ``b""``.
        Raises ``NotFoundError`` if the object does not exist.
        """

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Create or replace the object atomically: readers see the old or the new bytes, whole."""

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object only if no object has that key; atomic across processes and hosts.

        Returns ``True`` when this call created it, ``False`` when the key already existed (the
        existing object is left untouched). After a lost response a tier's own retry can return
        ``False`` although the first attempt created the object: callers that must know whether
        *they* won compare a token in the stored bytes (the engine does this for manifests).
        """

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the objects; keys that do not exist are ignored."""

    @abc.abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Yield the objects whose key starts with ``prefix``, in lexicographic key order.

        With ``start_after``, only keys strictly greater than it are yielded. Implementations page
        through large listings lazily.
        """

    def direct_reader(self, key: str) -> Callable[[int, int], bytes | memoryview] | None:
        """Optional fast path for the many small reads of one immutable object (SST blocks).

        Returns ``None`` (the default: readers use :meth:`get_range`) or a callable
        ``read(start, length)`` that behaves like ``get_range(key, start, length)`` for
        non-negative ints ``start`` and ``length`` (the caller checks them), raising the same
        errors, with two differences allowed. It may return a read-only, contiguous
        ``memoryview`` of bytes instead of ``bytes`` (the ``file://`` tier returns ``bytes``,
        one ``pread`` each, :mod:`silt.tiers.blockread`); such a view must stay valid and
        unchanged for as long as it is referenced (readers keep it in cached blocks). And an
        object deleted by *another process* may still be read for a short time, since only
        objects that are never overwritten are read this way and such a read returns that
        object's own bytes (the ``file://`` tier's bound is ``fdcache.RECHECK_SECONDS``; a
        delete through a store of this process is seen at once). Each call is one request.
        The callable is
        thread-safe and may be kept for the store's lifetime. A wrapper (metering, caches,
        fault injection) returns ``None`` unless it serves the reads itself or forwards them
        with its own bookkeeping.
        """
        return None

    def remove_stale_temporaries(self, prefix: str, older_than_seconds: float) -> int:
        """Optional housekeeping, called by GC: delete what interrupted writes left behind.

        A tier whose writes go through scratch space of its own that is never listed (the
        ``file://`` tier's ``.tmp/`` directories) removes the leftovers of the DB whose store is
        opened at ``<this store's root>/<prefix>`` (``""``: this root itself) that are older
        than ``older_than_seconds`` by the tier's own clock, and returns how many it removed.
        It never touches an object. A wrapper (cache, metering) forwards the call to the store
        it wraps. The default does nothing and returns 0: object stores publish atomically and
        leave no such files (an incomplete multipart upload is the bucket's lifecycle rules'
        business).
        """
        return 0

    def close(self) -> None:  # noqa: B027 - optional hook with a default
        """Release connections and other resources. The default does nothing."""

    def take_extra_reads(self) -> int:
        """Requests this thread's reads sent since the last call besides the one each asked for
        (hedged reads, silt.tierkit.hedge), and reset the count: metering adds them to the
        bill. A wrapper forwards the call to the store it wraps; the default is 0."""
        return 0

    def stats(self) -> dict[str, Any]:
        """Optional counters for inspection (a cache tier reports hits, misses, bytes used...).

        JSON-serializable; the default is empty. Shown by ``DB.stats()`` and ``silt inspect``.
        """
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def retrying(
    call: Callable[[], T],
    *,
    attempts: int = ENGINE_ATTEMPTS,
    base_delay: float = 0.05,
    max_delay: float = 2.0,
    deadline: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """Run ``call``, retrying ``TransientStoreError`` with capped exponential backoff and jitter.

    Only a failure nobody has retried yet: :class:`~silt.errors.RetriesExhaustedError` (the
    tier's SDK, or the tier's own loop, already retried the request) propagates at once, so
    retries never multiply (:mod:`silt.tierkit.retry` states the policy). Stops after
    ``attempts`` tries or when ``deadline`` seconds have passed, re-raising the last error.
    Other exceptions propagate at once. ``sleep`` and ``rng`` are injectable for tests.
    """
    rng = rng or random.Random()
    start = time.monotonic()
    for attempt in range(attempts):
        try:
            return call()
        except RetriesExhaustedError:
            raise
        except TransientStoreError:
            elapsed = time.monotonic() - start
            if attempt == attempts - 1 or elapsed >= deadline:
                raise
            delay = min(max_delay, base_delay * (2**attempt))
            sleep(min(rng.uniform(0, delay), max(0.0, deadline - elapsed)))
    raise AssertionError("unreachable")  # pragma: no cover


def __getattr__(name: str) -> Any:
    # ``split_url`` lives in :mod:`silt.tierkit.urls` (URLs are the kit's concern, and the kit
    # builds on this module, never the other way round). The old name stays importable from
    # here; the import is resolved at run time so that this module imports nothing above it.
    if name == "split_url":
        return importlib.import_module("silt.tierkit.urls").split_url
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
