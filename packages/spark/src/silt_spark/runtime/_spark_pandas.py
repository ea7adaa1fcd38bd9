"""pandas frames as PySpark's ``transformWithStateInPandas`` hands them over, and back.

Spark's JVM sends a partition's rows in Arrow batches of at most
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows; its Python worker converts each batch with
its own converter (``pyspark.sql.conversion``) in the session time zone, then regroups the rows
by key through ``DataFrame.itertuples`` and builds each frame of a key (at most that many rows)
with ``pd.DataFrame(rows)``. Those steps decide the dtypes user code sees: a timestamp is
``datetime64[ns]`` without a time zone (the session time zone's wall clock), a date an
``object`` of ``datetime.date``, a narrower int ``int64``, a float ``float64``. This module runs
the same steps with Spark's own converters, each frame converted on its own.

Simplified: Spark converts a batch that may hold several keys' rows, so an int or boolean
column with a null *anywhere in that batch* becomes ``float64``/``object`` for every key in it;
here a frame's dtype depends on its own rows only (so it never depends on the shard count).

Output frames go back through Spark's ``PandasToArrowConversion`` with the same options (a naive
timestamp is read in the session time zone; columns are matched by name unless
``spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName`` is ``false``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PandasConf:
    """The session settings Spark's pandas conversions read (plain data, shipped to tasks)."""

    #: ``spark.sql.session.timeZone``.
    timezone: str = "UTC"
    #: ``spark.sql.execution.pandas.convertToArrowArraySafely``.
    safecheck: bool = False
    #: ``spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName``.
    assign_cols_by_name: bool = True
    #: ``spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype``.
    prefer_int_ext_dtype: bool = False
    #: ``spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled``.
    int_to_decimal: bool = False
    #: ``spark.sql.execution.arrow.maxRecordsPerBatch`` (``<= 0``: unbounded).
    max_records: int = 10_000

    @classmethod
    def of_session(cls, spark: Any) -> PandasConf:
        """The settings of ``spark`` (a SparkSession), read on the driver."""
        conf = spark.conf

        def flag(name: str, default: str) -> bool:
            return str(conf.get(name, default)).strip().lower() == "true"

        return cls(
            timezone=conf.get("spark.sql.session.timeZone"),
            safecheck=flag("spark.sql.execution.pandas.convertToArrowArraySafely", "false"),
            assign_cols_by_name=flag(
                "spark.sql.legacy.execution.pandas.groupedMap.assignColumnsByName", "true"),
            prefer_int_ext_dtype=flag(
                "spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype", "false"),
            int_to_decimal=flag(
                "spark.sql.execution.pythonUDF.pandas.intToDecimalCoercionEnabled", "false"),
            max_records=int(conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")),
        )


def to_frame(table: Any, conf: PandasConf) -> Any:
    """``table`` (a ``pyarrow.Table``, one Arrow batch's rows) as the pandas frame Spark's
    converter makes of it, before the regrouping (:func:`chunks`)."""
    import pandas as pd
    from pyspark.sql.conversion import ArrowBatchTransformer

    if not table.num_columns:
        return pd.DataFrame(index=range(table.num_rows))
    series = ArrowBatchTransformer.to_pandas(
        table, timezone=conf.timezone, prefer_int_ext_dtype=conf.prefer_int_ext_dtype)
    return pd.concat(series, axis=1)


def chunks(table: Any, conf: PandasConf) -> list[Any]:
    """One key's rows (a ``pyarrow.Table``) exactly as Spark's steps make them: one frame per
    Arrow batch of at most ``max_records`` rows, each converted and rebuilt from its rows
    (``pd.DataFrame(rows)``). About 3 ms per frame: :class:`Frames` gives the same frames from
    one conversion of a whole table."""
    import pandas as pd

    n = table.num_rows
    step = conf.max_records if conf.max_records > 0 else n or 1
    return [pd.DataFrame(list(to_frame(table.slice(i, step), conf).itertuples(index=False)))
            for i in range(0, n, step)]


class Frames:
    """The frames of each key of a table sorted by key, as :func:`chunks` makes them, from one
    conversion of the whole table (about 0.1 ms per key instead of 3 ms).

    ``pd.DataFrame(rows)`` of ``itertuples`` rows widens ints to ``int64`` and floats to
    ``float64``, renames columns that are not identifiers as ``itertuples`` does, indexes from 0,
    and infers a column's dtype from the frame's own values: an int column whose Arrow
    conversion held nulls elsewhere is ``int64`` again in a frame without them, a boolean one
    ``bool``. Those rules are applied per frame here; with
    ``spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype`` set, each frame takes
    :func:`chunks`' exact steps instead.
    """

    def __init__(self, table: Any, conf: PandasConf) -> None:
        import pyarrow as pa

        self.table, self.conf = table, conf
        self.exact = conf.prefer_int_ext_dtype or table.num_columns > 254
        if self.exact:
            return
        frame = to_frame(table, conf)
        widen = {}
        #: Columns converted to float64 / object for nulls: int64 / bool in a frame without.
        self.ints: list[Any] = []
        self.bools: list[Any] = []
        for i, f in enumerate(table.schema):
            dtype = str(frame.dtypes.iloc[i])
            if pa.types.is_integer(f.type):
                if dtype == "float64":
                    self.ints.append(i)
                elif dtype != "int64":
                    widen[frame.columns[i]] = "int64"
            elif pa.types.is_floating(f.type) and dtype != "float64":
                widen[frame.columns[i]] = "float64"
            elif pa.types.is_boolean(f.type) and dtype == "object":
                self.bools.append(i)
        if widen:
            frame = frame.astype(widen)
        if len(frame):
            frame.columns = list(next(frame.iloc[:1].itertuples(index=False))._fields)
        self.frame = frame

    def of(self, a: int, b: int) -> list[Any]:
        """The frames of rows ``a`` to ``b`` (one key's)."""
        if self.exact:
            return chunks(self.table.slice(a, b - a), self.conf)
        step = self.conf.max_records if self.conf.max_records > 0 else b - a or 1
        out = []
        for i in range(a, b, step):
            f = self.frame.iloc[i:min(i + step, b)].reset_index(drop=True)
            for at, dtype in ((self.ints, "int64"), (self.bools, "bool")):
                fix = [f.columns[c] for c in at if not f.iloc[:, c].isna().any()]
                if fix:
                    f = f.astype(dict.fromkeys(fix, dtype))
            out.append(f)
        return out


def key_of(frame: Any, positions: list[int]) -> tuple:
    """The grouping key Spark passes with a key's frames: the values at the key columns'
    ``positions`` of its first row (a frame of :func:`chunks`), as ``itertuples`` yields
    them."""
    row = next(frame.itertuples(index=False))
    return tuple(row[p] for p in positions)


def to_arrow(frame: Any, schema: Any, conf: PandasConf) -> Any:
    """A frame the processor returned as a ``pyarrow.RecordBatch`` of ``schema`` (an Arrow
    schema), converted as Spark converts ``transformWithStateInPandas`` output."""
    import pyarrow as pa
    from pyspark.sql.conversion import PandasToArrowConversion
    from pyspark.sql.pandas.types import from_arrow_schema

    struct = from_arrow_schema(schema)
    batch = PandasToArrowConversion.convert(
        frame, struct, timezone=conf.timezone, safecheck=conf.safecheck, arrow_cast=True,
        assign_cols_by_name=conf.assign_cols_by_name,
        int_to_decimal_coercion_enabled=conf.int_to_decimal,
    )
    # Spark's Arrow timestamps carry the session time zone; the operator's schema says UTC.
    return pa.Table.from_batches([batch]).cast(schema)
