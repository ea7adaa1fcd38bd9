"""State keys of a whole batch: ``kg:u16be tag enc(key tuple)`` per row (``enc`` is
:mod:`silt_spark.runtime._codec`'s tuple encoding), without a Python call per key where the
key columns allow it. Used by every operator whose state is keyed by the query's grouping key.
"""

from __future__ import annotations

from typing import Any

from ..runtime import _codec, _keys
from ..runtime._ndarrays import empty_binary, to_numpy


def encode_keys(kgs: Any, key_values: list[list[Any]], tag: bytes = _keys.AGG_TAG) -> list[bytes]:
    """State keys ``kg:u16 tag enc(key tuple)`` for distinct grouping keys (``key_values``: one
    list per key column)."""
    head, enc = _keys.head, _codec.encode
    return [head(kg, tag) + enc(key) for kg, key in zip(kgs, zip(*key_values))]


def encode_key_columns(kg: Any, columns: list[Any], tag: bytes) -> list[bytes]:
    """:func:`encode_keys` of Arrow columns, through :func:`encode_keys_arrow` when it handles
    them (no Python call per key), in row order."""
    encoded = encode_keys_arrow(kg, columns, tag)
    if encoded is not None:
        return encoded.to_pylist()
    return encode_keys(kg.to_pylist(), [c.to_pylist() for c in columns], tag)


def _fixed(rec: Any) -> Any:
    """A numpy structured array as an Arrow binary array of its records."""
    import pyarrow as pa

    width = rec.dtype.itemsize
    arr = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(rec), [None, pa.py_buffer(rec.tobytes())]
    )
    return arr.cast(pa.binary())


def encode_keys_arrow(kg: Any, columns: list[Any], tag: bytes = _keys.AGG_TAG) -> Any:
    """:func:`encode_keys` for Arrow columns without a Python call per key: an Arrow binary
    array of the same bytes (``_codec``'s tuple encoding) for integer, floating-point and string
    key columns without nulls; ``None`` for other columns (use :func:`encode_keys`)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(kg)
    head = np.empty(n, [("kg", ">u2"), ("tag", "u1"), ("tuple", "u1"), ("len", ">u4")])
    head["kg"] = to_numpy(kg)
    head["tag"] = tag[0]
    head["tuple"] = 0x07  # _codec._TUPLE
    head["len"] = len(columns)
    pieces = [_fixed(head)]
    for col in columns:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        t = col.type
        if col.null_count:
            return None
        if pa.types.is_integer(t) and t != pa.uint64():
            rec = np.empty(n, [("t", "u1"), ("v", ">i8")])
            rec["t"], rec["v"] = 0x03, to_numpy(col)  # _codec._INT
            pieces.append(_fixed(rec))
        elif pa.types.is_floating(t):
            rec = np.empty(n, [("t", "u1"), ("v", ">f8")])
            rec["t"], rec["v"] = 0x04, to_numpy(col)  # _codec._FLOAT
            pieces.append(_fixed(rec))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            raw = col.cast(pa.binary())
            rec = np.empty(n, [("t", "u1"), ("len", ">u4")])
            rec["t"], rec["len"] = 0x05, to_numpy(pc.binary_length(raw))  # _codec._STR
            pieces += [_fixed(rec), raw]
        else:
            return None
    return pc.binary_join_element_wise(*pieces, empty_binary())
