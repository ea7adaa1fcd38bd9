"""Time modes of the two processors (``transform_with_state`` and ``transform_batches``):
the options checked on the driver, and in a task the event time of a batch's rows, the late
rows (at or before the watermark of the batches before) and the timers that are due.

Timers use the layout of ``_varkeys.py``: a shard-wide index per key group
(``kg 'T' expiry enc(key)``), scanned here for the due ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from silt.errors import InvalidArgumentError, InvalidTypeError

from ..runtime import _api, _keys
from ..runtime._shard import ShardTask
from ._varkeys import TIMER_TAG

TIME_MODES = ("none", "processingtime", "eventtime")


def time_config(df: Any, mode: str, column: str | None, delay: Any) -> Any:
    """The time handling of an operator from its ``time_mode``, ``event_time_column`` and
    ``watermark_delay`` options (checked against ``df``'s schema), as the processors take
    them."""
    from pyspark.sql import types as T

    m = str(mode).lower()
    if m not in TIME_MODES:
        raise InvalidArgumentError(
            f"time_mode must be one of {TIME_MODES}, got {mode!r}"
        )
    delay_ms = _api.parse_delay_ms(delay)
    if m != "eventtime":
        if column is not None:
            raise InvalidArgumentError("event_time_column needs time_mode='eventtime'")
        if delay_ms:
            raise InvalidArgumentError("watermark_delay needs time_mode='eventtime'")
        return TimeConfig(m)
    if column is None:
        raise InvalidArgumentError("time_mode='eventtime' needs event_time_column")
    fields = {f.name: f.dataType for f in df.schema.fields}
    t = fields.get(column)
    if t is None:
        raise InvalidArgumentError(f"event_time_column {column!r} is not in the DataFrame")
    if not isinstance(t, (T.TimestampType, T.TimestampNTZType, T.LongType, T.IntegerType)):
        raise InvalidTypeError(
            f"event_time_column {column!r} must be a timestamp or ms, not {t}"
        )
    return TimeConfig(m, column, delay_ms)


@dataclass(frozen=True)
class TimeConfig:
    """Time handling of a processor operator (plain data, shipped to the tasks)."""

    mode: str = "none"
    event_time_column: str | None = None
    watermark_delay_ms: int = 0

    @property
    def event_time_delays(self) -> tuple[int, ...]:
        """The watermark delays the operator's spec records: this one in event time, else
        none."""
        return (self.watermark_delay_ms,) if self.mode == "eventtime" else ()


def meta_int(meta: dict[str, str], name: str) -> int | None:
    v = meta.get(name)
    return int(v) if v else None


def max_event_time_ms(column: Any) -> int | None:
    """The largest value of an event-time column in ms (timestamps or integral ms)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    if pa.types.is_timestamp(t):
        top = pc.max(column.cast(pa.int64())).as_py()
        if top is None:
            return None
        per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        return top * 1000 if per_ms is None else top // per_ms
    if pa.types.is_integer(t):
        top = pc.max(column).as_py()
        return None if top is None else int(top)
    raise InvalidTypeError(
        f"the event-time column must be a timestamp or integral ms column, got {t}"
    )


def late_mask(column: Any, watermark: int | None) -> Any:
    """``True`` where an event time (timestamp or integral ms) is at or before ``watermark``
    (ms); nulls are never late, as in Spark. ``None`` when no row is late."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if watermark is None:
        return None
    t = column.type
    if pa.types.is_timestamp(t):
        per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        raw = column.cast(pa.int64())
        limit = watermark // 1000 if per_ms is None else watermark * per_ms
        mask = pc.less_equal(raw, limit)
    else:
        mask = pc.less_equal(column, watermark)
    mask = pc.fill_null(mask, False)
    return mask if pc.any(mask).as_py() else None


def due_timers(task: ShardTask, threshold: int) -> tuple[list[tuple[int, int, bytes]], int | None]:
    """Timers of the shard with expiry ``<= threshold`` as ``(expiry, kg, encoded key)`` in
    firing order, and the smallest expiry after ``threshold`` (``None``: no timer left).
    One short scan per key group of the shard's timer index."""
    entries, nxt = _keys.due_entries(task.db, task.first_kg, task.last_kg, TIMER_TAG,
                                     threshold)
    due = sorted((expiry, kg, _keys.after_time(k)) for expiry, kg, k in entries)
    return due, nxt
