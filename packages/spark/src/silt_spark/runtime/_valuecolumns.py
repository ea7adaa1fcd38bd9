"""Typed state values for many keys at once: :mod:`._valuecodec`'s encoding of whole Arrow
columns, by numpy records, for schemas whose fields are all fixed-width (numbers, booleans,
dates and timestamps).

Such a value is a fixed-width record, ``0x80 schema_id:u16be`` then the null bitmap and one
big-endian slot per field (a null field's slot zero), so a column set becomes one numpy
structured array and each value a slice of its buffer: the same bytes as
:meth:`VarCodec.encode <._valuecodec.VarCodec.encode>` row by row, without a Python call per
value. :func:`encode_columns` and :func:`decode_columns` return ``None`` when they do not apply
(a variable without a schema or with a variable-length field; a null in a ``NOT NULL`` field,
whose error the row codec gives; a stored value of another schema version, untagged or of a
deleted generation, which the row codec converts): the caller then takes the row path.
"""

from __future__ import annotations

from typing import Any

from ._ndarrays import from_numpy, to_numpy
from ._valuecodec import TYPED_VALUE, VarCodec

#: The numpy slot of each fixed-width field type (``_types.FIXED``'s struct formats).
_SLOTS = {
    "tinyint": ">i1", "smallint": ">i2", "int": ">i4", "date": ">i4", "bigint": ">i8",
    "timestamp": ">i8", "timestamp_ntz": ">i8", "float": ">f4", "double": ">f8", "boolean": "u1",
}
#: The Arrow type a field's slot values are read into before the cast to the column's type.
_RAW = {"date": "int32", "timestamp": "int64", "timestamp_ntz": "int64", "boolean": "uint8"}


def record_dtype(codec: VarCodec) -> Any:
    """The numpy record of one value of ``codec``'s latest schema, or ``None`` when the
    variable has no schema or a variable-length field."""
    import numpy as np

    if not codec.typed:
        return None
    fields = codec.latest.fields
    if any(t not in _SLOTS for _, t, _ in fields):
        return None
    parts = [("tag", "u1"), ("sid", ">u2")]
    parts += [(f"n{i}", "u1") for i in range(codec.latest.nbytes)]
    parts += [(f"f{i}", _SLOTS[t]) for i, (_, t, _) in enumerate(fields)]
    return np.dtype(parts)


def encode_columns(codec: VarCodec, table: Any) -> list[bytes] | None:
    """Each row of ``table`` (its columns of the variable's latest schema, in order, of its
    Arrow types) as the variable's value bytes, or ``None`` (see the module docstring)."""
    import numpy as np
    import pyarrow as pa

    dtype = record_dtype(codec)
    if dtype is None:
        return None
    n = table.num_rows
    rec = np.zeros(n, dtype)
    rec["tag"] = TYPED_VALUE
    rec["sid"] = codec.sid
    for i, ((_, t, nullable), col) in enumerate(zip(codec.latest.fields, table.columns)):
        if col.null_count:
            if not nullable:
                return None  # the row codec names the field
            nulls = to_numpy(col.is_null().cast(pa.uint8())).astype(bool)
            rec[f"n{i >> 3}"] |= nulls.astype(np.uint8) << (i & 7)
        raw = _RAW.get(t)
        rec[f"f{i}"] = to_numpy(col.cast(raw) if raw else col, 0)
    buf = rec.tobytes()
    width = dtype.itemsize
    return [buf[j:j + width] for j in range(0, n * width, width)]


def decode_columns(codec: VarCodec, raws: list[bytes | None], schema: Any) -> Any:
    """Stored values (``None``: absent) as a ``pyarrow.Table`` of ``schema`` (the variable's
    latest schema as Arrow), a row of nulls for an absent value; or ``None`` (see the module
    docstring)."""
    import numpy as np
    import pyarrow as pa

    dtype = record_dtype(codec)
    if dtype is None:
        return None
    n = len(raws)
    present = np.fromiter((r is not None for r in raws), bool, n)
    found = [r for r in raws if r is not None]
    width = dtype.itemsize
    if found and not (np.fromiter(map(len, found), np.int64, len(found)) == width).all():
        return None
    rec = np.frombuffer(b"".join(found), dtype)
    if not ((rec["tag"] == TYPED_VALUE).all() and (rec["sid"] == codec.sid).all()):
        return None
    where = np.flatnonzero(present)
    arrays = []
    for i, field in enumerate(schema):
        slot = rec[f"f{i}"]
        values = np.zeros(n, slot.dtype.newbyteorder("="))
        values[where] = slot
        null = ~present
        null[where] |= (rec[f"n{i >> 3}"] >> (i & 7)) & 1 == 1
        arr = from_numpy(values, mask=null)
        arrays.append(arr.cast(field.type) if arr.type != field.type else arr)
    return pa.Table.from_arrays(arrays, schema=schema)
