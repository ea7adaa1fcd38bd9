"""``read_state``: an operator's state as a DataFrame, at the latest or any retained version.

One Spark task per shard of the root's current layout reads that shard at the latest version
``<= version`` (a shard of a rescaled layout without such a version is read through the
previous layout's shards, as its first task would), straight from the manifest's SSTs, so the
expiry time of every entry is known. Nothing is written.
"""

from __future__ import annotations

from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError
from silt.tierkit import public_url

from ..errors import LayoutMismatchError, NotAnOperatorRootError, VersionNotFoundError
from ..runtime import _layout, _names, _readers, _root, _sources, _storage
from ..runtime._codec import to_json
from ..runtime._names import DESCRIPTOR_SCHEMAS, PROCESSOR_KIND

#: Columns after the key columns.
STATE_COLUMNS = (
    ("state", "string"),
    ("map_key", "string"),
    ("value", "string"),
    ("expires_at_ms", "bigint"),
    ("shard_version", "bigint"),
)

def decode_entries(
    kind: str, items: Any, state_columns: list[list[str]] | None
) -> Any:
    """``(key tuple, state, map_key, value, expires_at_ms, version)`` per live state entry of
    ``items`` (``(key, value, expires_at_ms, version)``)."""
    return _reader(kind).decode(items, state_columns)


def _reader(kind: str) -> _readers.StateReader:
    """The registered reader of operator kind ``kind``; a kind no operator has is refused."""
    reader = _readers.reader_of(kind)
    if reader is None:
        raise LayoutMismatchError(
            f"the state root's descriptor names operator kind {kind!r}, which this silt_spark "
            f"does not know ({', '.join(_readers.kinds())}): the descriptor is damaged, or the "
            "state was written by a newer silt_spark; upgrade silt_spark"
        )
    return reader


def read_shard(spec: _root.OperatorSpec, shard: int, version: int) -> Any:
    """``(key, value, expires_at_ms or None, shard version)`` of one shard at ``<= version``."""
    import time

    sources = _sources.shard_sources(spec, shard, version)
    try:
        now = int(time.time() * 1000)
        for src, lo, hi in sources:
            start, end = _layout.kg_bounds(lo, hi)
            for key, rec in _sources.manifest_records(src, start, end):
                if rec.__class__ is bytes:
                    yield key, rec, None, src.version
                elif rec is not None and rec[1] > now:
                    yield key, rec[0], rec[1], src.version
    finally:
        for src, _, _ in sources:
            src.close()


