"""The StatefulProcessor API on silt state, shaped like PySpark 4's ``transformWithStateInPandas``.

State calls are plain LSM reads and writes inside the Python worker: no round trip to the JVM.

Key layout inside a shard's LSM (every key starts with its key group, so a rescale can clip SSTs
by key-group range)::

    kg:u16be 'S' len(enc(grouping key)):u32be enc(grouping key) len(name):u8 name [enc(map key)]

``enc`` is :mod:`silt_spark.runtime._codec`. A value state is one entry; a list has one entry per
element (``... name 0xFF seq:u64be``, so an append writes only what it appends; lists written
whole by older versions, one entry at ``... name``, still read); each map entry is its own LSM
entry, so maps and lists can be large. Values are tuples (like PySpark's ``Row`` tuples); a variable
declared with a schema is encoded with it (``_schema.py``), one declared without in ``_codec``'s
self-describing encoding.

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

Before user code runs, a batch's state is read ahead (``_prefetch.py``): one sorted
``multi_get`` for the value states of all the batch's keys (and of the keys whose timers fire),
one prefix scan per key for list and map states and timers; the state variables read from it.

The module owns the operator: its builder (:func:`transform_with_state`, which plans the query on
the driver), its executors (``process_partition`` in the shard's task, with the state handles above)
and :func:`decode` (its entries as ``read_state`` rows). Keys are built and split through
``_keys.py``.
"""

from __future__ import annotations

import dataclasses
import struct as _struct
import time as _time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ...runtime import _api, _codec, _keys, _layout, _rewrite, _root, _schema, _shard
from ...runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ...runtime._names import (
    DESCRIPTOR_SCHEMAS,
    META_DELETED_STATES,
    META_LATE_ROWS,
    META_NEXT_TIMER,
    META_WATERMARK,
    PROCESSOR_KIND,
)
from ...runtime._prefetch import BatchState
from ...runtime._shard import ShardTask, check_key_groups
from . import _handover, _initial

#: The operator kind, as recorded in the state root's descriptor.
KIND = PROCESSOR_KIND
STATE_TAG = _keys.STATE_TAG
#: Shard-wide timer index: ``kg:u16 'T' expiry:u64 enc(grouping key)`` (value empty).
TIMER_TAG = _keys.TIMER_TAG
#: A key's own timer entries: ``key_prefix + 0x00 + expiry:u64`` (state names are never empty,
#: so their length byte is never 0).
TIMER_MARK = _keys.TIMER_MARK
TIME_MODES = ("none", "processingtime", "eventtime")
#: A list element's key: ``key_prefix + name + LIST_ELEMENT + seq:u64be``.
LIST_ELEMENT = _keys.LIST_ELEMENT
_SEQ = _struct.Struct(">Q")


def list_seq(key: bytes, at: int) -> int:
    """The sequence number of a list element's key whose list key is ``at`` bytes long."""
    return _SEQ.unpack_from(key, at + 1)[0]


class TimerValues:
    """Processing time and watermark of the current micro-batch (PySpark's ``TimerValues``)."""

    def __init__(self, currentProcessingTimeInMs: int = -1, currentWatermarkInMs: int = -1):
        self._processing = currentProcessingTimeInMs
        self._watermark = currentWatermarkInMs

    def getCurrentProcessingTimeInMs(self) -> int:
        """Wall-clock time when the shard's task started, in ms since the epoch."""
        return self._processing

    def getCurrentWatermarkInMs(self) -> int:
        """The query's event-time watermark of the micro-batch in ms (``0`` before any event,
        as in Spark; ``-1`` when not in ``time_mode="eventtime"``)."""
        return self._watermark


