"""An example silt tier: ``example://bucket/prefix`` keeps objects in a process-wide dict.

This is a complete tier, written to be copied (see ``docs/plugins.md``). :class:`ExampleClient`
stands in for an SDK's client; a real tier deletes it, calls its SDK where :class:`ExampleStore`
calls the client, and maps the SDK's errors in :meth:`ExampleStore._error`. Everything the
first-party tiers share comes from :mod:`silt.tierkit`: :class:`~silt.tierkit.TierStore` (the
layout under a prefix, ``from_url``, the argument checks of ``list`` and ``delete_many``, error
mapping around each call, ``close``, pickling), :class:`~silt.tierkit.TierOptions` (query
options) and the URL and name rules.

Retries (docs/plugins.md, "Retries"): this client has no retry policy of its own, so a failure
a retry may fix is a plain ``TransientStoreError`` and the engine retries it. A tier whose SDK
retries requests configures that policy from its options and raises ``RetriesExhaustedError``
for what outlived it, so that retries never multiply.

Thread safety: every method may be called from any number of threads; the client takes one
lock, only around in-memory work.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import silt
from silt.errors import NotFoundError, StoreError, TransientStoreError
from silt.plugins import Registry
from silt.store import ObjectInfo
from silt.tierkit import (
    TierOptions,
    TierStore,
    check_root_name,
    parse_root_url,
)

__version__ = "0.1.0"

SCHEME = "example"


class ExampleClient:
    """The stand-in for an SDK: buckets of objects in one process-wide dict.

    Like a real client it raises its own exceptions: ``KeyError`` for a missing object,
    ``TimeoutError`` for a request that may succeed if repeated (set :attr:`failures` to
    simulate some), ``ConnectionError`` after :meth:`close`.
    """

    _buckets: ClassVar[dict[str, dict[str, bytes]]] = {}
    _names: ClassVar[dict[str, list[str]]] = {}  # each bucket's names, sorted
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.failures = 0  # the next this many requests time out
        self.closed = False

    def _bucket(self, bucket: str) -> tuple[dict[str, bytes], list[str]]:
        if self.closed:
            raise ConnectionError("the client is closed")
        if self.failures:
            self.failures -= 1
            raise TimeoutError("the request timed out")
        return self._buckets.setdefault(bucket, {}), self._names.setdefault(bucket, [])

    def get(self, bucket: str, name: str) -> bytes:
        with self._lock:
            return self._bucket(bucket)[0][name]

    def put(self, bucket: str, name: str, data: bytes, *, if_absent: bool) -> bool:
        with self._lock:  # a real SDK sends a conditional request (If-None-Match: *)
            objects, names = self._bucket(bucket)
            if name in objects:
                if if_absent:
                    return False
            else:
                bisect.insort(names, name)
            objects[name] = data
            return True

    def delete(self, bucket: str, name: str) -> None:
        with self._lock:
            objects, names = self._bucket(bucket)
            if objects.pop(name, None) is not None:
                names.pop(bisect.bisect_left(names, name))

    def list(self, bucket: str, prefix: str, after: str, limit: int) -> list[tuple[str, int]]:
        """One page: up to ``limit`` names that start with ``prefix``, after ``after``."""
        with self._lock:
            objects, names = self._bucket(bucket)
            i = max(bisect.bisect_left(names, prefix), bisect.bisect_right(names, after))
            page = [n for n in names[i : i + limit] if n.startswith(prefix)]
            return [(n, len(objects[n])) for n in page]

    def close(self) -> None:
        self.closed = True

    @classmethod
    def drop(cls, bucket: str) -> None:
        """Forget a bucket and its objects (for tests)."""
        with cls._lock:
            cls._buckets.pop(bucket, None)
            cls._names.pop(bucket, None)


@dataclass(frozen=True)
class ExampleOptions(TierOptions):
    """The tier's options (``example://bucket/prefix?page_size=100``): one field each, parsed
    from the URL's query by :class:`~silt.tierkit.TierOptions`."""

    SCHEME = SCHEME

    page_size: int = 1000


