"""The typed read of a stream-stream join's buffered rows (``read_state(state_name="left" |
"right")``): each side's rows under that side's own column names, the key columns first (as
that side names them), then the row's other columns, its event time and whether the other
side matched it yet. The operator (``_join``) records what this needs in the root's
descriptor (:data:`~silt_spark.operators.join._probe.SIDE_TYPES`,
:data:`~silt_spark.operators.join._probe.JOIN_KEYS`)."""

from __future__ import annotations

from typing import Any

from silt.errors import InvalidArgumentError

from ...runtime import _codec, _keys, _readers, _rowcodec
from ._buffers import JOIN_KEYS, JOIN_TAG, KIND, RIGHT, SIDE_TYPES, SIDES, split_row_key


def side_keys(desc: dict[str, Any], state_name: str) -> list[list[str]]:
    """The join key columns ``[name, type]`` as side ``state_name`` names them."""
    keys = desc.get("key_columns") or []
    names = (desc.get(JOIN_KEYS) or {}).get(state_name) or [n for n, _ in keys]
    return [[str(n), str(t)] for n, (_, t) in zip(names, keys)]


def _row_columns(desc: dict[str, Any], state_name: str) -> list[tuple[int, str, str]]:
    """``(index in the buffered row, read name, type)`` of each column of side
    ``state_name``'s rows that the typed read shows after the key columns: every column but
    the side's key columns (their values are the key's), under the side's own name; a name
    the read adds after them (``event_time``, ``matched``, ``shard_version``; compared
    without case, as Spark does) is prefixed ``row_`` until it is free."""
    sides = desc.get(SIDE_TYPES)
    if sides is None:
        raise InvalidArgumentError(
            "this join's state root was written before silt_spark recorded its input types: "
            "restart the query once with this version, or read_state(raw=True) for the JSON "
            "form"
        )
    keys = side_keys(desc, state_name)
    key_names = {n for n, _ in keys}
    taken = {n.lower() for n, _ in keys} | {"event_time", "matched", "shard_version"}
    out = []
    for i, (n, t) in enumerate(sides[state_name]):
        name = str(n)
        if name in key_names:
            continue
        while name.lower() in taken:
            name = f"row_{name}"
        taken.add(name.lower())
        out.append((i, name, str(t)))
    return out


def typed_columns(desc: dict[str, Any], state_name: str) -> list[tuple[str, str]]:
    """``read_state(state_name="left" | "right")``'s columns after the join key columns (as
    :func:`side_keys` names them) and before ``shard_version``: the buffered row's other
    columns as that side's input names them (:func:`_row_columns`), ``event_time`` (the
    row's, as a timestamp; null without a time range) and ``matched`` (whether a row of the
    other side matched it yet: an outer join emits the unmatched ones with nulls once the
    watermark passes them)."""
    return [*((n, t) for _, n, t in _row_columns(desc, state_name)),
            ("event_time", "timestamp"), ("matched", "boolean")]


def typed_rows(items: Any, desc: dict[str, Any], url: str, schema: Any,
               state_name: str) -> Any:
    """``read_state(state_name="left" | "right")`` of one shard: a pyarrow table of ``schema``
    per buffered row of that side; ``None`` when there is none."""
    import pyarrow as pa

    side = SIDES.index(state_name)
    gkeys, times, matched, values, versions = [], [], [], [], []
    for key, value, _, ver in items:
        if _keys.tag_of(key) != JOIN_TAG or key[_keys.BODY_AT] != side:
            continue
        _, _, enc_key, time_us, _ = split_row_key(key)
        gkeys.append(_codec.decode(enc_key))
        times.append(time_us if desc["join"].get("bucket_us") is not None else None)
        matched.append(value[0] == 1)
        values.append(value)
        versions.append(ver)
    if not values:
        return None
    nk = len(desc.get("key_columns") or [])
    shown = _row_columns(desc, state_name)
    nrow = len(shown)
    fields = list(schema)
    # The buffered row's Arrow types, by position: a key column's is its key field's, any
    # other column's its field after the keys.
    types: dict[int, Any] = {i: f.type for (i, _, _), f in zip(shown, fields[nk:nk + nrow])}
    key_at = {n: j for j, (n, _) in enumerate(side_keys(desc, state_name))}
    for i, (n, _) in enumerate(desc[SIDE_TYPES][state_name]):
        if i not in types:
            types[i] = fields[key_at[str(n)]].type
    row_schema = pa.schema([pa.field(f"c{i}", types[i]) for i in range(len(types))])
    cols = _rowcodec.decode_tuples(_rowcodec.Rows.from_list(values), row_schema, skip=1)
    arrays = [pa.array([k[j] for k in gkeys], type=fields[j].type) for j in range(nk)]
    arrays += [cols[i] if cols[i].type == f.type else cols[i].cast(f.type)
               for (i, _, _), f in zip(shown, fields[nk:nk + nrow])]
    arrays += [pa.array(times, pa.int64()).cast(fields[nk + nrow].type),
               pa.array(matched, pa.bool_()), pa.array(versions, pa.int64())]
    return pa.Table.from_arrays(arrays, schema=schema)


def decode(items: Any, state_columns: list[list[str]] | None) -> Any:
    """``read_state``'s rows of this operator: per buffered row, ``(join key, "left"|"right",
    map_key, value, expires_at_ms, version)`` with ``map_key`` the JSON of ``[event time us,
    seq]`` and ``value`` the JSON of ``{"matched": bool, "row": [...]}``."""
    for key, value, expiry, ver in items:
        if _keys.tag_of(key) != JOIN_TAG or key[_keys.BODY_AT] > RIGHT:
            continue
        side, _, enc_key, time_us, seq = split_row_key(key)
        row = {"matched": value[0] == 1, "row": list(_codec.decode(value[1:]))}
        yield (_codec.decode(enc_key), SIDES[side], _codec.to_json([time_us, seq]),
               _codec.to_json(row), expiry, ver)


_readers.register(_readers.StateReader(
    KIND, decode, states=SIDES, typed_columns=typed_columns, typed_rows=typed_rows,
    key_columns=side_keys,
))
