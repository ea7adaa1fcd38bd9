"""silt_spark: keyed stateful streaming operators for PySpark, with state in silt.

Each operator's state lives under one root URL, split by a stable hash of the key into key
groups and served by ``num_shards`` shards, each its own silt LSM. A shard commits state version
``b`` when micro-batch ``b`` finishes, so a checkpoint is a manifest commit and recovery opens a
manifest: neither grows with the state size. See ``docs/spark.md``.

Quick start::

    import silt_spark

    totals = silt_spark.aggregate(
        events, ["user"], ["count", "sum(amount)"],
        state_url="file:///data/state/totals", num_shards=4,
    )
    totals.writeStream.format("parquet").option("path", "/data/out") \\
        .option("checkpointLocation", "/data/chk").start()
"""

from __future__ import annotations

from . import errors
from ._aggregate import aggregate
from ._changes import read_changes
from ._dedup import deduplicate
from ._join import join
from ._lifecycle import drop_state
from ._metrics import MetricsListener, metrics
from ._processor import (
    ExpiredTimerInfo,
    ListState,
    MapState,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    ValueState,
    transform_with_state,
)
from ._progress import progress_metrics
from ._read import read_state
from ._size import StateSize, state_size
from ._window import window_aggregate

__version__ = "0.1.0"

__all__ = [
    "ExpiredTimerInfo",
    "ListState",
    "MapState",
    "MetricsListener",
    "StateSize",
    "StatefulProcessor",
    "StatefulProcessorHandle",
    "TimerValues",
    "ValueState",
    "aggregate",
    "deduplicate",
    "drop_state",
    "errors",
    "join",
    "metrics",
    "progress_metrics",
    "read_changes",
    "read_state",
    "state_size",
    "transform_with_state",
    "window_aggregate",
]
