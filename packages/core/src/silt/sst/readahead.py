"""Scan read-ahead: the blocks of one SST for a forward range read, fetched as runs.

A block a range read needs that is not cached is read together with the blocks after it (up to
the one holding the range's end) in one ranged GET of at most :data:`READAHEAD_FIRST` bytes,
doubling on every further miss up to :data:`READAHEAD_MAX`: small blocks keep point reads cheap,
read-ahead keeps scans and compactions at a few large requests. One :class:`Readahead` serves
one iterator (not thread-safe); both twins of :func:`silt.sst.reader.RangeIter` use it.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Protocol

from .block import Block
from .tail import SstTail


class BlockSource(Protocol):
    """What a :class:`Readahead` reads from: an :class:`~silt.sst.reader.SstReader`."""

    @property
    def tail(self) -> SstTail: ...
    def cached_block(self, i: int) -> Block | None: ...
    def run_end(self, first: int, max_bytes: int, limit: int | None = None) -> int: ...
    def read_run(self, first: int, stop: int, fill_cache: bool = True) -> list[Block]: ...

#: A range read's first read of blocks that are not cached covers up to this many bytes ...
READAHEAD_FIRST = 64 * 1024
#: ... and every further one twice the last, up to this.
READAHEAD_MAX = 1024 * 1024


class Readahead:
    """The blocks of one SST for a forward range read: a block that is not cached is read
    together with the blocks after it, up to the one holding ``end`` (the range's last), in one
    ranged GET of at most ``READAHEAD_FIRST`` bytes, doubling on every further miss up to
    ``READAHEAD_MAX``. Small blocks keep point reads cheap; this keeps scans and compactions
    at a few large requests. Used by both twins of :func:`RangeIter`."""

    __slots__ = ("reader", "fill_cache", "limit", "run", "first", "ahead")

    def __init__(self, reader: BlockSource, end: bytes | None, fill_cache: bool) -> None:
        self.reader = reader
        self.fill_cache = fill_cache
        last_keys = reader.tail.last_keys
        # the block holding the last key below ``end`` is the last one the range needs
        self.limit = len(last_keys) if end is None else min(
            len(last_keys), bisect_left(last_keys, end) + 1
        )
        self.run: list[Block] = []
        self.first = 0
        self.ahead = READAHEAD_FIRST

    def block(self, i: int) -> Block:
        """Block ``i`` (``i`` only grows from call to call)."""
        j = i - self.first
        if 0 <= j < len(self.run):
            return self.run[j]
        reader = self.reader
        blk = reader.cached_block(i)
        if blk is not None:
            return blk
        stop = reader.run_end(i, self.ahead, self.limit)
        self.run = reader.read_run(i, stop, self.fill_cache)
        self.first = i
        self.ahead = min(2 * self.ahead, READAHEAD_MAX)
        return self.run[0]
