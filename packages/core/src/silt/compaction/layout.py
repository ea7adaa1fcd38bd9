"""Key-range helpers over SSTs and sorted runs, shared by policies and adoption. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

from ..sst.builder import SstInfo


def hull(ssts: Iterable[SstInfo]) -> tuple[bytes, bytes]:
    """The smallest key range covering every SST (precondition: at least one SST)."""
    items = list(ssts)
    return min(s.smallest for s in items), max(s.largest for s in items)


def overlaps(s: SstInfo, lo: bytes, hi: bytes) -> bool:
    """Whether ``s`` has keys in the closed range ``[lo, hi]``."""
    return s.smallest <= hi and s.largest >= lo


def overlapping(run: Sequence[SstInfo], lo: bytes, hi: bytes) -> list[SstInfo]:
    return [s for s in run if overlaps(s, lo, hi)]


def run_bytes(run: Iterable[SstInfo]) -> int:
    return sum(s.size for s in run)


def is_sorted_run(run: Sequence[SstInfo]) -> bool:
    """Whether the SSTs are in key order with disjoint ranges."""
    return all(a.largest < b.smallest for a, b in pairwise(run))


def nothing_below(levels: Sequence[Sequence[SstInfo]], index: int, lo: bytes, hi: bytes) -> bool:
    """Whether no run deeper than ``levels[index]`` has keys in ``[lo, hi]``."""
    return not any(overlaps(s, lo, hi) for run in levels[index + 1:] for s in run)
