"""One shard's micro-batch of ``transform_batches``, inside its Spark task.

The task (under ``silt_spark.runtime._shard.run_shard``, which opens the shard at the batch's base,
commits version ``b`` when the task succeeded and anything changed, and discards every write of
a failed task) gathers the shard's rows into one ``pyarrow.Table``, finds the batch's grouping
keys and their key groups, runs ``processor.init(handle)``, reads the state of every key ahead
(one ``multi_get`` for value state, one ``multi_scan`` for list and map state), calls
``processor.process(batch, state, timers)`` once and checks what it returned against the output
schema. A shard with no rows in a batch does not open its state.

Any error (a state call refused, output of the wrong shape, an exception in ``process``) fails
the task before anything is committed; it names the processor, the micro-batch and the shard.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterator
from typing import Any

from ...runtime import _rowcodec
from ...runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ...runtime._shard import ShardTask
from .. import _initial
from .._timervalues import TimerValues
from ._handle import BatchHandle, BatchStates
from ._state import BatchKeys
from ._tables import as_table, conform


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
) -> Iterator[Any]:
    """Run ``processor`` over the shard's rows of the micro-batch; yield output Arrow batches
    of ``output_schema``. Heartbeat rows (key group ``-1``) are dropped. ``initial``: the
    staging id of the query's initial state (``operators/_initial.py``), handed to
    ``process_initial`` in micro-batch 0 before ``process``."""
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
    if not rows and init_rows is None:
        return  # no rows: the shard is not even opened
    name = type(processor).__name__
    where = f"batch processor {name} (micro-batch {task.batch_id}, shard {task.shard})"

    # the keys state calls take: the batch's, and its initial rows'
    with_keys = [t.select([*key_columns, KG_COLUMN]) for t in (table, init_rows)
                 if t is not None and t.num_rows]
    distinct = pa.concat_tables(with_keys, promote_options="permissive").group_by(
        key_columns, use_threads=False).aggregate([(KG_COLUMN, "min")])
    encoded = _rowcodec.encode_tuples([distinct[c] for c in key_columns],
                                      distinct.num_rows).to_list()
    keys = BatchKeys(key_columns, encoded, distinct[f"{KG_COLUMN}_min"].to_pylist(), name)
    handle = BatchHandle(task, name, registry, arrow_schemas, arrow_keys)
    timers = TimerValues(int(_time.time() * 1000), -1)
    out = output_schema.empty_table()
    try:
        processor.init(handle)
        handle._bind(keys)  # no state read in process waits on the store
        states = BatchStates(handle)
        if init_rows is not None:
            processor.process_initial(init_rows.drop_columns([KG_COLUMN]), states, timers)
        if rows:
            batch = table.drop_columns([PARTITION_COLUMN, KG_COLUMN])
            out = _output(processor.process(batch, states, timers), output_schema, where)
    except Exception as exc:
        exc.add_note(f"in {where}; nothing of this micro-batch was committed")
        raise
    finally:
        close = getattr(processor, "close", None)
        if close is not None:
            close()
    yield from out.to_batches(max_chunksize=65536)


def _output(result: Any, schema: Any, where: str) -> Any:
    """What ``process`` returned as a table of the output ``schema`` (columns by name, cast to
    their types), or an error saying what does not fit."""
    if result is None:
        return schema.empty_table()
    result = as_table(result, f"{where}: process must return a pyarrow Table or RecordBatch, "
                              "a pandas DataFrame or None, got {got}")
    return conform(result, schema, f"{where}: process returned", "output_schema",
                   f"{where}: what process returned does not fit output_schema {schema}")