class StatefulProcessor:
    """Per-key stateful logic, applied with :func:`silt_spark.transform_with_state`.

    Subclass it and implement :meth:`init` and :meth:`handleInputRows`; :meth:`close` is
    optional. Code written for PySpark's own ``StatefulProcessor`` (used with
    ``transformWithStateInPandas``) runs unchanged: any object with these methods is accepted.

    One processor instance serves one shard in one micro-batch: ``init`` is called first, then
    ``handleInputRows`` once per grouping key present in the batch, then ``close``. Keep per-key
    data in state obtained from the handle, never in attributes.

    Examples
    --------
    >>> import pandas as pd
    >>> class RunningCount(StatefulProcessor):
    ...     def init(self, handle):
    ...         self.count = handle.getValueState("count", "n long")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         n = (self.count.get() or (0,))[0] + sum(len(df) for df in rows)
    ...         self.count.update((n,))
    ...         yield pd.DataFrame({"user": [key[0]], "n": [n]})
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Create state variables with ``handle.getValueState`` and friends.

        Parameters
        ----------
        handle : StatefulProcessorHandle
            Gives access to this operator's state.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.seen = handle.getMapState("seen", "id string", "ts long", 3_600_000)
        """
        raise NotImplementedError

    def handleInputRows(
        self, key: tuple, rows: Iterator[Any], timerValues: TimerValues
    ) -> Iterator[Any]:
        """Process one grouping key's rows of this micro-batch and yield output rows.

        Parameters
        ----------
        key : tuple
            The grouping key's values, one per key column.
        rows : iterator of pandas.DataFrame (or of pyspark.sql.Row, or pyarrow.Table)
            The key's rows in this micro-batch (all input columns), in ``rows_format``.
        timerValues : TimerValues
            Processing time and watermark of the batch.

        Returns
        -------
        iterator of pandas.DataFrame
            Output rows matching the operator's ``output_schema``; may be empty. Returning a
            single DataFrame or ``None`` is accepted too.

        Examples
        --------
        >>> import pandas as pd
        >>> class Echo(StatefulProcessor):
        ...     def init(self, handle):
        ...         pass
        ...     def handleInputRows(self, key, rows, timerValues):
        ...         for df in rows:
        ...             yield df
        """
        raise NotImplementedError

    def handleInitialState(self, key: tuple, initialState: Any, timerValues: TimerValues) -> None:
        """Called in the query's first micro-batch once per key of the ``initial_state``
        DataFrame given to :func:`silt_spark.transform_with_state`, before ``handleInputRows``
        (as PySpark's). Optional: by default the initial state is ignored.

        Parameters
        ----------
        key : tuple
            The grouping key's values.
        initialState : pandas.DataFrame or pyarrow.Table
            The key's initial rows (a ``pyarrow.Table`` with ``rows_format="arrow"``).
        timerValues : TimerValues
            Processing time and watermark of the batch.

        Examples
        --------
        >>> class Count(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.n = handle.getValueState("n", "n long")
        ...     def handleInitialState(self, key, initialState, timerValues):
        ...         self.n.update((int(initialState["n"].sum()),))
        """

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Any]:
        """Called once per timer of ``key`` that is due, after the batch's input rows.

        State variables and timer calls act on ``key`` here, as in ``handleInputRows``. As in
        PySpark, the timer is removed when the handler returns: ``listTimers()`` lists it
        during the call, and registering it again there does not keep it; register another
        timestamp to fire again. Output rows are yielded
        as from ``handleInputRows``. Spark runs every shard in every micro-batch, so a timer
        fires even when its shard gets no rows (see ``heartbeat`` for idle streams).

        Examples
        --------
        >>> class Timeout(StatefulProcessor):
        ...     def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        ...         yield pd.DataFrame({"user": [key[0]], "timed_out_at": [
        ...             expiredTimerInfo.getExpiryTimeInMs()]})
        """
        return iter(())

    def close(self) -> None:
        """Called once after the last key of the micro-batch.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def close(self):
        ...         self.cache = None
        """


def _name_bytes(name: str) -> bytes:
    if not isinstance(name, str) or not name:
        raise (InvalidArgumentError if isinstance(name, str) else InvalidTypeError)(
            f"a state name must be a non-empty str, got {name!r:.80}")
    b = name.encode("utf-8")
    if len(b) > 255:
        raise InvalidArgumentError(f"a state name must be at most 255 bytes, got {len(b)}")
    return bytes([len(b)]) + b


#: ``(state name, encoded map key, list element mark or b"")`` of what follows a key's prefix
#: in a state entry (the inverse of :func:`_name_bytes` + map key).
_split_name = _keys.split_state_name


def key_prefix(kg: int, encoded_key: bytes) -> bytes:
    """The LSM key prefix of all state of one grouping key."""
    return _keys.length_prefixed(kg, STATE_TAG, encoded_key)


def _timer_bytes(ms: int) -> bytes:
    """A signed ms timestamp as 8 bytes that sort like the numbers."""
    return _keys.time_bytes(ms)


def _timer_value(raw: bytes) -> int:
    return _keys.time_value(raw)


def _due_key(kg: int, expiry: int, encoded_key: bytes) -> bytes:
    """The shard-wide timer index entry: timers of a key group sorted by expiry."""
    return _keys.timed_key(kg, TIMER_TAG, expiry, encoded_key)


#: The longest duration (ms) any option or TTL may give: Spark timestamps are 64-bit
#: microseconds.
MAX_DURATION_MS = (2**63 - 1) // 1000


def _ttl_seconds(ttl_ms: int | None) -> float | None:
    if ttl_ms is None:
        return None
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, (int, float)):
        raise InvalidTypeError(f"ttlDurationMs must be a number of ms, got {ttl_ms!r:.80}")
    if not 0 < ttl_ms <= MAX_DURATION_MS:  # false for nan
        raise InvalidArgumentError(
            f"ttlDurationMs must be a positive number of ms, at most {MAX_DURATION_MS}, got "
            f"{ttl_ms!r}"
        )
    return ttl_ms / 1000.0


class _State:
    def __init__(self, handle: StatefulProcessorHandle, name: str, ttl_ms: int | None) -> None:
        self._handle = handle
        self._name = _name_bytes(name)
        self._ttl = _ttl_seconds(ttl_ms)
        self._state_name = name
        #: The variable's schema codec (None: declared without a schema, values self-describing).
        self._codec: _schema.VarCodec | None = handle._codecs.get(name)
        codec = self._codec
        #: Decoded values as PySpark's state clients return them (None: as decoded).
        fields = codec.versions[-1] if codec and codec.typed else None
        self._view = _handover.state_view(fields, handle._timezone)
        self._input = _handover.state_input(fields, handle._timezone)

    def _key(self) -> bytes:
        handle = self._handle
        if self._state_name not in handle._live:
            raise RuntimeError(
                f"state {self._state_name!r} was deleted by handle.deleteIfExists after it was "
                "declared, so it cannot be used (PySpark: 'not initialized'); declare it again "
                "after the delete to use it"
            )
        return handle._require_key() + self._name

    def _put(self, key: bytes, value: bytes) -> None:
        handle = self._handle
        task = handle._task
        task.db.put(key, value, ttl=self._ttl)
        task.changed = True
        if handle._deleted and self._state_name in handle._deleted:
            handle._undelete(self._state_name)
        self._wrote(key, value)

    def _encode(self, value: Any) -> bytes:
        codec = self._codec
        if codec is None:
            return _codec.encode(tuple(value))
        return codec.encode(value if self._input is None else self._input(value))

    def _decode(self, raw: bytes | None) -> Any:
        if raw is None:
            return None
        codec = self._codec
        value = _codec.decode(raw) if codec is None else codec.decode(raw)
        view = self._view
        return value if view is None else view(value)

    def _delete(self, key: bytes) -> None:
        task = self._handle._task
        task.db.delete(key)
        task.changed = True
        self._wrote(key, None)

    def _wrote(self, key: bytes, value: bytes | None) -> None:
        self._handle._state.wrote(key, value)


