"""The processor's state for one micro-batch's keys, read before any user code runs.

``transform_with_state`` knows every grouping key of a batch (and every key with a due timer)
before it calls ``handleInputRows``; reading their state then, in as few store requests as
possible, means no state read in user code waits on the store (with state on an object store
and a cold cache, one ranged GET per key otherwise). :class:`BatchState`:

* reads the value states of all the keys with **one** sorted ``multi_get``;
* when the processor has list or map states or timers, reads every key's entries under its key
  prefix (its list elements, map entries and timer marks) with **one** ``multi_scan`` of all
  the keys' prefixes (one planned wave of block reads, however many keys; a scan per key took
  a round trip per SST and key on an object store);
* or, for the batch processor, reads the list and map entries of all the keys with **one**
  ``multi_scan`` (:meth:`BatchState.load_ranges`);
* serves the state variables' reads from what it holds, and records every write the variables
  make (the writes still go to the DB at once, as before), so a read after a write in the same
  batch sees the write.

A read of something it does not hold (a key outside the batch, a state name registered after
the prefetch) goes to the DB. Values are as of the prefetch: a state TTL that runs out during
the batch takes effect from the next batch (Spark also evaluates TTL against the batch's time).

Not thread-safe: one batch of one shard, in its task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ._keys import TIMER_MARK, prefix_end, read_ranges


class BatchState:
    """What a batch's state reads are served from (see the module docstring)."""

    def __init__(self, task: Any) -> None:
        #: Reads go to ``task.db`` (whatever the task's DB is at the time of the read).
        self._task = task
        #: Key prefixes whose state is held.
        self._loaded: set[bytes] = set()
        #: Entry key -> value (``None``: absent) of value states.
        self._values: dict[bytes, bytes | None] = {}
        #: ``key prefix + state name`` of a map -> its entries (key -> value, ``None``: removed).
        self._maps: dict[bytes, dict[bytes, bytes | None]] = {}
        #: Key prefix -> the key's timers (expiry ms).
        self._timers: dict[bytes, set[int]] = {}

    def load(
        self, prefixes: Iterable[bytes], names: Iterable[bytes], map_names: Iterable[bytes],
        timers: bool, timer_value: Any,
    ) -> None:
        """Read the state of the keys with these prefixes (already held ones are skipped):
        the entries ``prefix + name`` for ``names`` (value states) with one ``multi_get``; with
        ``map_names`` (list and map states: entries under ``prefix + name``) or ``timers``, one
        ``multi_scan`` of every key's prefix for their entries and the timers (``timer_value``
        decodes a timer's 8 bytes). Key prefixes are length-prefixed, so no prefix is another's
        and their ranges never overlap."""
        prefixes = [p for p in dict.fromkeys(prefixes) if p not in self._loaded]
        names = list(names)
        map_names = list(map_names)
        if not prefixes:
            return
        self._loaded.update(prefixes)
        db = self._task.db
        if names:
            keys = sorted(p + n for p in prefixes for n in names)
            self._values.update(zip(keys, db.multi_get(keys)))
        if map_names or timers:
            wanted = set(map_names)
            got = read_ranges(db, [(p, prefix_end(p)) for p in prefixes])
            for (p, _), items in got.items():
                n = len(p)
                maps: dict[bytes, dict[bytes, bytes | None]] = {p + m: {} for m in map_names}
                own: set[int] = set()
                for k, v in items:
                    if k[n] == TIMER_MARK[0]:
                        own.add(timer_value(k[n + 1:]))
                        continue
                    name = k[n:n + 1 + k[n]]
                    if name in wanted:
                        maps[p + name][k] = v
                self._maps.update(maps)
                self._timers[p] = own

    def load_ranges(self, map_prefixes: Iterable[bytes]) -> None:
        """Read every entry under each of ``map_prefixes`` (``key prefix + state name`` of list
        and map states; already held ones are skipped) with one ``multi_scan``, and hold them
        for :meth:`map_get` and :meth:`map_items`."""
        wanted = [p for p in set(map_prefixes) if p not in self._maps]
        if not wanted:
            return
        got = read_ranges(self._task.db, [(p, prefix_end(p)) for p in wanted])
        self._maps.update({p: dict(items) for (p, _), items in got.items()})

    # -- value states -------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value of an entry: held, else from the DB."""
        try:
            return self._values[key]
        except KeyError:
            return self._task.db.get(key)

    def wrote(self, key: bytes, value: bytes | None) -> None:
        """Note a write of a value state (``None``: deleted)."""
        if key in self._values:
            self._values[key] = value

    # -- list and map states ------------------------------------------------------------------
    def map_get(self, map_prefix: bytes, key: bytes) -> bytes | None:
        entries = self._maps.get(map_prefix)
        if entries is None:
            return self._task.db.get(key)
        return entries.get(key)

    def map_items(self, map_prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The map's live entries in key order (a snapshot)."""
        entries = self._maps.get(map_prefix)
        if entries is None:
            return iter(list(self._task.db.scan(prefix=map_prefix)))
        return iter([(k, entries[k]) for k in sorted(entries) if entries[k] is not None])

    def map_wrote(self, map_prefix: bytes, key: bytes, value: bytes | None) -> None:
        entries = self._maps.get(map_prefix)
        if entries is not None:
            entries[key] = value

    # -- timers -------------------------------------------------------------------------------
    def timers(self, prefix: bytes) -> set[int] | None:
        """The key's timers, or ``None`` when not held (read the DB)."""
        return self._timers.get(prefix)

    def timer_set(self, prefix: bytes, expiry: int) -> None:
        own = self._timers.get(prefix)
        if own is not None:
            own.add(expiry)

    def timer_deleted(self, prefix: bytes, expiry: int) -> None:
        own = self._timers.get(prefix)
        if own is not None:
            own.discard(expiry)
