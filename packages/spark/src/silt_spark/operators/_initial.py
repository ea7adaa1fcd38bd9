"""A processor's initial state: ``transform_with_state(..., initial_state=df)``, as PySpark's
``transformWithStateInPandas(..., initialState=...)``, and ``transform_batches(...,
initial_state=df)`` (shared by the two processors, which read it alike).

Spark cannot union a batch DataFrame into a stream, so the initial rows reach the shards through
the state root: when the query is built on a root with no committed state, one Spark job routes
the initial DataFrame by the same key groups as the stream (``_layout.with_routing_columns``,
the key columns' types checked equal so the hash is the same) and writes each shard's rows as one
Arrow IPC object::

    <operator root>/initial/<staging id>/<shard:05d>.arrow

(the staging id is new per build, so a build that failed half-way is never read; all of a
shard's rows are in one Spark partition, so a retried task writes what its first attempt did,
and finds it there: nothing is overwritten). In micro-batch
0, each shard's task reads its object (one GET; absent: no initial rows) and calls
``handleInitialState(key, rows, timerValues)`` once per key, before any ``handleInputRows``
(the batch processor: ``process_initial(rows, state, timers)`` once, before ``process``). A
query restarted past batch 0, or built on a root that already has state (other than to take it
over), never applies it again (the build then deletes staged objects left over).
"""

from __future__ import annotations

import uuid
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from silt.plugins import open_store

from ..runtime import _layout, _root, _sources

PREFIX = "initial/"


def object_name(staging: str, shard: int) -> str:
    return f"{PREFIX}{staging}/{shard:05d}.arrow"


def _frame(initial: Any) -> Any:
    """The DataFrame of ``initial`` (a DataFrame, or PySpark's ``df.groupBy(...)``)."""
    df = getattr(initial, "_df", initial)  # GroupedData keeps its DataFrame there
    if not hasattr(df, "schema") or not hasattr(df, "isStreaming"):
        raise InvalidTypeError(
            f"initial_state must be a DataFrame (or its groupBy), got {type(initial).__name__}"
        )
    if df.isStreaming:
        raise InvalidArgumentError(
            "initial_state must be a batch DataFrame (spark.read...), not a streaming one"
        )
    return df


def check(initial: Any, df: Any, keys: list[str]) -> Any:
    """The initial DataFrame, its key columns checked against the stream's (same names and
    types: the key groups are a hash of the typed values)."""
    init = _frame(initial)
    have = {f.name: f.dataType for f in init.schema.fields}
    want = {f.name: f.dataType for f in df.schema.fields}
    for c in keys:
        if c not in have:
            raise InvalidArgumentError(
                f"initial_state has no key column {c!r}; it needs the key columns {keys}"
            )
        if have[c] != want[c]:
            raise InvalidTypeError(
                f"initial_state's key column {c!r} is {have[c].simpleString()}, the stream's "
                f"is {want[c].simpleString()}: cast it to the same type"
            )
    return init


def _has_state(spec: _root.OperatorSpec) -> bool:

    return bool(_sources.root_versions(spec))


def stage(initial: Any, keys: list[str], spec: _root.OperatorSpec) -> str | None:
    """Write each shard's initial rows under the root (one Spark job); the staging id, or
    ``None`` when the root already has state (the initial state was applied before), unless
    the query takes the root over (``take_over=True``: its first batch starts from empty
    state, so the initial state applies to it)."""
    store = open_store(spec.root, storage_options=spec.storage_options)
    try:
        if not spec.take_over and _has_state(spec):
            left = [o.key for o in store.list(PREFIX)]
            if left:
                store.delete_many(left)
            return None
    finally:
        store.close()
    staging = uuid.uuid4().hex
    root, n, groups = spec.root, spec.num_shards, spec.key_groups
    storage_options = spec.storage_options
    routed = _layout.with_routing_columns(initial, keys, n, groups)
    routed = routed.repartition(n, _layout.PARTITION_COLUMN)

    def write(batches: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches).drop_columns([_layout.PARTITION_COLUMN])
        shard_of = pc.divide(pc.multiply(table[_layout.KG_COLUMN].cast(pa.int64()), n), groups)
        out = open_store(root, storage_options=storage_options)
        try:
            for shard in pc.unique(shard_of).to_pylist():
                part = table.filter(pc.equal(shard_of, shard))
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, part.schema) as w:
                    w.write_table(part)
                # objects are never overwritten: a retried task finds its shard's rows there
                out.put_if_absent(object_name(staging, shard), sink.getvalue().to_pybytes())
        finally:
            out.close()
        yield pa.RecordBatch.from_pydict({"n": [table.num_rows]},
                                         schema=pa.schema([("n", pa.int64())]))

    routed.mapInArrow(write, "n long").collect()
    return staging


def load(
    root: str, staging: str, shard: int, storage_options: dict[str, str] | None = None
) -> Any:
    """The shard's staged initial rows (a ``pyarrow.Table`` with the key-group column), or
    ``None``."""
    import pyarrow as pa

    store = open_store(root, storage_options=storage_options)
    try:
        data = store.get(object_name(staging, shard))
    except NotFoundError:
        return None
    finally:
        store.close()
    return pa.ipc.open_stream(data).read_all()
