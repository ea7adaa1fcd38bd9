"""An operator root's descriptor (``silt-spark.json``) read back: bounded JSON, every field checked.

The descriptor is stored metadata like a manifest, so it is read the same way: the JSON is
parsed by the core's bounded reader (:func:`silt.boundedjson.loads`: a size and a nesting limit,
so crafted bytes cannot exhaust the parser), and every field silt_spark reads from it is checked
for the type and range the writers (:func:`silt_spark.runtime._shard.ensure_descriptor` and the
operators' builders) give it, before anything uses it. Anything else is a
:class:`~silt.errors.CorruptionError` naming the descriptor and the field. Fields no silt_spark
reads are left alone (a newer silt_spark may add some).

A format 1 descriptor (one layout, no ``layouts``) is upgraded in memory to generation 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from silt import boundedjson
from silt.errors import CorruptionError

from ._layout import MAX_KEY_GROUPS
from ._names import DESCRIPTOR  # the object's name under the operator root

#: The newest descriptor format this silt_spark writes and reads.
DESCRIPTOR_FORMAT = 2
#: Limits for a crafted descriptor (a real one is a few KiB, nested 5 deep).
MAX_BYTES = 4 << 20
MAX_DEPTH = 16
#: Most layouts (rescales) and columns a descriptor may list.
MAX_ITEMS = 1 << 16
#: The largest generation, interval or time a descriptor may hold (a signed 64-bit value).
MAX_INT = (1 << 63) - 1


def _int(value: Any, what: str, low: int = 0, high: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be an integer in {low}..{high}, got {value!r:.60}")
    return value


def _str(value: Any, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty) or len(value) > 4096:
        raise ValueError(f"{what} must be a {'' if empty else 'non-empty '}string of at most "
                         f"4096 characters, got {value!r:.60}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise ValueError(f"{what} must be a list of at most {MAX_ITEMS} items, got "
                         f"{type(value).__name__}")
    return value


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _rows(value: Any, what: str, shape: tuple[Callable[[Any, str], Any], ...],
          least: int = 0) -> None:
    """A list of at least ``least`` lists, each with one item per ``shape`` check."""
    if len(_list(value, what)) < least:
        raise ValueError(f"{what} must list at least {least}")
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != len(shape):
            raise ValueError(f"{what}[{i}] must be a list of {len(shape)} items, got {row!r:.60}")
        for j, check in enumerate(shape):
            check(row[j], f"{what}[{i}][{j}]")


def _name(value: Any, what: str) -> None:
    _str(value, what)


def _type(value: Any, what: str) -> None:
    _str(value, what)


def _opt_name(value: Any, what: str) -> None:
    if value is not None:
        _str(value, what)


def _flag(value: Any, what: str) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, got {value!r:.60}")


def _schema(value: Any, what: str) -> None:
    """A state schema: one or more ``[name, type, nullable]`` fields."""
    _rows(value, what, (_name, _type, _flag), 1)


def _layouts(d: dict[str, Any], key_groups: int) -> None:
    layouts = _list(d["layouts"], "'layouts'")
    if not layouts:
        raise ValueError("'layouts' must list at least one layout")
    last = -1
    for i, item in enumerate(layouts):
        item = _dict(item, f"'layouts'[{i}]")
        gen = _int(item.get("generation"), f"'layouts'[{i}].generation")
        _int(item.get("num_shards"), f"'layouts'[{i}].num_shards", 1, key_groups)
        if gen <= last:
            raise ValueError("'layouts' must be in increasing generation order")
        last = gen
    if layouts[-1]["generation"] != d["generation"] or layouts[-1]["num_shards"] != d[
            "num_shards"]:
        raise ValueError("the last of 'layouts' must be the current 'generation' and "
                         "'num_shards'")


def _state_schemas(value: Any) -> None:
    for name, entry in _dict(value, "'state_schemas'").items():
        what = f"'state_schemas'[{name!r:.40}]"
        entry = _dict(entry, what)
        _opt_name(entry.get("kind"), f"{what}.kind")
        if entry.get("key") is not None:
            _schema(entry["key"], f"{what}.key")
        versions = _list(entry.get("versions"), f"{what}.versions")
        for i, v in enumerate(versions):
            _schema(v, f"{what}.versions[{i}]")
        _int(entry.get("base", 0), f"{what}.base", 0, len(versions))


def _window(value: Any) -> None:
    w = _dict(value, "'window'")
    _int(w.get("window_ms"), "'window'.window_ms", 1)
    _int(w.get("slide_ms"), "'window'.slide_ms", 1)


def _join(value: Any) -> None:
    j = _dict(value, "'join'")
    _str(j.get("how"), "'join'.how")
    if j.get("bucket_us") is not None:
        _int(j["bucket_us"], "'join'.bucket_us", 1)
    for side in ("left", "right"):
        for i, c in enumerate(_list(j.get(side), f"'join'.{side}")):
            _str(c, f"'join'.{side}[{i}]")


def _side_types(value: Any) -> None:
    for side, cols in _dict(value, "'join_side_types'").items():
        _rows(cols, f"'join_side_types'[{side!r:.20}]", (_name, _type))


#: The optional fields and their checks (each raises ValueError naming the field).
_OPTIONAL: dict[str, Callable[[Any], Any]] = {
    "format": lambda v: _int(v, "'format'", 1, DESCRIPTOR_FORMAT),
    "incarnation": lambda v: _str(v, "'incarnation'", empty=True),
    "lifecycle": lambda v: _int(v, "'lifecycle'"),
    "key_columns": lambda v: _rows(v, "'key_columns'", (_name, _type)),
    "state_columns": lambda v: _rows(v, "'state_columns'", (_name, _type)),
    "outputs": lambda v: _rows(v, "'outputs'", (_name, _name, _opt_name, _type)),
    "window": _window,
    "window_time_type": lambda v: _str(v, "'window_time_type'"),
    "dedup_time": lambda v: _str(v, "'dedup_time'"),
    "join": _join,
    "join_side_types": _side_types,
    "join_time_index": lambda v: _int(v, "'join_time_index'"),
    "state_schemas": _state_schemas,
}


def check(d: Any) -> dict[str, Any]:
    """``d`` (a parsed descriptor) if every field silt_spark reads is as its writers write it,
    with a format 1 descriptor upgraded to generation 0; raises ``ValueError`` otherwise."""
    d = _dict(d, "the descriptor")
    _str(d.get("operator"), "'operator'")
    key_groups = _int(d.get("key_groups"), "'key_groups'", 1, MAX_KEY_GROUPS)
    num_shards = _int(d.get("num_shards"), "'num_shards'", 1, key_groups)
    if "layouts" not in d:  # format 1: one layout, generation 0
        if "generation" in d:
            raise ValueError("'generation' without 'layouts'")
        d["layouts"] = [{"generation": 0, "num_shards": num_shards}]
        d["generation"] = 0
    _int(d.get("generation"), "'generation'")
    _layouts(d, key_groups)
    for name, checker in _OPTIONAL.items():
        if name in d:
            checker(d[name])
    return d


def parse(data: bytes) -> dict[str, Any]:
    """The descriptor stored as ``data``, read with limits and checked (:func:`check`); raises
    :class:`~silt.errors.CorruptionError` naming the descriptor and what is wrong."""
    try:
        return check(boundedjson.loads(data, max_bytes=MAX_BYTES, max_depth=MAX_DEPTH))
    except ValueError as exc:
        raise CorruptionError(DESCRIPTOR, None, f"the silt_spark descriptor is not the JSON "
                                                f"silt_spark writes: {exc}") from None
