"""``TierStore``: the part of an object-store tier that is the same for every SDK.

A first-party or third-party tier subclasses it and writes only what its SDK does differently:
building the client, mapping the SDK's errors (:meth:`TierStore._error`), and one method per
request kind (:meth:`TierStore._read`, :meth:`TierStore._head`, :meth:`TierStore._put`,
:meth:`TierStore._create`, :meth:`TierStore._delete`, :meth:`TierStore._list`). The base
class owns the rest:

* the layout: the object ``k`` of a store opened on ``scheme://root/prefix`` is ``prefix + k``
  (:meth:`TierStore._full`, which also validates ``k``);
* ``from_url``: the URL's root, prefix and query, parsed by the subclass's ``parse_url`` and
  ``options_type`` (a :class:`~silt.tierkit.TierOptions`);
* ``put`` and ``put_if_absent``: key and data checked before :meth:`_put` or :meth:`_create`;
* ``get`` and ``get_range``: arguments checked, an empty range answered by :meth:`_head` (so a
  missing object still raises ``NotFoundError``), each read one :meth:`_whole_read`;
* the argument checks of ``list`` and ``delete_many`` (:mod:`silt.tierkit.checks`), made at the
  call, before any request;
* running one SDK call with its errors mapped and secrets kept out of the chain
  (:meth:`TierStore._request`), and whole-read retries (:meth:`TierStore._whole_read`, the
  policy in :mod:`silt.tierkit.retry`);
* a thread pool for parallel requests, made on first use (:meth:`TierStore._threads`);
* ``close``: idempotent; it stops the thread pool and releases what :meth:`TierStore._release`
  names, once. A closed store is not used again (the engine never does);
* pickling: a store travels as its root, prefix and options and opens a fresh client where it
  lands, unless it was built with an explicit client or credentials (``handles``), which do
  not travel;
* ``repr``: the URL and the endpoint, never a credential.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

from ..errors import SiltError, StoreError
from ..store import ObjectInfo, ObjectStore
from .checks import check_data, check_keys, check_list_args, check_range
from .hedge import Hedger
from .leaks import safe_cause
from .names import normalize_prefix, validate_key
from .retry import whole_read

T = TypeVar("T")
S = TypeVar("S", bound="TierStore")


class TierStore(ObjectStore):
    """An object store on one SDK client, under ``scheme://root/prefix``. See the module
    docstring for what it provides and what a subclass writes."""

    #: The URL scheme, as in ``s3``.
    scheme: ClassVar[str] = ""
    #: The options dataclass (:class:`~silt.tierkit.TierOptions`) ``from_url`` builds.
    options_type: ClassVar[Any] = None
    #: The SDK's exceptions that :meth:`_request` maps (silt's own errors pass through).
    sdk_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    #: The constructor arguments that make a store unpicklable, named in the message.
    handles: ClassVar[str] = "client="

    def __init__(self, root: str, prefix: str, options: Any, *, picklable: bool) -> None:
        """Set the layout and options; call it first from a subclass's ``__init__``. ``root``
        is the already checked bucket or container."""
        self.root = root
        self.prefix = normalize_prefix(prefix, example=f"{self.scheme}://{root}/jobs/clicks")
        self.options = options if options is not None else self.options_type()
        self.url = f"{self.scheme}://{root}/{self.prefix}".rstrip("/")
        self.endpoint: str | None = None
        secrets = getattr(self.options, "secrets", None)
        self._secrets: tuple[str, ...] = tuple(secrets()) if callable(secrets) else ()
        self._picklable = picklable
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        #: Hedged reads, when the options ask for them (silt.tierkit.hedge).
        self._hedger = Hedger.from_options(self.options)

    @staticmethod
    @abc.abstractmethod
    def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
        """``(root, prefix, options)`` of a URL (:func:`silt.tierkit.parse_root_url`)."""

    @classmethod
    def from_url(
        cls: type[S], url: str, options: dict[str, str] | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> S:
        """The tier factory: ``scheme://root[/prefix]`` plus query options (merged with
        ``options``) and ``storage_options`` (given in code; they may hold credentials)."""
        root, prefix, query = cls.parse_url(url)
        merged = {**query, **(options or {})}
        parsed = cls.options_type.from_query(url, merged, storage_options)
        return cls(root, prefix, options=parsed)  # type: ignore[call-arg]

    # --- what a subclass writes ----------------------------------------------------------------

    @abc.abstractmethod
    def _error(self, exc: BaseException, action: str, key: str | None, **context: Any
               ) -> StoreError:
        """The silt error for the SDK's ``exc``, raised while ``action`` (a verb phrase, as in
        ``"read"``) on ``key`` (``None``: the store as a whole). Messages never hold a secret."""

    @abc.abstractmethod
    def _read(self, key: str, full: str, start: int | None, length: int | None) -> bytes:
        """One read of the object ``full`` (``key`` names it in messages): whole when ``start``
        is ``None``, else ``length`` (> 0) bytes from ``start``, ``b""`` past the end. Raise
        :class:`~silt.tierkit.BodyBrokenError` for a body the SDK did not re-request that
        broke or came back short: the read is repeated whole (:meth:`_whole_read`)."""

    @abc.abstractmethod
    def _head(self, key: str, full: str) -> None:
        """Raise ``NotFoundError`` unless the object ``full`` exists (an empty range's read)."""

    @abc.abstractmethod
    def _put(self, key: str, full: str, data: bytes) -> None:
        """Create or replace the object ``full`` atomically (``key`` names it in messages)."""

    @abc.abstractmethod
    def _create(self, key: str, full: str, data: bytes) -> bool:
        """Create the object ``full`` unless it exists, atomically across hosts (a conditional
        request); ``False`` if it existed, or if a lost answer's retry found it."""

    @abc.abstractmethod
    def _delete(self, names: list[str]) -> None:
        """Delete the objects with these full names (validated, without duplicates, not empty);
        missing ones are ignored."""

    @abc.abstractmethod
    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        """Yield the objects under ``prefix`` (relative to the store's prefix) after
        ``start_after``, in key order, lazily (the arguments are already checked)."""

    def _release(self) -> None:
        """Release the client's connections (called once, by ``close``)."""

    # --- shared --------------------------------------------------------------------------------

    def _full(self, key: object) -> str:
        """The full object name of ``key``, after validating it."""
        return self.prefix + validate_key(key)

    def _cause(self, exc: BaseException) -> BaseException | None:
        """What a tier error may be raised ``from``: ``exc``, unless its chain holds a secret."""
        return safe_cause(exc, self._secrets)

    def _request(self, action: str, key: str | None, call: Callable[[], T], **context: Any) -> T:
        """Run one SDK call, mapping its errors (``action`` names it in messages, ``context``
        goes to :meth:`_error`)."""
        try:
            return call()
        except SiltError:
            raise
        except self.sdk_errors as exc:
            raise self._error(exc, action, key, **context) from self._cause(exc)

    def _threads(self, workers: int, name: str) -> ThreadPoolExecutor:
        """The store's thread pool (``workers`` threads named ``name``), made on first use and
        stopped by ``close``."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
            return self._pool

    def get(self, key: str) -> bytes:
        """The whole object; ``NotFoundError`` if it does not exist."""
        full = self._full(key)
        return self._whole_read(lambda: self._read(key, full, None, None))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end, ``b""`` past it)."""
        full = self._full(key)
        start, length = check_range(start, length)
        if length == 0:
            self._head(key, full)
            return b""
        return self._whole_read(lambda: self._read(key, full, start, length))

    def put(self, key: str, data: bytes) -> None:
        """Create or replace the object."""
        self._put(key, self._full(key), check_data(data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object unless the key exists; see :meth:`_create`."""
        return self._create(key, self._full(key), check_data(data))

    def _whole_read(self, call: Callable[[], T]) -> T:
        """Run one whole read, repeated on :class:`~silt.tierkit.BodyBrokenError` as the
        options' ``read_attempts`` and ``read_timeout`` allow (:func:`silt.tierkit.whole_read`;
        a tier without these options reads once), and hedged when the options ask for it
        (:mod:`silt.tierkit.hedge`: a slow read sends a second request, the first answer wins)."""
        attempts = getattr(self.options, "read_attempts", 1)
        timeout = getattr(self.options, "read_timeout", 0.0)
        if self._hedger is not None:
            hedger = self._hedger
            return hedger.run(lambda: whole_read(call, attempts=attempts, timeout=timeout))
        return whole_read(call, attempts=attempts, timeout=timeout)

    def take_extra_reads(self) -> int:
        """The hedged requests this thread's reads sent since the last call."""
        return 0 if self._hedger is None else self._hedger.take_extra()

    def stats(self) -> dict[str, Any]:
        """Hedged reads: ``reads``, ``hedged`` (a second request sent) and ``hedge_wins`` (the
        second answered first), when the store hedges; else nothing."""
        return {} if self._hedger is None else {"hedging": self._hedger.stats()}

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the objects; missing keys are ignored. All keys are validated before anything
        is deleted."""
        names = check_keys(keys, self._full)
        if names:
            self._delete(names)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Yield the objects under ``prefix`` after ``start_after``, in key order, a page at a
        time. Arguments are checked at the call."""
        prefix, start_after = check_list_args(prefix, start_after)
        return self._list(prefix, start_after)

    def close(self) -> None:
        """Release the client's connections and thread pools; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        if self._hedger is not None:
            self._hedger.close()
        self._release()

    def __reduce__(self) -> tuple[Any, ...]:
        if not self._picklable:
            name = type(self).__name__
            raise TypeError(
                f"a {name} built with an explicit {self.handles} cannot be pickled; open it with "
                f"{name}.from_url (or without {self.handles}) to ship it to workers"
            )
        return (_reopen, (type(self), self.root, self.prefix, self.options))

    def __repr__(self) -> str:
        where = f", endpoint={self.endpoint!r}" if self.endpoint else ""
        return f"{type(self).__name__}({self.url!r}{where})"


def _reopen(cls: type[S], root: str, prefix: str, options: Any) -> S:
    """Unpickle a :class:`TierStore`: a fresh client from the standard chain where it lands."""
    return cls(root, prefix, options=options)  # type: ignore[call-arg]


__all__ = ["TierStore"]
