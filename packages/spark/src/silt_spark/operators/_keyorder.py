"""A shard's rows grouped by grouping key, the groups in the order of their state keys, with
numpy: what :func:`~._groupby.group_by` followed by a sort of the groups' encoded state keys
gives, without hashing the rows and without sorting the keys' bytes.

For grouping keys of integer columns (``_batchkeys``' fixed-width encoding of
``kg:u16be tag enc(key tuple)``: ``0x07 count:u32be``, then ``0x03 value:i64be`` per column),
the order of the state keys' bytes is the order of ``(kg, u_1, ..., u_k)``, ``u_j`` being
column ``j``'s value as an int64 read as the unsigned 64-bit number of the same bits
(big-endian bytes compare as unsigned numbers; every other byte is the same in every key).
:func:`grouped_in_key_order` sorts the rows by those numbers (one ``argsort`` of one ``uint64``
packing them when their ranges fit in 64 bits, else ``lexsort``), numbers the groups in that
order, and applies each aggregation per group as Acero's hash aggregates do: in row order
(``ufunc.at``), nulls skipped, a null for a group without a value; floating ``min``/``max``
ignore NaN unless every value is NaN.

It returns ``None`` for what it does not take (a key column that is not an integer one, a
``uint64`` or a null in one; an aggregated column that is not ``int64`` or ``double``; a function
other than ``sum``, ``min``, ``max``): the caller then groups with ``group_by`` and sorts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..runtime._arrowcompute import take
from ..runtime._ndarrays import from_numpy, to_numpy

#: The functions :func:`grouped_in_key_order` applies (as ``group_by``'s ``hash_`` ones).
FUNCTIONS = ("sum", "min", "max")


def _plain(col: Any) -> Any:
    """``col`` as one Arrow array."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


def _sort_numbers(kg: Any, columns: list[Any]) -> list[Any] | None:
    """Per row, the numbers whose order is its state key's (kg first), or ``None``."""
    import numpy as np
    import pyarrow as pa

    numbers = [to_numpy(kg).astype(np.uint64)]
    for col in columns:
        t = col.type
        if col.null_count or not pa.types.is_integer(t) or t == pa.uint64():
            return None
        numbers.append(to_numpy(col).astype(np.int64).view(np.uint64))
    return numbers


def _order(numbers: list[Any]) -> tuple[Any, Any]:
    """``(order, first)``: the row indices sorting ``numbers`` (most significant first) and,
    over the sorted rows, whether each starts a new group."""
    import numpy as np

    n = len(numbers[0])
    lows = [int(x.min()) for x in numbers]
    spans = [int(x.max()) - low for x, low in zip(numbers, lows)]
    bits = [s.bit_length() for s in spans]
    first = np.empty(n, bool)
    first[:1] = True
    if sum(bits) <= 64:  # one packed number per row
        packed = np.zeros(n, np.uint64)
        for x, low, b in zip(numbers, lows, bits):
            packed <<= np.uint64(b)
            packed |= x - np.uint64(low)
        order = np.argsort(packed)
        ranked = packed[order]
        np.not_equal(ranked[1:], ranked[:-1], out=first[1:])
        return order, first
    order = np.lexsort(numbers[::-1])
    first[1:] = False
    for x in numbers:
        ranked = x[order]
        first[1:] |= ranked[1:] != ranked[:-1]
    return order, first


def _reduce(values: Any, func: str, ids: Any, count: int) -> Any:
    """``func`` of ``values`` (an int64 or double Arrow array) per group (``ids``: each row's
    group), as an Arrow array of ``count`` groups."""
    import numpy as np

    data = to_numpy(values, 0)
    valid = None
    if values.null_count:
        bits = np.frombuffer(values.buffers()[0], np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[values.offset:values.offset + len(values)]
        valid = valid.astype(bool)
        data, ids = data[valid], ids[valid]
    floating = data.dtype.kind == "f"
    if func == "sum":
        out = np.zeros(count, data.dtype)
        np.add.at(out, ids, data)
    else:
        if floating:  # NaN to start: fmin/fmax skip a NaN unless both are
            out = np.full(count, np.nan)
        else:
            info = np.iinfo(data.dtype)
            out = np.full(count, info.max if func == "min" else info.min, data.dtype)
        ufunc = {("min", True): np.fmin, ("max", True): np.fmax,
                 ("min", False): np.minimum, ("max", False): np.maximum}[func, floating]
        ufunc.at(out, ids, data)
        if floating:  # 0.0 == -0.0: Acero keeps the first of equal values (in row order)
            zeros = np.flatnonzero(data == 0)
            if len(zeros):  # each group's first zero (np.unique would import numpy.ma)
                first = np.full(count, len(data))
                np.minimum.at(first, ids[zeros], zeros)
                tie = np.flatnonzero((out == 0) & (first < len(data)))
                out[tie] = data[first[tie]]
    if valid is None:
        return from_numpy(out)
    empty = np.bincount(ids, minlength=count) == 0
    if empty.any():
        out[empty] = 0
        return from_numpy(out, mask=empty)
    return from_numpy(out)


def grouped_in_key_order(table: Any, key_columns: Sequence[str], kg_column: str,
                         aggregations: Sequence[tuple[str, str]]) -> Any:
    """``group_by(table, [*key_columns, kg_column], aggregations)`` with its rows sorted by
    their state keys (``kg:u16be tag enc(key tuple)``), or ``None`` (see the module
    docstring). ``aggregations``: ``(column, function)`` pairs, ``function`` one of
    :data:`FUNCTIONS`; the columns are named and ordered as ``group_by``'s (the keys, then
    ``<column>_<function>``)."""
    import numpy as np
    import pyarrow as pa

    if table.num_rows == 0:
        return None
    keys = [_plain(table[c]) for c in key_columns]
    values = []
    for column, func in aggregations:
        col = _plain(table[column])
        if func not in FUNCTIONS or col.type not in (pa.int64(), pa.float64()):
            return None
        values.append(col)
    numbers = _sort_numbers(_plain(table[kg_column]), keys)
    if numbers is None:
        return None
    order, first = _order(numbers)
    ids = np.empty(len(order), np.int64)
    ids[order] = np.cumsum(first) - 1
    heads = from_numpy(order[first])
    count = len(heads)
    names = [*key_columns, kg_column]
    arrays = [take(table[c], heads) for c in names]
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, as Acero: NaN
        for (column, func), col in zip(aggregations, values):
            names.append(f"{column}_{func}")
            arrays.append(_reduce(col, func, ids, count))
    return pa.Table.from_arrays(arrays, names=names)
