"""The StatefulProcessor API on silt state, shaped like PySpark 4's ``transformWithStateInPandas``.

State calls are plain LSM reads and writes inside the Python worker: no round trip to the JVM.

Key layout inside a shard's LSM (every key starts with its key group, so a rescale can clip SSTs
by key-group range)::

    kg:u16be 'S' len(enc(grouping key)):u32be enc(grouping key) len(name):u8 name [enc(map key)]

``enc`` is :mod:`silt_spark.runtime._codec`. A value state is one entry; a list has one entry per
element (``... name 0xFF seq:u64be``, so an append writes only what it appends; lists written
whole by older versions, one entry at ``... name``, still read); each map entry is its own LSM
entry, so maps and lists can be large. Values are tuples (like PySpark's ``Row`` tuples); a variable
declared with a schema is encoded with it (``runtime/_valuecodec.py``), one declared without in
``_codec``'s self-describing encoding.

Timers live in the same LSM: each key's timers under its prefix (``key_prefix 0x00 expiry``,
for ``listTimers``), and a shard-wide index per key group (``kg 'T' expiry enc(key)``) scanned
for due timers. The manifest meta keeps a lower bound of the shard's timers
(``spark.next_timer_ms``), so a batch with nothing due scans nothing.

Event time (``time_mode="eventtime"``) is query-wide, as in Spark (``_watermark.py``): batch ``b``
runs with the watermark of the batches before it; rows at or before batch ``b - 1``'s are late
and dropped (Spark's watermark for late events); the batch's rows are handled, then the timers
at or before the watermark fire, those the rows set included (the batch after one that moved
the watermark is a tick batch of ``_tick.py`` when no data waits, as Spark's no-data batch).
A state TTL is processing time (the LSM's own expiry), restarts on every update, as in PySpark,
and is refused in event-time mode, as PySpark does.

Before user code runs, a batch's state is read ahead (``runtime/_prefetch.py``): one sorted
``multi_get`` for the value states of all the batch's keys (and of the keys whose timers fire),
one prefix scan per key for list and map states and timers; the state variables read from it.

This module is the handle (:class:`StatefulProcessorHandle`): the state of the key being
processed, read from the batch's prefetch; the rest of the operator is beside it (see the
package's docstring). Keys are built and split through ``operators/_varkeys.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ...runtime import _keys, _schema
from ...runtime._names import (
    META_DELETED_STATES,
    PROCESSOR_KIND,
)
from ...runtime._prefetch import BatchState
from ...runtime._shard import ShardTask
from .._varkeys import (
    STATE_TAG,
    TIMER_MARK,
    _due_key,
    _name_bytes,
    _timer_bytes,
    _timer_value,
    key_prefix,
)
from ._state import ListState, MapState, ValueState

#: The operator kind, as recorded in the state root's descriptor.
KIND = PROCESSOR_KIND


class StatefulProcessorHandle:
    """What :meth:`StatefulProcessor.init` receives: creates state variables for the operator.

    State variables are bound to the grouping key being processed: inside
    ``handleInputRows(key, ...)`` every call reads and writes that key's state.

    Examples
    --------
    >>> class P(StatefulProcessor):
    ...     def init(self, handle):
    ...         self.count = handle.getValueState("count", "n long", ttlDurationMs=86_400_000)
    ...         self.items = handle.getListState("items", "item string")
    ...         self.seen = handle.getMapState("seen", "id string", "ts long")
    """

    def __init__(
        self, task: ShardTask | None, time_mode: str = "none",
        schemas: dict[str, Any] | None = None, *, record: bool = False,
        timezone: str | None = None,
    ) -> None:
        self._task = task
        #: The time zone of naive timestamps in state values (None: local time).
        self._timezone = timezone
        self._time_mode = time_mode
        #: The operator's schema registry (``None``: none given, every variable untyped) and
        #: a codec per typed variable.
        self._registry = schemas
        self._codecs = _schema.codecs(schemas)
        #: On the driver (``record=True``): what ``init`` declares, name -> [kind, key schema,
        #: value schema, deleted first], and nothing else happens.
        self._declared: dict[str, list[Any]] | None = {} if record else None
        #: Variables deleteIfExists removed from the shard with nothing written since.
        self._deleted: set[str] = set()
        if task is not None and not record:
            raw = task.base_meta.get(META_DELETED_STATES) if task.base_meta else None
            if raw:
                import json

                self._deleted = set(json.loads(raw))
        self._prefix: bytes | None = None
        self._kg = 0
        self._enc = b""
        self._names: dict[str, type] = {}
        #: Names declared in init and not deleted by deleteIfExists since (usable variables).
        self._live: set[str] = set()
        #: Smallest timer registered since the last reset (keeps the shard's timer bound).
        self._registered_min: int | None = None
        #: The batch's state, read ahead by :meth:`_prefetch` (silt_spark.runtime._prefetch).
        self._state = BatchState(task)
        #: List key -> the sequence number of its next element, once known in this batch.
        self._list_next: dict[bytes, int] = {}

    def _prefetch(self, keys: Iterator[tuple[int, bytes]]) -> None:
        """Read the state of ``(key group, encoded key)`` pairs before user code asks for it:
        one ``multi_get`` for the value states registered so far, and one ``multi_scan`` of
        every key's prefix when there are list or map states or timers."""
        names, maps = [], []
        for name, kind in self._names.items():
            (names if kind is ValueState else maps).append(_name_bytes(name))
        self._state.load(
            [key_prefix(kg, enc) for kg, enc in keys], names, maps,
            self._time_mode != "none", _timer_value,
        )

    def _bind(self, kg: int, encoded_key: bytes) -> None:
        self._kg = kg
        self._enc = encoded_key
        self._prefix = key_prefix(kg, encoded_key)

    def _require_key(self) -> bytes:
        if self._prefix is None:
            raise RuntimeError(
                "state variables can only be used inside handleInputRows (they are bound to "
                "the grouping key being processed)"
            )
        return self._prefix

    def _register(self, name: str, kind: type, ttl_ms: Any = None) -> None:
        if ttl_ms is not None and self._time_mode == "eventtime":
            from ...errors import TimeModeError

            raise TimeModeError(
                f"state {name!r} asks for ttlDurationMs={ttl_ms!r}, but a state TTL is "
                "processing time and the operator runs with time_mode='eventtime' (PySpark "
                "refuses this too): drop the TTL and clear the state from an event-time timer, "
                "or use time_mode='processingtime'"
            )
        have = self._names.get(name)
        if have is not None and have is not kind:
            raise InvalidArgumentError(
                f"state {name!r} is already a {have.__name__}; each name has one kind"
            )
        self._names[name] = kind
        self._live.add(name)

    def _declare(self, name: str, kind: type, key_schema: Any, schema: Any) -> None:
        """Record a declaration (driver), or check that the query recorded one (tasks)."""
        if self._declared is not None:
            reset = bool(self._declared.get(name, [None, None, None, False])[3])
            self._declared[name] = [kind.__name__, key_schema, schema, reset]
            return
        if (schema is not None and self._registry is not None and name not in self._codecs):
            from ...errors import StateSchemaError

            raise StateSchemaError(
                f"state {name!r} declares a schema, but init did not declare it when the query "
                "started: init must declare the same state variables every time it runs"
            )

    def getValueState(
        self, stateName: str, schema: Any = None, ttlDurationMs: int | None = None
    ) -> ValueState:
        """A single-value state variable.

        Parameters
        ----------
        stateName : str
            Name, unique within the operator.
        schema : StructType or str, optional
            The value's schema: values (tuples in schema order) are checked against it and
            encoded with it, and it may evolve across restarts (see ``docs/spark.md``,
            Evolving state schemas). Without one, values are tuples of plain values.
        ttlDurationMs : int, optional
            Processing-time TTL in ms, restarted by every update. Refused in
            ``time_mode="eventtime"`` (:class:`silt_spark.errors.TimeModeError`), as in PySpark.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.last_seen = handle.getValueState("last_seen", "ts long", 60_000)
        """
        self._register(stateName, ValueState, ttlDurationMs)
        self._declare(stateName, ValueState, None, schema)
        return ValueState(self, stateName, ttlDurationMs)

    def getListState(
        self, stateName: str, schema: Any = None, ttlDurationMs: int | None = None
    ) -> ListState:
        """A list state variable: one LSM entry per element, so appends cost what they append.

        Parameters
        ----------
        stateName : str
            Name, unique within the operator.
        schema : StructType or str, optional
            The elements' schema (checked, encoded and evolved as ``getValueState``'s).
        ttlDurationMs : int, optional
            Processing-time TTL of each element in ms, from when it was appended or put (as
            in Spark; not in ``time_mode="eventtime"``).

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.recent = handle.getListState("recent", "amount double")
        """
        self._register(stateName, ListState, ttlDurationMs)
        self._declare(stateName, ListState, None, schema)
        return ListState(self, stateName, ttlDurationMs)

    def getMapState(
        self,
        stateName: str,
        userKeySchema: Any = None,
        valueSchema: Any = None,
        ttlDurationMs: int | None = None,
    ) -> MapState:
        """A map state variable: each entry is its own LSM entry, so maps may be large.

        Parameters
        ----------
        stateName : str
            Name, unique within the operator.
        userKeySchema, valueSchema : StructType or str, optional
            Schemas of map keys (checked; they cannot change across restarts) and of values
            (checked, encoded and evolved as ``getValueState``'s).
        ttlDurationMs : int, optional
            Processing-time TTL of each entry in ms, restarted when the entry is updated (not
            in ``time_mode="eventtime"``).

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.per_device = handle.getMapState("per_device", "d string", "n long")
        """
        self._register(stateName, MapState, ttlDurationMs)
        self._declare(stateName, MapState, userKeySchema, valueSchema)
        return MapState(self, stateName, ttlDurationMs)

    def deleteIfExists(self, stateName: str) -> None:
        """Delete the state variable ``stateName`` for every key of the operator, if it has any
        state (as PySpark's ``StatefulProcessorHandle.deleteIfExists``).

        Usually called in ``init`` to drop a variable the code no longer uses, or before
        declaring it again with a schema its state could not evolve to (the variable then
        starts over: see ``docs/spark.md``, Evolving state schemas). The first call in a shard
        scans the shard's state once and deletes the variable's entries; later calls cost
        nothing until the variable is written again.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         handle.deleteIfExists("old_counts")
        ...         self.count = handle.getValueState("count", "n long")
        """
        _name_bytes(stateName)
        self._live.discard(stateName)
        if self._declared is not None:
            have = self._declared.get(stateName)
            if have is not None and have[0] is not None:
                # declared, then deleted (as PySpark's own test processors do): the variable
                # keeps its schema, and its state starts over in every batch
                have[3] = True
            else:
                self._declared[stateName] = [None, None, None, True]
            return
        task = self._task
        if stateName in self._deleted:
            return
        import json

        name = stateName.encode("utf-8")
        db = task.db
        doomed: list[bytes] = []
        for kg in range(task.first_kg, task.last_kg + 1):
            start, end = _keys.tag_range(kg, STATE_TAG)
            for k, _ in db.scan(start, end):
                _, rest = _keys.split_length_prefixed(k)
                if rest[:1] != TIMER_MARK and rest[1:1 + rest[0]] == name:
                    doomed.append(k)
        for k in doomed:
            _, rest = _keys.split_length_prefixed(k)
            db.delete(k)
            sub = rest[1 + rest[0]:]
            # a value state's entry, a list's (held like a map's entries) or a map's
            self._state.map_wrote(k[:len(k) - len(sub)], k, None)
            if not sub:
                self._state.wrote(k, None)
        self._list_next.clear()
        self._deleted.add(stateName)
        task.meta_updates[META_DELETED_STATES] = json.dumps(sorted(self._deleted))
        if doomed:
            task.changed = True

    def _undelete(self, name: str) -> None:
        """``name`` was written: a later deleteIfExists has entries to delete again."""
        import json

        self._deleted.discard(name)
        self._task.meta_updates[META_DELETED_STATES] = json.dumps(sorted(self._deleted))

    def registerTimer(self, expiryTimestampMs: int) -> None:
        """Register a timer for the current key, firing when time passes ``expiryTimestampMs``.

        In ``time_mode="processingtime"`` the timer fires in the first micro-batch whose
        processing time is at or after it; in ``"eventtime"``, in the first micro-batch whose
        watermark is at or after it. Firing calls ``handleExpiredTimer(key, timerValues,
        expiredTimerInfo)`` once and removes the timer. A key has at most one timer per
        timestamp; registering it again does nothing.

        Examples
        --------
        >>> class Idle(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.handle = handle
        ...     def handleInputRows(self, key, rows, timerValues):
        ...         now = timerValues.getCurrentProcessingTimeInMs()
        ...         self.handle.registerTimer(now + 60_000)  # one minute from now
        ...         return iter(())
        ...     def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        ...         yield pd.DataFrame({"user": [key[0]], "idle_since": [
        ...             expiredTimerInfo.getExpiryTimeInMs() - 60_000]})
        """
        expiry = self._check_timer(expiryTimestampMs)
        db = self._task.db
        db.put(self._require_key() + TIMER_MARK + _timer_bytes(expiry), b"")
        db.put(_due_key(self._kg, expiry, self._enc), b"")
        self._task.changed = True
        self._state.timer_set(self._prefix, expiry)
        if self._registered_min is None or expiry < self._registered_min:
            self._registered_min = expiry

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        """Delete the current key's timer at ``expiryTimestampMs`` (no error if there is none).

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.handle = handle
        ...     def handleInputRows(self, key, rows, timerValues):
        ...         for t in list(self.handle.listTimers()):
        ...             self.handle.deleteTimer(t)
        ...         return iter(())
        """
        expiry = self._check_timer(expiryTimestampMs)
        db = self._task.db
        mark = self._require_key() + TIMER_MARK + _timer_bytes(expiry)
        held = self._state.timers(self._prefix)
        exists = expiry in held if held is not None else db.get(mark) is not None
        if not exists:
            return
        db.delete(mark)
        db.delete(_due_key(self._kg, expiry, self._enc))
        self._task.changed = True
        self._state.timer_deleted(self._prefix, expiry)

    def listTimers(self) -> Iterator[int]:
        """The current key's registered timers (expiry timestamps in ms), ascending.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.handle = handle
        ...     def handleInputRows(self, key, rows, timerValues):
        ...         pending = list(self.handle.listTimers())
        ...         return iter(())
        """
        self._check_timers_on()
        held = self._state.timers(self._require_key())
        if held is not None:
            return iter(sorted(held))
        prefix = self._prefix + TIMER_MARK
        n = len(prefix)
        return iter([_timer_value(k[n:]) for k, _ in self._task.db.scan(prefix=prefix)])

    def _check_timers_on(self) -> None:
        if self._time_mode == "none":
            raise RuntimeError(
                "timers need time_mode='processingtime' or 'eventtime' in transform_with_state"
            )

    def _check_timer(self, expiry: Any) -> int:
        self._check_timers_on()
        if isinstance(expiry, bool) or not isinstance(expiry, (int, float)):
            raise InvalidTypeError(
                f"a timer is an int timestamp in ms, got {type(expiry).__name__}"
            )
        if not -(1 << 63) <= expiry < (1 << 63):  # false for nan
            raise InvalidArgumentError(
                f"timer timestamp {expiry!r} is out of range (a signed 64-bit count of ms)"
            )
        return int(expiry)


# --- driver: the query plan ------------------------------------------------------------------


# --- read-back: read_state ----------------------------------------------------------------


