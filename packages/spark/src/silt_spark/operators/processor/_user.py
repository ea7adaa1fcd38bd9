"""What user code of ``transform_with_state`` sees besides its state: the processor it subclasses
(:class:`StatefulProcessor`), the batch's times (:class:`TimerValues`) and a firing timer
(:class:`ExpiredTimerInfo`), shaped like PySpark 4's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._timervalues import TimerValues

if TYPE_CHECKING:
    from ._handle import StatefulProcessorHandle


class StatefulProcessor:
    """Per-key stateful logic, applied with :func:`silt_spark.transform_with_state`.

    Subclass it and implement :meth:`init` and :meth:`handleInputRows`; :meth:`close` is
    optional. Code written for PySpark's own ``StatefulProcessor`` (used with
    ``transformWithStateInPandas``) runs unchanged: any object with these methods is accepted.

    One processor instance serves one shard in one micro-batch: ``init`` is called first, then
    ``handleInputRows`` once per grouping key present in the batch, then ``close``. Keep per-key
    data in state obtained from the handle, never in attributes.

    Examples
    --------
    >>> import pandas as pd
    >>> class RunningCount(StatefulProcessor):
    ...     def init(self, handle):
    ...         self.count = handle.getValueState("count", "n long")
    ...     def handleInputRows(self, key, rows, timerValues):
    ...         n = (self.count.get() or (0,))[0] + sum(len(df) for df in rows)
    ...         self.count.update((n,))
    ...         yield pd.DataFrame({"user": [key[0]], "n": [n]})
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Create state variables with ``handle.getValueState`` and friends.

        Parameters
        ----------
        handle : StatefulProcessorHandle
            Gives access to this operator's state.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.seen = handle.getMapState("seen", "id string", "ts long", 3_600_000)
        """
        raise NotImplementedError

    def handleInputRows(
        self, key: tuple, rows: Iterator[Any], timerValues: TimerValues
    ) -> Iterator[Any]:
        """Process one grouping key's rows of this micro-batch and yield output rows.

        Parameters
        ----------
        key : tuple
            The grouping key's values, one per key column.
        rows : iterator of pandas.DataFrame (or of pyspark.sql.Row, or pyarrow.Table)
            The key's rows in this micro-batch (all input columns), in ``rows_format``.
        timerValues : TimerValues
            Processing time and watermark of the batch.

        Returns
        -------
        iterator of pandas.DataFrame
            Output rows matching the operator's ``output_schema``; may be empty. Returning a
            single DataFrame or ``None`` is accepted too.

        Examples
        --------
        >>> import pandas as pd
        >>> class Echo(StatefulProcessor):
        ...     def init(self, handle):
        ...         pass
        ...     def handleInputRows(self, key, rows, timerValues):
        ...         for df in rows:
        ...             yield df
        """
        raise NotImplementedError

    def handleInitialState(self, key: tuple, initialState: Any, timerValues: TimerValues) -> None:
        """Called in the query's first micro-batch once per key of the ``initial_state``
        DataFrame given to :func:`silt_spark.transform_with_state`, before ``handleInputRows``
        (as PySpark's). Optional: by default the initial state is ignored.

        Parameters
        ----------
        key : tuple
            The grouping key's values.
        initialState : pandas.DataFrame or pyarrow.Table
            The key's initial rows (a ``pyarrow.Table`` with ``rows_format="arrow"``).
        timerValues : TimerValues
            Processing time and watermark of the batch.

        Examples
        --------
        >>> class Count(StatefulProcessor):
        ...     def init(self, handle):
        ...         self.n = handle.getValueState("n", "n long")
        ...     def handleInitialState(self, key, initialState, timerValues):
        ...         self.n.update((int(initialState["n"].sum()),))
        """

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Any]:
        """Called once per timer of ``key`` that is due, after the batch's input rows.

        State variables and timer calls act on ``key`` here, as in ``handleInputRows``. As in
        PySpark, the timer is removed when the handler returns: ``listTimers()`` lists it
        during the call, and registering it again there does not keep it; register another
        timestamp to fire again. Output rows are yielded
        as from ``handleInputRows``. Spark runs every shard in every micro-batch, so a timer
        fires even when its shard gets no rows (see ``heartbeat`` for idle streams).

        Examples
        --------
        >>> class Timeout(StatefulProcessor):
        ...     def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        ...         yield pd.DataFrame({"user": [key[0]], "timed_out_at": [
        ...             expiredTimerInfo.getExpiryTimeInMs()]})
        """
        return iter(())

    def close(self) -> None:
        """Called once after the last key of the micro-batch.

        Examples
        --------
        >>> class P(StatefulProcessor):
        ...     def close(self):
        ...         self.cache = None
        """


class ExpiredTimerInfo:
    """What ``handleExpiredTimer`` learns about the timer that fired (PySpark's shape)."""

    def __init__(self, expiryTimeInMs: int) -> None:
        self._expiry = expiryTimeInMs

    def isValid(self) -> bool:
        """Always ``True`` here: the object is only made for a firing timer."""
        return True

    def getExpiryTimeInMs(self) -> int:
        """The timer's timestamp in ms."""
        return self._expiry
