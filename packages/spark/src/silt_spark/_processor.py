"""The StatefulProcessor API on silt state, shaped like PySpark 4's ``transformWithStateInPandas``.

State calls are plain LSM reads and writes inside the Python worker: no round trip to the JVM.

Key layout inside a shard's LSM (every key starts with its key group, so a rescale can clip SSTs
by key-group range)::

    kg:u16be 'S' len(enc(grouping key)):u32be enc(grouping key) len(name):u8 name [enc(map key)]

``enc`` is :mod:`silt_spark._codec`. Value and list states are one entry each (a list is stored
whole, so ``appendValue`` rewrites it: fine for short lists, see the docs); each map entry is its
own LSM entry, so a map can be large. Values are tuples (like PySpark's ``Row`` tuples).

Simplifications: timers are not implemented yet (``registerTimer`` raises); TTL is processing
time (the LSM's own expiry) and restarts on every update, as in PySpark.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Any

from . import _codec
from ._layout import KG_COLUMN, PARTITION_COLUMN
from ._shard import ShardTask, check_key_groups

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
STATE_TAG = b"S"


class TimerValues:
    """Processing time and watermark of the current micro-batch (PySpark's ``TimerValues``)."""

    def __init__(self, currentProcessingTimeInMs: int = -1, currentWatermarkInMs: int = -1):
        self._processing = currentProcessingTimeInMs
        self._watermark = currentWatermarkInMs

    def getCurrentProcessingTimeInMs(self) -> int:
        """Wall-clock time when the shard's task started, in ms since the epoch."""
        return self._processing

    def getCurrentWatermarkInMs(self) -> int:
        """The event-time watermark in ms (``-1``: no watermark; event time is not yet
        supported)."""
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
        rows : iterator of pandas.DataFrame
            The key's rows in this micro-batch (all input columns).
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
        raise ValueError(f"a state name must be a non-empty str, got {name!r}")
    b = name.encode("utf-8")
    if len(b) > 255:
        raise ValueError(f"a state name must be at most 255 bytes, got {len(b)}")
    return bytes([len(b)]) + b


def key_prefix(kg: int, encoded_key: bytes) -> bytes:
    """The LSM key prefix of all state of one grouping key."""
    return _U16.pack(kg) + STATE_TAG + _U32.pack(len(encoded_key)) + encoded_key


def _ttl_seconds(ttl_ms: int | None) -> float | None:
    if ttl_ms is None:
        return None
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, (int, float)) or not ttl_ms > 0:
        raise ValueError(f"ttlDurationMs must be a positive number of ms, got {ttl_ms!r}")
    return ttl_ms / 1000.0


class _State:
    def __init__(self, handle: StatefulProcessorHandle, name: str, ttl_ms: int | None) -> None:
        self._handle = handle
        self._name = _name_bytes(name)
        self._ttl = _ttl_seconds(ttl_ms)

    def _key(self) -> bytes:
        return self._handle._require_key() + self._name

    def _put(self, key: bytes, value: bytes) -> None:
        task = self._handle._task
        task.db.put(key, value, ttl=self._ttl)
        task.changed = True

    def _delete(self, key: bytes) -> None:
        task = self._handle._task
        task.db.delete(key)
        task.changed = True


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
        return self._handle._task.db.get(self._key()) is not None

    def get(self) -> tuple | None:
        """The current key's value, or ``None``."""
        raw = self._handle._task.db.get(self._key())
        return None if raw is None else _codec.decode(raw)

    def update(self, newValue: tuple) -> None:
        """Set the current key's value (restarts its TTL)."""
        self._put(self._key(), _codec.encode(tuple(newValue)))

    def clear(self) -> None:
        """Remove the current key's value."""
        self._delete(self._key())


