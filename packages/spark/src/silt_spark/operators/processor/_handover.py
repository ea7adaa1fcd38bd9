"""What crosses into a processor's code, in the types PySpark gives, and what comes back.

A shard's rows are grouped by key (:class:`KeyGroups`) and each key's rows handed over in the
operator's ``rows_format``:

- ``"pandas"`` (``transformWithStateInPandas``): an iterator of pandas DataFrames with the dtypes
  Spark's worker gives (``_spark_pandas.py``), the key as ``itertuples`` yields it;
- ``"row"`` (``transformWithState``): an iterator of ``pyspark.sql.Row`` (one per input row,
  fields named after the input columns, values as Arrow's ``as_py`` gives them: a timestamp is
  a ``datetime`` in the session time zone), the key a tuple of such values; what the processor
  yields are Rows, matched to the output schema by field name (``Row.asDict(True)``);
- ``"arrow"`` (silt's own): an iterator of ``pyarrow.Table`` slices.

State values are tuples of plain Python values in every format, as PySpark's state clients
return them: a timestamp field reads back as a naive ``datetime``, the wall clock of the
session time zone (pandas) or of the process's local time (Row; :func:`state_view`), and a
naive one given is read in that zone (:func:`state_input`). ``handleExpiredTimer`` gets its key
as a ``Row`` of the key columns (:func:`timer_key`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ...runtime._spark_pandas import Frames, PandasConf, key_of, to_arrow

FORMATS = ("pandas", "arrow", "row")


@dataclass(frozen=True)
class RowsFormat:
    """How a processor receives rows and returns them (plain data, shipped to the tasks)."""

    name: str = "pandas"
    pandas: PandasConf = field(default_factory=PandasConf)

    @classmethod
    def of(cls, fmt: Any) -> RowsFormat:
        """``fmt`` as a RowsFormat (a name takes Spark's default pandas settings)."""
        return fmt if isinstance(fmt, RowsFormat) else cls(str(fmt))

    @property
    def state_timezone(self) -> str | None:
        """The time zone of naive timestamps in state values, as PySpark's worker sees them:
        the session's in the pandas worker (and here for Arrow), the process's local time in
        the Row worker (``None``)."""
        return None if self.name == "row" else self.pandas.timezone

    @classmethod
    def for_session(cls, name: str, spark: Any) -> RowsFormat:
        """Format ``name`` with the pandas settings of ``spark`` (read on the driver)."""
        return cls(name, PandasConf.of_session(spark))


class KeyGroups:
    """The rows of ``table`` grouped by the values of ``key_columns`` (stable within a key).

    ``keys[i]`` is key ``i``'s values as Python objects from Arrow (what the state is keyed
    by), ``kgs[i]`` its key group; :meth:`handed` gives it and its rows in a format."""

    def __init__(self, table: Any, key_columns: list[str], kg_column: str) -> None:
        import numpy as np
        import pyarrow as pa

        keys_pdf = table.select(key_columns).to_pandas()
        codes = keys_pdf.groupby(key_columns, sort=False, dropna=False).ngroup().to_numpy()
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        self.starts = starts.tolist()
        self.ends = np.r_[starts[1:], len(order)].tolist()
        first_rows = pa.array(order[starts])
        self.keys = list(zip(*(table[c].take(first_rows).to_pylist() for c in key_columns)))
        self.kgs = table[kg_column].take(first_rows).to_pylist()
        self.data = table.drop_columns([kg_column]).take(pa.array(order))
        self._positions = [self.data.column_names.index(c) for c in key_columns]
        self._fmt: str | None = None
        self._pylists: list[list[Any]] = []
        self._row: Any = None
        self._frames: Any = None

    def __len__(self) -> int:
        return len(self.keys)

    def prepare(self, fmt: RowsFormat) -> None:
        """Get ready to hand rows over in ``fmt`` (before :meth:`handed`)."""
        self._fmt = fmt.name
        if fmt.name == "pandas":
            self._frames = Frames(self.data, fmt.pandas)
        elif fmt.name == "row":
            from pyspark.sql import Row

            self._pylists = [c.to_pylist() for c in self.data.columns]
            self._row = Row(*self.data.column_names)

    def handed(self, i: int) -> tuple[tuple, list[Any]]:
        """Key ``i`` and its rows as the processor receives them in the prepared format:
        ``(key, DataFrames)``, ``(key, Rows)`` or ``(key, [one Arrow slice])``."""
        a, b = self.starts[i], self.ends[i]
        if self._fmt == "pandas":
            frames = self._frames.of(a, b)
            return key_of(frames[0], self._positions), frames
        if self._fmt == "row":
            make = self._row
            return self.keys[i], [make(*vals) for vals in zip(*(c[a:b] for c in self._pylists))]
        return self.keys[i], [self.data.slice(a, b - a)]


def row_output(result: Any) -> Any:
    """What a Row-based processor returned, its Rows as dicts by field name (Spark's
    ``Row.asDict(True)``), anything else as it is."""
    from pyspark.sql import Row

    if result is None or isinstance(result, Row):
        return None if result is None else result.asDict(True)
    if isinstance(result, (tuple, dict)) or hasattr(result, "num_rows") or hasattr(
            result, "columns"):
        return result
    return [r.asDict(True) if isinstance(r, Row) else r for r in result]


class Output:
    """Collects what ``handleInputRows`` returns: pandas DataFrames (PySpark's shape), Arrow
    tables or record batches, and single rows as tuples (in ``output_schema`` order, PySpark
    ``Row`` included) or dicts. Rows skip pandas entirely: the fast path for one row per key."""

    def __init__(self, arrow_schema: Any, pandas: Any = None) -> None:
        self.schema = arrow_schema
        #: Spark's pandas settings (_spark_pandas.PandasConf) frames are converted with.
        self.pandas = pandas
        self.frames: list[Any] = []
        self.tables: list[Any] = []
        self.tuples: list[tuple] = []
        self.dicts: list[dict] = []

    def add(self, result: Any) -> None:
        import pandas as pd
        import pyarrow as pa

        if result is None:
            return
        if isinstance(result, (pd.DataFrame, pa.Table, pa.RecordBatch, tuple, dict)):
            result = (result,)
        for item in result:
            if isinstance(item, tuple):  # includes pyspark.sql.Row
                self.tuples.append(item)
            elif isinstance(item, dict):
                self.dicts.append(item)
            elif isinstance(item, pd.DataFrame):
                if len(item):
                    self.frames.append(item)
            elif isinstance(item, (pa.Table, pa.RecordBatch)):
                if item.num_rows:
                    self.tables.append(item)
            elif item is not None:
                raise InvalidTypeError(
                    "handleInputRows must yield pandas DataFrames, Arrow tables or record "
                    f"batches, tuples or dicts, got {type(item).__name__}"
                )

    def _check_columns(self, pdf: Any) -> None:
        names = self.schema.names
        missing = [n for n in names if n not in pdf.columns]
        if missing:
            raise InvalidArgumentError(
                f"handleInputRows returned DataFrames without the output columns {missing}; "
                f"output_schema has {names}"
            )

    def batches(self) -> Iterator[Any]:
        import pandas as pd
        import pyarrow as pa

        schema = self.schema
        names = schema.names
        parts = []
        if self.frames and self.pandas is not None:
            # each frame on its own, as Spark converts what the processor returns
            for f in self.frames:
                if self.pandas.assign_cols_by_name:
                    self._check_columns(f)
                parts.append(to_arrow(f, schema, self.pandas))
        elif self.frames:
            pdf = pd.concat(self.frames, ignore_index=True)
            self._check_columns(pdf)
            parts.append(pa.Table.from_pandas(pdf[names], schema=schema, preserve_index=False))
        if self.tuples:
            width = {len(t) for t in self.tuples}
            if width != {len(names)}:
                raise InvalidArgumentError(
                    f"handleInputRows yielded tuples of length {sorted(width)}; output_schema "
                    f"has {len(names)} columns {names}"
                )
            cols = [list(c) for c in zip(*self.tuples)]
            parts.append(pa.Table.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema
            ))
        if self.dicts:
            parts.append(pa.Table.from_pylist(self.dicts, schema=schema))
        for t in self.tables:
            if isinstance(t, pa.RecordBatch):
                t = pa.Table.from_batches([t])
            parts.append(t.select(names).cast(schema))
        for t in parts:
            yield from t.to_batches(max_chunksize=65536)


