"""Count the sequential round trips of what an open DB does inside a block, as if its store
were remote: :class:`silt.testing.LatencyStore` (every request kind delayed by :data:`DELAY`,
the store no longer ``local``) put between the DB's metered store and the store it wraps.

For a DB opened without a latency store (a Spark shard's cached handle, a test's plain
``silt.open``); tests that open the DB themselves wrap the store at open instead
(tests/test_round_trips.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import silt
from silt.testing import LatencyStore, Operation

#: How long each request takes (seconds): long against a thread's start-up on a loaded
#: machine, so requests issued at once are never mistaken for a chain.
DELAY = 0.12


class Timed:
    """The requests of one block: :meth:`round_trips`, and ``spans`` (the requests of each
    round trip, for assertion messages)."""

    def __init__(self, op: Operation) -> None:
        self.op = op

    def round_trips(self) -> int:
        """The longest chain of requests, each started after the one before had completed."""
        return self.op.round_trips

    @property
    def spans(self) -> list[list[tuple[str, str]]]:
        return self.op.waves()


@contextmanager
def timed(db: silt.DB) -> Iterator[Timed]:
    """Time the requests ``db`` makes inside the block (its metered store's inner store is
    wrapped for the block), as if its store were remote."""
    metered = db.store
    inner = metered.inner
    slow = LatencyStore(inner, DELAY)
    metered.inner, metered.local = slow, False
    try:
        with slow.operation() as op:
            yield Timed(op)
    finally:
        metered.inner, metered.local = inner, inner.local


def foreground_requests(db: silt.DB) -> dict[str, int]:
    """The requests ``db`` made, by kind, but for its background compaction's: on a local store
    a new handle that compacts lists ``compaction/`` on a thread of its own for results an
    earlier process left (:mod:`silt.compaction.leftovers`), off the path of its open, reads
    and commits, and at a moment no test controls."""
    counts: dict[str, int] = {}
    for purpose, kinds in db.stats()["requests"].items():
        if purpose != "compaction":
            for kind, figures in kinds.items():
                counts[kind] = counts.get(kind, 0) + figures["count"]
    return {kind: counts.get(kind, 0) for kind in db.stats()["requests_by_kind"]}

