"""Finding a byte range among an object's cached entries, without the lock.

A request hits an entry of exactly its range, else the smallest entry holding it, else a chain
of adjacent entries covering it (found by listing the object's directory, so a miss costs one
``scandir``; a whole-object entry holds every range). A hit refreshes the entry's recency (its
mtime) at most once per touch interval. A damaged entry is dropped, never returned.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from . import entry
from .cachedir import CacheDir
from .counters import Counters


class Lookup:
    """Reads ranges from the entries in ``cachedir``, counting disk errors and damaged entries
    in ``counters``; ``clock`` (nanoseconds) and ``touch_ns`` set recency. Never raises."""

    def __init__(self, cachedir: CacheDir, counters: Counters, clock: Callable[[], int],
                 touch_ns: int) -> None:
        self._dir = cachedir
        self._counters = counters
        self._clock = clock
        self._touch_ns = touch_ns

    def find(self, ident: bytes, start: int, length: int) -> bytes | None:
        """The bytes of ``(start, length)`` of the object ``ident`` (``length`` may be
        :data:`entry.WHOLE`) from its entries; ``None`` when they do not hold them."""
        path = self._dir.path(ident, start, length)
        data = self._entry(path, ident, start, length)
        if data is None and length != entry.WHOLE:
            data = self._within(os.path.dirname(path), ident, start, length)
        return data

    def _entry(self, path: str, ident: bytes, start: int, length: int) -> bytes | None:
        try:
            with open(path, "rb", buffering=0) as f:
                st = os.fstat(f.fileno())
                buf = f.read()
                now = self._clock()
                if now - st.st_mtime_ns >= self._touch_ns:
                    with contextlib.suppress(OSError):
                        os.utime(f.fileno(), ns=(now, now))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            self._counters.add(errors=1)
            return None
        try:
            return entry.decode(buf, ident, start, length)
        except entry.DamagedEntry:
            self._counters.add(dropped_damaged=1)
            self._drop_damaged(path, st)
            return None

    def _drop_damaged(self, path: str, seen: os.stat_result) -> None:
        """Remove the damaged entry at ``path`` unless another process already replaced it."""
        if self._dir.closed:
            return
        try:
            self._dir.drop_if_unchanged(path, seen)
        except OSError:
            self._counters.add(errors=1)

    def _within(self, folder: str, ident: bytes, start: int, length: int) -> bytes | None:
        """``[start, start + length)`` from the object's cached ranges other than its exact
        one: cut from the smallest entry holding it (a run of blocks read with one request
        holds each of its blocks; a whole-object entry holds every range), else joined from
        adjacent entries that cover it (single blocks admitted by write-through cover a run);
        ``None`` when they do not."""
        end = start + length
        spans: list[tuple[int, int]] = []  # (start, length) of each cached range
        whole = False
        try:
            with os.scandir(folder) as it:
                for e in it:
                    if e.name == "all":
                        whole = True
                        continue
                    s_, plus, n_ = e.name.partition("+")
                    if plus and s_.isdigit() and n_.isdigit():
                        spans.append((int(s_), int(n_)))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            self._counters.add(errors=1)
            return None
        holding = [(n, s) for s, n in spans if s <= start and end <= s + n]
        if holding:
            n, s = min(holding)
            return self._cut(folder, ident, s, n, start, end)
        if whole:
            return self._cut(folder, ident, 0, entry.WHOLE, start, end)
        # A chain of entries, each starting inside the previous one, from start to end.
        pieces: list[bytes] = []
        pos = start
        while pos < end:
            reach = [(s + n, s, n) for s, n in spans if s <= pos < s + n]
            if not reach:
                return None
            _, s, n = max(reach)
            data = self._cut(folder, ident, s, n, pos, end)
            if data is None:
                return None
            pieces.append(data)
            pos += len(data)
            if pos < min(s + n, end):  # the object ends inside this entry
                break
        return b"".join(pieces)

    def _cut(self, folder: str, ident: bytes, s: int, n: int, start: int,
             end: int) -> bytes | None:
        """Bytes ``[start, end)`` of the object from its entry ``(s, n)`` (``None``: gone or
        damaged, then dropped); fewer where the object ends first."""
        data = self._entry(os.path.join(folder, entry.file_name(s, n)), ident, s, n)
        if data is None:
            return None
        return data[start - s:end - s]


__all__ = ["Lookup"]