def _spark_timestamp(v: Any, timezone: str | None) -> Any:
    """A stored timestamp (an aware ``datetime``) as PySpark's Python worker gets it from its
    state server: naive, the wall clock of the session time zone (``None``: of the process's
    local time)."""
    if not isinstance(v, _dt.datetime) or v.tzinfo is None:
        return v
    if timezone is None:
        return v.astimezone().replace(tzinfo=None)
    from zoneinfo import ZoneInfo

    return v.astimezone(ZoneInfo(timezone)).replace(tzinfo=None)


def timer_key(key: tuple, names: list[str], timezone: str | None) -> Any:
    """A grouping key read back from the timer index as PySpark hands it to
    ``handleExpiredTimer``: a ``Row`` of the key columns, timestamps as
    :func:`_spark_timestamp` gives them."""
    from pyspark.sql import Row

    return Row(*names)(*(_spark_timestamp(v, timezone) for v in key))


def state_input(fields: Any, timezone: str | None) -> Any:
    """A function making a value given to a state variable of schema ``fields`` what PySpark
    would store: a naive timestamp (``datetime`` or ``pandas.Timestamp``) is the wall clock of
    ``timezone`` (``None``: local time). ``None`` when nothing needs converting."""
    at = [(i, f[0]) for i, f in enumerate(fields or ()) if f[1] == "timestamp"]
    if not at:
        return None
    from zoneinfo import ZoneInfo

    zone = None if timezone is None else ZoneInfo(timezone)

    def aware(v: Any) -> Any:
        if hasattr(v, "to_pydatetime"):
            v = v.to_pydatetime()
        if isinstance(v, _dt.datetime) and v.tzinfo is None:
            return v.astimezone() if zone is None else v.replace(tzinfo=zone)
        return v

    def convert(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: aware(v) if k in names else v for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            out = list(value)
            for i, _ in at:
                if i < len(out):
                    out[i] = aware(out[i])
            return tuple(out)
        return value

    names = {n for _, n in at}
    return convert


def state_view(fields: Any, timezone: str | None) -> Any:
    """A function giving a decoded state tuple of schema ``fields`` (``(name, type,
    nullable)`` triples) with PySpark's Python types (timestamps naive in ``timezone``, see
    :attr:`RowsFormat.state_timezone`), or ``None`` when nothing needs converting."""
    at = [i for i, f in enumerate(fields or ()) if f[1] == "timestamp"]
    if not at:
        return None

    def view(value: Any) -> Any:
        if not isinstance(value, tuple):
            return value
        out = list(value)
        for i in at:
            if i < len(out):
                out[i] = _spark_timestamp(out[i], timezone)
        return tuple(out)

    return view