class ListState(_State):
    """A list of tuples per grouping key, stored as one LSM entry.

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

    def _load(self) -> list[tuple]:
        raw = self._handle._task.db.get(self._key())
        return [] if raw is None else _codec.decode(raw)

    def exists(self) -> bool:
        """Whether the current key's list is non-empty."""
        return bool(self._load())

    def get(self) -> Iterator[tuple]:
        """Iterate over the current key's list."""
        return iter(self._load())

    def put(self, newState: list[tuple]) -> None:
        """Replace the current key's list."""
        items = [tuple(x) for x in newState]
        if items:
            self._put(self._key(), _codec.encode(items))
        else:
            self._delete(self._key())

    def appendValue(self, newState: tuple) -> None:
        """Append one tuple to the current key's list."""
        self.put([*self._load(), tuple(newState)])

    def appendList(self, newState: list[tuple]) -> None:
        """Append several tuples to the current key's list."""
        self.put(self._load() + [tuple(x) for x in newState])

    def clear(self) -> None:
        """Remove the current key's list."""
        self._delete(self._key())


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
        return self._key() + _codec.encode(tuple(key))

    def exists(self) -> bool:
        """Whether the current key's map has any entry."""
        return next(self._scan(), None) is not None

    def getValue(self, key: tuple) -> tuple | None:
        """The value of ``key`` in the current key's map, or ``None``."""
        raw = self._handle._task.db.get(self._entry(key))
        return None if raw is None else _codec.decode(raw)

    def containsKey(self, key: tuple) -> bool:
        """Whether the current key's map has ``key``."""
        return self._handle._task.db.get(self._entry(key)) is not None

    def updateValue(self, key: tuple, value: tuple) -> None:
        """Set ``key`` to ``value`` in the current key's map (restarts that entry's TTL)."""
        self._put(self._entry(key), _codec.encode(tuple(value)))

    def _scan(self) -> Iterator[tuple[bytes, bytes]]:
        prefix = self._key()
        return self._handle._task.db.scan(prefix=prefix)

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        """Iterate over ``(key, value)`` pairs of the current key's map, in key-byte order."""
        n = len(self._key())
        for k, v in list(self._scan()):
            yield _codec.decode(k[n:]), _codec.decode(v)

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

    def __init__(self, task: ShardTask) -> None:
        self._task = task
        self._prefix: bytes | None = None
        self._names: dict[str, type] = {}

    def _require_key(self) -> bytes:
        if self._prefix is None:
            raise RuntimeError(
                "state variables can only be used inside handleInputRows (they are bound to "
                "the grouping key being processed)"
            )
        return self._prefix

    def _register(self, name: str, kind: type) -> None:
        have = self._names.get(name)
        if have is not None and have is not kind:
            raise ValueError(
                f"state {name!r} is already a {have.__name__}; each name has one kind"
            )
        self._names[name] = kind

    def getValueState(
        self, stateName: str, schema: Any = None, ttlDurationMs: int | None = None
    ) -> ValueState:
        """A single-value state variable.

        Parameters
        ----------
        stateName : str
            Name, unique within the operator.
        schema : StructType or str, optional
            The value's schema (documentation only for now: values are tuples).
        ttlDurationMs : int, optional
            Processing-time TTL in ms, restarted by every update.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.last_seen = handle.getValueState("last_seen", "ts long", 60_000)
        """
        self._register(stateName, ValueState)
        return ValueState(self, stateName, ttlDurationMs)

    def getListState(
        self, stateName: str, schema: Any = None, ttlDurationMs: int | None = None
    ) -> ListState:
        """A list state variable (stored whole; keep lists short).

        Parameters
        ----------
        stateName : str
            Name, unique within the operator.
        schema : StructType or str, optional
            The elements' schema (documentation only for now: elements are tuples).
        ttlDurationMs : int, optional
            Processing-time TTL of the whole list in ms, restarted by every update.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.recent = handle.getListState("recent", "amount double")
        """
        self._register(stateName, ListState)
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
            Schemas of map keys and values (documentation only for now: both are tuples).
        ttlDurationMs : int, optional
            Processing-time TTL of each entry in ms, restarted when the entry is updated.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.per_device = handle.getMapState("per_device", "d string", "n long")
        """
        self._register(stateName, MapState)
        return MapState(self, stateName, ttlDurationMs)

    def registerTimer(self, expiryTimestampMs: int) -> None:
        """Not supported yet: timers are planned (processing time and event time)."""
        raise NotImplementedError("silt_spark does not support timers yet")

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        """Not supported yet."""
        raise NotImplementedError("silt_spark does not support timers yet")

    def listTimers(self) -> Iterator[int]:
        """Not supported yet."""
        raise NotImplementedError("silt_spark does not support timers yet")


class _Output:
    """Collects what ``handleInputRows`` returns: pandas DataFrames (PySpark's shape), Arrow
    tables or record batches, and single rows as tuples (in ``output_schema`` order, PySpark
    ``Row`` included) or dicts. Rows skip pandas entirely: the fast path for one row per key."""

    def __init__(self, arrow_schema: Any) -> None:
        self.schema = arrow_schema
        self.frames: list[Any] = []
        self.tables: list[Any] = []
        self.tuples: list[tuple] = []
        self.dicts: list[dict] = []

    def add(self, result: Any) -> None:
        import pandas as pd
        import pyarrow as pa

        if result is None:
            return
        if isinstance(result, (pd.DataFrame, pa.Table, pa.RecordBatch, tuple, dict)):
            result = (result,)
        for item in result:
            if isinstance(item, tuple):  # includes pyspark.sql.Row
                self.tuples.append(item)
            elif isinstance(item, dict):
                self.dicts.append(item)
            elif isinstance(item, pd.DataFrame):
                if len(item):
                    self.frames.append(item)
            elif isinstance(item, (pa.Table, pa.RecordBatch)):
                if item.num_rows:
                    self.tables.append(item)
            elif item is not None:
                raise TypeError(
                    "handleInputRows must yield pandas DataFrames, Arrow tables or record "
                    f"batches, tuples or dicts, got {type(item).__name__}"
                )

    def batches(self) -> Iterator[Any]:
        import pandas as pd
        import pyarrow as pa

        schema = self.schema
        names = schema.names
        parts = []
        if self.frames:
            pdf = pd.concat(self.frames, ignore_index=True)
            missing = [n for n in names if n not in pdf.columns]
            if missing:
                raise ValueError(
                    f"handleInputRows returned DataFrames without the output columns {missing}; "
                    f"output_schema has {names}"
                )
            parts.append(pa.Table.from_pandas(pdf[names], schema=schema, preserve_index=False))
        if self.tuples:
            width = {len(t) for t in self.tuples}
            if width != {len(names)}:
                raise ValueError(
                    f"handleInputRows yielded tuples of length {sorted(width)}; output_schema "
                    f"has {len(names)} columns {names}"
                )
            cols = [list(c) for c in zip(*self.tuples)]
            parts.append(pa.Table.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema
            ))
        if self.dicts:
            parts.append(pa.Table.from_pylist(self.dicts, schema=schema))
        for t in self.tables:
            if isinstance(t, pa.RecordBatch):
                t = pa.Table.from_batches([t])
            parts.append(t.select(names).cast(schema))
        for t in parts:
            yield from t.to_batches(max_chunksize=65536)


def process_partition(
    task: ShardTask,
    batches: Iterator[Any],
    processor: Any,
    key_columns: list[str],
    output_schema: Any,
    rows_format: str = "pandas",
) -> Iterator[Any]:
    """Group the shard's rows by key, run the processor per key, yield output Arrow batches.

    ``rows_format`` is ``"pandas"`` (PySpark's shape: an iterator of DataFrames per key) or
    ``"arrow"`` (an iterator of ``pyarrow.Table`` slices: much cheaper per key).
    """
    import numpy as np
    import pyarrow as pa

    batches = list(batches)
    rows = sum(b.num_rows for b in batches)
    if rows == 0:
        return
    table = pa.Table.from_batches(batches)
    check_key_groups(task, table[KG_COLUMN])
    table = table.drop_columns([PARTITION_COLUMN])
    data = table.drop_columns([KG_COLUMN])
    keys_pdf = table.select(key_columns).to_pandas()
    codes = keys_pdf.groupby(key_columns, sort=False, dropna=False).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    ends = np.r_[starts[1:], len(order)]
    first_rows = pa.array(order[starts])
    key_values = [table[c].take(first_rows).to_pylist() for c in key_columns]
    kgs = table[KG_COLUMN].take(first_rows).to_pylist()
    sorted_rows = data.take(pa.array(order))
    if rows_format != "arrow":
        sorted_rows = sorted_rows.to_pandas()

    handle = StatefulProcessorHandle(task)
    timer_values = TimerValues(int(time.time() * 1000), -1)
    processor.init(handle)
    output = _Output(output_schema)
    add = output.add
    try:
        encode = _codec.encode
        arrow = rows_format == "arrow"
        for i, key in enumerate(zip(*key_values)):
            handle._prefix = key_prefix(kgs[i], encode(key))
            a, b = int(starts[i]), int(ends[i])
            sub = sorted_rows.slice(a, b - a) if arrow else sorted_rows.iloc[a:b]
            add(processor.handleInputRows(key, iter((sub,)), timer_values))
        handle._prefix = None
    finally:
        close = getattr(processor, "close", None)
        if close is not None:
            close()
    yield from output.batches()
