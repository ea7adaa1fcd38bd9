"""The vectorized stateful processor: :func:`transform_batches`.

A :class:`BatchProcessor` declares typed state variables in ``init(handle)`` as a
:class:`~silt_spark.StatefulProcessor` does (value, list and map state, each with an optional
TTL), and its ``process(batch, state, timers)`` is called **once per shard and micro-batch**
with all the shard's rows as a ``pyarrow.Table``; state is read and written for many keys at
once (``state.value(name).get(keys)``, ``state.list(name).append(keys, elements)``,
``state.map(name).put(keys, user_keys, values)``); ``initial_state=`` seeds it through
``process_initial(rows, state, timers)``; with ``time_mode=`` it registers timers for many keys
at once (``timers.register(keys, times)``) and gets the due ones in ``expired(keys, times,
state)``. The state layout is the per-key processor's
(the same operator kind), so a query may switch between ``transform_with_state`` and
``transform_batches`` on the same state when both declare their variables alike.

Modules: ``_builder`` (the driver side: options, schemas, the query plan), ``_task`` (one
shard's micro-batch in its Spark task), ``_handle`` (the handle, ``state`` and the batch's
prefetch), ``_state`` (the layout, what every variable shares, value state), ``_lists`` and
``_maps`` (list and map state), ``_timers`` (timers and their firing), ``_tables`` (tables
handed over).
"""

from ._builder import transform_batches
from ._handle import BatchHandle, BatchStates
from ._lists import BatchListState
from ._maps import BatchMapState
from ._processor import BatchProcessor
from ._state import BatchValueState
from ._timers import BatchTimers

__all__ = ["BatchHandle", "BatchListState", "BatchMapState", "BatchProcessor", "BatchStates",
           "BatchTimers", "BatchValueState", "transform_batches"]