def rows_batch(rows: list[tuple], columns: Any, nkeys: int, json_key: bool,
               arrow_schema: Any) -> Any:
    """One Arrow batch of ``(key tuple, *values)`` rows: the key columns (one JSON ``key``
    column for roots created before key types were recorded), then one column per entry of
    ``columns`` (``(name, type)``) from the values in order."""
    import pyarrow as pa

    cols: list[list[Any]] = [[] for _ in range(nkeys)]
    for gkey, *_ in rows:
        if json_key:
            cols[0].append(to_json(list(gkey)))
        else:
            for j in range(nkeys):
                cols[j].append(gkey[j])
    arrays = [pa.array(c, type=arrow_schema.field(j).type) for j, c in enumerate(cols)]
    for j, (name, _) in enumerate(columns):
        arrays.append(pa.array([r[1 + j] for r in rows], type=arrow_schema.field(name).type))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def read_state(
    spark: Any, state_url: str, version: int | None = None, state_name: str | None = None,
    *, raw: bool = False, storage_options: dict[str, str] | None = None,
) -> Any:
    """The state of a silt_spark operator as a DataFrame, for inspection and time travel.

    Typed by default wherever the state's schema is known: an aggregate's, a window
    aggregate's and a deduplication's state (each operator has one) read as its typed
    ``state_name`` would; a join's side or a processor's variable by its ``state_name``.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        Runs one task per shard, in parallel.
    state_url : str
        The operator's ``state_url``.
    version : int, optional
        A micro-batch id: each shard is read at its latest version ``<= version`` (shards commit
        only when their state changes). Default: the latest state. A version no shard
        committed (a micro-batch that changed no state, one not run yet, or one removed by GC)
        raises :class:`silt_spark.errors.VersionNotFoundError` naming the versions there are.
    state_name : str, optional
        Only this state, typed (see Returns): a built-in operator's state by its name, or a
        :func:`silt_spark.transform_with_state` variable declared with a schema (a variable
        without one keeps the JSON columns). Without it, an aggregate's, window aggregate's or
        deduplication's root reads its one state typed; a join's or a processor's root, whose
        states have different schemas, reads all of them in the JSON form.
    raw : bool, default False
        The JSON form (below) whatever the root, every state or only ``state_name``'s: the
        same columns for every operator, for tools that read any root.
    storage_options : dict of str, optional
        Object-store options for the state root, credentials included, as for the operator
        builders (``spark.silt.storage.<name>`` in the session's conf sets them too).

    Returns
    -------
    pyspark.sql.DataFrame
        The JSON form (``raw=True``, a join's or processor's root without ``state_name``, a
        processor variable declared without a schema, and roots created before key types were
        recorded): the key columns (typed as in the query; a JSON ``key`` column for roots
        created before key types were recorded), then ``state`` (the state variable's name,
        ``"__timer__"`` for a timer, ``"aggregate"`` for :func:`silt_spark.aggregate`,
        ``"window"`` for an open window of :func:`silt_spark.window_aggregate`, ``"seen"`` for a
        key remembered by :func:`silt_spark.deduplicate`, ``"left"`` or ``"right"`` for a row
        buffered by :func:`silt_spark.join`), ``map_key`` (JSON: a map state's key; a window's
        start in ms), ``value`` (JSON: a value state's tuple as a list, a list state's list, a
        timer's ms, an aggregate's or window's running parts, the micro-batch that first saw a
        deduplicated key), ``expires_at_ms`` (TTL, else null) and ``shard_version`` (the version
        the row was read from).

        With ``state_name`` naming a built-in operator's state (``"aggregate"``,
        ``"window"``, ``"seen"``, ``"left"``/``"right"``, a processor's ``"__timer__"``), or
        an aggregate's, window's or deduplication's root without it: typed columns, the key
        columns, then the state as the operator shows it (an aggregate's output columns; a
        window's ``window_start``, ``window_end`` (timestamps) and aggregates; a deduplicated
        key's ``first_batch_id`` and ``expires_at``; a timer's ``timer``), then
        ``shard_version`` (docs/spark.md, "Reading state"). A join's side reads as that side
        names its columns: its key columns, its other columns, then ``event_time``,
        ``matched`` and ``shard_version``. A root created before key types
        were recorded is not read typed (:class:`silt.errors.InvalidArgumentError`).

        With ``state_name`` naming a processor variable declared with a schema: the key
        columns, then (map state) the map key's fields, then the value's fields in the
        variable's latest schema (older values converted), each typed as declared, then
        ``expires_at_ms`` and ``shard_version``; one row per value, map entry or list element.
        A field whose name is already taken is prefixed ``map_key_`` or ``value_``.

    Examples
    --------
    >>> import silt_spark
    >>> df = silt_spark.read_state(spark, "file:///data/state/sessions")
    >>> df.filter("state = 'count'").orderBy("user").show()
    >>> before = silt_spark.read_state(spark, "file:///data/state/sessions", version=41)
    """

    storage = _storage.resolve(storage_options, spark)
    desc = _root.read_descriptor(state_url, storage)
    if desc is None:
        raise NotAnOperatorRootError(
            f"{public_url(state_url)!r} is not the state root of a silt_spark operator (no "
            f"{_names.DESCRIPTOR}): check state_url")
    spec = _root.spec_of(desc, state_url, storage)
    # Arguments are checked before any Spark call.
    at = _layout_version(version)
    if state_name is not None and not isinstance(state_name, str):
        raise InvalidTypeError(f"state_name must be a str, got {type(state_name).__name__}")
    if not isinstance(raw, bool):
        raise InvalidTypeError(f"raw must be True or False, got {type(raw).__name__}")
    if state_name is None and not raw:
        state_name = default_state(desc)
    typed = typed_entry(desc, state_url, state_name)
    builtin = None if raw else builtin_columns(desc, state_url, state_name)
    if version is not None:
        check_version(spec, version)
    key_columns = desc.get("key_columns") or [["key", "string"]]
    if raw:
        typed = None
    elif builtin is not None:
        key_columns = builtin_keys(desc, state_name)
    if typed is not None:
        return _read_typed(spark, spec, at, key_columns, state_name, typed)
    if builtin is not None:
        return _read_builtin(spark, spec, at, desc, key_columns, state_name, builtin)
    json_key, schema, arrow_schema, kind, state_columns, nkeys = json_layout(
        desc, key_columns, STATE_COLUMNS)

    def read(batches: Any) -> Any:

        for b in batches:
            for shard in b.column(0).to_pylist():
                rows = list(decode_entries(kind, read_shard(spec, shard, at), state_columns))
                if state_name is not None:
                    rows = [r for r in rows if r[1] == state_name]
                if rows:
                    yield rows_batch(rows, STATE_COLUMNS, nkeys, json_key, arrow_schema)

    n = spec.num_shards
    shards = spark.range(0, n, 1, n).selectExpr("cast(id as int) as shard")
    return shards.mapInArrow(read, schema)


