"""The ``memory://`` tier: objects in process memory, for tests, examples and simulations.

URL: ``memory://name`` or ``memory://name/sub/path`` (percent-escapes are decoded, and every
segment must be a plain name, as on every tier: :func:`silt.tierkit.check_name`). ``name``
selects a process-global namespace (like a bucket): every store opened on the same name in the
same process sees the same objects, so a test can "reopen" a database. A path after the name
is a key prefix inside the namespace (like a bucket prefix), so ``memory://ns/kg-0-127`` holds
the objects that ``memory://ns`` lists as ``kg-0-127/...``, exactly as with ``file://``
directories. The tier takes no options, and refuses an ``@`` in the name (``memory://user:pw@ns``)
without showing the URL.

``MemoryStore()`` without a name is a private, anonymous store nobody else can open.

Nothing is durable beyond the process, and namespaces live until :meth:`MemoryStore.drop`.
Stored bytes are copies, so callers may reuse their buffers. Keys follow the rule of every tier
(:func:`silt.tierkit.validate_key`), so code tested here cannot write keys the file tier
rejects.

Thread safety: every method may be called from any number of threads; each namespace has a lock
held only for in-memory work. A listing is a snapshot taken when iteration starts.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from ..hookspecs import hookimpl
from ..store import ObjectInfo, ObjectStore
from ..tierkit import (
    check_data,
    check_keys,
    check_list_args,
    check_name,
    check_options,
    check_path,
    check_range,
    decode_path,
    public_url,
    refuse_credentials_in_host,
    split_url,
    validate_key,
)

#: Options ``MemoryStore.from_url`` accepts (none yet).
ACCEPTED_OPTIONS: frozenset[str] = frozenset()


class _Namespace:
    """One set of objects plus a lazily maintained sorted key list. Guarded by ``lock``."""

    __slots__ = ("lock", "objects", "_sorted")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, bytes] = {}
        self._sorted: list[str] | None = None

    def sorted_keys(self) -> list[str]:
        """All keys in order (the caller holds ``lock``)."""
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def added(self, key: str) -> None:
        """Record that ``key`` was newly created (the caller holds ``lock``)."""
        if self._sorted is not None:
            bisect.insort(self._sorted, key)

    def removed(self, key: str) -> None:
        """Record that ``key`` was deleted (the caller holds ``lock``)."""
        if self._sorted is not None:
            i = bisect.bisect_left(self._sorted, key)
            del self._sorted[i]


_NAMESPACES: dict[str, _Namespace] = {}
_NAMESPACES_LOCK = threading.Lock()


def _parse_name(name: str) -> tuple[str, str]:
    """Split ``"ns/sub/path"`` into the namespace ``"ns"`` and the key prefix ``"sub/path/"``.

    Every segment must be a plain name (:func:`silt.tierkit.check_name`), as on every tier."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"a memory store name must be a str, got {type(name).__name__}")
    if any(ch in name for ch in "?#\x00\\"):
        raise InvalidArgumentError(
            f"memory store name {name!r} contains one of '?', '#', '\\' or NUL"
        )
    namespace, _, sub = name.partition("/")
    if not namespace:
        raise InvalidArgumentError(
            f"memory store name {name!r} is empty; name the store, as in 'memory://mystate'"
        )
    try:
        check_name(namespace, what="memory store name")
        check_path(sub, what="memory store path")
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(
            f"{exc}; use a plain '/'-separated path, as in 'memory://mystate/kg-0-127'"
        ) from None
    sub = sub.strip("/")
    return namespace, (sub + "/" if sub else "")


