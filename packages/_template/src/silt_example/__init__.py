"""An example silt tier: ``example://name`` keeps objects in a process-wide dict.

This is the smallest complete tier, written to be copied (see ``docs/plugins.md``). A real tier
replaces the dict with its SDK's calls and maps the SDK's errors as :meth:`ExampleStore._call`
shows. Everything else stays the same: one :class:`~silt.store.ObjectStore` subclass, one
``silt_register`` hook, one entry point in ``pyproject.toml``, and a test module that runs
:class:`silt.testing.StoreConformance`.

Simplified on purpose: nothing outlives the process, and every store opened on the same name in
one process shares the same objects (like two clients of one bucket).

Thread safety: every method takes one lock per namespace, only around in-memory work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import silt
from silt.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    StoreError,
    TransientStoreError,
)
from silt.plugins import Registry
from silt.store import ObjectInfo, ObjectStore, split_url
from silt.tierkit import decode_path

__version__ = "0.1.0"

SCHEME = "example"
T = TypeVar("T")

_NAMESPACES: dict[str, tuple[threading.Lock, dict[str, bytes]]] = {}
_NAMESPACES_LOCK = threading.Lock()


class ExampleStore(ObjectStore):
    """Objects in a dict shared by every ``ExampleStore`` opened on the same ``name``."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"an example store needs a name, got {name!r}")
        with _NAMESPACES_LOCK:
            self._lock, self._objects = _NAMESPACES.setdefault(name, (threading.Lock(), {}))
        self.url = f"{SCHEME}://{name}"

    @classmethod
    def from_url(cls, url: str, options: dict[str, str]) -> ExampleStore:
        """The tier factory silt calls: ``url`` without its query, ``options`` from the query."""
        _scheme, location, _query = split_url(url)
        if options:
            raise InvalidArgumentError(
                f"unknown option(s) {sorted(options)} for {url!r}; the example:// tier has none"
            )
        # Decode the path with the rule every tier shares: no segment can be '..', '.', empty,
        # a control character or a look-alike of '/' (sibling DBs' URLs are built from stored
        # names, so a tier's own decoding could otherwise lead outside the root).
        path = decode_path(location, what=f"the path of {url!r}").strip("/")
        if not path:
            raise InvalidArgumentError(f"{url!r} names no store; write 'example://name'")
        return cls(path)

    @staticmethod
    def drop(name: str) -> None:
        """Forget the namespace ``name`` and its objects (for tests)."""
        with _NAMESPACES_LOCK:
            _NAMESPACES.pop(name, None)

    # --- error mapping ---------------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        """Run one backend call, mapping its errors onto silt's shared names.

        A real tier catches its SDK's exceptions here: "no such object" -> ``NotFoundError``,
        timeouts, throttling and 5xx -> ``TransientStoreError`` (silt retries those), anything
        else -> ``StoreError``. Messages name the object and never include credentials.
        """
        try:
            return fn()
        except KeyError as exc:
            raise NotFoundError(f"object {exc.args[0]!r} does not exist in {self.url}") from None
        except TimeoutError as exc:  # what an SDK timeout would look like
            raise TransientStoreError(f"{self.url}: request timed out ({exc})") from exc
        except OSError as exc:
            raise StoreError(f"{self.url}: request failed ({exc})") from exc

    @staticmethod
    def _check_key(key: object) -> str:
        if not isinstance(key, str):
            raise InvalidTypeError(f"an object key must be a str, got {type(key).__name__}")
        if not key:
            raise InvalidArgumentError("an object key must not be empty")
        return key

    # --- the ObjectStore contract ----------------------------------------------------------------

    def get(self, key: str) -> bytes:
        key = self._check_key(key)

        def get() -> bytes:
            with self._lock:
                return self._objects[key]

        return self._call(get)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise InvalidArgumentError(f"get_range needs start >= 0 and length >= 0, got "
                                       f"{start}, {length}")
        return self.get(key)[start : start + length]

    def put(self, key: str, data: bytes) -> None:
        key, payload = self._check_key(key), bytes(data)
        with self._lock:
            self._objects[key] = payload

    def put_if_absent(self, key: str, data: bytes) -> bool:
        key, payload = self._check_key(key), bytes(data)
        with self._lock:  # a real tier sends a conditional request (If-None-Match: *)
            if key in self._objects:
                return False
            self._objects[key] = payload
            return True

    def delete_many(self, keys: Iterable[str]) -> None:
        checked = [self._check_key(k) for k in keys]
        with self._lock:
            for key in checked:
                self._objects.pop(key, None)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        with self._lock:  # a real tier pages through the listing lazily instead
            found = sorted(
                ObjectInfo(k, len(v)) for k, v in self._objects.items()
                if k.startswith(prefix) and (start_after is None or k > start_after)
            )
        return iter(found)


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Provide the ``example://`` scheme."""
    registry.add_tier(SCHEME, ExampleStore.from_url)


__all__ = ["ExampleStore", "silt_register"]