def _states(kind: str) -> tuple[str, ...]:
    """The states of operator ``kind`` that ``read_state(state_name=...)`` reads typed."""
    reader = _readers.reader_of(kind)
    return reader.states if reader is not None else ()


def default_state(desc: dict[str, Any]) -> str | None:
    """The state ``read_state`` reads typed when not told which: the one state of an
    aggregate's, window aggregate's or deduplication's root whose key types are recorded;
    ``None`` (the JSON form of every state) for others."""
    names = _states(desc["operator"])
    if desc["operator"] == PROCESSOR_KIND or len(names) != 1 or "key_columns" not in desc:
        return None
    return names[0]


def builtin_keys(desc: dict[str, Any], state_name: str) -> list[list[str]]:
    """The key columns (name, type) of built-in state ``state_name``'s typed rows: the
    query's, or for a join's side the join key as that side names it."""
    reader = _reader(desc["operator"])
    if reader.key_columns is not None:
        return reader.key_columns(desc, state_name)
    return desc["key_columns"]


def builtin_columns(
    desc: dict[str, Any], state_url: str, state_name: str | None
) -> list[tuple[str, str]] | None:
    """The typed columns of a built-in operator's state ``state_name`` (after the key columns,
    before ``shard_version``), or ``None`` when ``state_name`` is not one (a processor's own
    variables are :func:`typed_entry`'s); a name the operator does not have is refused."""
    kind = desc["operator"]
    names = _states(kind)
    if state_name is None or (kind == PROCESSOR_KIND and state_name not in names):
        return None
    if state_name not in names:
        raise InvalidArgumentError(
            f"the {kind} operator at {public_url(state_url)!r} has no state {state_name!r}; "
            f"its state is {', '.join(map(repr, names))} (or omit state_name for all of it "
            "as JSON)"
        )
    if "key_columns" not in desc:
        raise InvalidArgumentError(
            f"the {kind} operator at {public_url(state_url)!r} was written before silt_spark "
            "recorded its key types, so its state cannot be read typed: omit state_name for "
            "the JSON form (one JSON key column)"
        )
    typed_columns = _reader(kind).typed_columns
    assert typed_columns is not None  # a reader with typed states has them
    return typed_columns(desc, state_name)


def _read_builtin(
    spark: Any, spec: _root.OperatorSpec, at: int, desc: dict[str, Any],
    key_columns: list[list[str]], state_name: str, columns: list[tuple[str, str]],
) -> Any:
    """``read_state`` of a built-in operator's state, typed (see :func:`read_state`)."""
    schema, arrow_schema = builtin_schema(key_columns, columns)
    root = spec.root

    def read(batches: Any) -> Any:
        for b in batches:
            for shard in b.column(0).to_pylist():
                table = builtin_table(read_shard(spec, shard, at), desc, root, arrow_schema,
                                      state_name)
                if table is not None and table.num_rows:
                    yield from table.to_batches()

    n = spec.num_shards
    shards = spark.range(0, n, 1, n).selectExpr("cast(id as int) as shard")
    return shards.mapInArrow(read, schema)