class ValueState(_State):
    """One value (a tuple) per grouping key.

    Examples
    --------
    >>> class P(StatefulProcessor):
    ...     def init(self, handle):
    ...         self.total = handle.getValueState("total", "amount double")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         t = self.total.get() or (0.0,)
    ...         self.total.update((t[0] + sum(df["amount"].sum() for df in rows),))
    ...         return iter(())
    """

    def exists(self) -> bool:
        """Whether the current key has a value."""
        return self.get() is not None

    def get(self) -> tuple | None:
        """The current key's value (a tuple in the variable's latest schema, older values
        converted), or ``None``."""
        return self._decode(self._handle._state.get(self._key()))

    def update(self, newValue: tuple) -> None:
        """Set the current key's value (restarts its TTL). With a schema, the value (a tuple
        in schema order, a ``Row`` or a dict by field name) is checked against it: a wrong
        shape or type raises :class:`~silt.errors.InvalidArgumentError` or
        :class:`~silt.errors.InvalidTypeError` naming the variable and the field."""
        self._put(self._key(), self._encode(newValue))

    def clear(self) -> None:
        """Remove the current key's value."""
        self._delete(self._key())


class ListState(_State):
    """A list of tuples per grouping key: one LSM entry per element, so an append writes only
    the appended elements.

    Elements are stored under the list's key (``key_prefix + name``) as ``0xFF seq:u64be`` (in
    append order); a list written whole by an older silt_spark (one entry at the list's key)
    reads as the elements before them. Reading a list is one prefix scan (done ahead by the
    batch's prefetch); ``put`` and ``clear`` remove the list with one range delete.

    Examples
    --------
    >>> class P(StatefulProcessor):
    ...     def init(self, handle):
    ...         self.events = handle.getListState("events", "ts long")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         for df in rows:
    ...             self.events.appendList([(int(t),) for t in df["ts"]])
    ...         return iter(())
    """

    def _wrote(self, key: bytes, value: bytes | None) -> None:
        self._handle._state.map_wrote(self._key(), key, value)

    def _entries(self) -> list[tuple[bytes, bytes]]:
        """The list's live entries in key order: the older one-entry form (at the list's key)
        first, then the elements."""
        return list(self._handle._state.map_items(self._key()))

    def _load(self) -> list[tuple]:
        key = self._key()
        codec = self._codec
        out: list[tuple] = []
        for k, raw in self._entries():
            if k == key:  # the whole list, as older silt_spark stored it
                items = _codec.decode(raw) if codec is None else codec.decode_list(raw)
                if items:
                    out.extend(items)
            else:
                item = self._decode(raw)
                if item is not None:  # None: a deleted generation's element
                    out.append(item)
        return out

    def exists(self) -> bool:
        """Whether the current key's list is non-empty."""
        return bool(self._load())

    def get(self) -> Iterator[tuple]:
        """Iterate over the current key's list."""
        return iter(self._load())

    def _append(self, encoded: list[bytes]) -> None:
        key = self._key()
        nexts = self._handle._list_next
        seq = nexts.get(key)
        if seq is None:  # the first append to this list in the batch: after its last element
            entries = self._entries()
            last = entries[-1][0] if entries else key
            seq = list_seq(last, len(key)) + 1 if len(last) > len(key) else 0
        for raw in encoded:
            self._put(key + LIST_ELEMENT + _SEQ.pack(seq), raw)
            seq += 1
        nexts[key] = seq

    def put(self, newState: list[tuple]) -> None:
        """Replace the current key's list (checked before anything is written)."""
        encoded = [self._encode(x) for x in newState]
        self.clear()
        self._append(encoded)

    def appendValue(self, newState: tuple) -> None:
        """Append one tuple to the current key's list (one write)."""
        self._append([self._encode(newState)])

    def appendList(self, newState: list[tuple]) -> None:
        """Append several tuples to the current key's list (one write each; all are checked
        before any is written)."""
        encoded = [self._encode(x) for x in newState]
        if encoded:
            self._append(encoded)

    def clear(self) -> None:
        """Remove the current key's list (one range delete)."""
        key = self._key()
        self._handle._list_next[key] = 0
        entries = self._entries()
        if not entries:
            return
        task = self._handle._task
        task.db.delete_range(key, key[:-1] + bytes([key[-1] + 1]))  # a name never ends in 0xFF
        task.changed = True
        for k, _ in entries:
            self._wrote(k, None)


