"""The batch processor's state: its handle (what ``init`` declares) and vectorized state
variables (what ``process`` reads and writes for many keys at once).

Layout: exactly the per-key processor's (``silt_spark.operators.processor``): a value state of
grouping key ``k`` in key group ``kg`` is the entry ``key_prefix(kg, enc(k)) + len(name) name``,
its value the variable's schema encoding (``silt_spark.runtime._schema.VarCodec``). Keys are encoded
with ``silt_spark.runtime._rowcodec.encode_tuples``, byte for byte ``_codec.encode`` of the key
tuple as the per-key processor encodes it, so either processor reads what the other wrote.

Reads are served from the batch's prefetch (``silt_spark.runtime._prefetch.BatchState``: one sorted
``multi_get`` for every value variable of every key of the batch, done before ``process``
runs); ``put`` writes its rows with one ``put_many``, ``delete`` with one ``WriteBatch``. State
calls take keys **of the batch** (rows of its key columns, in any order, each key at most once
in a ``put``), as the per-key processor's variables are bound to the key being handled; the
key group of a key is the one Spark routed its rows by.

Every argument is checked before anything is written; an error names the processor, the
variable and what was wrong. Not thread-safe: one shard's micro-batch, in its task.

Simplified for now: value state only (no list or map variables, no TTL, no timers, no
``deleteIfExists``); encoding and decoding of values is one Python call per key (no user code
per key, but not yet numpy-vectorized as the keys are).
"""

from __future__ import annotations

import json
from typing import Any

from silt.errors import InvalidArgumentError

from ...runtime import _rowcodec, _schema, _valuecodec
from ...runtime._names import META_DELETED_STATES
from .. import _varkeys
from ._tables import as_table, conform

#: The kinds of state variables ``transform_batches`` serves so far.
SUPPORTED_KINDS = ("value",)


class BatchProcessor:
    """Stateful logic over whole micro-batches, applied with
    :func:`silt_spark.transform_batches`.

    ``init(handle)`` declares the state variables (``handle.getValueState(name, schema)``, as a
    :class:`~silt_spark.StatefulProcessor` does); ``process(batch, state, timers)`` is called
    once per shard and micro-batch with the shard's rows (a ``pyarrow.Table`` with every input
    column, key columns included) and returns the output rows (a ``pyarrow.Table``,
    ``RecordBatch`` or pandas DataFrame with the operator's ``output_schema``, or ``None``);
    ``close()`` is optional. Any object with ``init`` and ``process`` is accepted.

    Examples
    --------
    >>> import pyarrow as pa
    >>> import pyarrow.compute as pc
    >>> class RunningCount(BatchProcessor):
    ...     def init(self, handle):
    ...         handle.getValueState("count", "n long")
    ...     def process(self, batch, state, timers):
    ...         per_key = batch.group_by("user").aggregate([([], "count_all")])
    ...         count = state.value("count")
    ...         old = count.get(per_key)
    ...         n = pc.add(pc.fill_null(old["n"], 0), per_key["count_all"])
    ...         count.put(per_key, pa.table({"n": n}))
    ...         return pa.table({"user": per_key["user"], "n": n})
    """

    def init(self, handle: BatchHandle) -> None:
        """Declare the state variables (``handle.getValueState``)."""
        raise NotImplementedError

    def process(self, batch: Any, state: BatchStates, timers: Any) -> Any:
        """The shard's output for its rows of one micro-batch (see the class docstring);
        ``timers`` is a :class:`~silt_spark.TimerValues` (processing time of the batch)."""
        raise NotImplementedError

    def close(self) -> None:
        """Called after ``process``, also when it raised."""


class BatchKeys:
    """The grouping keys of one shard's micro-batch: each key's encoding and state prefix."""

    def __init__(self, key_columns: list[str], encoded: list[bytes], kgs: list[int],
                 processor: str) -> None:
        self.key_columns = key_columns
        self.processor = processor
        #: enc(key) -> the key's state prefix (``_varkeys.key_prefix``).
        self.prefix_of = {e: _varkeys.key_prefix(kg, e) for e, kg in zip(encoded, kgs)}

    def prefixes(self, keys: Any, what: str) -> list[bytes]:
        """The state prefixes of ``keys`` (a table of key rows of this batch), or an error
        naming ``what`` (the processor and variable) and the first bad row."""
        table = self._key_table(keys, what)
        columns = [table[c] for c in self.key_columns]
        encoded = _rowcodec.encode_tuples(columns, table.num_rows).to_list()
        get = self.prefix_of.get
        out = [get(e) for e in encoded]
        if None in out:
            i = out.index(None)
            key = tuple(c[i].as_py() for c in columns)
            if any(v is None for v in key):
                why = (f"the key columns {self.key_columns} hold a null in row {i} {key!r}, "
                       "and no row of this batch has that key")
            else:
                why = f"row {i} {key!r} is not a key of this batch"
            raise InvalidArgumentError(
                f"{what}: {why}. State calls take keys of the batch, e.g. "
                f"batch.select({self.key_columns}) or a group_by of it"
            )
        return out

    def _key_table(self, keys: Any, what: str) -> Any:

        keys = as_table(keys, f"{what}: keys must be a pyarrow Table or RecordBatch (or a "
                              f"pandas DataFrame) with the key columns {self.key_columns}, "
                              "got {got}")
        missing = [c for c in self.key_columns if c not in keys.column_names]
        if missing:
            raise InvalidArgumentError(
                f"{what}: keys lack the key columns {missing} (they have {keys.column_names})"
            )
        return keys


