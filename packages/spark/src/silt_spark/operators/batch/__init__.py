"""The vectorized stateful processor: :func:`transform_batches`.

A :class:`BatchProcessor` declares typed state variables in ``init(handle)`` as a
:class:`~silt_spark.StatefulProcessor` does, and its ``process(batch, state, timers)`` is called
**once per shard and micro-batch** with all the shard's rows as a ``pyarrow.Table``; state is
read and written for many keys at once (``state.value(name).get(keys)``). The state layout is
the per-key processor's (the same operator kind), so a query may switch between
``transform_with_state`` and ``transform_batches`` on the same state when both declare their
variables alike.

Modules: ``_builder`` (the driver side: options, schemas, the query plan), ``_task`` (one
shard's micro-batch in its Spark task) and ``_state`` (the handle and the vectorized state
variables).
"""

from ._builder import transform_batches
from ._state import BatchHandle, BatchProcessor, BatchStates, BatchValueState

__all__ = ["BatchHandle", "BatchProcessor", "BatchStates", "BatchValueState",
           "transform_batches"]
