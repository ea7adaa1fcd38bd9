"""Compaction brings a processor's typed state values up to their latest schema.

A value of a state variable declared with a schema is tagged with its schema id (see
:mod:`._schema`). After the schema evolves, values of older ids are converted on every read.
When a processor's registry has such ids, its shards open with ``Settings.value_rewriter`` set
to :func:`for_registry` and the registry as its config (:func:`settings_for`). Each value a
compaction copies with an older live id is decoded (converted) and encoded again in the latest
schema. So values nobody updates stop paying the conversion once compaction has passed over them,
and no restart rewrites the state.

What is left alone: timers and other operators' keys, untagged values (written before the
variable had a schema: their conversion depends on their arity and stays on read), values of a
deleted generation (ids below the variable's ``base``: they read as absent and the shard deletes
them), and values already in the latest schema (the common case, found from three bytes).

A rewritten value decodes to the same row as the value it replaces (what the core's contract
asks, :mod:`silt.compaction.rewrite`). The module imports neither pyspark nor numpy: it runs in
the compaction subprocess.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from . import _keys, _schema, _valuecodec

#: The factory's name, as ``Settings.value_rewriter`` holds it.
NAME = "silt_spark.runtime._rewrite:for_registry"


def stale(registry: dict[str, Any] | None) -> bool:
    """Whether some typed variable of ``registry`` may hold values of an older live schema."""
    for entry in (registry or {}).values():
        versions = entry.get("versions") or ()
        if len(versions) - 1 > int(entry.get("base", 0)):
            return True
    return False


def settings_for(settings: dict[str, Any] | None, registry: dict[str, Any] | None
                 ) -> dict[str, Any] | None:
    """``settings`` (an operator spec's dict) with the rewriter set when the registry has
    values to bring up to date, else unchanged."""
    if not stale(registry):
        return settings
    return {**(settings or {}), "value_rewriter": NAME,
            "value_rewriter_config": json.dumps(registry, sort_keys=True)}


def for_registry(config: str) -> Callable[[bytes, bytes], bytes | None]:
    """The rewriter of a processor shard whose schema registry is ``config`` (JSON)."""
    codecs = {name: codec for name, codec in _schema.codecs(json.loads(config)).items()
              if codec.typed and codec.sid > codec.base}
    if not codecs:
        return lambda key, value: None
    newest = max(c.sid for c in codecs.values())
    state_tag = _keys.STATE_TAG
    timer_mark = _keys.TIMER_MARK
    list_element = _keys.LIST_ELEMENT[0]
    tagged = (_valuecodec.TYPED_VALUE, _valuecodec.TYPED_LIST)

    def rewrite(key: bytes, value: bytes) -> bytes | None:
        if len(value) < 3 or value[0] not in tagged or ((value[1] << 8) | value[2]) >= newest:
            return None
        if _keys.tag_of(key) != state_tag:
            return None
        _, rest = _keys.split_length_prefixed(key)
        if rest[:1] == timer_mark:
            return None
        name, sub = _keys.split_state_name(rest)
        codec = codecs.get(name)
        if codec is None:
            return None
        sid = (value[1] << 8) | value[2]
        if sid >= codec.sid or sid < codec.base:
            return None
        try:
            if value[0] == _valuecodec.TYPED_LIST:
                if sub[:1] and sub[0] == list_element:
                    return None  # never written: elements are single values
                rows = codec.decode_list(value)
                return None if rows is None else codec.encode_list(rows)
            row = codec.decode(value)
            return None if row is None else codec.encode(row)
        except Exception:
            return None    # every compaction of its range: keeping it is always safe

    return rewrite
