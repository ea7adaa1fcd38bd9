"""A processor's part of a micro-batch in the shard's task: the batch's rows grouped by key and
handed to ``handleInputRows``, the initial state in batch 0, then the timers that are due
(processing or event time), with late rows dropped against the watermark.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterator
from typing import Any

from ...runtime import _codec
from ...runtime._layout import KG_COLUMN, PARTITION_COLUMN
from ...runtime._names import (
    META_LATE_ROWS,
    META_NEXT_TIMER,
    META_WATERMARK,
)
from ...runtime._shard import ShardTask
from .. import _initial
from .._timemode import TimeConfig
from .._timemode import due_timers as _due_timers
from .._timemode import late_mask as _late_mask
from .._timemode import max_event_time_ms as _max_event_time_ms
from .._timemode import meta_int as _meta_int
from .._varkeys import TIMER_MARK, _due_key, _timer_bytes
from . import _handover
from ._handle import StatefulProcessorHandle
from ._user import ExpiredTimerInfo, TimerValues


def process_partition(
    task: ShardTask,
    batches: Iterator[Any],
    processor: Any,
    key_columns: list[str],
    output_schema: Any,
    rows_format: Any = "pandas",
    time: TimeConfig = TimeConfig(),  # noqa: B008 - frozen
    schemas: dict[str, Any] | None = None,
    initial: str | None = None,
) -> Iterator[Any]:
    """Group the shard's rows by key, run the processor per key, then fire due timers; yield
    output Arrow batches.

    ``initial`` is the staging id of the query's initial state (``_initial.py``): in
    micro-batch 0 the shard's initial rows go to ``handleInitialState`` per key first.

    ``rows_format`` (a name or a ``_handover.RowsFormat``) is ``"pandas"`` (PySpark's shape:
    an iterator of DataFrames per key, with Spark's dtypes), ``"row"`` (an iterator of
    ``pyspark.sql.Row``, as PySpark's ``transformWithState``) or ``"arrow"`` (an iterator of
    ``pyarrow.Table`` slices: much cheaper per key). Spark runs this
    for every partition, empty ones included, so timers fire even in batches that bring the
    shard no rows. Heartbeat rows (key group ``-1``) only make a batch happen; they are dropped.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    fmt = _handover.RowsFormat.of(rows_format)
    batches = list(batches)
    table = pa.Table.from_batches(batches) if batches else None
    if table is not None and table.num_rows:
        kg_col = table[KG_COLUMN]
        if pc.min(kg_col).as_py() < 0:
            table = table.filter(pc.greater_equal(kg_col, 0))
    rows = table.num_rows if table is not None else 0
    timers_on = time.mode != "none"
    init_rows = None
    if initial is not None and task.batch_id == 0:
        init_rows = _initial.load(task.spec.root, initial, task.shard,
                                  task.spec.storage_options)
    if rows == 0 and not timers_on and init_rows is None:
        return  # no rows and no timers: the shard is not even opened
    meta = task.base_meta
    next_timer = _meta_int(meta, META_NEXT_TIMER) if timers_on else None
    if rows == 0 and next_timer is None and init_rows is None:
        return
    now_ms = int(_time.time() * 1000)
    watermark = task.watermark if time.mode == "eventtime" else None
    timer_values = TimerValues(now_ms, -1 if watermark is None else watermark)
    threshold = now_ms if time.mode == "processingtime" else watermark
    if rows == 0 and init_rows is None and (threshold is None or next_timer > threshold):
        return  # nothing due: this shard has no work in this batch

    if watermark is not None:
        task.meta_updates[META_WATERMARK] = str(watermark)  # for inspection, if it commits
    handle = StatefulProcessorHandle(task, time.mode, schemas, timezone=fmt.state_timezone)
    processor.init(handle)
    output = _handover.Output(output_schema, fmt.pandas)
    add = output.add
    if fmt.name == "row":
        def add(result: Any) -> None:
            output.add(_handover.row_output(result))
    bound = next_timer
    try:
        if init_rows is not None:
            _initial_state(handle, processor, init_rows, key_columns, fmt, timer_values)
        if time.mode == "eventtime" and not task.spec.ticks:  # the no-data batch's work first
            bound = _fire_timers(task, handle, processor, timer_values, threshold, bound, add,
                                 key_columns)
        if rows:
            table = table.drop_columns([PARTITION_COLUMN])
            if time.mode == "eventtime":
                column = table[time.event_time_column]
                task.observe_event_time(_max_event_time_ms(column))
                late = _late_mask(column, task.late_watermark)  # batch b - 1's watermark
                if late is not None:
                    # As Spark's transformWithState in event time: rows at or before the
                    # watermark never reach the processor.
                    table = table.filter(pc.invert(late))
                    if table.num_rows < rows:
                        task.meta_updates[META_LATE_ROWS] = str(
                            (_meta_int(meta, META_LATE_ROWS) or 0) + rows - table.num_rows
                        )
                        task.changed = True
                    rows = table.num_rows
        if rows:
            groups = _handover.KeyGroups(table, key_columns, KG_COLUMN)
            groups.prepare(fmt)
            bind = handle._bind
            encoded = list(map(_codec.encode, groups.keys))
            handle._prefetch(zip(groups.kgs, encoded))  # no state read below waits on the store
            for i in range(len(groups)):
                bind(groups.kgs[i], encoded[i])
                key, parts = groups.handed(i)
                add(processor.handleInputRows(key, iter(parts), timer_values))
            handle._prefix = None
        if timers_on:
            bound = _fire_timers(task, handle, processor, timer_values, threshold, bound, add,
                                 key_columns)
            if bound != next_timer:
                task.meta_updates[META_NEXT_TIMER] = "" if bound is None else str(bound)
                task.changed = True
    finally:
        close = getattr(processor, "close", None)
        if close is not None:
            close()
    yield from output.batches()


