"""Vectorized keyed aggregation: count, sum, min, max, avg, with no Python call per row.

Plan: a partial aggregation per input partition (``mapInArrow`` + ``pyarrow`` ``group_by``) before
the shuffle, then routing by key group, ``repartition(N)``, and per shard: merge the partials
per key in state-key order (numpy for integer keys, ``_keyorder.py``; else ``group_by`` again and
a sort of the encoded keys), read the state of every distinct key with one sorted
``multi_get``, combine with numpy, write the new states, commit, and emit one row per key
updated in the batch (the key's aggregates over everything seen so far: Spark's "update"
output, usable with any sink). No Python step runs per key.

State entry per grouping key: ``kg:u16be 'A' enc(grouping key)`` -> one partial-aggregate
record (``_aggregation.py``, shared with the window aggregation).

The module owns the operator: its builder (:func:`aggregate`, which plans the query on the
driver), its task code (``merge_partition`` in the shard's task; ``partial_aggregate`` before
the shuffle is the shared one) and its state reader (:func:`decode`, :func:`typed_rows`: its
entries as ``read_state`` rows). Keys are built through ``_batchkeys.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..runtime import _api, _arrowcompute, _codec, _keys, _layout, _readers, _root, _shard
from ..runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ..runtime._ndarrays import record_bytes
from ..runtime._shard import ShardTask
from . import _aggregation
from ._aggregation import (
    AGG_TAG,
    OUTPUTS,
    AggPlan,
    combine,
    merge_specs,
    output_arrays,
    outputs,
    parse_aggs,
    partial_aggregate,
    plan,
    previous_columns,
    read_records,
    record_columns,
    running_parts,
    state_columns,
    stored_plan,
)
from ._batchkeys import encode_keys, encode_keys_arrow
from ._groupby import group_by
from ._keyorder import grouped_in_key_order

#: The operator kind, as recorded in the state root's descriptor.
KIND = "aggregate"


def merge_partition(task: ShardTask, batches: Iterator[Any], p: AggPlan) -> Iterator[Any]:
    """After the shuffle, in the shard's task: merge partials into state, emit updated keys."""
    import pyarrow as pa

    batches = list(batches)
    if not any(b.num_rows for b in batches):
        return
    t = pa.Table.from_batches(batches).drop_columns([PARTITION_COLUMN])
    g, keys = _groups_in_key_order(t, p)
    db = task.db
    new = combine(read_records(db.multi_get(keys), p, task.url), g, p)
    db.put_many(keys, record_bytes(new))
    task.changed = True

    arrays = [g[c] for c in p.key_columns] + output_arrays(new, p)
    yield from pa.Table.from_arrays(arrays, schema=p.output_schema).to_batches()


def _groups_in_key_order(t: Any, p: AggPlan) -> tuple[Any, list[bytes]]:
    """The partials of ``t`` merged per grouping key (``merge_specs``), sorted by their state
    keys, and those keys: sorted, so multi_get's sort finds one run and SSTs are probed in key
    order. Integer keys are grouped and ordered by numpy (``_keyorder``), other keys by
    ``group_by`` then a sort of their encodings."""
    g = grouped_in_key_order(t, p.key_columns, KG_COLUMN, merge_specs(p))
    if g is not None:
        return g, encode_keys_arrow(g[KG_COLUMN], [g[c] for c in p.key_columns]).to_pylist()
    g = group_by(t, [*p.key_columns, KG_COLUMN], merge_specs(p))
    encoded = encode_keys_arrow(g[KG_COLUMN], [g[c] for c in p.key_columns])
    if encoded is None:
        return g, encode_keys(g[KG_COLUMN].to_pylist(),
                              [g[c].to_pylist() for c in p.key_columns])
    # Sorted in C++ (_arrowcompute: a fresh worker's first batch does not import
    # pyarrow.compute).
    order = _arrowcompute.sort_indices(encoded)
    return _arrowcompute.take(g, order), _arrowcompute.take(encoded, order).to_pylist()


# --- driver: the query plan ------------------------------------------------------------------

