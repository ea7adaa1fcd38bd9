"""``read_changes``: what an operator's state changed between two micro-batches.

One Spark task per shard of the root's current layout opens the shard at both versions (each
the latest version ``<=`` it; a shard of a rescaled layout without such a version is read
through the previous layout's shards, as :func:`silt_spark.read_state` does) and asks the core
for the keys that may differ (:meth:`silt.DB.changed_keys`: the keys of the SSTs one version
lists and the other does not, and of range deletes made since). Only those SSTs are read, so
the cost follows the changes, not the state. Each candidate's value is read at both versions;
keys whose value is the same (rewritten by a compaction) are dropped, and the rest decode as
``read_state`` rows.
"""

from __future__ import annotations

from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError
from silt.tierkit import public_url

from ..errors import LayoutMismatchError
from ..runtime import _layout, _names, _root, _sources, _storage
from . import _read

#: Columns after the key columns.
CHANGE_COLUMNS = (
    ("state", "string"),
    ("map_key", "string"),
    ("change_type", "string"),
    ("old_value", "string"),
    ("new_value", "string"),
    ("shard", "int"),
)


def _values(sources: list[tuple[Any, int, int]], keys: list[bytes]) -> dict[bytes, bytes]:
    """The live values of ``keys`` (sorted) in ``sources`` (each serves its key groups)."""
    out: dict[bytes, bytes] = {}
    for db, lo, hi in sources:
        start, end = _layout.kg_bounds(lo, hi)
        mine = [k for k in keys if k >= start and (end is None or k < end)]
        for k, v in zip(mine, db.multi_get(mine)):
            if v is not None:
                out[k] = v
    return out


def shard_changes(spec: _root.OperatorSpec, shard: int, start_version: int,
                  end_version: int) -> list[tuple[bytes, bytes | None, bytes | None]]:
    """``(key, old value, new value)`` of every entry of the shard that differs between the
    two versions (``None``: absent), in key order."""
    old = _sources.shard_sources(spec, shard, start_version)
    new = _sources.shard_sources(spec, shard, end_version)
    try:
        if not new and not old:
            return []
        first, last = _layout.shard_range(shard, spec.num_shards, spec.key_groups)
        start, end = _layout.kg_bounds(first, last)
        keys: set[bytes] = set()
        for db, _, _ in new:
            keys.update(db.changed_keys([d for d, _, _ in old], start, end))
        if not new:  # nothing at the end version: every old key is gone
            for db, lo, hi in old:
                keys.update(k for k, _ in db.scan(*_layout.kg_bounds(lo, hi)))
        ordered = sorted(keys)
        before, after = _values(old, ordered), _values(new, ordered)
        return [(k, before.get(k), after.get(k)) for k in ordered
                if before.get(k) != after.get(k)]
    finally:
        for db, _, _ in {id(s[0]): s for s in (*old, *new)}.values():
            db.close()


