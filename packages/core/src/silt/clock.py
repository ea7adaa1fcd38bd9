"""The clock component: the engine's only source of wall time (TTL expiry, ids, GC cutoffs), and
of the wake-ups the engine asks for at a time of that clock (:meth:`Clock.call_at`).

Inject a :class:`ManualClock` to make TTL behaviour and wake-ups deterministic in tests and
simulations: its wake-ups run when the test moves it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Wakeup:
    """A wake-up :meth:`Clock.call_at` scheduled; :meth:`cancel` stops it if it has not run."""

    def __init__(self, at_ms: int, fn: Callable[[], None]) -> None:
        self.at_ms = at_ms
        self.fn = fn
        self.cancelled = False
        self._timer: threading.Timer | None = None

    def cancel(self) -> None:
        """Make sure the wake-up does not run (when it is already running, it finishes)."""
        self.cancelled = True
        if self._timer is not None:
            self._timer.cancel()

    def run(self) -> None:
        if not self.cancelled:
            self.fn()


class Clock:
    """Wall-clock milliseconds since the Unix epoch."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> Wakeup:
        """Call ``fn()`` once, on a thread of its own, when this clock reaches ``at_ms`` (at once
        if it has); returns the :class:`Wakeup` that cancels it. ``fn`` must not raise."""
        wakeup = Wakeup(at_ms, fn)
        timer = threading.Timer(max(0.0, (at_ms - self.now_ms()) / 1000), wakeup.run)
        timer.daemon = True
        wakeup._timer = timer
        timer.start()
        return wakeup


class ManualClock(Clock):
    """A clock that only moves when told to. Thread-safe. Its wake-ups (:meth:`call_at`) run in
    the thread that moves it past their time (:meth:`advance`, :meth:`set`), in time order,
    after the move."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()
        self._wakeups: list[Wakeup] = []

    def now_ms(self) -> int:
        return self._now

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> Wakeup:
        wakeup = Wakeup(at_ms, fn)
        with self._lock:
            self._wakeups.append(wakeup)
        self._run_due()
        return wakeup

    def advance(self, ms: int) -> None:
        with self._lock:
            self._now += ms
        self._run_due()

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = ms
        self._run_due()

    def _run_due(self) -> None:
        with self._lock:
            due = sorted((w for w in self._wakeups if w.at_ms <= self._now),
                         key=lambda w: w.at_ms)
            self._wakeups = [w for w in self._wakeups if w.at_ms > self._now and not w.cancelled]
        for wakeup in due:
            wakeup.run()
