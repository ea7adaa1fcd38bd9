"""``FaultyStore``: a deterministic fault-injecting wrapper around any object store.

The engine's failure tests wrap a real store (usually a :class:`~silt.tiers.memory.MemoryStore`)
and tell the wrapper exactly which requests fail and how::

    faulty = FaultyStore(MemoryStore())
    faulty.fail_next("put", error=TransientStoreError)     # the next put fails, nothing written
    faulty.lose_response_next("put_if_absent")             # done on the inner store, then raises
    faulty.fail_matching("get_range", lambda k: k.startswith("sst/"), times=None)  # every time
    faulty.corrupt_reads(lambda k: k.endswith(".sst"))     # reads return damaged bytes
    faulty.on_call("put", stall)                           # run stall(op, key) first (may block)

    assert faulty.calls["put"] == 3
    assert faulty.log[-1] == Call("put_if_absent", "manifest/00000000000000000007")

Operation names are the :class:`~silt.store.ObjectStore` method names: ``get``, ``get_range``,
``put``, ``put_if_absent``, ``delete_many``, ``list``; ``"*"`` matches every operation.

Rules:

* Fault rules are checked in the order they were added; the first rule that matches a request
  fires and uses up one of its ``times`` (``None`` = unlimited); a used-up rule is removed.
  At most one fault fires per request. ``on_call`` callbacks run before fault rules, and every
  matching callback runs.
* A rule's key predicate sees the request's key; for ``delete_many`` it sees each key of the
  batch (the rule matches if any key does), for ``list`` the prefix.
* An injected failure is raised *before* the inner store is called, so nothing happens. A lost
  response is raised *after* the inner call succeeded, so the effect is real (this is what makes
  commits ambiguous; see docs/safety.md).
* ``list`` failures and callbacks fire when iteration starts, as a real tier's first page
  would; a lost ``list`` response fires after the last item.
* Predicates run under the wrapper's lock: keep them quick and never call the store from them.
* Corruption changes only what the caller receives, never the stored bytes.

Counters (``calls``, ``bytes_read``, ``bytes_written``, ``log``) include requests that failed.
``bytes_read`` counts bytes returned by ``get``/``get_range`` (after corruption, before any lost
response); ``bytes_written`` counts the bytes of ``put``/``put_if_absent`` that reached the inner
store.

Thread safety: all methods may be called from several threads; schedules and counters are guarded
by a lock that is never held while the inner store or a callback runs.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from ..errors import InvalidArgumentError, TransientStoreError
from ..store import ObjectInfo, ObjectStore

T = TypeVar("T")

#: The operation names a schedule may name (plus ``"*"`` for all of them).
OPS: tuple[str, ...] = ("get", "get_range", "put", "put_if_absent", "delete_many", "list")

KeyPredicate = Callable[[str], bool]
ErrorSpec = type[BaseException] | BaseException
Callback = Callable[[str, str], object]


class Call(NamedTuple):
    """One request seen by a :class:`FaultyStore`: its operation and key.

    ``delete_many`` logs one ``Call`` per key of the batch; ``list`` logs its prefix as the key.
    """

    op: str
    key: str


def flip_middle_bit(data: bytes) -> bytes:
    """Default corruption: flip the lowest bit of the middle byte (``b""`` stays ``b""``)."""
    if not data:
        return data
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0x01
    return bytes(damaged)


@dataclass
class _Rule:
    op: str
    predicate: KeyPredicate | None
    times: int | None
    error: ErrorSpec | None = None
    after: bool = False
    corrupt: Callable[[bytes], bytes] | None = None
    callback: Callback | None = None

    def matches(self, op: str, keys: tuple[str, ...]) -> bool:
        if self.op != "*" and self.op != op:
            return False
        return self.predicate is None or any(self.predicate(k) for k in keys)


def _check_op(op: str) -> None:
    if op != "*" and op not in OPS:
        raise InvalidArgumentError(f"unknown store operation {op!r}; expected one of {OPS} or '*'")


def _check_times(times: int | None) -> None:
    if times is not None and (not isinstance(times, int) or times < 1):
        raise InvalidArgumentError(f"times must be a positive int or None, got {times!r}")


def _make_error(error: ErrorSpec, op: str, keys: tuple[str, ...], when: str) -> BaseException:
    if isinstance(error, BaseException):
        return error
    what = keys[0] if len(keys) == 1 else list(keys)
    return error(f"injected fault ({when}): {op} {what!r}")


class FaultyStore(ObjectStore):
    """Wraps ``inner`` and injects the faults a test schedules. See the module docstring."""

    def __init__(self, inner: ObjectStore) -> None:
        if not isinstance(inner, ObjectStore):
            raise InvalidArgumentError(
                f"FaultyStore wraps an ObjectStore, got {type(inner).__name__}"
            )
        self.inner = inner
        self.url = inner.url
        self.local = inner.local
        self.shared_across = inner.shared_across
        self._lock = threading.Lock()
        self._faults: list[_Rule] = []
        self._corruptions: list[_Rule] = []
        self._callbacks: list[_Rule] = []
        #: Requests per operation name (a request that failed counts too).
        self.calls: Counter[str] = Counter()
        #: Bytes returned by ``get``/``get_range``.
        self.bytes_read = 0
        #: Bytes passed to the inner store by ``put``/``put_if_absent``.
        self.bytes_written = 0
        #: Every request in order (see :class:`Call`).
        self.log: list[Call] = []

    # --- scheduling ----------------------------------------------------------------------------

    def fail_next(self, op: str, n: int = 1, error: ErrorSpec = TransientStoreError) -> None:
        """Make the next ``n`` requests of ``op`` raise ``error`` without reaching the store.

        ``error`` is an exception class (instantiated with a message naming the request) or an
        instance (raised as is).
        """
        self.fail_matching(op, None, error, times=n)

    def fail_matching(
        self,
        op: str,
        predicate: KeyPredicate | None,
        error: ErrorSpec = TransientStoreError,
        times: int | None = 1,
    ) -> None:
        """Make ``times`` requests of ``op`` whose key satisfies ``predicate`` raise ``error``.

        ``predicate=None`` matches every key; ``times=None`` fails every matching request until
        :meth:`clear_faults`. The inner store is not called.
        """
        _check_op(op)
        _check_times(times)
        with self._lock:
            self._faults.append(_Rule(op, predicate, times, error=error))

    def lose_response_next(
        self,
        op: str,
        n: int = 1,
        predicate: KeyPredicate | None = None,
        error: ErrorSpec = TransientStoreError,
    ) -> None:
        """Let the next ``n`` matching requests of ``op`` reach the inner store, then raise.

        Models a response lost in transit: the write (or delete) happened, the caller sees
        ``error`` (by default :class:`~silt.errors.TransientStoreError`) and typically retries.
        """
        _check_op(op)
        _check_times(n)
        with self._lock:
            self._faults.append(_Rule(op, predicate, n, error=error, after=True))

    def corrupt_reads(
        self,
        predicate: KeyPredicate | None = None,
        corrupt: Callable[[bytes], bytes] = flip_middle_bit,
        times: int | None = None,
    ) -> None:
        """Pass what ``get``/``get_range`` return for matching keys through ``corrupt``.

        The stored object is unchanged. ``times=None`` corrupts every matching read.
        """
        _check_times(times)
        with self._lock:
            self._corruptions.append(_Rule("*", predicate, times, corrupt=corrupt))

    def on_call(
        self,
        op: str,
        callback: Callback,
        predicate: KeyPredicate | None = None,
        times: int | None = None,
    ) -> None:
        """Call ``callback(op, key)`` before each matching request reaches the store.

        ``key`` is the request's key (for ``delete_many`` the first key of the batch that
        matches ``predicate``, for ``list`` the prefix).

        The callback may block (to stall a writer at an exact point, e.g. on a
        :class:`threading.Event`) or raise (the exception propagates to the caller and the
        request is not made). It runs without any lock held.
        """
        _check_op(op)
        _check_times(times)
        with self._lock:
            self._callbacks.append(_Rule(op, predicate, times, callback=callback))

    def clear_faults(self) -> None:
        """Remove every scheduled fault, corruption and callback (counters are kept)."""
        with self._lock:
            self._faults.clear()
            self._corruptions.clear()
            self._callbacks.clear()

    def reset_counters(self) -> None:
        """Zero ``calls``, ``bytes_read``, ``bytes_written`` and empty ``log``."""
        with self._lock:
            self.calls.clear()
            self.bytes_read = 0
            self.bytes_written = 0
            self.log.clear()

    @property
    def pending_faults(self) -> int:
        """How many fault rules (failures and lost responses) are still scheduled."""
        with self._lock:
            return len(self._faults)

    # --- machinery -----------------------------------------------------------------------------

    @staticmethod
    def _take(rules: list[_Rule], op: str, keys: tuple[str, ...], first: bool) -> list[_Rule]:
        """Matching rules (only the first if ``first``), each using up one of its ``times``."""
        taken: list[_Rule] = []
        for rule in list(rules):
            if not rule.matches(op, keys):
                continue
            taken.append(rule)
            if rule.times is not None:
                rule.times -= 1
                if rule.times == 0:
                    rules.remove(rule)
            if first:
                break
        return taken

    def _begin(self, op: str, keys: tuple[str, ...]) -> _Rule | None:
        """Count and log the request, run callbacks, and return the fault to apply (if any)."""
        with self._lock:
            self.calls[op] += 1
            self.log.extend(Call(op, k) for k in keys)
            callbacks = self._take(self._callbacks, op, keys, first=False)
        for rule in callbacks:
            assert rule.callback is not None
            pred = rule.predicate
            key = next((k for k in keys if pred is None or pred(k)), keys[0] if keys else "")
            rule.callback(op, key)
        with self._lock:
            taken = self._take(self._faults, op, keys, first=True)
        fault = taken[0] if taken else None
        if fault is not None and not fault.after:
            assert fault.error is not None
            raise _make_error(fault.error, op, keys, "request failed")
        return fault

    @staticmethod
    def _end(fault: _Rule | None, op: str, keys: tuple[str, ...]) -> None:
        if fault is not None:
            assert fault.error is not None
            raise _make_error(fault.error, op, keys, "response lost")

    def _read(self, op: str, key: str, call: Callable[[], bytes]) -> bytes:
        keys = (key,)
        fault = self._begin(op, keys)
        data = call()
        with self._lock:
            corruptions = self._take(self._corruptions, op, keys, first=False)
        for rule in corruptions:
            assert rule.corrupt is not None
            data = rule.corrupt(data)
        with self._lock:
            self.bytes_read += len(data)
        self._end(fault, op, keys)
        return data

    def _write(self, op: str, key: str, data: bytes, call: Callable[[], T]) -> T:
        keys = (key,)
        fault = self._begin(op, keys)
        with self._lock:
            self.bytes_written += len(data)
        result = call()
        self._end(fault, op, keys)
        return result

    # --- ObjectStore ---------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        return self._read("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._read("get_range", key, lambda: self.inner.get_range(key, start, length))

    def put(self, key: str, data: bytes) -> None:
        self._write("put", key, data, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._write(
            "put_if_absent", key, data, lambda: self.inner.put_if_absent(key, data)
        )

    def delete_many(self, keys: Iterable[str]) -> None:
        if isinstance(keys, (str, bytes)):
            self.inner.delete_many(keys)  # the inner store rejects a lone key in its own words
            return
        batch = tuple(keys)
        fault = self._begin("delete_many", batch)
        self.inner.delete_many(batch)
        self._end(fault, "delete_many", batch)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        keys = (prefix,)
        fault = self._begin("list", keys)
        yield from self.inner.list(prefix, start_after)
        self._end(fault, "list", keys)

    def close(self) -> None:
        self.inner.close()

    def take_extra_reads(self) -> int:
        return self.inner.take_extra_reads()

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r})"


__all__ = ["OPS", "Call", "FaultyStore", "flip_middle_bit"]
