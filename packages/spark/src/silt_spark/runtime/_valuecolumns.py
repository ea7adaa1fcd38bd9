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
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(dtype.itemsize), n, [None, pa.py_buffer(rec.tobytes())]
    ).cast(pa.binary()).to_pylist()  # binary's to_pylist is the fast one


def decode_columns(codec: VarCodec, raws: Any, schema: Any) -> Any:
    """Stored values (a sequence or numpy object array of bytes, ``None``: absent) as a
    ``pyarrow.Table`` of ``schema`` (the variable's latest schema as Arrow), a row of nulls for
    an absent value; or ``None`` (see the module docstring)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    dtype = record_dtype(codec)
    if dtype is None:
        return None
    values = pa.array(raws, pa.binary())  # one C-level pass (not large_binary's); None: null
    n = len(values)
    width = dtype.itemsize
    if values.null_count < n:
        lengths = pc.min_max(pc.binary_length(values)).as_py()
        if lengths["min"] != width or lengths["max"] != width:
            return None
    present = values.is_valid().to_numpy(zero_copy_only=False)
    _, offsets, data = values.buffers()
    off = np.frombuffer(offsets, np.int32)[values.offset:values.offset + n + 1]
    found = int(present.sum())
    rec = (np.frombuffer(data, dtype, count=found, offset=int(off[0])) if found
           else np.zeros(0, dtype))
    if not ((rec["tag"] == TYPED_VALUE).all() and (rec["sid"] == codec.sid).all()):
        return None
    where = np.flatnonzero(present)
    arrays = []
    for i, field in enumerate(schema):
        slot = rec[f"f{i}"]
        column = np.zeros(n, slot.dtype.newbyteorder("="))
        column[where] = slot
        null = ~present
        null[where] |= (rec[f"n{i >> 3}"] >> (i & 7)) & 1 == 1
        arr = from_numpy(column, mask=null)
        arrays.append(arr.cast(field.type) if arr.type != field.type else arr)
    return pa.Table.from_arrays(arrays, schema=schema)
