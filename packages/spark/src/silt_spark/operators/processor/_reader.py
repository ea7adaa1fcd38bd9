"""A processor root's entries as ``read_state`` rows: each state variable's entries decoded with
its schema (or ``_codec``'s self-describing encoding), lists gathered, timers named
``__timer__``. Registered for the kind ``processor``.
"""

from __future__ import annotations

from typing import Any

from ...runtime import _codec, _keys, _readers, _schema
from ...runtime._names import DESCRIPTOR_SCHEMAS, PROCESSOR_KIND
from .._varkeys import LIST_ELEMENT, STATE_TAG, TIMER_MARK, _split_name


def decode(items: Any, state_columns: list[list[str]] | None) -> Any:
    """``read_state``'s rows of this operator: ``(key tuple, state, map_key, value,
    expires_at_ms, version)`` per live entry of ``items`` (``(key, value, expires_at_ms,
    version)`` of one shard); a list is one row (its elements as a JSON list, the earliest
    expiry of its elements, the newest version among them)."""
    to_json = _codec.to_json
    lst: list[Any] | None = None  # the list being gathered: [gkey, name, key, items, exp, ver]
    for gkey, name, sub, value, expiry, ver, list_key in decode_typed(items, state_columns):
        if lst is not None and list_key != lst[2]:
            yield lst[0], lst[1], None, to_json(lst[3]), lst[4], lst[5]
            lst = None
        if list_key is not None:
            if lst is None:
                lst = [gkey, name, list_key, [], expiry, ver]
            else:
                if expiry is not None and (lst[4] is None or expiry < lst[4]):
                    lst[4] = expiry
                lst[5] = max(lst[5], ver)
            if sub:
                lst[3].append(value)
            else:
                lst[3].extend(value)
            continue
        if name == "__timer__":
            yield gkey, name, None, str(value), expiry, ver
            continue
        yield gkey, name, to_json(sub) if sub is not None else None, to_json(value), expiry, ver
    if lst is not None:
        yield lst[0], lst[1], None, to_json(lst[3]), lst[4], lst[5]


def decode_typed(items: Any, state_columns: Any, only: str | None = None) -> Any:
    """Each live state entry of ``items`` decoded: ``(key tuple, state name, sub, value,
    expires_at_ms, version, list key)``. ``sub`` is a map entry's key (a tuple), ``True`` for
    one list element, ``None`` otherwise; ``value`` a tuple (a value, map value or list
    element), a list (a list stored whole by older versions) or a timer's ms (state
    ``"__timer__"``); ``list key`` is the entry key of the list an entry belongs to, else
    ``None``. With ``only``, the entries of that state variable only."""
    # A processor root's descriptor has no state columns; read_state gives it the schema
    # registry instead (a dict), to decode typed values.
    codecs = _schema.codecs(state_columns) if isinstance(state_columns, dict) else {}
    for key, value, expiry, ver in items:
        if _keys.tag_of(key) != STATE_TAG:
            continue  # the timer index repeats the keys' own timer entries
        encoded, rest = _keys.split_length_prefixed(key)
        gkey = _codec.decode(encoded)
        if rest[:1] == TIMER_MARK:
            if only is not None and only != "__timer__":
                continue
            yield (gkey, "__timer__", None, _keys.time_value(rest, len(TIMER_MARK)), expiry,
                   ver, None)
            continue
        name, sub = _split_name(rest)
        if only is not None and name != only:
            continue
        codec = codecs.get(name)
        list_key = None
        if sub[:1] == LIST_ELEMENT:
            list_key = key[:len(key) - len(sub)]
            decoded = _codec.decode(value) if codec is None else codec.decode(value)
            part: Any = True
        elif sub:
            decoded = _codec.decode(value) if codec is None else codec.decode(value)
            part = _codec.decode(sub)
        else:
            part = None
            if codec is None:
                decoded = _codec.decode(value)
                if isinstance(decoded, list):  # a list stored whole
                    list_key = key
            elif codec.kind == "list":
                decoded = codec.decode_list(value)
                list_key = key
            else:
                decoded = codec.decode(value)
        if decoded is None:
            continue  # a value of a deleted generation of the variable
        yield gkey, name, part, decoded, expiry, ver, list_key


#: The state name of a processor's timers.
TIMER_STATE = "__timer__"


def timer_columns(desc: dict[str, Any], state_name: str) -> list[tuple[str, str]]:
    """``read_state(state_name="__timer__")``'s column after the key columns: the timer's time."""
    return [("timer", "timestamp")]


def timer_rows(items: Any, desc: dict[str, Any], root: str, schema: Any, state_name: str) -> Any:
    """A processor's timers of one shard: key columns, the timer's time, ``shard_version``."""
    import pyarrow as pa

    registry = desc.get(DESCRIPTOR_SCHEMAS) or {}
    rows = [(gkey, value, ver) for gkey, _, _, value, _, ver, _
            in decode_typed(items, registry, TIMER_STATE)]
    if not rows:
        return None
    nk = len(schema) - 2
    arrays = [pa.array([r[0][j] for r in rows], type=schema.field(j).type) for j in range(nk)]
    arrays.append(pa.array([r[1] * 1000 for r in rows], pa.int64()).cast(schema.field(nk).type))
    arrays.append(pa.array([r[2] for r in rows], pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema)


_readers.register(_readers.StateReader(
    PROCESSOR_KIND, decode, states=(TIMER_STATE,), typed_columns=timer_columns,
    typed_rows=timer_rows, decode_typed=decode_typed,
))
