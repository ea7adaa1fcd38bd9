"""The batch processor's timers: what ``process`` and ``expired`` get as ``timers``
(:class:`BatchTimers`: register, delete and list timers of many keys at once, and the batch's
times), and the firing of the timers that are due (:func:`fire`).

Layout: exactly the per-key processor's (``operators/_varkeys.py``), so a query may switch
processors with timers pending: a key's timer at ``t`` ms is the entry ``key_prefix 0x00
t:u64`` under the key's prefix and the entry ``kg 'T' t enc(key)`` of the shard-wide index that
the due timers are read from; the manifest meta keeps a lower bound of the shard's timers
(``spark.next_timer_ms``), so a batch with nothing due scans nothing. Times are int64 ms since
the epoch (timestamps are taken too, as whole ms); a key has at most one timer per time.
"""

from __future__ import annotations

from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ...runtime import _codec
from ...runtime._shard import ShardTask
from .._timemode import due_timers
from .._timervalues import TimerValues
from .._varkeys import TIMER_MARK, _due_key, _timer_bytes, _timer_value

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
        #: Key prefix -> the key's timers (ms), once read in this batch.
        self._held: dict[bytes, set[int]] = {}
        #: Smallest timer registered since the last reset (keeps the shard's timer bound).
        self.registered_min: int | None = None

    def _what(self, call: str) -> str:
        return f"{self._handle._processor} timers.{call}"

    def _resolve(self, keys: Any, call: str) -> tuple[Any, list[bytes]]:
        what = self._what(call)
        if self._mode == "none":
            raise InvalidArgumentError(
                f"{what}: timers need time_mode='ProcessingTime' or 'EventTime' in "
                "transform_batches"
            )
        return self._handle._keys.resolve(keys, what)

    def _times(self, times: Any, n: int, call: str) -> list[int]:
        """``times`` as ``n`` ints (ms), or an error saying what was wrong."""
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
            raw = arr.cast(pa.int64()).to_pylist()
            if t.unit == "s":
                return [v * 1000 for v in raw]
            per_ms = {"ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
            return [v // per_ms for v in raw]
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)):
            raise InvalidTypeError(
                f"{what}: times must be int64 ms or timestamps, got an array of {t}"
            )
        try:
            return arr.cast(pa.int64()).to_pylist()
        except (ValueError, TypeError) as exc:  # pyarrow's ArrowInvalid included
            raise InvalidArgumentError(f"{what}: times do not fit int64 ms: {exc}") from None

    def held(self, prefix: bytes) -> set[int]:
        """The timers of the key with ``prefix`` (from the batch's prefetch, then this
        batch's writes)."""
        own = self._held.get(prefix)
        if own is None:
            n = len(prefix) + 1
            own = {_timer_value(k[n:])
                   for k, _ in self._handle._state.map_items(prefix + TIMER_MARK)}
            self._held[prefix] = own
        return own

    def register(self, keys: Any, times: Any) -> None:
        """Register a timer at ``times[i]`` (ms) for each key row ``keys[i]``: it fires in the
        first micro-batch whose processing time (``ProcessingTime``) or watermark
        (``EventTime``) is at or after it, calling ``expired`` once and then removed. A key
        has at most one timer per time (registering it again does nothing). One write batch."""
        table, prefixes = self._resolve(keys, "register")
        ms = self._times(times, table.num_rows, "register")
        self._range(ms, "register")
        key_of = self._handle._keys.key_of
        import silt

        batch = silt.WriteBatch()
        fresh = sorted(set(zip(prefixes, ms)))
        for p, t in fresh:
            kg, enc = key_of[p]
            batch.put(p + TIMER_MARK + _timer_bytes(t), b"")
            batch.put(_due_key(kg, t, enc), b"")
        if not fresh:
            return
        self._handle._task.db.write(batch)
        self._handle._task.changed = True
        for p, t in fresh:
            self.held(p).add(t)
        low = min(ms)
        if self.registered_min is None or low < self.registered_min:
            self.registered_min = low

    def delete(self, keys: Any, times: Any) -> None:
        """Delete the timer at ``times[i]`` of each key row ``keys[i]`` (none there: nothing
        happens). One write batch."""
        table, prefixes = self._resolve(keys, "delete")
        ms = self._times(times, table.num_rows, "delete")
        self._range(ms, "delete")
        gone = sorted({(p, t) for p, t in zip(prefixes, ms) if t in self.held(p)})
        if not gone:
            return
        self._forget(gone)

    def _forget(self, gone: list[tuple[bytes, int]]) -> None:
        """Delete the timers ``(key prefix, ms)``, both entries each, in one write batch."""
        import silt

        key_of = self._handle._keys.key_of
        batch = silt.WriteBatch()
        for p, t in gone:
            kg, enc = key_of[p]
            batch.delete(p + TIMER_MARK + _timer_bytes(t))
            batch.delete(_due_key(kg, t, enc))
            self.held(p).discard(t)
        self._handle._task.db.write(batch)
        self._handle._task.changed = True

    def list(self, keys: Any) -> Any:
        """The timers of ``keys`` as a ``pyarrow.Table``: the key columns of ``keys`` and
        ``time`` (int64 ms), one row per timer, by key row in their order, then by time (a key
        column itself named ``time`` comes first: select by position then)."""
        import pyarrow as pa

        table, prefixes = self._resolve(keys, "list")
        take: list[int] = []
        times: list[int] = []
        for i, p in enumerate(prefixes):
            own = sorted(self.held(p))
            take.extend([i] * len(own))
            times.extend(own)
        cols = self._handle._keys.key_columns
        out = table.select(cols).take(pa.array(take, pa.int64()))
        return out.append_column(TIME_COLUMN, pa.array(times, pa.int64()))

    def _range(self, ms: list[int], call: str) -> None:
        bad = [t for t in ms if not -(1 << 63) <= t < (1 << 63)]
        if bad:
            raise InvalidArgumentError(
                f"{self._what(call)}: time {bad[0]!r} is out of range (a signed 64-bit count "
                "of ms)"
            )


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
    due, bound = due_timers(task, threshold)
    result = None
    if due:
        handle._add_keys([(kg, enc) for _, kg, enc in due])
        fn = getattr(processor, "expired", None)
        if fn is not None:
            decoded = [_codec.decode(enc) for _, _, enc in due]
            keys = pa.Table.from_arrays(
                [pa.array([k[i] for k in decoded], f.type) for i, f in enumerate(key_schema)],
                schema=key_schema)
            result = fn(keys, pa.array([t for t, _, _ in due], pa.int64()), states)
        prefix_of = handle._keys.prefix_of
        timers._forget([(prefix_of[enc], t) for t, _, enc in due])
    again = timers.registered_min
    timers.registered_min = None
    if again is not None and (bound is None or again < bound):
        bound = again
    return bound, result
