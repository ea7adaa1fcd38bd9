"""Spark types of state fields: a schema is a tuple of fields ``(name, type, nullable)``,
``type`` being Spark's ``simpleString`` of the field's type (``"bigint"``, ``"string"``,
``"decimal(10,2)"``, ``"array<int>"``...). They come from the ``StructType`` or DDL string
given to ``getValueState``/``getListState``/``getMapState`` (:func:`from_spark`, driver only:
DDL parsing needs the JVM); everything else here is plain Python and runs anywhere. Also the
widenings that schema evolution allows (Avro's promotions, as Spark 4 resolves them) and a
change's description.
"""

from __future__ import annotations

from typing import Any

from ..errors import StateSchemaError

Field = tuple[str, str, bool]


Schema = tuple[Field, ...]


#: Fixed-width types and their struct format (big-endian, see the module docstring).
FIXED = {
    "tinyint": "b", "smallint": "h", "int": "i", "bigint": "q", "float": "f", "double": "d",
    "boolean": "?", "date": "i", "timestamp": "q", "timestamp_ntz": "q",
}


INTEGRAL = ("tinyint", "smallint", "int", "bigint")


#: Avro's promotions, as Spark 4 resolves them (byte and short are Avro ints there).
WIDENING = {
    "tinyint": {"smallint", "int", "bigint", "float", "double"},
    "smallint": {"int", "bigint", "float", "double"},
    "int": {"bigint", "float", "double"},
    "bigint": {"float", "double"},
    "float": {"double"},
}


def from_spark(schema: Any, what: str) -> Schema:
    """The schema of a ``StructType`` or DDL string (driver side: DDL parsing needs a Spark
    session). ``what`` names the variable in the error raised for anything else."""
    from pyspark.sql.types import DataType, StructType

    if isinstance(schema, str):
        try:
            schema = DataType.fromDDL(schema)
        except Exception as exc:  # pyspark's ParseException and friends
            raise StateSchemaError(f"{what}: cannot parse the schema {schema!r}: {exc}") from None
    if not isinstance(schema, StructType):
        raise StateSchemaError(
            f"{what}: a schema is a StructType or a DDL string such as 'n long, name string', "
            f"got {type(schema).__name__}"
        )
    fields = tuple((f.name, f.dataType.simpleString(), bool(f.nullable)) for f in schema.fields)
    check_schema(fields, what)
    return fields


def check_schema(fields: Schema, what: str) -> None:
    """Refuse an empty schema or one with a duplicate field name."""
    if not fields:
        raise StateSchemaError(f"{what}: a schema needs at least one field")
    names = [f[0] for f in fields]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise StateSchemaError(f"{what}: the schema names the fields {dup} more than once")


def show(fields: Schema) -> str:
    return ", ".join(f"{n} {t}{'' if nullable else ' NOT NULL'}" for n, t, nullable in fields)


def changes(old: Schema, new: Schema) -> tuple[list[str], list[str]]:
    """``(accepted, refused)``: the changes from ``old`` to ``new`` by field name, each as text
    (see the module docstring for the rules)."""
    ok: list[str] = []
    bad: list[str] = []
    before = {n: (t, nullable) for n, t, nullable in old}
    after = {n: (t, nullable) for n, t, nullable in new}
    for n, t, nullable in new:
        if n not in before:
            if nullable:
                ok.append(f"added field {n!r} ({t}, null in older values)")
            else:
                bad.append(
                    f"added field {n!r} is NOT NULL, but older values have none (add it as "
                    "nullable)"
                )
            continue
        t0, nullable0 = before[n]
        if t0 != t:
            if t in WIDENING.get(t0, ()):
                ok.append(f"widened field {n!r} from {t0} to {t}")
            else:
                narrow = t0 in WIDENING.get(t, ())
                bad.append(
                    f"field {n!r} changed type from {t0} to {t}"
                    + (" (narrowing)" if narrow else "")
                    + f"; allowed widenings of {t0}: {sorted(WIDENING.get(t0, ())) or 'none'}"
                )
        if nullable0 and not nullable:
            bad.append(f"field {n!r} became NOT NULL, but older values may hold nulls")
        elif not nullable0 and nullable:
            ok.append(f"field {n!r} became nullable")
    ok.extend(f"removed field {n!r}" for n, _, _ in old if n not in after)
    if [f[0] for f in old if f[0] in after] != [f[0] for f in new if f[0] in before]:
        ok.append("reordered fields")
    return ok, bad


def as_schema(raw: Any) -> Schema | None:
    return None if raw is None else tuple((str(n), str(t), bool(b)) for n, t, b in raw)
