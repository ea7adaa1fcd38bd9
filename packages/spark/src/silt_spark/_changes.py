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

from silt.errors import InvalidArgumentError
from silt.tierkit import public_url

from . import _layout, _read, _shard, _storage
from .errors import LayoutMismatchError

#: Columns after the key columns.
CHANGE_COLUMNS = (
    ("state", "string"),
    ("map_key", "string"),
    ("change_type", "string"),
    ("old_value", "string"),
    ("new_value", "string"),
    ("shard", "int"),
)


def _sources(spec: _shard.OperatorSpec, shard: int, version: int) -> list[tuple[Any, int, int]]:
    """The DBs holding shard ``shard``'s key groups at ``<= version``, with their ranges."""
    import silt

    first, last = _layout.shard_range(shard, spec.num_shards, spec.key_groups)
    db = silt.open(spec.shard_url(shard), at_most=version, settings=spec.silt_settings(),
                   storage_options=spec.storage_options)
    if db.version is not None:
        return [(db, first, last)]
    db.close()
    out: list[tuple[Any, int, int]] = []
    index = [g for g, _ in spec.layouts].index(spec.generation)
    if index > 0:
        _shard._previous_sources(spec, index - 1, first, last, version, out)
    return out


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


def shard_changes(spec: _shard.OperatorSpec, shard: int, start_version: int,
                  end_version: int) -> list[tuple[bytes, bytes | None, bytes | None]]:
    """``(key, old value, new value)`` of every entry of the shard that differs between the
    two versions (``None``: absent), in key order."""
    old = _sources(spec, shard, start_version)
    new = _sources(spec, shard, end_version)
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
    spark: Any, state_url: str, start_version: int, end_version: int, *,
    storage_options: dict[str, str] | None = None,
) -> Any:
    """What the state of a silt_spark operator changed from micro-batch ``start_version`` to
    ``end_version`` (each shard at its latest version ``<=`` each), as a DataFrame.

    Computed from the manifests' deltas (the SSTs added or removed between the versions), never
    by comparing the two snapshots: the cost follows the changes, not the state's size.
    ``storage_options``: object-store options for the root, as for :func:`read_state`.

    Returns
    -------
    pyspark.sql.DataFrame
        The key columns (as :func:`silt_spark.read_state` gives them), then ``state`` and
        ``map_key`` (as in ``read_state``), ``change_type`` (``"insert"``, ``"update"`` or
        ``"delete"``), ``old_value`` and ``new_value`` (``read_state``'s JSON ``value`` at
        each version; null when absent) and ``shard``. An operator's internal index entries
        (timer and expiry indexes, join bucket counts) are not shown, as in ``read_state``.

    Examples
    --------
    >>> changes = silt_spark.read_changes(spark, "file:///data/state/counts", 41, 42)
    >>> changes.filter("change_type = 'delete'").show()
    """
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    storage = _storage.resolve(storage_options, spark)
    desc = _shard.read_descriptor(state_url, storage)
    if desc is None:
        raise LayoutMismatchError(f"{public_url(state_url)!r} is not a silt_spark state root "
                                  f"(no {_shard.DESCRIPTOR})")
    spec = _read._spec(desc, state_url, storage)
    if start_version is None or end_version is None:
        raise InvalidArgumentError("read_changes needs both start_version and end_version")
    a, b = _read._layout_version(start_version), _read._layout_version(end_version)
    if a >= b:
        raise InvalidArgumentError(
            f"start_version ({start_version}) must be below end_version ({end_version})")
    _read.check_version(spec, end_version)
    key_columns = desc.get("key_columns") or [["key", "string"]]
    json_key = "key_columns" not in desc
    ddl = ", ".join(f"`{n}` {t}" for n, t in key_columns)
    ddl += ", " + ", ".join(f"`{n}` {t}" for n, t in CHANGE_COLUMNS)
    schema = T.DataType.fromDDL(ddl)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    kind = desc["operator"]
    state_columns = desc.get("state_columns", desc.get("state_schemas"))
    nkeys = len(key_columns)

    def decode(key: bytes, value: bytes | None) -> list[tuple]:
        if value is None:
            return []
        return list(_read.decode_entries(kind, [(key, value, None, 0)], state_columns))

    def read(batches: Any) -> Any:

        for batch in batches:
            for shard in batch.column(0).to_pylist():
                rows = []
                for key, old, new in shard_changes(spec, shard, a, b):
                    olds = {(r[1], r[2]): r for r in decode(key, old)}
                    news = {(r[1], r[2]): r for r in decode(key, new)}
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