class BatchValueState:
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

    def __init__(self, handle: BatchHandle, name: str, codec: _valuecodec.VarCodec,
                 arrow_schema: Any) -> None:
        import pyarrow as pa

        self._handle = handle
        self.name = name
        self._name = _varkeys._name_bytes(name)
        self._codec = codec
        #: The variable's latest schema as Arrow (what ``put`` takes; ``get`` returns it with
        #: every field nullable, null for keys without a value).
        self.schema = arrow_schema
        self._read_schema = pa.schema([f.with_nullable(True) for f in arrow_schema])
        self._what = f"{handle._processor} state {name!r}"

    def _entries(self, keys: Any, call: str) -> list[bytes]:
        name = self._name
        return [p + name for p in self._handle._keys.prefixes(keys, f"{self._what}.{call}")]

    def get(self, keys: Any) -> Any:
        """The values of ``keys`` (key rows of this batch) as a ``pyarrow.Table`` of the
        variable's schema, one row per key row in their order; all nulls for a key without a
        value. Served from the batch's prefetch (and this batch's own writes)."""
        import pyarrow as pa

        entries = self._entries(keys, "get")
        state = self._handle._state
        decode = self._codec.decode
        rows = [None if raw is None else decode(raw) for raw in map(state.get, entries)]
        schema = self._read_schema
        width = len(schema)
        columns: list[list[Any]] = [[] for _ in range(width)]
        for row in rows:
            for j in range(width):
                columns[j].append(None if row is None else row[j])
        return pa.Table.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema
        )

    def exists(self, keys: Any) -> Any:
        """A ``pyarrow.BooleanArray``: whether each of ``keys`` has a value."""
        import pyarrow as pa

        state = self._handle._state
        decode = self._codec.decode
        return pa.array([raw is not None and decode(raw) is not None
                         for raw in map(state.get, self._entries(keys, "exists"))], pa.bool_())

    def put(self, keys: Any, values: Any) -> None:
        """Set the value of each of ``keys`` (key rows of this batch, each at most once) to the
        row of ``values`` at the same position (a ``pyarrow.Table``/``RecordBatch`` or pandas
        DataFrame with the schema's columns by name, cast to their types). Everything is
        checked before anything is written; the rows are written with one ``put_many``."""
        entries = self._entries(keys, "put")
        if len(set(entries)) != len(entries):
            raise InvalidArgumentError(
                f"{self._what}.put: keys hold the same key more than once; give each key one "
                "value (e.g. aggregate per key first)"
            )
        table = self._values(values)
        if table.num_rows != len(entries):
            raise InvalidArgumentError(
                f"{self._what}.put: got {len(entries)} keys but {table.num_rows} value rows; "
                "give one value row per key, in the keys' order"
            )
        encode = self._codec.encode
        try:
            encoded = [encode(row) for row in zip(*(c.to_pylist() for c in table.columns))]
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"{self._what}.put: {exc}") from None
        if not entries:
            return
        handle = self._handle
        handle._task.db.put_many(entries, encoded)
        handle._wrote(self.name, entries, encoded)

    def delete(self, keys: Any) -> None:
        """Remove the value of each of ``keys`` (key rows of this batch), in one write batch."""
        import silt

        entries = self._entries(keys, "delete")
        if not entries:
            return
        batch = silt.WriteBatch()
        for k in entries:
            batch.delete(k)
        handle = self._handle
        handle._task.db.write(batch)
        handle._wrote(self.name, entries, [None] * len(entries))

    def _values(self, values: Any) -> Any:

        what = f"{self._what}.put"
        values = as_table(values, f"{what}: values must be a pyarrow Table or RecordBatch (or "
                                  f"a pandas DataFrame) with the columns {self.schema.names}, "
                                  "got {got}")
        return conform(values, self.schema, f"{what}: values have", "the variable's schema",
                       f"{what}: values do not fit the variable's schema {self.schema}")


