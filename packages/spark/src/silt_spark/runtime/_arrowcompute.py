"""Arrow compute kernels for the shard stages without importing ``pyarrow.compute``.

``import pyarrow.compute`` builds a Python wrapper, with a signature and a parsed docstring,
for each of Arrow's ~290 registered functions: 30-40 ms of CPU in a fresh Python worker on a
quiet machine, two to three times that on a loaded one. pyarrow's own ``Array.cast``,
``Table.take`` and ``Array.take`` import it on first use, so every fresh Spark worker of a
restarted query paid it in its first shard task, and the stateless floor's workers never do.
These functions call the same kernels through ``pyarrow._compute.call_function``, the function
``pyarrow.compute``'s wrappers end in, with the same options those wrappers build, so the
results are the same arrays (``tests/test_spark_arrowcompute.py`` compares them). The module
``pyarrow._compute`` is the compiled one ``pyarrow.compute`` is made from; should a pyarrow
lack it, the functions fall back to ``pyarrow.compute`` (same results, the import paid).
"""

from __future__ import annotations

from typing import Any


def _kernels() -> Any:
    """The module holding ``call_function`` and the option classes."""
    try:
        import pyarrow._compute as kernels
    except ImportError:  # pragma: no cover - a pyarrow without its compiled compute module
        import pyarrow.compute as kernels
    return kernels


def cast(arr: Any, target_type: Any) -> Any:
    """``pyarrow.compute.cast(arr, target_type)`` (a safe cast) of an Arrow array, chunked
    array, table or scalar: what ``arr.cast(target_type)`` returns."""
    k = _kernels()
    return k.call_function("cast", [arr], k.CastOptions.safe(target_type))


def take(data: Any, indices: Any) -> Any:
    """``pyarrow.compute.take(data, indices)`` (bounds checked) of an Arrow array, chunked
    array, record batch or table: what ``data.take(indices)`` returns."""
    k = _kernels()
    return k.call_function("take", [data, indices], k.TakeOptions(boundscheck=True))


def sort_indices(arr: Any) -> Any:
    """``pyarrow.compute.sort_indices(arr)`` of an Arrow array: the indices that sort it
    ascending (stable, nulls at the end)."""
    k = _kernels()
    return k.call_function("sort_indices", [arr], k.SortOptions())


def binary_length(arr: Any) -> Any:
    """``pyarrow.compute.binary_length(arr)``: each value's length in bytes."""
    return _kernels().call_function("binary_length", [arr])


def binary_join_element_wise(*args: Any) -> Any:
    """``pyarrow.compute.binary_join_element_wise(*args)``: per row, the values of all but the
    last argument joined with the last (the separator)."""
    return _kernels().call_function("binary_join_element_wise", list(args))
