"""Operator metrics in Spark's own query progress, through ``DataFrame.observe``.

A silt operator has no Spark state, so ``StreamingQueryProgress.stateOperators`` has no entry
for it and PySpark offers no way to add one. What PySpark does offer is observed metrics:
aggregates of named expressions over the rows that pass a point of the plan, reported per
micro-batch in ``progress.observedMetrics[name]`` (and so in every ``StreamingQueryListener``,
the Spark UI's progress JSON, and any dashboard that reads it).

So the shard stage carries one hidden, nullable struct column, :data:`METRICS_COLUMN`. Output
rows have it null; each task appends one row where it holds the task's figures and every other
column is null. Right after the ``mapInArrow``, ``observe`` sums (or takes the maximum of) the
figures, then a filter drops the metric rows and the column. What the query's sink sees is
exactly the operator's output, with every field nullable.

The observation is named :func:`observation_name` (``silt <operator> <state_url>``, the URL
without its query), so two operators of one query on different roots never clash.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from silt.cost import request_classes
from silt.tierkit import public_url

from ._ndarrays import from_numpy, numpy_dtype

#: The hidden column of the shard stage (never reaches the sink).
METRICS_COLUMN = "__silt_metrics"

#: The figures of a task's metrics row: (name, Spark type, how ``observe`` combines tasks).
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("shards", "long", "sum"),
    ("shards_committed", "long", "sum"),
    ("shards_opened", "long", "sum"),
    ("rows_in", "long", "sum"),
    ("rows_out", "long", "sum"),
    ("state_reads", "long", "sum"),
    ("state_writes", "long", "sum"),
    ("requests_class_a", "long", "sum"),
    ("requests_class_b", "long", "sum"),
    ("open_ms", "double", "max"),
    ("process_ms", "double", "max"),
    ("commit_ms", "double", "max"),
    # Under the names of Spark's StateOperatorProgress (what its dashboards read there):
    ("numRowsTotal", "long", "sum"),
    ("numRowsUpdated", "long", "sum"),
    ("numRowsRemoved", "long", "sum"),
    ("numRowsDroppedByWatermark", "long", "sum"),
    ("memoryUsedBytes", "long", "max"),
    ("commitTimeMs", "long", "max"),
    ("allUpdatesTimeMs", "long", "max"),
    ("numStateStoreInstances", "long", "sum"),
    ("stateOnStoreBytes", "long", "sum"),
    ("shardsWithUnknownState", "long", "sum"),
)


def observation_name(kind: str, root: str) -> str:
    """The name of an operator's observed metrics in ``progress.observedMetrics``."""
    return f"silt {kind} {public_url(root)}"


def _metrics_type() -> Any:
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType

    types = {"long": LongType(), "double": DoubleType()}
    return StructType([StructField(n, types[t], True) for n, t, _ in FIELDS])


def stage_struct(struct: Any) -> Any:
    """The shard stage's Spark schema: ``struct`` with every field nullable, plus the metrics
    column."""
    from pyspark.sql.types import StructField, StructType

    return StructType(
        [StructField(f.name, f.dataType, True, f.metadata) for f in struct.fields]
        + [StructField(METRICS_COLUMN, _metrics_type(), True)]
    )


def arrow_schema(struct: Any) -> Any:
    """The Arrow schema of the shard stage's batches (see :func:`stage_struct`)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(stage_struct(struct), timezone="UTC")


def observe(mapped: Any, kind: str, root: str) -> Any:
    """``mapped`` (the shard stage) observed, its metric rows and column dropped."""
    from pyspark.sql import functions as F

    # One SQL expression per metric (one call into the JVM each, where building the same
    # column from Column methods takes three): this runs on the driver each time a query is
    # built, a cold restart included.
    aggs = [F.expr(f"{how}(`{METRICS_COLUMN}`.`{name}`) AS `{name}`") for name, _, how in FIELDS]
    return (mapped.observe(observation_name(kind, root), *aggs)
            .filter(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN))


class Stage:
    """One task's output through the shard stage: the operator's batches with the (null)
    metrics column appended (:meth:`data`), then the task's metrics row (:meth:`metrics`), all
    with one schema (the first output batch's, else the declared ``schema``: Spark's Arrow
    writer takes one schema per task)."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema

    def data(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        field = self.schema.field(METRICS_COLUMN)
        first = True
        for b in batches:
            out = pa.RecordBatch.from_arrays(
                [*b.columns, pa.nulls(b.num_rows, field.type)], schema=b.schema.append(field))
            if first:
                self.schema, first = out.schema, False
            yield out

    def metrics(self, record: dict[str, Any]) -> Any:
        """The task's metrics row: every output column null, the metrics column set from
        ``record`` (a :mod:`silt_spark.runtime._metrics` task record)."""
        return metrics_batch(record, self.schema)


def metrics_batch(record: dict[str, Any], schema: Any) -> Any:
    """A metrics row in ``schema`` (see :class:`Stage`)."""
    import numpy as np
    import pyarrow as pa

    classes = request_classes(record.get("requests", {}))
    values = {
        "shards": 1,
        "shards_committed": int(bool(record.get("committed"))),
        "shards_opened": int(bool(record.get("opened"))),
        "rows_in": record.get("rows_in", 0),
        "rows_out": record.get("rows_out", 0),
        "state_reads": record.get("state_reads", 0),
        "state_writes": record.get("state_writes", 0),
        "requests_class_a": classes["class_a"],
        "requests_class_b": classes["class_b"],
        "open_ms": float(record.get("open_ms", 0.0)),
        "process_ms": float(record.get("process_ms", 0.0)),
        "commit_ms": float(record.get("commit_ms", 0.0)),
        "numRowsTotal": record.get("state_rows", 0),
        "numRowsUpdated": record.get("state_puts", 0),
        "numRowsRemoved": record.get("state_deletes", 0),
        "numRowsDroppedByWatermark": record.get("late_rows", 0),
        "memoryUsedBytes": record.get("memory_bytes", 0),
        "commitTimeMs": round(record.get("commit_ms", 0.0)),
        "allUpdatesTimeMs": round(record.get("process_ms", 0.0)),
        "numStateStoreInstances": 1,
        "stateOnStoreBytes": record.get("state_bytes", 0),
        "shardsWithUnknownState": 1 - record.get("state_known", 1),
    }
    metrics_type = schema.field(METRICS_COLUMN).type
    arrays = [pa.nulls(1, f.type) for f in schema if f.name != METRICS_COLUMN]
    # Field by field from numpy: ``pa.array`` of the dict would import pandas in the task.
    fields = [metrics_type.field(i) for i in range(metrics_type.num_fields)]
    arrays.append(pa.StructArray.from_arrays(
        [from_numpy(np.array([values[f.name]], numpy_dtype(f.type))) for f in fields], fields=fields
    ))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def progress_metrics(progress: Any) -> dict[str, dict[str, Any]]:
    """The silt operators' figures in one micro-batch's progress (a
    ``StreamingQueryProgress``, or its ``json``/dict form as ``query.lastProgress`` gives it):
    observation name -> figures (``shards``, ``rows_in``, ..., see :data:`FIELDS`)."""
    import json

    if hasattr(progress, "json") and not isinstance(progress, dict):
        progress = json.loads(progress.json)
    observed = (progress or {}).get("observedMetrics") or {}
    out: dict[str, dict[str, Any]] = {}
    for name, row in observed.items():
        if not name.startswith("silt "):
            continue
        out[name] = dict(row.asDict() if hasattr(row, "asDict") else row)
    return out