class BatchStates:
    """What ``process`` receives as ``state``: the variables ``init`` declared, by name."""

    def __init__(self, handle: BatchHandle) -> None:
        self._handle = handle

    def value(self, name: str) -> BatchValueState:
        """The value state variable ``name`` (declared in ``init``)."""
        var = self._handle._vars.get(name)
        if var is None:
            raise InvalidArgumentError(
                f"{self._handle._processor} has no value state {name!r}: declare it in init "
                f"with handle.getValueState({name!r}, schema) (declared: "
                f"{sorted(self._handle._vars)})"
            )
        return var


class BatchHandle:
    """What ``init`` receives: declares state variables.

    On the driver (``task=None``) it only records the declarations (name -> ``(kind, key
    schema, value schema, ttl)``); in a task it makes the vectorized variables, their schema
    codecs taken from the operator's registry.
    """

    def __init__(self, task: Any, processor: str, registry: dict[str, Any] | None = None,
                 arrow_schemas: dict[str, Any] | None = None) -> None:
        self._task = task
        self._processor = processor
        self._codecs = _schema.codecs(registry)
        self._arrow = arrow_schemas or {}
        #: Driver: what ``init`` declared.
        self.declared: dict[str, tuple[str, Any, Any, Any]] = {}
        self._vars: dict[str, BatchValueState] = {}
        self._keys: Any = None
        self._state: Any = None
        #: Variables the per-key processor's ``deleteIfExists`` removed with nothing written
        #: since (its manifest meta); a write here takes the variable out of that list.
        self._deleted: set[str] = set()
        if task is not None:
            raw = task.base_meta.get(META_DELETED_STATES) if task.base_meta else None
            self._deleted = set(json.loads(raw)) if raw else set()

    def _declare(self, kind: str, name: str, key_schema: Any, schema: Any, ttl: Any) -> None:
        _varkeys._name_bytes(name)  # a name the layout can hold
        if name in self.declared and self.declared[name][0] != kind:
            raise InvalidArgumentError(
                f"{self._processor} declares state {name!r} as a {self.declared[name][0]} and "
                f"a {kind} state; each name has one kind"
            )
        self.declared[name] = (kind, key_schema, schema, ttl)

    def getValueState(self, stateName: str, schema: Any = None,
                      ttlDurationMs: Any = None) -> BatchValueState | None:
        """Declare a value state variable with its schema (a ``StructType`` or DDL string;
        required: ``get`` returns Arrow columns of it). Returns the variable in a task (also
        reachable as ``state.value(stateName)`` in ``process``), ``None`` on the driver."""
        self._declare("value", stateName, None, schema, ttlDurationMs)
        if self._task is None:
            return None
        var = self._vars.get(stateName)
        if var is None:
            codec = self._codecs.get(stateName)
            if codec is None or not codec.typed or stateName not in self._arrow:
                raise InvalidArgumentError(
                    f"{self._processor} declares value state {stateName!r} in a task but did "
                    "not when the query started: init must declare the same variables every time"
                )
            var = self._vars[stateName] = BatchValueState(
                self, stateName, codec, self._arrow[stateName])
        return var

    def getListState(self, stateName: str, schema: Any = None, ttlDurationMs: Any = None) -> None:
        """List state: not served by ``transform_batches`` yet (refused when the query is
        built)."""
        self._declare("list", stateName, None, schema, ttlDurationMs)

    def getMapState(self, stateName: str, userKeySchema: Any = None, valueSchema: Any = None,
                    ttlDurationMs: Any = None) -> None:
        """Map state: not served by ``transform_batches`` yet (refused when the query is
        built)."""
        self._declare("map", stateName, userKeySchema, valueSchema, ttlDurationMs)

    def _bind(self, keys: BatchKeys) -> None:
        """Serve the batch's ``keys``: read every declared value variable of every key ahead,
        with one ``multi_get`` (the same prefetch as the per-key processor's)."""
        from ...runtime._prefetch import BatchState

        self._keys = keys
        self._state = BatchState(self._task)
        names = [v._name for v in self._vars.values()]
        if names:
            self._state.load(keys.prefix_of.values(), names, (), False, None)

    def _wrote(self, name: str, entries: list[bytes], values: list[bytes | None]) -> None:
        task = self._task
        task.changed = True
        wrote = self._state.wrote
        for k, v in zip(entries, values):
            wrote(k, v)
        if name in self._deleted and values and values[0] is not None:
            self._deleted.discard(name)
            task.meta_updates[META_DELETED_STATES] = json.dumps(sorted(self._deleted))
