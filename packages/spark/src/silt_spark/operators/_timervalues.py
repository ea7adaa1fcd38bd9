"""The batch's times as both processors hand them to user code (PySpark's ``TimerValues``):
``transform_with_state`` and ``transform_batches``."""

from __future__ import annotations


class TimerValues:
    """Processing time and watermark of the current micro-batch (PySpark's ``TimerValues``)."""

    def __init__(self, currentProcessingTimeInMs: int = -1, currentWatermarkInMs: int = -1):
        self._processing = currentProcessingTimeInMs
        self._watermark = currentWatermarkInMs

    def getCurrentProcessingTimeInMs(self) -> int:
        """Wall-clock time when the shard's task started, in ms since the epoch."""
        return self._processing

    def getCurrentWatermarkInMs(self) -> int:
        """The query's event-time watermark of the micro-batch in ms (``0`` before any event,
        as in Spark; ``-1`` when not in ``time_mode="eventtime"``)."""
        return self._watermark