def read_changes(
    spark: Any, state_url: str, start_version: int, end_version: int,
    state_name: str | None = None, *, storage_options: dict[str, str] | None = None,
) -> Any:
    """What the state of a silt_spark operator changed from micro-batch ``start_version`` to
    ``end_version`` (each shard at its latest version ``<=`` each), as a DataFrame.

    Computed from the manifests' deltas (the SSTs added or removed between the versions), never
    by comparing the two snapshots: the cost follows the changes, not the state's size.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        Runs one task per shard, in parallel.
    state_url : str
        The operator's ``state_url``.
    start_version, end_version : int
        Micro-batch ids, ``start_version < end_version``; ``end_version`` must be a version
        some shard committed.
    state_name : str, optional
        Only this state. A built-in operator's state (``"aggregate"``, ``"window"``,
        ``"seen"``, ``"left"``/``"right"``, a processor's ``"__timer__"``) comes typed, as
        :func:`silt_spark.read_state` types it (see Returns); a processor's own variable keeps
        the JSON columns, its rows only.
    storage_options : dict of str, optional
        Object-store options for the root, as for :func:`silt_spark.read_state`.

    Returns
    -------
    pyspark.sql.DataFrame
        The key columns (as :func:`silt_spark.read_state` gives them), then ``state`` and
        ``map_key`` (as in ``read_state``), ``change_type`` (``"insert"``, ``"update"`` or
        ``"delete"``), ``old_value`` and ``new_value`` (``read_state``'s JSON ``value`` at
        each version; null when absent) and ``shard``. An operator's internal index entries
        (timer and expiry indexes, join bucket counts) are not shown, as in ``read_state``.

        With ``state_name`` naming a built-in operator's state: the key columns,
        ``change_type``, then ``old_value`` and ``new_value`` as structs of the typed columns
        ``read_state(..., state_name=...)`` gives between the keys and ``shard_version`` (an
        aggregate's output columns, a window's bounds and aggregates...; null when absent),
        then ``shard``. An entry whose typed columns are equal at both versions is not shown.

    Examples
    --------
    >>> changes = silt_spark.read_changes(spark, "file:///data/state/counts", 41, 42)
    >>> changes.filter("change_type = 'delete'").show()
    >>> totals = silt_spark.read_changes(spark, "file:///data/state/counts", 41, 42,
    ...                                  state_name="aggregate")
    >>> totals.select("user", "change_type", "old_value.count", "new_value.count").show()
    """

    storage = _storage.resolve(storage_options, spark)
    desc = _root.read_descriptor(state_url, storage)
    if desc is None:
        raise LayoutMismatchError(f"{public_url(state_url)!r} is not a silt_spark state root "
                                  f"(no {_names.DESCRIPTOR})")
    spec = _root.spec_of(desc, state_url, storage)
    if start_version is None or end_version is None:
        raise InvalidArgumentError("read_changes needs both start_version and end_version")
    a, b = _read._layout_version(start_version), _read._layout_version(end_version)
    if a >= b:
        raise InvalidArgumentError(
            f"start_version ({start_version}) must be below end_version ({end_version})")
    if state_name is not None and not isinstance(state_name, str):
        raise InvalidTypeError(f"state_name must be a str, got {type(state_name).__name__}")
    _read.typed_entry(desc, state_url, state_name)  # an unknown variable is refused
    builtin = _read.builtin_columns(desc, state_url, state_name)
    _read.check_version(spec, end_version)
    key_columns = desc.get("key_columns") or [["key", "string"]]
    if builtin is not None:
        return _read_builtin_changes(spark, spec, a, b, desc,
                                     _read.builtin_keys(desc, state_name), state_name, builtin)
    json_key, schema, arrow_schema, kind, state_columns, nkeys = _read.json_layout(
        desc, key_columns, CHANGE_COLUMNS)

    def decode(key: bytes, value: bytes | None) -> list[tuple]:
        if value is None:
            return []
        return list(_read.decode_entries(kind, [(key, value, None, 0)], state_columns))

    def read(batches: Any) -> Any:

        for batch in batches:
            for shard in batch.column(0).to_pylist():
                rows = []
                for key, old, new in shard_changes(spec, shard, a, b):
                    olds = {(r[1], r[2]): r for r in decode(key, old)
                            if state_name is None or r[1] == state_name}
                    news = {(r[1], r[2]): r for r in decode(key, new)
                            if state_name is None or r[1] == state_name}
                    for ident in sorted(olds.keys() | news.keys(), key=repr):
                        o, n = olds.get(ident), news.get(ident)
                        if o is not None and n is not None and o[3] == n[3]:
                            continue
                        change = "insert" if o is None else "delete" if n is None else "update"
                        gkey = (n or o)[0]
                        rows.append((gkey, ident[0], ident[1], change,
                                     None if o is None else o[3], None if n is None else n[3],
                                     shard))
                if rows:
                    yield _read.rows_batch(rows, CHANGE_COLUMNS, nkeys, json_key, arrow_schema)

    n = spec.num_shards
    shards = spark.range(0, n, 1, n).selectExpr("cast(id as int) as shard")
    return shards.mapInArrow(read, schema)


