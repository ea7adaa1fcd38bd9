"""What a batch processor hands over as a table: a pyarrow Table, a RecordBatch or a pandas
DataFrame, all taken as one ``pyarrow.Table`` (the one coercion its state calls and its output
share)."""

from __future__ import annotations

from typing import Any

from silt.errors import InvalidTypeError


def as_table(obj: Any, refusal: str) -> Any:
    """``obj`` as a ``pyarrow.Table``: a Table as it is, a RecordBatch or a pandas DataFrame
    (without its index) converted. Anything else raises :class:`InvalidTypeError` with
    ``refusal``, its ``{got}`` replaced by the type's name (replaced, not formatted: the
    message may hold column names with braces)."""
    import pyarrow as pa

    if isinstance(obj, pa.Table):
        return obj
    if isinstance(obj, pa.RecordBatch):
        return pa.Table.from_batches([obj])
    if hasattr(obj, "columns") and hasattr(obj, "iloc"):  # pandas
        return pa.Table.from_pandas(obj, preserve_index=False)
    raise InvalidTypeError(refusal.replace("{got}", type(obj).__name__))
