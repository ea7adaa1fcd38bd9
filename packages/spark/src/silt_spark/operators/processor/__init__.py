"""The per-key processor operator, ``transform_with_state`` (PySpark 4's
``transformWithStateInPandas`` shape), on silt state.

- ``_user.py``: what user code subclasses and receives (``StatefulProcessor``, ``TimerValues``,
  ``ExpiredTimerInfo``);
- ``_state.py``: the state variables (``ValueState``, ``ListState``, ``MapState``);
- ``_handle.py``: ``StatefulProcessorHandle``, the state of one key at a time, read ahead per batch;
- ``_runner.py``: the shard task's part of a micro-batch (rows, initial state, timers);
- ``_builder.py``: ``transform_with_state`` on the driver;
- ``_handover.py``: pandas hand-over (the initial state is ``operators/_initial.py``, shared with
  ``transform_batches``);
- ``_reader.py``: the state as ``read_state`` rows.

The key layout is ``operators/_varkeys.py``, shared with ``transform_batches``.
"""

from ._builder import transform_with_state
from ._handle import StatefulProcessorHandle
from ._state import ListState, MapState, ValueState
from ._user import ExpiredTimerInfo, StatefulProcessor, TimerValues

__all__ = [
    "ExpiredTimerInfo",
    "ListState",
    "MapState",
    "StatefulProcessor",
    "StatefulProcessorHandle",
    "TimerValues",
    "ValueState",
    "transform_with_state",
]
