"""The batch processor's state variables: what ``process`` reads and writes for many keys at
once. :class:`BatchValueState` is here with what every variable shares (:class:`BatchKeys`,
:class:`BatchVariable`); list and map variables are ``_lists.py`` and ``_maps.py``, the handle
that declares them ``_handle.py``, the processor's base class ``_processor.py``.

Layout: exactly the per-key processor's (``silt_spark.operators.processor``, built from
``operators/_varkeys.py``). For grouping key ``k`` in key group ``kg`` and a variable named
``name``, with ``P = key_prefix(kg, enc(k)) + len(name) name``:

* a value state is the entry ``P``;
* a list state is one entry per element, ``P 0xFF seq:u64be`` in append order (a list an older
  silt_spark wrote whole, one entry at ``P``, reads as the elements before them);
* a map state is one entry per map key, ``P enc(user key)``.

Values are the variable's schema encoding (``silt_spark.runtime._valuecodec.VarCodec``), map
keys and grouping keys ``silt_spark.runtime._codec`` encodings of their tuples, built for whole
Arrow columns by ``silt_spark.runtime._rowcodec.encode_tuples`` (byte for byte what the per-key
processor writes), so either processor reads what the other wrote. A variable declared with a
TTL (``ttlDurationMs``) writes every entry with the LSM's own expiry
(``operators/_varkeys.ttl_seconds``, as the per-key processor does): processing time, restarted
by every write of the entry (a value ``put``, a map ``put``; each list element from when it was
appended or put); an entry that expired reads as absent from the next batch on.

Reads are served from the batch's prefetch, filled before ``process`` runs, and this batch's own
writes: no state read waits on the store. Value variables: one sorted ``multi_get`` for every
value variable of every key of the batch, held by key position (``_values.py``); list and map
variables: one ``multi_scan`` for their entries of every key
(``silt_spark.runtime._prefetch.BatchState``). State calls take keys **of the batch** (rows of
its key columns, in any order; in micro-batch 0 also those of the shard's ``initial_state``
rows), as the per-key processor's variables are bound to the key being handled; the key group
of a key is the one Spark routed its rows by. A table of keys is resolved to key positions with
one Arrow lookup (``_keyset.py``), so a value ``get``, ``put`` or ``delete`` makes no Python
call per key.

Every argument is checked before anything is written; an error names the processor, the
variable and what was wrong. Not thread-safe: one shard's micro-batch, in its task.

Timers (``time_mode="ProcessingTime"`` or ``"EventTime"``) are ``_timers.py``: in the per-key
processor's layout, registered, deleted and listed for many keys at once (no Python call per
timer), the due ones handed to ``expired(keys, times, state)`` in one call.

Simplified for now: no ``deleteIfExists`` (refused when the query is built: run the query once
with ``transform_with_state`` to delete a variable); values of a schema with a
variable-length field (or of an older schema version) are encoded and decoded with one Python
call per element, while fixed-width schemas go by numpy records (``runtime._valuecolumns``).
"""

from __future__ import annotations

from typing import Any, Protocol

from silt.errors import InvalidArgumentError

from ...runtime import _valuecodec, _valuecolumns
from .. import _varkeys
from ._keyset import BatchKeys
from ._tables import as_table, conform

__all__ = ["BatchKeys", "BatchValueState", "BatchVariable", "VariableHost", "rows_table"]



class VariableHost(Protocol):
    """What a state variable uses of the handle that declared it (``_handle.BatchHandle``):
    the processor's name for errors, the batch's keys, prefetched state and held values, the
    shard's task (its DB), the next list sequence per list prefix, and the record of which
    variables the batch wrote."""

    _processor: str
    _keys: Any
    _state: Any
    _values: Any
    _task: Any
    _list_next: dict[bytes, int]

    def _wrote(self, name: str, put: bool) -> None: ...

