"""A processor's state variables: :class:`ValueState`, :class:`ListState` and :class:`MapState`,
plain LSM reads and writes of the shard's DB through the handle (no round trip to the JVM),
read from the batch's prefetch where it has them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...runtime import _codec, _valuecodec
from .._varkeys import _SEQ, LIST_ELEMENT, _name_bytes, list_seq
from .._varkeys import ttl_seconds as _ttl_seconds
from . import _handover


class _State:
    def __init__(self, handle: Any, name: str, ttl_ms: int | None) -> None:
        # ``handle``: the StatefulProcessorHandle that declared the variable (``_handle.py``,
        # which builds the variables of this module: not imported back here).
        self._handle = handle
        self._name = _name_bytes(name)
        self._ttl = _ttl_seconds(ttl_ms)
        self._state_name = name
        #: The variable's schema codec (None: declared without a schema, values self-describing).
        self._codec: _valuecodec.VarCodec | None = handle._codecs.get(name)
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
