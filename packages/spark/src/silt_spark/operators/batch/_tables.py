"""What a batch processor hands over as a table: a pyarrow Table, a RecordBatch or a pandas
DataFrame, all taken as one ``pyarrow.Table`` (the one coercion its state calls and its output
share)."""

from __future__ import annotations

from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError


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


def conform(table: Any, schema: Any, lead: str, wants: str, misfit: str) -> Any:
    """``table``'s columns of ``schema``, in the schema's order and cast to its types.

    A missing or extra column raises :class:`InvalidArgumentError` saying ``"<lead> the columns
    [...]; <wants> has [...]"`` and which are missing or not in it; a value that does not cast
    raises it with ``"<misfit>: <pyarrow's reason>"``."""
    names = schema.names
    missing = [n for n in names if n not in table.column_names]
    extra = [n for n in table.column_names if n not in names]
    if missing or extra:
        raise InvalidArgumentError(
            f"{lead} the columns {table.column_names}; {wants} has {names}"
            + (f" (missing {missing})" if missing else "")
            + (f" (not in it: {extra})" if extra else "")
        )
    try:
        return table.select(names).cast(schema)
    except (ValueError, TypeError, NotImplementedError) as exc:  # pyarrow's included
        raise InvalidArgumentError(f"{misfit}: {exc}") from None