def rows_table(rows: list[tuple | None], schema: Any) -> Any:
    """A ``pyarrow.Table`` of ``schema`` from decoded rows (``None``: a row of nulls)."""
    import pyarrow as pa

    width = len(schema)
    columns: list[list[Any]] = [[] for _ in range(width)]
    for row in rows:
        for j in range(width):
            columns[j].append(None if row is None else row[j])
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema
    )


class BatchVariable:
    """What every batch state variable shares: its name, codec and schema, the checks of the
    keys and values it is given, and its writes (one ``put_many`` or one write batch per call,
    with the variable's TTL)."""

    #: ``"value"``, ``"list"`` or ``"map"``.
    kind = ""

    def __init__(self, handle: VariableHost, name: str, codec: _valuecodec.VarCodec,
                 arrow_schema: Any, ttl_seconds: float | None = None) -> None:
        import pyarrow as pa

        self._handle = handle
        self.name = name
        self._name = _varkeys._name_bytes(name)
        self._codec = codec
        #: The variable's latest (value or element) schema as Arrow: what writes take; reads
        #: return it with every field nullable.
        self.schema = arrow_schema
        self._read_schema = pa.schema([f.with_nullable(True) for f in arrow_schema])
        self._what = f"{handle._processor} state {name!r}"
        #: The TTL of every entry written (seconds, the LSM's expiry), or ``None``.
        self._ttl = ttl_seconds

    def _resolve(self, keys: Any, call: str) -> tuple[Any, list[bytes]]:
        """``keys`` as a table and each row's ``key prefix + name`` (checked)."""
        table, prefixes = self._handle._keys.resolve(keys, f"{self._what}.{call}")
        name = self._name
        return table, [p + name for p in prefixes]

    def _entries(self, keys: Any, call: str) -> list[bytes]:
        return self._resolve(keys, call)[1]

    def _rows(self, values: Any, schema: Any, call: str, label: str = "values") -> Any:
        """``values`` as a table of ``schema``'s columns by name, cast to its types."""
        what = f"{self._what}.{call}"
        values = as_table(values, f"{what}: {label} must be a pyarrow Table or RecordBatch (or "
                                  f"a pandas DataFrame) with the columns {schema.names}, "
                                  "got {got}")
        return conform(values, schema, f"{what}: {label} have", "the variable's schema",
                       f"{what}: {label} do not fit the variable's schema {schema}")

    def _same_count(self, call: str, n_keys: int, table: Any, label: str = "value") -> None:
        if table.num_rows != n_keys:
            raise InvalidArgumentError(
                f"{self._what}.{call}: got {n_keys} keys but {table.num_rows} {label} rows; "
                f"give one {label} row per key row, in the keys' order"
            )

    def _encoded(self, values: Any, call: str, n_keys: int, label: str = "values",
                 row: str = "value") -> list[bytes]:
        """``values`` (one row of the variable's schema per key row, ``n_keys`` of them)
        checked and encoded: the table's columns, its row count, then each row's bytes."""
        table = self._rows(values, self.schema, call, label)
        self._same_count(call, n_keys, table, row)
        return self._encode(table, call)

    def _encode(self, table: Any, call: str) -> list[bytes]:
        """Each row of ``table`` (already of the schema) in the variable's encoding: by numpy
        records for a schema of fixed-width fields (``_valuecolumns``), else row by row."""
        encoded = _valuecolumns.encode_columns(self._codec, table)
        if encoded is not None:
            return encoded
        encode = self._codec.encode
        try:
            return [encode(row) for row in zip(*(c.to_pylist() for c in table.columns))]
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"{self._what}.{call}: {exc}") from None

    def _write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes] = (),  # type: ignore[assignment]
               ranges: list[tuple[bytes, bytes]] = ()) -> None:  # type: ignore[assignment]
        """Apply range deletes, then deletes, then puts (with the TTL) as one write: a
        ``put_many`` when it is only puts without a TTL, else one write batch."""
        if not (puts or deletes or ranges):
            return
        db = self._handle._task.db
        if self._ttl is None and not deletes and not ranges:
            db.put_many([k for k, _ in puts], [v for _, v in puts])
            return
        import silt

        batch = silt.WriteBatch()
        for start, end in ranges:
            batch.delete_range(start, end)
        batch.delete_many(deletes)
        ttl = self._ttl
        for k, v in puts:
            batch.put(k, v, ttl=ttl)
        db.write(batch)