def _initial_state(
    handle: StatefulProcessorHandle, processor: Any, table: Any, key_columns: list[str],
    fmt: _handover.RowsFormat, timer_values: TimerValues,
) -> None:
    """Call ``processor.handleInitialState(key, rows, timerValues)`` per key of the shard's
    initial rows, as PySpark does: once per DataFrame chunk (``"pandas"``), per ``Row``
    (``"row"``) or once with the key's Arrow table (``"arrow"``). What it returns is ignored,
    as in PySpark; a processor without the method ignores its initial state, as in PySpark."""
    fn = getattr(processor, "handleInitialState", None)
    if fn is None or not table.num_rows:
        return
    groups = _handover.KeyGroups(table, key_columns, KG_COLUMN)
    groups.prepare(fmt)
    encoded = list(map(_codec.encode, groups.keys))
    handle._prefetch(zip(groups.kgs, encoded))
    for i in range(len(groups)):
        handle._bind(groups.kgs[i], encoded[i])
        key, parts = groups.handed(i)
        for part in parts:
            fn(key, part, timer_values)
    handle._prefix = None


def _fire_timers(
    task: ShardTask, handle: StatefulProcessorHandle, processor: Any,
    timer_values: TimerValues, threshold: int | None, bound: int | None, add: Any,
    keys: list[str] | None = None,
) -> int | None:
    """Fire the shard's timers due at ``threshold``; return the shard's new next-timer bound.

    ``bound`` (``spark.next_timer_ms`` in the meta) is a lower bound of the shard's timers
    (deleting a timer leaves it alone), so a batch scans the timer index only when a timer may
    be due. With the key columns' names ``keys``, the handler gets its key as PySpark's: a
    ``Row`` (else a tuple).
    """
    registered = handle._registered_min
    handle._registered_min = None
    if registered is not None and (bound is None or registered < bound):
        bound = registered
    if bound is not None and threshold is not None and bound <= threshold:
        due, bound = _due_timers(task, threshold)
        fire = getattr(processor, "handleExpiredTimer", None)
        db = task.db
        decode = _codec.decode
        if fire is not None:
            handle._prefetch((kg, enc) for _, kg, enc in due)
        for expiry, kg, enc in due:
            handle._bind(kg, enc)
            if fire is not None:
                # As PySpark: the timer is removed once its handler is done, so listTimers()
                # in the handler lists it (and registering it again there does not keep it).
                key = decode(enc) if keys is None else _handover.timer_key(
                    decode(enc), keys, handle._timezone)
                add(fire(key, timer_values, ExpiredTimerInfo(expiry)))
            db.delete(handle._prefix + TIMER_MARK + _timer_bytes(expiry))
            db.delete(_due_key(kg, expiry, enc))
            task.changed = True
            handle._state.timer_deleted(handle._prefix, expiry)
        handle._prefix = None
        again = handle._registered_min
        handle._registered_min = None
        if again is not None and (bound is None or again < bound):
            bound = again
    return bound
