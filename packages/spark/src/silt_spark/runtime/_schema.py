"""Typed, evolvable state values of the processors: the schema registry of a root's state
variables and the evolution rules, and the codecs (``_valuecodec.py``) the registry gives.

Schemas are ``_types.py``'s: tuples of fields ``(name, type, nullable)``.

**Registry.** Per state variable (the operator descriptor's ``state_schemas`` field, written by
the driver when the query starts, before any task runs)::

    {"kind": "value" | "list" | "map", "key": map key schema or null,
     "versions": [schema 0, schema 1, ...], "base": first version still live}

A schema id is an index into ``versions``; ids are never reused. ``deleteIfExists`` followed by a
new declaration starts the variable over: ``base`` moves to the new schema's id, and a value
tagged with an older id reads as absent (every shard deletes such values before it reads).

**Evolution** (:func:`evolve`, when the query starts), by field name, as Spark 4's Avro state
encoding: added fields must be nullable and read as null; removed fields are dropped; order may
change; a non-nullable field may become nullable; types may widen along Avro's promotions
(tinyint -> smallint -> int -> bigint, any of them -> float or double, float -> double).
Everything else is refused with :class:`~silt_spark.errors.StateSchemaError` naming the
variable and the change: narrowing, another type, a nullable field made non-nullable, a change of
a map's key schema, another kind of variable. A rename is a removal plus an addition (the old
field's values are not carried over), as in Spark. Nested types (arrays, maps, structs) change
only as a whole: any change of one is refused.
"""

from __future__ import annotations

from typing import Any

from ..errors import StateSchemaError
from ._types import Schema, as_schema, changes, show
from ._valuecodec import VarCodec

MAX_VERSIONS = 1 << 16


_KIND_NAMES = {"ValueState": "value", "ListState": "list", "MapState": "map"}


# --- schemas ---------------------------------------------------------------------------------


# --- the registry ----------------------------------------------------------------------------


class Declared:
    """One variable as ``init`` declared it (driver side): kind, map key schema, value schema,
    and whether ``init`` called ``deleteIfExists`` on it first (kind ``None``: deleted and not
    declared again)."""

    def __init__(self, kind: str | None, key: Schema | None, value: Schema | None, reset: bool):
        self.kind, self.key, self.value, self.reset = kind, key, value, reset


def evolve(registry: dict[str, Any], declared: dict[str, Declared]) -> dict[str, Any]:
    """The registry after the query starts with ``declared`` variables (JSON-able, as stored).

    Raises :class:`~silt_spark.errors.StateSchemaError` naming the variable and the change
    for anything the rules refuse, before anything is written. Variables the code no longer
    declares keep their entry (their state stays, as in Spark).
    """
    out = {name: dict(entry) for name, entry in registry.items()}
    for name, d in sorted(declared.items()):
        what = f"state {name!r}"
        have = out.get(name)
        if d.kind is None:  # deleted and not declared again: every stored value is gone
            if have is not None:
                out[name] = {**have, "kind": None, "base": len(have["versions"])}
            continue
        if have is not None and have["kind"] is None:
            have = None if not have["versions"] else {
                **have, "kind": d.kind, "key": None if d.key is None else [list(f) for f in d.key]
            }
            if have is None:
                out.pop(name)
        if have is None or d.reset:
            # A new variable, or one deleteIfExists starts over: a new generation whenever
            # what it stores changes (older values then read as absent).
            key = None if d.key is None else [list(f) for f in d.key]
            versions = list(have["versions"]) if have is not None else []
            base = int(have.get("base", 0)) if have is not None else 0
            same = (
                have is not None and have["kind"] == d.kind and have.get("key") == key
                and (d.value is None or (versions[base:] and as_schema(versions[-1]) == d.value))
            )
            if not same:
                if d.value is not None:
                    versions.append([list(f) for f in d.value])
                    base = len(versions) - 1
                else:
                    base = len(versions)
            out[name] = {"kind": d.kind, "key": key, "versions": versions, "base": base}
            if have is None and versions:
                # Values written before the variable had a schema (untagged) are read as
                # rows of its first one.
                out[name]["untagged"] = 0
            continue
        if have["kind"] not in (d.kind, None):
            raise StateSchemaError(
                f"{what} was a {have['kind']} state and is now declared a {d.kind} state; a "
                "variable keeps its kind (call handle.deleteIfExists first to start it over)"
            )
        old_key = as_schema(have.get("key"))
        if d.kind == "map" and d.key is not None and old_key is not None and old_key != d.key:
            raise StateSchemaError(
                f"{what}: the map key schema changed from ({show(old_key)}) to "
                f"({show(d.key)}); map keys are part of the stored keys and cannot evolve "
                "(call handle.deleteIfExists first to start the variable over)"
            )
        if d.kind == "map" and old_key is None and d.key is not None:
            if [v for v in have["versions"][have.get("base", 0):]]:
                raise StateSchemaError(
                    f"{what}: the map had no key schema and now declares ({show(d.key)}); "
                    "map keys cannot evolve (call handle.deleteIfExists first)"
                )
            out[name]["key"] = [list(f) for f in d.key]
        versions = have["versions"]
        live = versions[have.get("base", 0):]
        if d.value is None:
            continue  # keeps its recorded schema, if any
        latest = as_schema(live[-1]) if live else None
        if latest == d.value:
            continue
        extra = {}
        if not versions:  # the variable's first schema: its untagged values are rows of it
            extra["untagged"] = 0
        if latest is not None:
            _, bad = changes(latest, d.value)
            if bad:
                raise StateSchemaError(
                    f"{what}: the schema ({show(latest)}) cannot change to ({show(d.value)}): "
                    + "; ".join(bad)
                )
        if len(versions) >= MAX_VERSIONS:
            raise StateSchemaError(f"{what} has {len(versions)} schema versions, the most kept")
        out[name] = {**have, **extra, "versions": [*versions, [list(f) for f in d.value]]}
    return out


# --- the encoding ----------------------------------------------------------------------------


def kind_name(cls_name: str) -> str:
    """``"value"``, ``"list"`` or ``"map"`` for a state class name."""
    return _KIND_NAMES[cls_name]


def codecs(registry: dict[str, Any] | None) -> dict[str, VarCodec]:
    """A :class:`VarCodec` per typed variable of a registry."""
    out = {}
    for name, entry in (registry or {}).items():
        if entry.get("versions"):  # typed now, or once (older values then read as absent)
            out[name] = VarCodec(name, entry)
    return out