def builtin_schema(key_columns: list[list[str]], columns: list[tuple[str, str]]) -> Any:
    """``(Spark schema, Arrow schema)`` of a built-in state's typed rows: the key columns,
    ``columns`` (:func:`builtin_columns`), then ``shard_version``."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    all_columns = [*[(n, t) for n, t in key_columns], *columns, ("shard_version", "bigint")]
    schema = T.DataType.fromDDL(", ".join(f"`{n}` {t}" for n, t in all_columns))
    return schema, to_arrow_schema(schema, timezone="UTC")


def builtin_table(items: Any, desc: dict[str, Any], root: str, schema: Any,
                  state_name: str) -> Any:
    """The entries of ``items`` (``(key, value, expires_at_ms, version)``) that belong to
    built-in state ``state_name``, typed: a pyarrow table of ``schema`` (from
    :func:`builtin_schema`), one row per entry in the order of ``items``, each entry's
    ``version`` as its ``shard_version``; ``None`` when there is none."""
    typed_rows = _reader(desc["operator"]).typed_rows
    assert typed_rows is not None  # a reader with typed states has them
    return typed_rows(items, desc, root, schema, state_name)


def typed_entry(
    desc: dict[str, Any], state_url: str, state_name: str | None
) -> dict[str, Any] | None:
    """The schema registry entry of processor variable ``state_name`` when it is typed (its
    rows then get typed columns), else ``None``; an unknown variable is refused, naming the
    variables there are."""
    if (state_name is None or desc["operator"] != PROCESSOR_KIND
            or state_name in _states(PROCESSOR_KIND)):
        return None
    registry = desc.get(DESCRIPTOR_SCHEMAS)
    if registry is None:
        return None  # a root from before the registry: the JSON form
    entry = registry.get(state_name)
    if entry is None:
        known = sorted(n for n, e in registry.items() if e.get("kind"))
        raise InvalidArgumentError(
            f"the processor at {public_url(state_url)!r} has no state "
            f"variable {state_name!r}; its variables are {known}"
        )
    return entry if entry.get("versions") and entry.get("kind") else None


def _read_typed(
    spark: Any, spec: _root.OperatorSpec, at: int, key_columns: list[list[str]],
    state_name: str, entry: dict[str, Any],
) -> Any:
    """``read_state`` of one typed processor variable (see :func:`read_state`)."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    taken = {n for n, _ in key_columns}
    columns = [(n, t) for n, t in key_columns]
    map_key = [f[:2] for f in entry.get("key") or ()] if entry["kind"] == "map" else []
    for prefix, fields in (("map_key_", map_key), ("value_", [f[:2] for f in
                                                             entry["versions"][-1]])):
        for n, t in fields:
            name = prefix + n if n in taken else n
            taken.add(name)
            columns.append((name, t))
    columns += [("expires_at_ms", "bigint"), ("shard_version", "bigint")]
    schema = T.DataType.fromDDL(", ".join(f"`{n}` {t}" for n, t in columns))
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    registry = {state_name: entry}
    decode_typed = _reader(PROCESSOR_KIND).decode_typed
    assert decode_typed is not None  # the processor's variables are typed
    nmap = len(map_key)

    def rows_of(shard: int) -> Any:
        items = read_shard(spec, shard, at)
        decoded = decode_typed(items, registry, state_name)
        for gkey, _, sub, value, expiry, ver, _ in decoded:
            head = (*gkey, *(sub if nmap else ()))
            if isinstance(value, list):  # a list stored whole by older versions
                for item in value:
                    yield (*head, *item, expiry, ver)
            else:
                yield (*head, *value, expiry, ver)

    def read(batches: Any) -> Any:
        import pyarrow as pa

        for b in batches:
            for shard in b.column(0).to_pylist():
                rows = list(rows_of(shard))
                if rows:
                    cols = list(zip(*rows))
                    yield pa.RecordBatch.from_arrays(
                        [pa.array(c, type=f.type) for c, f in zip(cols, arrow_schema)],
                        schema=arrow_schema,
                    )

    n = spec.num_shards
    shards = spark.range(0, n, 1, n).selectExpr("cast(id as int) as shard")
    return shards.mapInArrow(read, schema)


def _ranges(versions: list[int]) -> str:
    """``0-3, 7, 9-12``: ascending versions as runs."""
    runs: list[list[int]] = []
    for v in versions:
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def check_version(spec: _root.OperatorSpec, version: int) -> None:
    """Refuse a ``version`` that no shard of the root committed (a micro-batch that changed
    no state, one not run yet, or one removed by GC), naming the versions there are."""
    versions = _sources.root_versions(spec)
    if version in versions:
        return
    there = f"the versions there are: {_ranges(versions)}" if versions else "it has none"
    raise VersionNotFoundError(
        f"{public_url(spec.root)!r} has no state version {version} (no shard committed it: "
        f"a micro-batch that changed no state, not run yet, or removed by GC); {there}"
    )


def _layout_version(version: int | None) -> int:
    from silt import paths

    if version is None:
        return paths.MAX_VERSION
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidTypeError(
            f"version must be a micro-batch id (an int >= 0), got {type(version).__name__}")
    if version < 0:
        raise InvalidArgumentError(f"version must be a micro-batch id (an int >= 0), got {version}")
    return version


def json_layout(desc: dict[str, Any], key_columns: list[list[str]],
                columns: Any) -> tuple[bool, Any, Any, str, Any, int]:
    """How an untyped reader (``read_state``'s JSON rows, ``read_changes``) lays out a root's
    entries: whether the key is one JSON string (a root that recorded no key columns), the
    Spark and Arrow schemas of the key columns followed by ``columns`` (name, DDL type), the
    operator kind, the root's recorded state columns (a processor root: its schema registry,
    which its decode takes instead) and the number of key columns."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    json_key = "key_columns" not in desc
    ddl = ", ".join(f"`{n}` {t}" for n, t in key_columns)
    ddl += ", " + ", ".join(f"`{n}` {t}" for n, t in columns)
    schema = T.DataType.fromDDL(ddl)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    state_columns = desc.get("state_columns", desc.get("state_schemas"))
    return json_key, schema, arrow_schema, desc["operator"], state_columns, len(key_columns)
