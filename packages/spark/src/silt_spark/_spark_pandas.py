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
    """One key's rows (a ``pyarrow.Table``) as Spark hands them to the processor: one frame
    per Arrow batch of at most ``max_records`` rows, each rebuilt from its rows
    (``pd.DataFrame(rows)``)."""
    import pandas as pd

    n = table.num_rows
    step = conf.max_records if conf.max_records > 0 else n or 1
    return [pd.DataFrame(list(to_frame(table.slice(i, step), conf).itertuples(index=False)))
            for i in range(0, n, step)]


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
