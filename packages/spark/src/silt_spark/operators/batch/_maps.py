"""Map state variables of the batch processor: many keys' maps read and written at once.

The shape is Arrow's "long" form, as for lists (``_lists.py``): a map of many keys is a table
with the key columns, the user key columns and the value columns, one row per entry; writes
take tables of equal length, row ``i`` of the user keys (and values) going to the key in row
``i`` of the keys. Layout and encoding: the per-key processor's (see ``_state.py``): one entry
per map key, ``key_prefix + name + enc(user key)``, ``enc`` the ``_codec`` encoding of the user
key's tuple (built for whole columns by ``_rowcodec.encode_tuples``).
"""

from __future__ import annotations

from typing import Any

from silt.errors import InvalidArgumentError

from ...runtime import _rowcodec, _valuecodec
from ._state import BatchVariable, rows_table


class BatchMapState(BatchVariable):
    """A map state variable (user key -> value) for many keys at once.

    Examples
    --------
    >>> class PerDevice(BatchProcessor):
    ...     def init(self, handle):
    ...         handle.getMapState("last", "device string", "ts long")
    ...     def process(self, batch, state, timers):
    ...         last = batch.group_by(["user", "device"]).aggregate([("ts", "max")])
    ...         m = state.map("last")
    ...         m.put(last, last.select(["device"]),
    ...               last.select(["ts_max"]).rename_columns(["ts"]))
    ...         return m.get(last.group_by("user").aggregate([]))  # user, device, ts
    """

    kind = "map"

    def __init__(self, handle: Any, name: str, codec: _valuecodec.VarCodec, arrow_schema: Any,
                 key_schema: Any, ttl_seconds: float | None = None) -> None:
        import pyarrow as pa

        super().__init__(handle, name, codec, arrow_schema, ttl_seconds)
        #: The user key schema as Arrow (what ``put`` and ``remove`` take).
        self.key_schema = key_schema
        self._read_key_schema = pa.schema([f.with_nullable(True) for f in key_schema])

    def _user_entries(self, call: str, keys: Any, user_keys: Any) -> list[tuple[bytes, bytes]]:
        """``(key prefix + name, key prefix + name + enc(user key))`` of each row (checked)."""
        _, map_keys = self._resolve(keys, call)
        table = self._rows(user_keys, self.key_schema, call, "user keys")
        self._same_count(call, len(map_keys), table, "user key")
        encoded = _rowcodec.encode_tuples(table.columns, table.num_rows).to_list()
        return [(m, m + e) for m, e in zip(map_keys, encoded)]

    def _entries_of(self, map_key: bytes) -> list[tuple[bytes, bytes]]:
        return list(self._handle._state.map_items(map_key))

    def get(self, keys: Any) -> Any:
        """Every entry of the maps of ``keys`` (key rows of this batch) as one
        ``pyarrow.Table``: the key columns (as ``keys`` has them), the user key columns, then
        the value columns (user key and value fields nullable), one row per entry; the maps in
        the order of the key rows, each in the order of its user keys' encoding (as the per-key
        processor iterates). A key without a map has no row. Served from the batch's prefetch
        and this batch's own writes."""
        import pyarrow as pa

        table, map_keys = self._resolve(keys, "get")
        decode = self._codec.decode
        user: list[bytes] = []
        rows: list[tuple] = []
        take: list[int] = []
        for i, mk in enumerate(map_keys):
            n = len(mk)
            for k, raw in self._entries_of(mk):
                value = decode(raw)
                if value is not None:  # None: a deleted generation's value
                    user.append(k[n:])
                    rows.append(value)
                    take.append(i)
        out = table.select(self._handle._keys.key_columns).take(pa.array(take, pa.int64()))
        user_columns = _rowcodec.decode_tuples(_rowcodec.Rows.from_list(user),
                                               self._read_key_schema)
        values = rows_table(rows, self._read_schema)
        for field, column in zip(self._read_key_schema, user_columns):
            out = out.append_column(field, column)
        for field, column in zip(values.schema, values.columns):
            out = out.append_column(field, column)
        return out

    def exists(self, keys: Any) -> Any:
        """A ``pyarrow.BooleanArray``: whether each of ``keys`` has a non-empty map."""
        import pyarrow as pa

        _, map_keys = self._resolve(keys, "exists")
        decode = self._codec.decode
        return pa.array([any(decode(raw) is not None for _, raw in self._entries_of(mk))
                         for mk in map_keys], pa.bool_())

    def put(self, keys: Any, user_keys: Any, values: Any) -> None:
        """Set, for each row ``i``, the entry ``user_keys[i]`` of the map of the key in row
        ``i`` of ``keys`` to ``values[i]`` (tables with the user key schema's and the value
        schema's columns by name, cast to their types; as many rows as keys; each (key, user
        key) at most once). A TTL restarts for every entry put. Checked before anything is
        written; one write for the whole call."""
        entries = self._user_entries("put", keys, user_keys)
        if len(set(entries)) != len(entries):
            raise InvalidArgumentError(
                f"{self._what}.put: the same user key is given more than once for a key; give "
                "each (key, user key) one value"
            )
        encoded = self._encoded(values, "put", len(entries))
        if not entries:
            return
        self._write([(k, v) for (_, k), v in zip(entries, encoded)])
        self._held(entries, encoded, True)

    def remove(self, keys: Any, user_keys: Any) -> None:
        """Remove, for each row ``i``, the entry ``user_keys[i]`` from the map of the key in row
        ``i`` of ``keys`` (absent entries are no error). One write."""
        entries = list(dict.fromkeys(self._user_entries("remove", keys, user_keys)))
        if not entries:
            return
        self._write([], [k for _, k in entries])
        self._held(entries, [None] * len(entries), False)

    def delete(self, keys: Any) -> None:
        """Remove every entry of the maps of ``keys``. One write."""
        _, map_keys = self._resolve(keys, "delete")
        entries = [(mk, k) for mk in dict.fromkeys(map_keys) for k, _ in self._entries_of(mk)]
        if not entries:
            return
        self._write([], [k for _, k in entries])
        self._held(entries, [None] * len(entries), False)

    def _held(self, entries: list[tuple[bytes, bytes]], values: list[bytes | None],
              put: bool) -> None:
        """Note this batch's writes (``(map key, entry)``) where its reads are served from."""
        self._handle._wrote(self.name, put)
        map_wrote = self._handle._state.map_wrote
        for (mk, k), v in zip(entries, values):
            map_wrote(mk, k, v)