@_api.root_parameters
def aggregate(
    df: Any,
    key_columns: Sequence[str] | str,
    aggs: Sequence[str] | Mapping[str, str],
    state_url: str,
    num_shards: int,
    *,
    key_groups: int = _layout.DEFAULT_KEY_GROUPS,
    take_over: bool = False,
    settings: Any = None,
    reset: bool | None = None,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """Keyed running aggregation (count, sum, min, max, avg) of a streaming DataFrame.

    The counterpart of ``df.groupBy(keys).agg(...)`` in update mode, vectorized end to end: a
    partial aggregation per input partition before the shuffle, then per shard one sorted
    ``multi_get`` of the batch's keys, numpy arithmetic and one write per key. Each micro-batch
    emits one row per key that received rows in that batch, with its aggregates over
    everything seen so far, so any sink works (append to files, ``foreachBatch`` upserts, ...).

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        A streaming DataFrame.
    key_columns : str or list of str
        The grouping key columns.
    aggs : list of str or dict of str to str
        Aggregates such as ``["count", "sum(amount)", "avg(amount)"]`` (output columns named
        like the expressions, ``count`` for the row count), or ``{"name": "expr"}``. Functions:
        ``count`` / ``count(*)`` (rows), ``count(col)`` (non-null values), ``sum``, ``min``,
        ``max``, ``avg`` of integral or floating-point columns; nulls are ignored as in Spark.
    state_url : str
        Root URL of this operator's state (one operator per root).
    num_shards : int
        Number of shards (Spark partitions of the operator). Restarting the query with
        another number rescales without moving state (see ``docs/spark.md``, Rescaling).
    {root_parameters}

    Returns
    -------
    pyspark.sql.DataFrame
        Streaming DataFrame: the key columns, then one column per aggregate. ``count`` is
        ``long``; ``sum`` is ``long`` for integral and ``double`` for floating columns; ``avg`` is
        ``double``; ``min``/``max`` keep the column's type.

    Examples
    --------
    >>> import silt_spark
    >>> tx = spark.readStream.schema("card string, amount double").parquet("/data/tx")
    >>> totals = silt_spark.aggregate(
    ...     tx, ["card"], ["count", "sum(amount)", "max(amount)"],
    ...     state_url="file:///data/state/totals", num_shards=4)
    >>> query = (totals.writeStream.foreachBatch(lambda out, batch_id: out.show())
    ...          .option("checkpointLocation", "/data/chk/totals").start())
    """
    keys = _api.key_list(key_columns, df)
    parsed = parse_aggs(aggs)
    plan(df.schema, keys, parsed)  # arguments checked before any state is touched
    spec = _api.operator_spec(
        KIND, state_url, num_shards, key_groups, take_over, settings, df=df, reset=reset,
        storage_options=storage_options,
    )
    previous = previous_columns(spec, KIND)
    p, partial_struct, output_struct = plan(df.schema, keys, parsed, previous, state_url)
    spec = _root.ensure_descriptor(spec, {
        "key_columns": _api.key_types(df, keys),
        "state_columns": state_columns(p),
        OUTPUTS: outputs(p, output_struct),
    }, _api.PINNED)
    record_columns(spec, previous, p)
    _root.refresh_descriptor(spec, {OUTPUTS: outputs(p, output_struct)})

    def partial_fn(batches: Any) -> Any:
        return partial_aggregate(batches, p)

    def process(task: _shard.ShardTask, batches: Any) -> Any:
        return merge_partition(task, batches, p)

    needed = list(dict.fromkeys([*keys, *p.value_columns]))
    partials = df.select(*needed).mapInArrow(partial_fn, partial_struct)
    return _api.shard_stage(_api.route(partials, keys, spec), df, spec, process, output_struct)


# --- read-back: read_state ----------------------------------------------------------------


def typed_rows(items: Any, desc: dict[str, Any], url: str, schema: Any) -> Any:
    """``read_state(state_name="aggregate")`` of one shard: a pyarrow table of ``schema`` (the
    key columns, each aggregate exactly as the operator emits it, by :func:`output_arrays` on
    the stored records, and ``shard_version``); ``None`` when the shard holds no group."""
    import pyarrow as pa

    gkeys, values, versions = [], [], []
    for key, value, _, ver in items:
        if _keys.tag_of(key) == AGG_TAG:
            gkeys.append(_codec.decode(_keys.body(key)))
            values.append(value)
            versions.append(ver)
    if not values:
        return None
    nk = len(desc.get("key_columns") or [["key", "string"]])
    p = stored_plan(desc, pa.schema(list(schema)[:-1]))
    arrays = [pa.array([k[j] for k in gkeys], type=schema.field(j).type) for j in range(nk)]
    arrays += output_arrays(read_records(values, p, url), p)
    arrays.append(pa.array(versions, pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema)


def decode(items: Any, state_columns: list[list[str]] | None) -> Any:
    """``read_state``'s rows of this operator: ``(key tuple, state, map_key, value,
    expires_at_ms, version)`` per live entry of ``items`` (``(key, value, expires_at_ms,
    version)`` of one shard)."""
    parts = running_parts(state_columns)
    for key, value, expiry, ver in items:
        if _keys.tag_of(key) != AGG_TAG:
            continue
        gkey = _codec.decode(_keys.body(key))
        yield gkey, "aggregate", None, _codec.to_json(parts(value)), expiry, ver


_readers.register(_readers.StateReader(
    KIND, decode, states=("aggregate",),
    typed_columns=lambda desc, state_name: _aggregation.typed_columns(desc),
    typed_rows=lambda items, desc, root, schema, state_name: typed_rows(items, desc, root, schema),
))
