"""Numeric Arrow arrays to and from numpy by their buffers, without importing pandas.

``pyarrow.array(...)`` and ``Array.to_numpy()`` consult pyarrow's pandas shim, which imports
pandas on first use (about 0.2 s of CPU, more on a loaded machine): every fresh Python worker
of a restarted query paid it in its first shard task, although no operator's shard stage uses
pandas. These two functions do the same conversions for the fixed-width numeric types the
operators' shard stages move between Arrow and numpy, by wrapping or reading the arrays'
buffers. Anything else (nulls on the way out, other types) falls back to pyarrow's own
conversion, with the same result and the import.
"""

from __future__ import annotations

from typing import Any

from ._arrowcompute import cast


def numpy_dtype(t: Any) -> Any:
    """The numpy dtype of a fixed-width Arrow integer or floating-point type, else ``None``."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_integer(t):
        return np.dtype(f"{'i' if pa.types.is_signed_integer(t) else 'u'}{t.bit_width // 8}")
    if pa.types.is_floating(t):
        return np.dtype(f"f{t.bit_width // 8}")
    return None


def to_numpy(arr: Any, fill: Any = None) -> Any:
    """``arr.to_numpy(zero_copy_only=False)`` of an Arrow ``Array`` or ``ChunkedArray``, its
    nulls replaced by ``fill`` when one is given (``pyarrow.compute.fill_null`` first).

    An integer or floating-point array is read from its data buffer (a read-only view when it
    has one chunk and no null to fill, as pyarrow's zero-copy conversion gives); any other
    array, or one with nulls and no ``fill``, is converted by pyarrow."""
    import numpy as np
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    dtype = numpy_dtype(arr.type)
    if dtype is None or (arr.null_count and fill is None):
        if fill is not None:
            import pyarrow.compute as pc

            arr = pc.fill_null(arr, fill)
        return arr.to_numpy(zero_copy_only=False)
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype)
    data = np.frombuffer(arr.buffers()[1], dtype, n, arr.offset * dtype.itemsize)
    if not arr.null_count:
        return data
    bits = np.frombuffer(arr.buffers()[0], np.uint8)
    valid = np.unpackbits(bits, bitorder="little")[arr.offset:arr.offset + n].astype(bool)
    return np.where(valid, data, np.asarray(fill, dtype))


def from_numpy(values: Any, type: Any = None, mask: Any = None) -> Any:
    """``pyarrow.array(values, type, mask=mask)`` of a 1-D numpy boolean, integer or
    floating-point array.

    ``type`` defaults to the array's own; a different ``type`` is reached with a cast (as
    ``pyarrow.array`` converts). ``mask`` (booleans, ``True`` = null) becomes the validity
    bitmap. Other dtypes are converted by pyarrow."""
    import numpy as np
    import pyarrow as pa

    values = np.asarray(values)
    own = pa.from_numpy_dtype(values.dtype) if values.dtype.kind in "iufb" else None
    if own is None or values.ndim != 1:
        return pa.array(values, type, mask=mask)
    if values.dtype.kind == "b":
        data = np.packbits(values, bitorder="little")
    else:
        data = np.ascontiguousarray(values, values.dtype.newbyteorder("="))
    validity, nulls = None, 0
    if mask is not None:
        mask = np.asarray(mask, bool)
        if mask.shape != values.shape:
            raise ValueError(f"a mask of shape {mask.shape} for values of shape {values.shape}")
        nulls = int(mask.sum())
        if nulls:
            validity = pa.py_buffer(np.packbits(~mask, bitorder="little").tobytes())
    arr = pa.Array.from_buffers(own, len(values), [validity, pa.py_buffer(data)], nulls)
    return arr if type is None or type == own else cast(arr, type)


def empty_binary() -> Any:
    """The empty ``binary`` scalar (as ``pyarrow.scalar(b"")``, which would import pandas),
    e.g. the separator of ``pyarrow.compute.binary_join_element_wise``."""
    import pyarrow as pa

    offsets = pa.py_buffer(bytes(8))  # two int32 offsets, both 0
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(b"")])[0]


def scalar(value: Any, dtype: str = "int64") -> Any:
    """A numeric Arrow scalar of numpy type ``dtype`` (as ``pyarrow.scalar``, which would import
    pandas): the operand of a ``pyarrow.compute`` call, where a Python number is converted
    with ``pyarrow.scalar``."""
    import numpy as np

    return from_numpy(np.array([value], dtype))[0]


def record_bytes(records: Any) -> list[bytes]:
    """Each element of a 1-D numpy array (a structured record, say) as its own ``bytes``, in
    order: ``[r.tobytes() for r in records]`` without a Python step per element (the array
    viewed as one opaque ``void`` field, whose ``tolist`` gives each element's bytes)."""
    import numpy as np

    records = np.ascontiguousarray(records)
    return records.view(np.dtype((np.void, records.dtype.itemsize))).tolist()