class BatchValueState(BatchVariable):
    """A value state variable for many keys at once: one row of its schema per key.

    Examples
    --------
    >>> class Totals(BatchProcessor):
    ...     def init(self, handle):
    ...         handle.getValueState("total", "amount double")
    ...     def process(self, batch, state, timers):
    ...         keys = batch.group_by("user").aggregate([("amount", "sum")])
    ...         total = state.value("total")
    ...         old = total.get(keys)["amount"]
    ...         new = pc.add(pc.fill_null(old, 0.0), keys["amount_sum"])
    ...         total.put(keys, pa.table({"amount": new}))
    """

    kind = "value"

    def get(self, keys: Any) -> Any:
        """The values of ``keys`` (key rows of this batch) as a ``pyarrow.Table`` of the
        variable's schema, one row per key row in their order; all nulls for a key without a
        value. Served from the batch's prefetch (and this batch's own writes)."""
        raws = self._held(keys, "get")
        table = _valuecolumns.decode_columns(self._codec, raws, self._read_schema)
        if table is not None:
            return table
        decode = self._codec.decode
        return rows_table([None if raw is None else decode(raw) for raw in raws.tolist()],
                          self._read_schema)

    def exists(self, keys: Any) -> Any:
        """A ``pyarrow.BooleanArray``: whether each of ``keys`` has a value."""
        import pyarrow as pa

        decode = self._codec.decode
        return pa.array([raw is not None and decode(raw) is not None
                         for raw in self._held(keys, "exists").tolist()], pa.bool_())

    def _held(self, keys: Any, call: str) -> Any:
        """The held values (an object array, ``None``: absent) of ``keys``, checked."""
        _, pos = self._positions(keys, call)
        return self._handle._values.get(self._name, pos)

    def _positions(self, keys: Any, call: str) -> tuple[Any, Any]:
        return self._handle._keys.positions(keys, f"{self._what}.{call}")

    def put(self, keys: Any, values: Any) -> None:
        """Set the value of each of ``keys`` (key rows of this batch, each at most once) to the
        row of ``values`` at the same position (a ``pyarrow.Table``/``RecordBatch`` or pandas
        DataFrame with the schema's columns by name, cast to their types). Everything is
        checked before anything is written; the rows are written with one ``put_many`` (one
        write batch with a TTL), and a TTL restarts for every key put."""
        import numpy as np

        _, pos = self._positions(keys, "put")
        if len(pos) and np.bincount(pos).max() > 1:
            raise InvalidArgumentError(
                f"{self._what}.put: keys hold the same key more than once; give each key one "
                "value (e.g. aggregate per key first)"
            )
        encoded = self._encoded(values, "put", len(pos))
        if not len(pos):
            return
        held = self._handle._values
        entries = held.entries(self._name, pos)
        if self._ttl is None:
            self._handle._task.db.put_many(entries, encoded)
        else:
            self._write(list(zip(entries, encoded)))
        self._handle._wrote(self.name, True)
        held.wrote(self._name, pos, encoded)

    def delete(self, keys: Any) -> None:
        """Remove the value of each of ``keys`` (key rows of this batch), in one write batch."""
        import numpy as np

        _, pos = self._positions(keys, "delete")
        if not len(pos):
            return
        _, first = np.unique(pos, return_index=True)
        pos = pos[np.sort(first)]
        held = self._handle._values
        self._write([], held.entries(self._name, pos))
        self._handle._wrote(self.name, False)
        held.wrote(self._name, pos, None)
