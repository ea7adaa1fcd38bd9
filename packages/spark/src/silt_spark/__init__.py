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

import importlib
from typing import TYPE_CHECKING, Any

from . import errors
from .runtime import _readers

if TYPE_CHECKING:
    from .inspect._changes import read_changes
    from .inspect._read import read_state
    from .inspect._size import StateSize, state_size
    from .operators.aggregate import aggregate
    from .operators.batch import BatchProcessor, transform_batches
    from .operators.dedup import deduplicate
    from .operators.join._builder import join
    from .operators.processor import (
        ExpiredTimerInfo,
        ListState,
        MapState,
        StatefulProcessor,
        StatefulProcessorHandle,
        TimerValues,
        ValueState,
        transform_with_state,
    )
    from .operators.window import window_aggregate
    from .runtime._lifecycle import drop_state
    from .runtime._metrics import MetricsListener, metrics
    from .runtime._progress import progress_metrics

#: Public name -> the module defining it, imported on first use (PEP 562), so that importing
#: ``silt_spark`` (as silt does for its ``silt`` entry point, ``silt_spark.plugin``, in every
#: process that lists its plugins) imports neither pyspark nor numpy (docs/plugins.md).
_EXPORTS = {
    "aggregate": "operators.aggregate",
    "read_changes": "inspect._changes",
    "deduplicate": "operators.dedup",
    "join": "operators.join",
    "drop_state": "runtime._lifecycle",
    "MetricsListener": "runtime._metrics",
    "metrics": "runtime._metrics",
    **dict.fromkeys(
        ("ExpiredTimerInfo", "ListState", "MapState", "StatefulProcessor",
         "StatefulProcessorHandle", "TimerValues", "ValueState", "transform_with_state"),
        "operators.processor",
    ),
    "progress_metrics": "runtime._progress",
    "read_state": "inspect._read",
    "StateSize": "inspect._size",
    "state_size": "inspect._size",
    "window_aggregate": "operators.window",
    "BatchProcessor": "operators.batch",
    "transform_batches": "operators.batch",
}


#: ``read_state`` and ``silt inspect`` find each operator's state reader through the registry;
#: the operators register when imported, which happens here only when a reader needs them.
_readers.add_loader(lambda: importlib.import_module(".operators", __name__).register_readers())


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'silt_spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__version__ = "0.1.0"

__all__ = [
    "BatchProcessor",
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
    "transform_batches",
    "transform_with_state",
    "window_aggregate",
]
