"""One shard's micro-batch of ``transform_batches``, inside its Spark task.

The task (under ``silt_spark.runtime._run.run_shard``, which opens the shard at the batch's base,
commits version ``b`` when the task succeeded and anything changed, and discards every write of
a failed task) gathers the shard's rows into one ``pyarrow.Table``, finds the batch's grouping
keys and their key groups, runs ``processor.init(handle)``, reads the state of every key ahead
(one ``multi_get`` for value state, one ``multi_scan`` for list and map state), calls
``processor.process(batch, state, timers)`` once and checks what it returned against the output
schema. With a time mode the due timers go to ``processor.expired(keys, times, state)`` as the
per-key processor fires them (``_timers.py``), late rows dropped in event time as there. A shard
with no rows and no timer due in a batch does not open its state.

Any error (a state call refused, output of the wrong shape, an exception in ``process``) fails
the task before anything is committed; it names the processor, the micro-batch and the shard.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterator
from typing import Any

from ...runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ...runtime._names import META_LATE_ROWS, META_NEXT_TIMER, META_WATERMARK
from ...runtime._ndarrays import to_numpy
from ...runtime._shard import ShardTask
from .. import _initial
from .._groupby import group_by
from .._timemode import TimeConfig, late_mask, max_event_time_ms, meta_int
from ._handle import BatchHandle, BatchStates
from ._keyset import BatchKeys, encode_keys
from ._tables import as_table, conform
from ._timers import BatchTimers, fire


def process_partition(
    task: ShardTask,
    batches: Iterator[Any],
    processor: Any,
    key_columns: list[str],
    output_schema: Any,
    registry: dict[str, Any],
    arrow_schemas: dict[str, Any],
    arrow_keys: dict[str, Any],
    initial: str | None = None,
    time: TimeConfig = TimeConfig(),  # noqa: B008 - frozen
    key_schema: Any = None,
) -> Iterator[Any]:
    """Run ``processor`` over the shard's rows of the micro-batch; yield output Arrow batches
    of ``output_schema``. Heartbeat rows (key group ``-1``) are dropped. ``initial``: the
    staging id of the query's initial state (``operators/_initial.py``), handed to
    ``process_initial`` in micro-batch 0 before ``process``. ``time``: the time mode; with
    one, due timers go to ``expired`` as the per-key processor fires them (event time: those
    due when the batch starts before ``process``, late rows dropped first; then, and in
    processing time, those due after it), their keys as Arrow columns of ``key_schema``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    batches = list(batches)
    table = pa.Table.from_batches(batches) if batches else None
    if table is not None and table.num_rows and pc.min(table[KG_COLUMN]).as_py() < 0:
        table = table.filter(pc.greater_equal(table[KG_COLUMN], 0))
    init_rows = None
    if initial is not None and task.batch_id == 0:
        init_rows = _initial.load(task.spec.root, initial, task.shard,
                                  task.spec.storage_options)
        if init_rows is not None and not init_rows.num_rows:
            init_rows = None
    rows = table.num_rows if table is not None else 0
    timers_on = time.mode != "none"
    meta = task.base_meta
    next_timer = meta_int(meta, META_NEXT_TIMER) if timers_on else None
    now_ms = int(_time.time() * 1000)
    watermark = task.watermark if time.mode == "eventtime" else None
    threshold = now_ms if time.mode == "processingtime" else watermark
    if not rows and init_rows is None and (
            next_timer is None or threshold is None or next_timer > threshold):
        return  # no rows and nothing due: the shard is not even opened
    name = type(processor).__name__
    where = f"batch processor {name} (micro-batch {task.batch_id}, shard {task.shard})"
    if watermark is not None:
        task.meta_updates[META_WATERMARK] = str(watermark)  # for inspection, if it commits
    if rows and time.mode == "eventtime":
        column = table[time.event_time_column]
        task.observe_event_time(max_event_time_ms(column))
        late = late_mask(column, task.late_watermark)  # batch b - 1's watermark
        if late is not None:  # as the per-key processor: late rows never reach process
            table = table.filter(pc.invert(late))
            task.meta_updates[META_LATE_ROWS] = str(
                (meta_int(meta, META_LATE_ROWS) or 0) + rows - table.num_rows)
            task.changed = True
            rows = table.num_rows

    # the keys state calls take: the batch's, and its initial rows'
    with_keys = [t.select([*key_columns, KG_COLUMN]) for t in (table, init_rows)
                 if t is not None and t.num_rows]
    kgs: Any = []
    encoded: Any = []
    if with_keys:
        distinct = group_by(pa.concat_tables(with_keys, promote_options="permissive"),
                            key_columns, [(KG_COLUMN, "min")])
        encoded = encode_keys([distinct[c] for c in key_columns], distinct.num_rows)
        kgs = to_numpy(distinct[f"{KG_COLUMN}_min"])
    keys = BatchKeys(key_columns, encoded, kgs, name,
                     [distinct[c] for c in key_columns] if with_keys else None)
    handle = BatchHandle(task, name, registry, arrow_schemas, arrow_keys)
    timers = BatchTimers(handle, time.mode, now_ms, -1 if watermark is None else watermark)
    outs = []
    bound = next_timer
    try:
        processor.init(handle)
        handle._bind(keys)  # no state read in process waits on the store
        states = BatchStates(handle, timers)
        if init_rows is not None:
            processor.process_initial(init_rows.drop_columns([KG_COLUMN]), states, timers)
        if time.mode == "eventtime" and not task.spec.ticks:  # the no-data batch's work first
            bound, fired = fire(task, handle, processor, states, timers, threshold, bound,
                                key_schema)
            outs.append(_output(fired, output_schema, where, "expired"))
        if rows:
            batch = table.drop_columns([PARTITION_COLUMN, KG_COLUMN])
            outs.append(_output(processor.process(batch, states, timers), output_schema,
                                where))
        if timers_on:
            bound, fired = fire(task, handle, processor, states, timers, threshold, bound,
                                key_schema)
            outs.append(_output(fired, output_schema, where, "expired"))
            if bound != next_timer:
                task.meta_updates[META_NEXT_TIMER] = "" if bound is None else str(bound)
                task.changed = True
    except Exception as exc:
        exc.add_note(f"in {where}; nothing of this micro-batch was committed")
        raise
    finally:
        close = getattr(processor, "close", None)
        if close is not None:
            close()
    for out in outs:
        yield from out.to_batches(max_chunksize=65536)


def _output(result: Any, schema: Any, where: str, call: str = "process") -> Any:
    """What ``process`` returned as a table of the output ``schema`` (columns by name, cast to
    their types), or an error saying what does not fit."""
    if result is None:
        return schema.empty_table()
    result = as_table(result, f"{where}: {call} must return a pyarrow Table or RecordBatch, "
                              "a pandas DataFrame or None, got {got}")
    return conform(result, schema, f"{where}: {call} returned", "output_schema",
                   f"{where}: what {call} returned does not fit output_schema {schema}")
