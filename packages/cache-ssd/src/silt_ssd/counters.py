"""This process's counters of a cache (hits, misses, admissions, evictions, errors...)."""

from __future__ import annotations

import threading

#: Every counter, in the order ``SsdCache.stats()`` reports them.
NAMES = (
    "hits", "misses", "bytes_served", "bytes_fetched", "admitted", "admitted_bytes",
    "write_through", "rejected", "evictions", "evicted_bytes", "dropped_damaged",
    "invalidated", "bypassed", "errors",
)


class Counters:
    """Counts of :data:`NAMES`, all 0 at first; safe to add to from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(NAMES, 0)

    def add(self, **deltas: int) -> None:
        """Add each delta to the counter of its name (a name not in :data:`NAMES`: KeyError)."""
        with self._lock:
            for name, delta in deltas.items():
                self._counts[name] += delta

    def snapshot(self) -> dict[str, int]:
        """A copy of every counter, taken at one moment."""
        with self._lock:
            return dict(self._counts)


__all__ = ["NAMES", "Counters"]
