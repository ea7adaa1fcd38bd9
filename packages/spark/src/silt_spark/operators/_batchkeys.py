"""State keys of a whole batch: ``kg:u16be tag enc(key tuple)`` per row (``enc`` is
:mod:`silt_spark.runtime._codec`'s tuple encoding), without a Python call per key where the
key columns allow it, and that tuple encoding alone (:func:`encode_key_tuples`, the batch
processor's ``enc(key)``). Used by every operator whose state is keyed by the query's grouping
key.
"""

from __future__ import annotations

from typing import Any

from ..runtime import _codec, _keys
from ..runtime._arrowcompute import binary_join_element_wise, binary_length, cast
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


def _fixed(rec: Any, typ: Any) -> Any:
    """A numpy structured array as an Arrow ``typ`` (binary or large_binary) array of its
    records."""
    import numpy as np
    import pyarrow as pa

    width = rec.dtype.itemsize
    arr = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(rec), [None, pa.py_buffer(rec.view(np.uint8))]
    )
    return cast(arr, typ)


def _encode(columns: list[Any], n: int, head: list[tuple[str, str, Any]], large: bool) -> Any:
    """Per row, the ``head`` fields (``(name, numpy dtype, value or values)``) then ``_codec``'s
    tuple encoding of the ``n`` rows of ``columns``, as one Arrow binary (``large``:
    large_binary) array: each run of fixed-width fields is one numpy record per row, joined
    with the strings' bytes. ``None`` for a column with nulls or of another type."""
    import numpy as np
    import pyarrow as pa

    typ = pa.large_binary() if large else pa.binary()
    fields = [*head, ("tuple", "u1", 0x07), ("count", ">u4", len(columns))]  # _codec._TUPLE
    pieces: list[Any] = []

    def close() -> None:
        rec = np.empty(n, [(name, dtype) for name, dtype, _ in fields])
        for name, _, value in fields:
            rec[name] = value
        pieces.append(_fixed(rec, typ))
        fields.clear()

    for i, col in enumerate(columns):
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        t = col.type
        if col.null_count:
            return None
        if pa.types.is_integer(t) and t != pa.uint64():  # a uint64 may need _codec's BIGINT
            fields += [(f"t{i}", "u1", 0x03), (f"v{i}", ">i8", to_numpy(col))]  # _codec._INT
        elif pa.types.is_floating(t):
            fields += [(f"t{i}", "u1", 0x04), (f"v{i}", ">f8", to_numpy(col))]  # _codec._FLOAT
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            raw = cast(col, typ)
            fields += [(f"t{i}", "u1", 0x05),  # _codec._STR
                       (f"v{i}", ">u4", to_numpy(binary_length(raw)))]
            close()
            pieces.append(raw)
        else:
            return None
    if fields:
        close()
    return pieces[0] if len(pieces) == 1 else binary_join_element_wise(
        *pieces, cast(empty_binary(), typ))


def encode_key_tuples(columns: list[Any], n: int) -> Any:
    """``_codec.encode(tuple(row))`` of each of the ``n`` rows of the Arrow key ``columns``,
    byte for byte, without a Python call per row: an Arrow large_binary array for integer (but
    ``uint64``), floating-point and string columns without nulls; ``None`` for other columns
    (``runtime._rowcodec.encode_tuples`` takes any)."""
    return _encode(columns, n, [], large=True)


def encode_keys_arrow(kg: Any, columns: list[Any], tag: bytes = _keys.AGG_TAG) -> Any:
    """:func:`encode_keys` for Arrow columns without a Python call per key: an Arrow binary
    array of the same bytes (``kg:u16be tag``, then :func:`encode_key_tuples`'s); ``None``
    where that is (use :func:`encode_keys`)."""
    return _encode(columns, len(kg), [("kg", ">u2", to_numpy(kg)), ("tag", "u1", tag[0])],
                   large=False)
