"""Hedged reads: a read that is slow gets a second, identical request, and the first answer wins.

Object stores have a long latency tail: most ranged GETs answer in tens of milliseconds, a few in
hundreds. AWS's guidance for latency-sensitive reads is to send a second request when the first
has taken longer than nearly all requests do, and take whichever answers first (a *hedged*
request). Reads of immutable objects (SSTs, manifests) are idempotent, so both answers are the
same bytes and the second request costs only its price.

A store hedges when its options say so (:class:`~silt.tierkit.NetworkOptions`):

* ``hedge_after_ms`` > 0: send the second request after this many milliseconds;
* ``hedge_quantile`` in (0, 1): after that quantile of the store's recent read latencies (the
  last :data:`WINDOW` reads; no hedging until :data:`MIN_SAMPLES` were seen), but never sooner
  than ``hedge_after_ms``.

A budget keeps hedging from doubling the load when the store is slow for everyone: at most
:data:`BUDGET` of the reads (plus :data:`BURST`) are hedged. The read waits for the first
*successful* answer: an attempt that fails while the other is still running is ignored; if both
fail, the first attempt's error is raised. The loser is not cancelled (the SDKs cannot cancel a
request in flight); it finishes in the background and its latency still feeds the window.

Each hedged read costs a thread hand-off, so hedging is for network tiers, never local files.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from ..errors import InvalidArgumentError

T = TypeVar("T")

#: Reads whose latency the adaptive threshold is computed from (the most recent ones).
WINDOW = 512
#: Reads to see before ``hedge_quantile`` hedges at all.
MIN_SAMPLES = 32
#: Largest share of reads that may be hedged, and the hedges allowed beyond it.
BUDGET = 0.1
BURST = 10
#: Threads running attempts (each hedged read holds one or two while it waits).
WORKERS = 32


def check(after_ms: float, quantile: float) -> None:
    """Refuse options a store cannot hedge with, naming the option and its range."""
    if not after_ms >= 0 or after_ms > 600_000:
        raise InvalidArgumentError(
            f"hedge_after_ms must be in 0..600000 (0: no fixed delay), got {after_ms}"
        )
    if not 0 <= quantile < 1:
        raise InvalidArgumentError(
            f"hedge_quantile must be in [0, 1) (0: off; 0.95 hedges the slowest 5%), got "
            f"{quantile}"
        )


class Hedger:
    """Runs reads with hedging (see the module docstring); thread-safe."""

    def __init__(self, after_ms: float, quantile: float) -> None:
        check(after_ms, quantile)
        self.after = after_ms / 1000.0
        self.quantile = quantile
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=WINDOW)
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self.reads = 0
        self.hedged = 0
        self.hedge_wins = 0

    @staticmethod
    def from_options(options: Any) -> Hedger | None:
        """A hedger for a store's options, or ``None`` when they do not ask for hedging."""
        after = float(getattr(options, "hedge_after_ms", 0.0) or 0.0)
        quantile = float(getattr(options, "hedge_quantile", 0.0) or 0.0)
        if after <= 0 and quantile <= 0:
            return None
        return Hedger(after, quantile)

    def delay(self) -> float | None:
        """Seconds after which a read started now is hedged, or ``None`` (not now)."""
        with self._lock:
            if self.hedged >= self.reads * BUDGET + BURST:
                return None
            if self.quantile <= 0:
                return self.after
            if len(self._latencies) < MIN_SAMPLES:
                return None
            ranked = sorted(self._latencies)
            q = ranked[min(len(ranked) - 1, int(self.quantile * len(ranked)))]
        return max(q, self.after)

    def take_extra(self) -> int:
        """Requests this thread's reads sent besides the ones asked for since the last call."""
        n = getattr(self._local, "extra", 0)
        self._local.extra = 0
        return n

    def run(self, call: Callable[[], T]) -> T:
        """``call()`` (one read), hedged when it takes longer than :meth:`delay`."""
        with self._lock:
            self.reads += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="silt-hedge")
            pool = self._pool
        after = self.delay()
        first = pool.submit(self._timed, call)
        if after is None:
            return first.result()
        try:
            return first.result(timeout=after)
        except TimeoutError:
            if first.done():
                raise  # the read's own error, not the wait's
        with self._lock:
            self.hedged += 1
        self._local.extra = getattr(self._local, "extra", 0) + 1
        second = pool.submit(self._timed, call)
        pending: set[Future[T]] = {first, second}
        while True:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in (f for f in (first, second) if f in done):
                if fut.exception() is None:
                    if fut is second:
                        with self._lock:
                            self.hedge_wins += 1
                    return fut.result()
            if not pending:
                return first.result()  # both failed: the first attempt's error

    def _timed(self, call: Callable[[], T]) -> T:
        start = time.monotonic()
        result = call()
        with self._lock:
            self._latencies.append(time.monotonic() - start)
        return result

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"reads": self.reads, "hedged": self.hedged, "hedge_wins": self.hedge_wins}

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
