"""The clock component: the engine's only source of wall time (TTL expiry, ids, GC cutoffs).

Inject a :class:`ManualClock` to make TTL behaviour deterministic in tests and simulations.
"""

from __future__ import annotations

import threading
import time


class Clock:
    """Wall-clock milliseconds since the Unix epoch."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock(Clock):
    """A clock that only moves when told to. Thread-safe."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now += ms

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = ms
