"""The batch processor's timers: what ``process`` and ``expired`` get as ``timers``
(:class:`BatchTimers`: register, delete and list timers of many keys at once, and the batch's
times), and the firing of the timers that are due (:func:`fire`).

Layout: exactly the per-key processor's (``operators/_varkeys.py``), so a query may switch
processors with timers pending: a key's timer at ``t`` ms is the entry ``key_prefix 0x00
t:u64`` under the key's prefix and the entry ``kg 'T' t enc(key)`` of the shard-wide index that
the due timers are read from; the manifest meta keeps a lower bound of the shard's timers
(``spark.next_timer_ms``), so a batch with nothing due scans nothing. Times are int64 ms since
the epoch (timestamps are taken too, as whole ms); a key has at most one timer per time.

Every call works on whole arrays (``_timerkeys.py`` builds and takes apart the entries with
numpy): no Python call per timer in ``register``, ``delete``, ``list`` or the firing. A key's
timers are not read ahead with the batch's state: ``register`` and ``delete`` write without
reading (registering a timer again rewrites the same entries, deleting a timer that is not
there removes nothing), and ``list`` reads the keys it is given when called.
"""

from __future__ import annotations

from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ...runtime import _rowcodec
from ...runtime._rowcodec import Rows
from ...runtime._shard import ShardTask
from .._timervalues import TimerValues
from . import _timerkeys

#: The time column of :meth:`BatchTimers.list`.
TIME_COLUMN = "time"


