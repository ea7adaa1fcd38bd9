"""Spark's on-disk names, in one place: the object every operator root holds, the descriptor
fields and operator kind that more than one operator writes, and the manifest meta keys that
more than one module reads or writes. A key only one operator knows stays with that operator
(for example the join's ``spark.join_*`` and the window's ``spark.window_min_start_ms``).

Each is part of the state format: renaming one makes older state unreadable.
"""

from __future__ import annotations

#: The operator root's descriptor object (:mod:`silt_spark.runtime._descriptor`).
DESCRIPTOR = "silt-spark.json"

#: The operator kind of ``transform_with_state`` and ``transform_batches`` (one state layout).
PROCESSOR_KIND = "processor"
#: A processor root's descriptor field holding the state schema registry (``_schema.py``).
DESCRIPTOR_SCHEMAS = "state_schemas"

# -- manifest meta: every shard --------------------------------------------------------------
#: The streaming query that committed the version.
META_QUERY_ID = "spark.query_id"
META_BATCH_ID = "spark.batch_id"
#: The task's input row count (``_metrics.TaskProbe.meta``).
META_ROWS_IN = "spark.rows_in"
#: The micro-batch whose task last collected the shard's garbage (state maintenance).
META_MAINTAINED = "spark.maintained_batch"

# -- manifest meta: event time ---------------------------------------------------------------
#: The watermark the batch ran with (ms).
META_WATERMARK = "spark.watermark_ms"
#: The largest event time the shard has seen (ms).
META_MAX_EVENT_TIME = "spark.max_event_time_ms"
#: Lower bound of the shard's next timer (ms; processors).
META_NEXT_TIMER = "spark.next_timer_ms"
#: The operator's running count of rows dropped as late (window aggregation, processors).
META_LATE_ROWS = "spark.late_rows"
#: State variables ``deleteIfExists`` removed from the shard and nothing wrote since (a JSON
#: list of names; processors).
META_DELETED_STATES = "spark.deleted_states"