def check_bucket(bucket: str, url: str = "") -> str:
    """Refuse an empty or malformed bucket name, and credentials in the URL."""
    return check_root_name(
        bucket, url, what="bucket", example="example://bucket/prefix",
        rule="bucket names are letters, digits, dots and hyphens",
        advice="a real tier takes credentials from its SDK's standard chain",
    )


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``example://bucket/prefix?opts`` -> ``(bucket, prefix, options)``, by the rules every
    tier shares (the prefix's segments are plain names, so no URL leads outside the root)."""
    return parse_root_url(url, (SCHEME,), check_root=check_bucket,
                          example="example://bucket/prefix")


class ExampleStore(TierStore):
    """Objects under ``example://bucket/prefix``. ``client`` replaces the client (tests); a
    store built with one cannot be pickled."""

    scheme = SCHEME
    options_type = ExampleOptions
    sdk_errors = (KeyError, TimeoutError, ConnectionError)
    parse_url = staticmethod(parse_url)
    # Where put_if_absent is atomic (ObjectStore.shared_across): this stand-in keeps its
    # buckets in one process. A real object store deletes the line (the default, "hosts");
    # a tier on one host's locks (a SQLite file) says "host".
    shared_across = "process"

    def __init__(self, bucket: str, prefix: str = "", *, options: ExampleOptions | None = None,
                 client: ExampleClient | None = None) -> None:
        super().__init__(check_bucket(bucket), prefix, options, picklable=client is None)
        self.options: ExampleOptions
        self._client = client or ExampleClient()

    def _error(self, exc: BaseException, action: str, key: str | None) -> StoreError:
        """Map the client's exceptions onto silt's. Never put a credential in a message."""
        where = f"{action} {key!r} in {self.url}" if key is not None else f"{action} {self.url}"
        if isinstance(exc, KeyError):
            return NotFoundError(f"object {key!r} does not exist in {self.url}")
        if isinstance(exc, TimeoutError):  # this client does not retry: the engine will
            return TransientStoreError(f"{where}: the request timed out; it can be retried")
        return StoreError(f"{where}: {type(exc).__name__}: {exc}")

    def _release(self) -> None:
        self._client.close()

    def _read(self, key: str, full: str, start: int | None, length: int | None) -> bytes:
        """One read, whole or ``length`` bytes from ``start`` (a real tier sends a ranged
        request, and raises ``BodyBrokenError`` for a body that came back short)."""
        data = self._request("read", key, lambda: self._client.get(self.root, full))
        return data if start is None or length is None else data[start : start + length]

    def _head(self, key: str, full: str) -> None:
        self._request("read", key, lambda: self._client.get(self.root, full))

    def _put(self, key: str, full: str, payload: bytes) -> None:
        self._request("write", key,
                      lambda: self._client.put(self.root, full, payload, if_absent=False))

    def _create(self, key: str, full: str, payload: bytes) -> bool:
        return self._request("create", key,
                             lambda: self._client.put(self.root, full, payload, if_absent=True))

    def _delete(self, names: list[str]) -> None:
        for name in names:  # a real SDK may delete in batches
            self._request("delete", name[len(self.prefix):],
                          lambda name=name: self._client.delete(self.root, name))

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        after = self.prefix + (start_after or "")
        while True:  # lazily, a page at a time
            page = self._request("list", None, lambda after=after: self._client.list(
                self.root, self.prefix + prefix, after, self.options.page_size))
            for name, size in page:
                yield ObjectInfo(name[len(self.prefix):], size)
            if len(page) < self.options.page_size:
                return
            after = page[-1][0]


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Provide the ``example://`` scheme. (This tier has no SDK to load. A real one keeps its
    store in its own module and registers a factory that imports it when called, so that
    loading the plugin imports no SDK: docs/plugins.md, "Register without importing your
    SDK".)"""
    registry.add_tier(SCHEME, ExampleStore.from_url)


__all__ = ["ExampleClient", "ExampleOptions", "ExampleStore", "silt_register"]