class BatchTimers(TimerValues):
    """What ``process`` (and ``expired``, ``process_initial``) get as ``timers``: the batch's
    processing time and watermark (as :class:`~silt_spark.TimerValues`) and the timers of the
    batch's keys, registered, deleted and listed for many keys at once.

    Keys are key rows of the batch (as for state calls; in ``expired`` also the keys whose
    timers fire); times are int64 ms since the epoch, one per key row (a ``pyarrow`` array,
    numpy array or list of ints; a timestamp array is taken as whole ms). Every argument is
    checked before anything is written. Timers need ``time_mode="ProcessingTime"`` or
    ``"EventTime"``.

    Examples
    --------
    >>> class Idle(BatchProcessor):
    ...     def init(self, handle):
    ...         pass
    ...     def process(self, batch, state, timers):
    ...         keys = batch.group_by("user").aggregate([("ts", "max")])
    ...         old = timers.list(keys.select(["user"]))
    ...         timers.delete(old.select(["user"]), old["time"])
    ...         timers.register(keys.select(["user"]), pc.add(keys["ts_max"], 60_000))
    ...     def expired(self, keys, times, state):
    ...         return pa.table({"user": keys["user"], "idle_since": pc.subtract(times, 60_000)})
    """

    def __init__(self, handle: Any, mode: str, processing_ms: int, watermark_ms: int) -> None:
        super().__init__(processing_ms, watermark_ms)
        self._handle = handle
        self._mode = mode
        #: Smallest timer registered since the last reset (keeps the shard's timer bound).
        self.registered_min: int | None = None

    def _what(self, call: str) -> str:
        return f"{self._handle._processor} timers.{call}"

    def _positions(self, keys: Any, call: str) -> tuple[Any, Any]:
        what = self._what(call)
        if self._mode == "none":
            raise InvalidArgumentError(
                f"{what}: timers need time_mode='ProcessingTime' or 'EventTime' in "
                "transform_batches"
            )
        return self._handle._keys.positions(keys, what)

    def _times(self, times: Any, n: int, call: str) -> Any:
        """``times`` as ``n`` int64 ms (a numpy array), or an error saying what was wrong."""
        import numpy as np
        import pyarrow as pa

        what = self._what(call)
        try:
            arr = times if isinstance(times, (pa.Array, pa.ChunkedArray)) else pa.array(times)
        except (TypeError, ValueError) as exc:  # pyarrow's included
            raise InvalidTypeError(
                f"{what}: times must be int64 ms (a pyarrow array, numpy array or list of "
                f"ints) or timestamps, got {type(times).__name__}: {exc}"
            ) from None
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if len(arr) != n:
            raise InvalidArgumentError(
                f"{what}: got {n} keys but {len(arr)} times; give one time per key row, in "
                "the keys' order"
            )
        if arr.null_count:
            i = arr.is_null().to_pylist().index(True)
            raise InvalidArgumentError(
                f"{what}: times hold a null (row {i}); give every key row a time in ms"
            )
        t = arr.type
        if pa.types.is_timestamp(t):
            raw = arr.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64)
            if t.unit == "s":
                return self._scaled(raw, what)
            per_ms = {"ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
            return raw // per_ms  # whole ms, as floor division does
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)):
            raise InvalidTypeError(
                f"{what}: times must be int64 ms or timestamps, got an array of {t}"
            )
        try:
            return arr.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64)
        except (ValueError, TypeError) as exc:  # pyarrow's ArrowInvalid included
            raise InvalidArgumentError(f"{what}: times do not fit int64 ms: {exc}") from None

    def _scaled(self, seconds: Any, what: str) -> Any:
        """Timestamps in seconds as ms, or an error when one is out of range."""
        import numpy as np

        bound = np.iinfo(np.int64).max // 1000
        if len(seconds) and (seconds.max() > bound or seconds.min() < -bound - 1):
            bad = seconds[(seconds > bound) | (seconds < -bound - 1)][0]
            raise InvalidArgumentError(
                f"{what}: time {int(bad) * 1000!r} is out of range (a signed 64-bit count "
                "of ms)"
            )
        return seconds * 1000

    def _entries(self, pos: Any, ms: Any) -> list[bytes]:
        """Both entries of each timer ``(key at position pos[i], ms[i])``: the keys' own, then
        the index's."""
        keys = self._handle._keys
        own = _timerkeys.own_entries(Rows.from_arrow(keys.prefix_array.take(pos)), ms)
        return own + _timerkeys.index_entries(keys.kgs[pos], ms,
                                              Rows.from_arrow(keys.encoded.take(pos)))

    def register(self, keys: Any, times: Any) -> None:
        """Register a timer at ``times[i]`` (ms) for each key row ``keys[i]``: it fires in the
        first micro-batch whose processing time (``ProcessingTime``) or watermark
        (``EventTime``) is at or after it, calling ``expired`` once and then removed. A key
        has at most one timer per time (registering it again does nothing). One
        ``put_many``, built with numpy: no Python call per timer."""
        _, pos = self._positions(keys, "register")
        ms = self._times(times, len(pos), "register")
        if not len(pos):
            return
        entries = self._entries(pos, ms)
        self._handle._task.db.put_many(entries, [b""] * len(entries))
        self._handle._task.changed = True
        low = int(ms.min())
        if self.registered_min is None or low < self.registered_min:
            self.registered_min = low

    def delete(self, keys: Any, times: Any) -> None:
        """Delete the timer at ``times[i]`` of each key row ``keys[i]`` (none there: nothing
        is removed). One write batch, built with numpy: no Python call per timer (and no read:
        the timers are not looked up first)."""
        _, pos = self._positions(keys, "delete")
        ms = self._times(times, len(pos), "delete")
        if len(pos):
            self._forget(self._entries(pos, ms))

    def _forget(self, entries: list[bytes]) -> None:
        """Delete the timer ``entries`` (both of each timer) in one write batch."""
        import silt

        self._handle._task.db.write(silt.WriteBatch().delete_many(entries))
        self._handle._task.changed = True

    def list(self, keys: Any) -> Any:
        """The timers of ``keys`` as a ``pyarrow.Table``: the key columns of ``keys`` and
        ``time`` (int64 ms), one row per timer, by key row in their order, then by time (a key
        column itself named ``time`` comes first: select by position then). Read when asked,
        with one ``multi_scan`` of the distinct keys' timers (this batch's registers and
        deletes included): timers are not read ahead with the batch's state, so a processor
        that never lists them never reads them."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        table, pos = self._positions(keys, "list")
        distinct = np.unique(pos)
        prefixes = self._handle._keys.prefix_array.take(distinct)
        by_bytes = pc.sort_indices(prefixes).to_numpy().astype(np.int64)
        owner, times = _timerkeys.listed(self._handle._task.db,
                                         Rows.from_arrow(prefixes.take(by_bytes)))
        owner = by_bytes[owner]  # the index in distinct of each timer's key
        grouped = np.argsort(owner, kind="stable")  # by key, then time (as read)
        times = times[grouped]
        counts = np.bincount(owner, minlength=len(distinct))
        first = np.cumsum(counts) - counts
        row_key = np.searchsorted(distinct, pos)
        per_row = counts[row_key]
        total = int(per_row.sum())
        out_first = np.cumsum(per_row) - per_row
        take = np.repeat(np.arange(len(pos)), per_row)
        at = np.repeat(first[row_key] - out_first, per_row) + np.arange(total)
        out = table.select(self._handle._keys.key_columns).take(pa.array(take, pa.int64()))
        return out.append_column(TIME_COLUMN, pa.array(times[at], pa.int64()))


def fire(task: ShardTask, handle: Any, processor: Any, states: Any, timers: BatchTimers,
         threshold: int | None, bound: int | None, key_schema: Any) -> tuple[int | None, Any]:
    """Fire the shard's timers due at ``threshold`` (ms): one call of
    ``processor.expired(keys, times, state)`` with all of them in the per-key processor's
    firing order (by time, key group, key), then the fired timers removed (a timer ``expired``
    registers again at its own time is removed too, as in the per-key processor). Returns the
    shard's new timer bound (``bound``: the old one) and what ``expired`` returned (``None``
    when nothing fired). A processor without ``expired`` has its due timers removed."""
    import pyarrow as pa

    registered = timers.registered_min
    timers.registered_min = None
    if registered is not None and (bound is None or registered < bound):
        bound = registered
    if bound is None or threshold is None or bound > threshold:
        return bound, None
    due, bound = _timerkeys.due(task.db, task.first_kg, task.last_kg, threshold)
    result = None
    if len(due.times):
        handle._add_keys(due.encoded, due.kgs)
        fn = getattr(processor, "expired", None)
        if fn is not None:
            keys = pa.Table.from_arrays(_rowcodec.decode_tuples(due.encoded, key_schema),
                                        schema=key_schema)
            result = fn(keys, pa.array(due.times, pa.int64()), states)
        pos = handle._keys.positions_of(due.encoded)
        own = _timerkeys.own_entries(Rows.from_arrow(handle._keys.prefix_array.take(pos)),
                                     due.times)
        timers._forget(own + due.index)
    again = timers.registered_min
    timers.registered_min = None
    if again is not None and (bound is None or again < bound):
        bound = again
    return bound, result
