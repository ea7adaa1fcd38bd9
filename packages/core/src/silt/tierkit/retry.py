"""silt's retry policy for tiers: every request is retried in one place, never in two.

Without a policy, retries multiply: the engine's loop (:func:`silt.store.retrying`) around a
tier's loop around the SDK's own retries made up to ~30 requests of one failing operation. The
rule now:

1. **The SDK retries requests**, where it can: a tier whose SDK has a retry policy configures
   it explicitly from its options (attempts, mode, backoff; see each tier's ``config``
   module), and raises :class:`~silt.errors.RetriesExhaustedError` for a transient failure
   that outlived it. The engine does not retry that error again.
2. **silt's loop retries only what the SDK does not**: a whole read whose body broke mid-transfer
   or came back short or corrupt, which SDKs do not re-request (:func:`whole_read`,
   :class:`BodyBrokenError`), or an answer the SDK treats as final but that a repeat may fix (a
   conflicting concurrent conditional write: :func:`retry_on`). When these run out they too
   raise :class:`~silt.errors.RetriesExhaustedError`.
3. **A plain** :class:`~silt.errors.TransientStoreError` means nobody has retried the request
   yet (a tier without an SDK, such as ``file://``, or a failure no SDK retries, such as one key
   of a batch delete): the engine's :func:`silt.store.retrying` retries it with backoff.

So a request that keeps failing is sent at most ``max_attempts`` times (the SDK's policy), a whole
read at most ``max_attempts * read_attempts`` times, and a tier without an SDK has its calls
tried :data:`silt.store.ENGINE_ATTEMPTS` times by the engine. docs/plugins.md states what a
third-party tier should do.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from ..errors import RetriesExhaustedError, TransientStoreError

T = TypeVar("T")


class BodyBrokenError(TransientStoreError):
    """A response body broke mid-read (reset, truncated, short, checksum mismatch): the SDK
    does not re-request it, so :func:`whole_read` repeats the whole read."""


def retry_on(
    error: type[BaseException],
    call: Callable[[], T],
    *,
    attempts: int,
    deadline: float,
    base_delay: float = 0.05,
    max_delay: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``call``, retrying only ``error`` with capped exponential backoff and full jitter.

    For a failure the SDK does not retry (rule 2 of the module docstring), so it never
    multiplies the SDK's retries of whole requests. After ``attempts`` tries or ``deadline``
    seconds the last ``error`` is raised as :class:`~silt.errors.RetriesExhaustedError`
    (chained to it), which the engine does not retry again. Other exceptions propagate at once.
    """
    start = time.monotonic()
    for attempt in range(attempts):
        try:
            return call()
        except error as exc:
            elapsed = time.monotonic() - start
            if attempt == attempts - 1 or elapsed >= deadline:
                if isinstance(exc, RetriesExhaustedError):
                    raise
                tries = f"{attempt + 1} tr{'y' if attempt == 0 else 'ies'}"
                raise RetriesExhaustedError(f"{exc} (gave up after {tries})") from exc
            delay = min(max_delay, base_delay * (2**attempt))
            sleep(min(random.uniform(0, delay), max(0.0, deadline - elapsed)))
    raise AssertionError("unreachable")  # pragma: no cover


def whole_read(call: Callable[[], T], *, attempts: int, timeout: float) -> T:
    """Run one whole read (``get`` or ``get_range``), repeating it while it raises
    :class:`BodyBrokenError`: ``attempts`` tries within ``attempts * timeout`` seconds (the
    tier's ``read_attempts`` and ``read_timeout``)."""
    return retry_on(BodyBrokenError, call, attempts=attempts, deadline=timeout * attempts)


__all__ = ["BodyBrokenError", "retry_on", "whole_read"]