def _read_builtin_changes(
    spark: Any, spec: _root.OperatorSpec, a: int, b: int, desc: dict[str, Any],
    key_columns: list[list[str]], state_name: str, columns: list[tuple[str, str]],
) -> Any:
    """``read_changes`` of a built-in operator's state, typed (see :func:`read_changes`)."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    typed_schema, typed_arrow = _read.builtin_schema(key_columns, columns)
    nkeys = len(key_columns)
    value = T.StructType(typed_schema.fields[nkeys:-1])
    schema = T.StructType([
        *typed_schema.fields[:nkeys], T.StructField("change_type", T.StringType()),
        T.StructField("old_value", value), T.StructField("new_value", value),
        T.StructField("shard", T.IntegerType()),
    ])
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    root = spec.root

    def read(batches: Any) -> Any:
        for batch in batches:
            for shard in batch.column(0).to_pylist():
                out = typed_changes(shard_changes(spec, shard, a, b), desc, root, state_name,
                                    typed_arrow, arrow_schema, shard)
                if out is not None:
                    yield out

    n = spec.num_shards
    shards = spark.range(0, n, 1, n).selectExpr("cast(id as int) as shard")
    return shards.mapInArrow(read, schema)


def typed_changes(
    changes: list[tuple[bytes, bytes | None, bytes | None]], desc: dict[str, Any], root: str,
    state_name: str, typed_schema: Any, schema: Any, shard: int,
) -> Any:
    """The typed change rows (a pyarrow batch of ``schema``; ``None`` when there is none) of
    one shard's ``changes`` (:func:`shard_changes`) to built-in state ``state_name``.

    Both sides are typed by :func:`silt_spark.inspect._read.builtin_table`, the code ``read_state``
    uses, which keeps each entry's ``version`` in ``shard_version``: the entries are given
    their position in ``changes`` as version, so each typed row names the change it is from.
    """
    import pyarrow as pa

    nkeys = len(schema) - 4
    tables = []
    for side in (1, 2):
        items = [(c[0], c[side], None, i) for i, c in enumerate(changes) if c[side] is not None]
        table = _read.builtin_table(items, desc, root, typed_schema, state_name) if items \
            else None
        if table is None:
            tables.append(({}, [], []))
            continue
        cols = [c.to_pylist() for c in table.columns]
        at = {i: row for row, i in enumerate(cols[-1])}
        tables.append((at, cols, [c.combine_chunks() for c in table.columns[nkeys:-1]]))
    (old_at, old_cols, old_values), (new_at, new_cols, new_values) = tables
    keys: list[tuple] = []
    kinds: list[str] = []
    old_rows: list[int | None] = []
    new_rows: list[int | None] = []
    for i in sorted(old_at.keys() | new_at.keys()):
        o, n = old_at.get(i), new_at.get(i)
        if o is not None and n is not None and all(
                c[o] == d[n] for c, d in zip(old_cols[nkeys:-1], new_cols[nkeys:-1])):
            continue
        side_cols, row = (new_cols, n) if n is not None else (old_cols, o)
        keys.append(tuple(side_cols[j][row] for j in range(nkeys)))
        kinds.append("insert" if o is None else "delete" if n is None else "update")
        old_rows.append(o)
        new_rows.append(n)
    if not kinds:
        return None
    value_type = schema.field("old_value").type

    def struct(columns: list[Any], rows: list[int | None]) -> Any:
        if not columns:
            return pa.nulls(len(rows), value_type)
        take = pa.array(rows, pa.int64())
        return pa.StructArray.from_arrays(
            [c.take(take) for c in columns], fields=list(value_type),
            mask=pa.array([r is None for r in rows], pa.bool_()))

    arrays = [pa.array([k[j] for k in keys], type=schema.field(j).type) for j in range(nkeys)]
    arrays += [pa.array(kinds, pa.string()), struct(old_values, old_rows),
               struct(new_values, new_rows), pa.array([shard] * len(kinds), pa.int32())]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