class MemoryStore(ObjectStore):
    """Objects in memory, shared by name within the process. See the module docstring.

    ``name`` is ``"namespace"`` or ``"namespace/sub/path"``; ``None`` makes a private store.
    """

    local = True
    shared_across = "process"  # objects live in this process only

    def __init__(self, name: str | None = None) -> None:
        if name is None:
            self.name: str | None = None
            self._ns = _Namespace()
            self._prefix = ""
            self.url = "memory://"
            return
        namespace, prefix = _parse_name(name)
        with _NAMESPACES_LOCK:
            ns = _NAMESPACES.get(namespace)
            if ns is None:
                ns = _NAMESPACES[namespace] = _Namespace()
        self.name = namespace
        self._ns = ns
        self._prefix = prefix
        self.url = f"memory://{namespace}/{prefix}".rstrip("/")

    @classmethod
    def from_url(cls, url: str, options: dict[str, str] | None = None) -> MemoryStore:
        """Open ``memory://name[/sub/path]``. There are no options yet: any option is an error."""
        scheme, location, query = split_url(url)
        if scheme != "memory":
            raise InvalidArgumentError(
                f"MemoryStore opens memory:// URLs, got {public_url(url)!r}; use 'memory://name'"
            )
        refuse_credentials_in_host(url, "", "A memory:// store is named by its first segment, "
                                   "as in 'memory://mystate', and takes no credentials.")
        check_options(url, {**query, **(options or {})}, ACCEPTED_OPTIONS, "memory")
        if not location.strip("/"):
            raise InvalidArgumentError(
                f"{public_url(url)!r} names no store; write 'memory://name' (stores with the same "
                "name in one process share their objects)"
            )
        return cls(decode_path(location, what=f"the path of {url.split('?', 1)[0]!r}"))

    @classmethod
    def drop(cls, name: str) -> None:
        """Delete the namespace ``name`` and all its objects (no error if it does not exist).

        Stores already open on it see it empty; opening the name again starts a new, empty
        namespace. ``name`` may carry a path (``"ns/sub"``); the whole namespace ``ns`` is dropped.
        """
        namespace, _ = _parse_name(name)
        with _NAMESPACES_LOCK:
            ns = _NAMESPACES.pop(namespace, None)
        if ns is not None:
            with ns.lock:
                ns.objects.clear()
                ns._sorted = None

    @classmethod
    def namespaces(cls) -> list[str]:
        """The names of the namespaces that exist in this process, sorted."""
        with _NAMESPACES_LOCK:
            return sorted(_NAMESPACES)

    def _key(self, key: str) -> str:
        return self._prefix + validate_key(key)

    def _not_found(self, key: str) -> NotFoundError:
        return NotFoundError(f"object {key!r} does not exist in {self.url}")

    def get(self, key: str) -> bytes:
        """Return the whole object; :class:`~silt.errors.NotFoundError` if it does not exist."""
        full = self._key(key)
        with self._ns.lock:
            data = self._ns.objects.get(full)
        if data is None:
            raise self._not_found(key)
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Return up to ``length`` bytes from ``start`` (``b""`` past the end)."""
        full = self._key(key)
        start, length = check_range(start, length)
        with self._ns.lock:
            data = self._ns.objects.get(full)
        if data is None:
            raise self._not_found(key)
        return data[start : start + length]

    def put(self, key: str, data: bytes) -> None:
        """Create or replace the object (a copy of ``data``)."""
        full = self._key(key)
        payload = check_data(data)
        with self._ns.lock:
            if full not in self._ns.objects:
                self._ns.added(full)
            self._ns.objects[full] = payload

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object unless the key exists; atomic across threads."""
        full = self._key(key)
        payload = check_data(data)
        with self._ns.lock:
            if full in self._ns.objects:
                return False
            self._ns.objects[full] = payload
            self._ns.added(full)
            return True

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the objects, ignoring missing ones. All keys are validated first."""
        fulls = check_keys(keys, self._key)
        with self._ns.lock:
            for full in fulls:
                if self._ns.objects.pop(full, None) is not None:
                    self._ns.removed(full)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Yield the objects under ``prefix`` with keys after ``start_after``, in key order.

        Arguments are checked at the call; the snapshot is taken when iteration starts.
        """
        prefix, start_after = check_list_args(prefix, start_after)
        return self._list(prefix, start_after)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        full_prefix = self._prefix + prefix
        cut = len(self._prefix)
        with self._ns.lock:
            keys = self._ns.sorted_keys()
            i = bisect.bisect_left(keys, full_prefix)
            if start_after is not None:
                i = max(i, bisect.bisect_right(keys, self._prefix + start_after))
            snapshot: list[ObjectInfo] = []
            objects = self._ns.objects
            while i < len(keys) and keys[i].startswith(full_prefix):
                snapshot.append(ObjectInfo(keys[i][cut:], len(objects[keys[i]])))
                i += 1
        yield from snapshot


@hookimpl
def silt_register(registry: Any) -> None:
    """Register the ``memory://`` tier (``registry.add_tier("memory", MemoryStore.from_url)``)."""
    registry.add_tier("memory", MemoryStore.from_url)


__all__ = ["MemoryStore"]