class MapState(_State):
    """A map from user keys (tuples) to values (tuples) per grouping key; one LSM entry each.

    Examples
    --------
    >>> class P(StatefulProcessor):
    ...     def init(self, handle):
    ...         self.last = handle.getMapState("last", "device string", "ts long")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         for df in rows:
    ...             for d, t in zip(df["device"], df["ts"]):
    ...                 self.last.updateValue((d,), (int(t),))
    ...         return iter(())
    """

    def _entry(self, key: tuple) -> bytes:
        codec = self._codec
        return self._key() + _codec.encode(
            tuple(key) if codec is None else codec.check_key(key)
        )

    def _wrote(self, key: bytes, value: bytes | None) -> None:
        self._handle._state.map_wrote(self._key(), key, value)

    def exists(self) -> bool:
        """Whether the current key's map has any entry."""
        return next(self.iterator(), None) is not None

    def getValue(self, key: tuple) -> tuple | None:
        """The value of ``key`` in the current key's map, or ``None``."""
        return self._decode(self._handle._state.map_get(self._key(), self._entry(key)))

    def containsKey(self, key: tuple) -> bool:
        """Whether the current key's map has ``key``."""
        return self.getValue(key) is not None

    def updateValue(self, key: tuple, value: tuple) -> None:
        """Set ``key`` to ``value`` in the current key's map (restarts that entry's TTL)."""
        self._put(self._entry(key), self._encode(value))

    def _scan(self) -> Iterator[tuple[bytes, bytes]]:
        return self._handle._state.map_items(self._key())

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        """Iterate over ``(key, value)`` pairs of the current key's map, in key-byte order."""
        n = len(self._key())
        decode = self._decode
        for k, v in list(self._scan()):
            value = decode(v)
            if value is not None:
                yield _codec.decode(k[n:]), value

    def keys(self) -> Iterator[tuple]:
        """Iterate over the map's keys."""
        return (k for k, _ in self.iterator())

    def values(self) -> Iterator[tuple]:
        """Iterate over the map's values."""
        return (v for _, v in self.iterator())

    def removeKey(self, key: tuple) -> None:
        """Remove ``key`` from the current key's map."""
        self._delete(self._entry(key))

    def clear(self) -> None:
        """Remove every entry of the current key's map."""
        for k, _ in list(self._scan()):
            self._delete(k)


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
        one ``multi_get`` for the value states registered so far, one prefix scan per key when
        there are list or map states or timers."""
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


class ExpiredTimerInfo:
    """What ``handleExpiredTimer`` learns about the timer that fired (PySpark's shape)."""

    def __init__(self, expiryTimeInMs: int) -> None:
        self._expiry = expiryTimeInMs

    def isValid(self) -> bool:
        """Always ``True`` here: the object is only made for a firing timer."""
        return True

    def getExpiryTimeInMs(self) -> int:
        """The timer's timestamp in ms."""
        return self._expiry


@dataclass(frozen=True)
class TimeConfig:
    """Time handling of a processor operator (plain data, shipped to the tasks)."""

    mode: str = "none"
    event_time_column: str | None = None
    watermark_delay_ms: int = 0


def _meta_int(meta: dict[str, str], name: str) -> int | None:
    v = meta.get(name)
    return int(v) if v else None


def _max_event_time_ms(column: Any) -> int | None:
    """The largest value of an event-time column in ms (timestamps or integral ms)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    if pa.types.is_timestamp(t):
        top = pc.max(column.cast(pa.int64())).as_py()
        if top is None:
            return None
        per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        return top * 1000 if per_ms is None else top // per_ms
    if pa.types.is_integer(t):
        top = pc.max(column).as_py()
        return None if top is None else int(top)
    raise InvalidTypeError(
        f"the event-time column must be a timestamp or integral ms column, got {t}"
    )


def _late_mask(column: Any, watermark: int | None) -> Any:
    """``True`` where an event time (timestamp or integral ms) is at or before ``watermark``
    (ms); nulls are never late, as in Spark. ``None`` when no row is late."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if watermark is None:
        return None
    t = column.type
    if pa.types.is_timestamp(t):
        per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        raw = column.cast(pa.int64())
        limit = watermark // 1000 if per_ms is None else watermark * per_ms
        mask = pc.less_equal(raw, limit)
    else:
        mask = pc.less_equal(column, watermark)
    mask = pc.fill_null(mask, False)
    return mask if pc.any(mask).as_py() else None


def _due_timers(task: ShardTask, threshold: int) -> tuple[list[tuple[int, int, bytes]], int | None]:
    """Timers of the shard with expiry ``<= threshold`` as ``(expiry, kg, encoded key)`` in
    firing order, and the smallest expiry after ``threshold`` (``None``: no timer left).
    One short scan per key group of the shard's timer index."""
    entries, nxt = _keys.due_entries(task.db, task.first_kg, task.last_kg, TIMER_TAG,
                                     threshold)
    due = sorted((expiry, kg, _keys.after_time(k)) for expiry, kg, k in entries)
    return due, nxt


def process_partition(
    task: ShardTask,
    batches: Iterator[Any],
    processor: Any,
    key_columns: list[str],
    output_schema: Any,
    rows_format: Any = "pandas",
    time: TimeConfig = TimeConfig(),
    schemas: dict[str, Any] | None = None,
    initial: str | None = None,
) -> Iterator[Any]:
    """Group the shard's rows by key, run the processor per key, then fire due timers; yield
    output Arrow batches.

    ``initial`` is the staging id of the query's initial state (``_initial.py``): in
    micro-batch 0 the shard's initial rows go to ``handleInitialState`` per key first.

    ``rows_format`` (a name or a ``_handover.RowsFormat``) is ``"pandas"`` (PySpark's shape:
    an iterator of DataFrames per key, with Spark's dtypes), ``"row"`` (an iterator of
    ``pyspark.sql.Row``, as PySpark's ``transformWithState``) or ``"arrow"`` (an iterator of
    ``pyarrow.Table`` slices: much cheaper per key). Spark runs this
    for every partition, empty ones included, so timers fire even in batches that bring the
    shard no rows. Heartbeat rows (key group ``-1``) only make a batch happen; they are dropped.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    fmt = _handover.RowsFormat.of(rows_format)
    batches = list(batches)
    table = pa.Table.from_batches(batches) if batches else None
    if table is not None and table.num_rows:
        kg_col = table[KG_COLUMN]
        if pc.min(kg_col).as_py() < 0:
            table = table.filter(pc.greater_equal(kg_col, 0))
    rows = table.num_rows if table is not None else 0
    timers_on = time.mode != "none"
    init_rows = None
    if initial is not None and task.batch_id == 0:
        init_rows = _initial.load(task.spec.root, initial, task.shard,
                                  task.spec.storage_options)
    if rows == 0 and not timers_on and init_rows is None:
        return  # no rows and no timers: the shard is not even opened
    meta = task.base_meta
    next_timer = _meta_int(meta, META_NEXT_TIMER) if timers_on else None
    if rows == 0 and next_timer is None and init_rows is None:
        return
    now_ms = int(_time.time() * 1000)
    watermark = task.watermark if time.mode == "eventtime" else None
    timer_values = TimerValues(now_ms, -1 if watermark is None else watermark)
    threshold = now_ms if time.mode == "processingtime" else watermark
    if rows == 0 and init_rows is None and (threshold is None or next_timer > threshold):
        return  # nothing due: this shard has no work in this batch

    if watermark is not None:
        task.meta_updates[META_WATERMARK] = str(watermark)  # for inspection, if it commits
    handle = StatefulProcessorHandle(task, time.mode, schemas, timezone=fmt.state_timezone)
    processor.init(handle)
    output = _handover.Output(output_schema, fmt.pandas)
    add = output.add
    if fmt.name == "row":
        def add(result: Any) -> None:
            output.add(_handover.row_output(result))
    bound = next_timer
    try:
        if init_rows is not None:
            _initial_state(handle, processor, init_rows, key_columns, fmt, timer_values)
        if time.mode == "eventtime" and not task.spec.ticks:  # the no-data batch's work first
            bound = _fire_timers(task, handle, processor, timer_values, threshold, bound, add,
                                 key_columns)
        if rows:
            check_key_groups(task, table[KG_COLUMN])
            table = table.drop_columns([PARTITION_COLUMN])
            if time.mode == "eventtime":
                column = table[time.event_time_column]
                task.observe_event_time(_max_event_time_ms(column))
                late = _late_mask(column, task.late_watermark)  # batch b - 1's watermark
                if late is not None:
                    # As Spark's transformWithState in event time: rows at or before the
                    # watermark never reach the processor.
                    table = table.filter(pc.invert(late))
                    if table.num_rows < rows:
                        task.meta_updates[META_LATE_ROWS] = str(
                            (_meta_int(meta, META_LATE_ROWS) or 0) + rows - table.num_rows
                        )
                        task.changed = True
                    rows = table.num_rows
        if rows:
            groups = _handover.KeyGroups(table, key_columns, KG_COLUMN)
            groups.prepare(fmt)
            bind = handle._bind
            encoded = list(map(_codec.encode, groups.keys))
            handle._prefetch(zip(groups.kgs, encoded))  # no state read below waits on the store
            for i in range(len(groups)):
                bind(groups.kgs[i], encoded[i])
                key, parts = groups.handed(i)
                add(processor.handleInputRows(key, iter(parts), timer_values))
            handle._prefix = None
        if timers_on:
            bound = _fire_timers(task, handle, processor, timer_values, threshold, bound, add,
                                 key_columns)
            if bound != next_timer:
                task.meta_updates[META_NEXT_TIMER] = "" if bound is None else str(bound)
                task.changed = True
    finally:
        close = getattr(processor, "close", None)
        if close is not None:
            close()
    yield from output.batches()


def _initial_state(
    handle: StatefulProcessorHandle, processor: Any, table: Any, key_columns: list[str],
    fmt: _handover.RowsFormat, timer_values: TimerValues,
) -> None:
    """Call ``processor.handleInitialState(key, rows, timerValues)`` per key of the shard's
    initial rows, as PySpark does: once per DataFrame chunk (``"pandas"``), per ``Row``
    (``"row"``) or once with the key's Arrow table (``"arrow"``). What it returns is ignored,
    as in PySpark; a processor without the method ignores its initial state, as in PySpark."""
    fn = getattr(processor, "handleInitialState", None)
    if fn is None or not table.num_rows:
        return
    groups = _handover.KeyGroups(table, key_columns, KG_COLUMN)
    groups.prepare(fmt)
    encoded = list(map(_codec.encode, groups.keys))
    handle._prefetch(zip(groups.kgs, encoded))
    for i in range(len(groups)):
        handle._bind(groups.kgs[i], encoded[i])
        key, parts = groups.handed(i)
        for part in parts:
            fn(key, part, timer_values)
    handle._prefix = None


def _fire_timers(
    task: ShardTask, handle: StatefulProcessorHandle, processor: Any,
    timer_values: TimerValues, threshold: int | None, bound: int | None, add: Any,
    keys: list[str] | None = None,
) -> int | None:
    """Fire the shard's timers due at ``threshold``; return the shard's new next-timer bound.

    ``bound`` (``spark.next_timer_ms`` in the meta) is a lower bound of the shard's timers
    (deleting a timer leaves it alone), so a batch scans the timer index only when a timer may
    be due. With the key columns' names ``keys``, the handler gets its key as PySpark's: a
    ``Row`` (else a tuple).
    """
    registered = handle._registered_min
    handle._registered_min = None
    if registered is not None and (bound is None or registered < bound):
        bound = registered
    if bound is not None and threshold is not None and bound <= threshold:
        due, bound = _due_timers(task, threshold)
        fire = getattr(processor, "handleExpiredTimer", None)
        db = task.db
        decode = _codec.decode
        if fire is not None:
            handle._prefetch((kg, enc) for _, kg, enc in due)
        for expiry, kg, enc in due:
            handle._bind(kg, enc)
            if fire is not None:
                # As PySpark: the timer is removed once its handler is done, so listTimers()
                # in the handler lists it (and registering it again there does not keep it).
                key = decode(enc) if keys is None else _handover.timer_key(
                    decode(enc), keys, handle._timezone)
                add(fire(key, timer_values, ExpiredTimerInfo(expiry)))
            db.delete(handle._prefix + TIMER_MARK + _timer_bytes(expiry))
            db.delete(_due_key(kg, expiry, enc))
            task.changed = True
            handle._state.timer_deleted(handle._prefix, expiry)
        handle._prefix = None
        again = handle._registered_min
        handle._registered_min = None
        if again is not None and (bound is None or again < bound):
            bound = again
    return bound


# --- driver: the query plan ------------------------------------------------------------------

def _time_config(df: Any, mode: str, column: str | None, delay: Any) -> Any:
    from pyspark.sql import types as T

    m = str(mode).lower()
    if m not in TIME_MODES:
        raise InvalidArgumentError(
            f"time_mode must be one of {TIME_MODES}, got {mode!r}"
        )
    delay_ms = _api.parse_delay_ms(delay)
    if m != "eventtime":
        if column is not None:
            raise InvalidArgumentError("event_time_column needs time_mode='eventtime'")
        if delay_ms:
            raise InvalidArgumentError("watermark_delay needs time_mode='eventtime'")
        return TimeConfig(m)
    if column is None:
        raise InvalidArgumentError("time_mode='eventtime' needs event_time_column")
    fields = {f.name: f.dataType for f in df.schema.fields}
    t = fields.get(column)
    if t is None:
        raise InvalidArgumentError(f"event_time_column {column!r} is not in the DataFrame")
    if not isinstance(t, (T.TimestampType, T.TimestampNTZType, T.LongType, T.IntegerType)):
        raise InvalidTypeError(
            f"event_time_column {column!r} must be a timestamp or ms, not {t}"
        )
    return TimeConfig(m, column, delay_ms)


def transform_with_state(
    df: Any,
    processor: Any,
    key_columns: Sequence[str] | str,
    output_schema: Any,
    state_url: str,
    num_shards: int,
    *,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    reset: bool | None = None,
    storage_options: dict[str, str] | None = None,
    rows_format: str = "pandas",
    time_mode: str = "none",
    event_time_column: str | None = None,
    watermark_delay: Any = 0,
    heartbeat: bool = False,
    initial_state: Any = None,
) -> Any:
    """Apply a :class:`StatefulProcessor` per key to a streaming DataFrame, state in silt.

    The silt counterpart of ``df.groupBy(keys).transformWithStateInPandas(...)``: rows are
    routed to ``num_shards`` shards by a stable hash of the key columns, and each shard keeps its
    keys' state in its own LSM under ``state_url``. State version ``b`` is committed when
    micro-batch ``b`` finishes on a shard, so restarting the query from its checkpoint resumes
    from exactly the state of its last finished batch. Output is what ``handleInputRows`` yields,
    per micro-batch; the result works with any sink and output mode that a ``mapInArrow``
    allows.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame (``spark.readStream...``).
    processor : StatefulProcessor
        The per-key logic (PySpark's own ``StatefulProcessor`` subclasses work too). It is
        pickled to the executors; each task gets a fresh copy.
    key_columns : str or list of str
        The grouping key columns.
    output_schema : pyspark.sql.types.StructType or str
        Schema of the DataFrames that ``handleInputRows`` yields (DDL strings allowed).
    state_url : str
        Root URL of this operator's state, e.g. ``"file:///data/state/sessions"`` or
        ``"s3://bucket/state/sessions"``. One operator per root.
    num_shards : int
        Number of shards (Spark partitions of the operator). Restarting the query with
        another number rescales without moving state (see ``docs/spark.md``, Rescaling).
    key_groups : int, default 256
        Number of key groups, fixed per root; the upper bound on ``num_shards``.
    take_over : bool, default False
        Take the state root over from another streaming query: discard the state that
        belongs to another query id (a new checkpoint means a new query id) instead of failing
        with :class:`~silt_spark.errors.ForeignStateError`. To start your own query's state
        over, use :func:`silt_spark.drop_state`. (``reset=`` is its deprecated old name.)
    settings : silt.Settings, optional
        LSM settings for the shards.
    storage_options : dict of str, optional
        Object-store options for the state root, credentials included (``access_key_id``,
        ``secret_access_key``... for ``s3://``; see docs/spark.md): passed with the job to the
        executors, never shown. ``spark.silt.storage.<name>`` in the Spark conf sets them too;
        this argument wins.
    rows_format : {"pandas", "row", "arrow"}, default "pandas"
        What ``handleInputRows`` receives. ``"pandas"``: an iterator of pandas DataFrames as
        ``transformWithStateInPandas`` gives them (Spark's dtypes, e.g. timestamps as naive
        ``datetime64[ns]`` in ``spark.sql.session.timeZone``, at most
        ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows per frame). ``"row"``: an
        iterator of ``pyspark.sql.Row`` as ``transformWithState`` gives them; the processor
        yields Rows (matched to ``output_schema`` by field name) and ``handleInitialState`` is
        called once per initial Row. ``"arrow"``: ``pyarrow.Table`` slices (far cheaper per
        key when keys have few rows).
    time_mode : {"none", "processingtime", "eventtime"}, default "none"
        What timers registered with ``handle.registerTimer`` mean (case-insensitive, as
        PySpark's ``timeMode``). Due timers call ``processor.handleExpiredTimer(key,
        timerValues, expiredTimerInfo)`` after the batch's rows were processed.
    event_time_column : str, optional
        With ``time_mode="eventtime"``: a timestamp column (or integral ms). The watermark is
        query-wide, as in Spark: micro-batch ``b`` runs with the largest event time of the
        batches before it minus ``watermark_delay`` (at least 0), in every shard, across
        retries, restarts and rescales. Rows at or before it are late and never reach the
        processor; timers at or before it fire, those set before the batch first.
    watermark_delay : int, str or timedelta, default 0
        How late rows may arrive: ms (int), a ``datetime.timedelta`` or a Spark interval
        string (``"10 minutes"``, ``"interval 1 hour 30 minutes"``, ``"2 weeks"``; see
        ``docs/spark.md``).
    heartbeat : bool, default False
        Union a 1 row/s ``rate`` source into the operator so micro-batches (and so timers) keep
        running while the input is idle; heartbeat rows never reach the processor. Set the
        cadence with the query's trigger, e.g. ``trigger(processingTime="10 seconds")``, and
        keep the setting across restarts (it is a source of the query).
    initial_state : pyspark.sql.DataFrame, optional
        A batch DataFrame (or its ``groupBy(...)``, as PySpark's ``initialState``) with the
        key columns (same names and types) and any other columns: in the query's first
        micro-batch, each key's rows (one pandas DataFrame, or ``pyarrow.Table`` with
        ``rows_format="arrow"``) go to ``processor.handleInitialState(key, rows,
        timerValues)``, before ``handleInputRows`` for that key (which runs only if the key
        has input rows in that batch). Never applied again: a restarted query, or one built on
        a root that has state (other than with ``take_over=True``), ignores it. Building the
        query runs one Spark job that stores each shard's initial rows under ``state_url``
        (see ``docs/spark.md``).

    Returns
    -------
    pyspark.sql.DataFrame
        A streaming DataFrame with ``output_schema``. ``handleInputRows`` may yield pandas
        DataFrames, Arrow tables or record batches, or single rows as tuples (in
        ``output_schema`` order, ``pyspark.sql.Row`` included) or dicts; rows are the cheapest
        when a key produces one output row.

    Raises
    ------
    silt_spark.errors.LayoutMismatchError
        ``state_url`` was created by another operator kind or with other shard or key-group
        counts.
    silt_spark.errors.StateSchemaError
        A state variable's schema changed in a way its stored state cannot evolve to
        (narrowing, another type, a map key schema...). ``processor.init`` runs once here, on
        the driver, on a copy of the processor with a handle that only records the state
        variables it declares; nothing is written when this is raised.

    Examples
    --------
    >>> import pandas as pd
    >>> import silt_spark
    >>> class Count(silt_spark.StatefulProcessor):
    ...     def init(self, handle):
    ...         self.n = handle.getValueState("n", "n long")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         n = (self.n.get() or (0,))[0] + sum(len(df) for df in rows)
    ...         self.n.update((n,))
    ...         yield pd.DataFrame({"user": [key[0]], "events": [n]})
    >>> events = spark.readStream.schema("user string, amount double").json("/data/in")
    >>> counts = silt_spark.transform_with_state(
    ...     events, Count(), ["user"], "user string, events long",
    ...     state_url="file:///data/state/counts", num_shards=4)
    >>> query = (counts.writeStream.format("parquet").option("path", "/data/out")
    ...          .option("checkpointLocation", "/data/chk").start())
    """
    keys = _api._key_list(key_columns, df)
    for method in ("init", "handleInputRows"):
        if not callable(getattr(processor, method, None)):
            raise InvalidTypeError(
                f"processor must have a {method}() method (see StatefulProcessor)"
            )
    struct = _api._struct(output_schema)
    if rows_format not in _handover.FORMATS:
        raise InvalidArgumentError(
            f"rows_format must be one of {_handover.FORMATS} ('row' for processors written for "
            f"PySpark's transformWithState, which take and yield Rows), got {rows_format!r}"
        )
    fmt = _handover.RowsFormat.for_session(rows_format, df.sparkSession)
    time_cfg = _time_config(df, time_mode, event_time_column, watermark_delay)
    init_df = None if initial_state is None else _initial.check(initial_state, df, keys)
    spec = _api._spec(
        KIND, state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
        storage_options=storage_options,
        event_time_delays=(
            (time_cfg.watermark_delay_ms,) if time_cfg.mode == "eventtime" else ()
        ),
    )
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(struct, timezone="UTC")
    # Schemas are checked and evolved here, on the driver, before any state is written.
    have = _root.read_descriptor(spec.root, spec.storage_options)
    registry = _schema.evolve(
        (have or {}).get(DESCRIPTOR_SCHEMAS) or {}, declared_states(processor, time_cfg.mode)
    )
    spec = _root.ensure_descriptor(
        spec, {"key_columns": _api._key_types(df, keys), DESCRIPTOR_SCHEMAS: registry},
        _api.PINNED,
    )
    if have is not None and DESCRIPTOR_SCHEMAS in have and have[DESCRIPTOR_SCHEMAS] != registry:
        _root.update_descriptor(spec.root, {DESCRIPTOR_SCHEMAS: registry},
                                 spec.storage_options)
    # Values of older schema ids are brought up to date by compaction (never at restart).
    spec = dataclasses.replace(spec, settings=_rewrite.settings_for(spec.settings, registry))

    staging = None if init_df is None else _initial.stage(init_df, keys, spec)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return process_partition(
            task, batches, processor, keys, arrow_schema, fmt, time_cfg, registry,
            staging,
        )

    return _api.shard_stage(_api._route(df, keys, spec, heartbeat), df, spec, process, struct)


def declared_states(processor: Any, time_mode: str = "none") -> dict[str, _schema.Declared]:
    """The state variables ``processor.init`` declares, with their schemas parsed (driver
    side: DDL strings need the Spark session).

    ``init`` runs on a copy of the processor with a handle that only records what it is asked
    for; a variable declared without a schema is recorded by kind only.
    """
    from pyspark import cloudpickle

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    handle = StatefulProcessorHandle(None, time_mode, record=True)
    copy.init(handle)
    out = {}
    assert handle._declared is not None
    for name, (kind, key, value, reset) in handle._declared.items():
        if kind is None:  # deleted, not declared again
            out[name] = _schema.Declared(None, None, None, True)
            continue
        what = f"state {name!r}"
        out[name] = _schema.Declared(
            _schema.kind_name(kind),
            None if key is None else _schema.from_spark(key, f"{what} map key"),
            None if value is None else _schema.from_spark(value, what),
            reset,
        )
    return out


# --- read-back: read_state ----------------------------------------------------------------


def decode(items: Any, state_columns: list[list[str]] | None) -> Any:
    """``read_state``'s rows of this operator: ``(key tuple, state, map_key, value,
    expires_at_ms, version)`` per live entry of ``items`` (``(key, value, expires_at_ms,
    version)`` of one shard); a list is one row (its elements as a JSON list, the earliest
    expiry of its elements, the newest version among them)."""
    to_json = _codec.to_json
    lst: list[Any] | None = None  # the list being gathered: [gkey, name, key, items, exp, ver]
    for gkey, name, sub, value, expiry, ver, list_key in decode_typed(items, state_columns):
        if lst is not None and list_key != lst[2]:
            yield lst[0], lst[1], None, to_json(lst[3]), lst[4], lst[5]
            lst = None
        if list_key is not None:
            if lst is None:
                lst = [gkey, name, list_key, [], expiry, ver]
            else:
                if expiry is not None and (lst[4] is None or expiry < lst[4]):
                    lst[4] = expiry
                lst[5] = max(lst[5], ver)
            if sub:
                lst[3].append(value)
            else:
                lst[3].extend(value)
            continue
        if name == "__timer__":
            yield gkey, name, None, str(value), expiry, ver
            continue
        yield gkey, name, to_json(sub) if sub is not None else None, to_json(value), expiry, ver
    if lst is not None:
        yield lst[0], lst[1], None, to_json(lst[3]), lst[4], lst[5]


def decode_typed(items: Any, state_columns: Any, only: str | None = None) -> Any:
    """Each live state entry of ``items`` decoded: ``(key tuple, state name, sub, value,
    expires_at_ms, version, list key)``. ``sub`` is a map entry's key (a tuple), ``True`` for
    one list element, ``None`` otherwise; ``value`` a tuple (a value, map value or list
    element), a list (a list stored whole by older versions) or a timer's ms (state
    ``"__timer__"``); ``list key`` is the entry key of the list an entry belongs to, else
    ``None``. With ``only``, the entries of that state variable only."""
    # A processor root's descriptor has no state columns; read_state gives it the schema
    # registry instead (a dict), to decode typed values.
    codecs = _schema.codecs(state_columns) if isinstance(state_columns, dict) else {}
    for key, value, expiry, ver in items:
        if _keys.tag_of(key) != STATE_TAG:
            continue  # the timer index repeats the keys' own timer entries
        encoded, rest = _keys.split_length_prefixed(key)
        gkey = _codec.decode(encoded)
        if rest[:1] == TIMER_MARK:
            if only is not None and only != "__timer__":
                continue
            yield (gkey, "__timer__", None, _keys.time_value(rest, len(TIMER_MARK)), expiry,
                   ver, None)
            continue
        name, sub = _split_name(rest)
        if only is not None and name != only:
            continue
        codec = codecs.get(name)
        list_key = None
        if sub[:1] == LIST_ELEMENT:
            list_key = key[:len(key) - len(sub)]
            decoded = _codec.decode(value) if codec is None else codec.decode(value)
            part: Any = True
        elif sub:
            decoded = _codec.decode(value) if codec is None else codec.decode(value)
            part = _codec.decode(sub)
        else:
            part = None
            if codec is None:
                decoded = _codec.decode(value)
                if isinstance(decoded, list):  # a list stored whole
                    list_key = key
            elif codec.kind == "list":
                decoded = codec.decode_list(value)
                list_key = key
            else:
                decoded = codec.decode(value)
        if decoded is None:
            continue  # a value of a deleted generation of the variable
        yield gkey, name, part, decoded, expiry, ver, list_key
