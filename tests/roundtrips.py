"""Count the sequential round trips of a DB's reads: wrap its store so that it behaves as a
remote one (not ``local``, so the DB issues independent GETs at once) whose every GET takes a
fixed delay, and record when each started and ended.

A read that started after another had ended (by the clock) waited for it, or could have; reads
issued at once overlap. The number of round trips is the longest chain of reads each of which
started after the one before had ended. The delay is long next to a thread's start-up, so
reads issued together are never mistaken for a chain (a loaded machine only shortens chains).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import silt

#: How long each timed read takes (seconds).
DELAY = 0.12


class TimedReads:
    """Delegates to ``inner``; ``get`` and ``get_range`` take :data:`DELAY` and are timed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _timed(self, read: Any, *args: Any) -> Any:
        start = time.monotonic()
        try:
            time.sleep(DELAY)
            return read(*args)
        finally:
            with self._lock:
                self.spans.append((start, time.monotonic()))

    def get(self, key: str) -> bytes:
        return self._timed(self.inner.get, key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._timed(self.inner.get_range, key, start, length)

    def round_trips(self) -> int:
        """The longest chain of reads, each started after the one before ended."""
        depth: list[int] = []
        spans = sorted(self.spans)
        for start, _ in spans:
            depth.append(1 + max((d for (_, end), d in zip(spans, depth) if end <= start),
                                 default=0))
        return max(depth, default=0)


@contextmanager
def timed(db: silt.DB) -> Iterator[TimedReads]:
    """Time the reads ``db`` makes inside the block (its metered store's inner store), as if
    its store were remote."""
    metered = db.store
    wrapper = TimedReads(metered.inner)
    metered.inner, metered.local = wrapper, False
    try:
        yield wrapper
    finally:
        metered.inner, metered.local = wrapper.inner, wrapper.inner.local
