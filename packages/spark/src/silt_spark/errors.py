"""The errors silt_spark raises (all are :class:`silt.errors.SiltError`)."""

from __future__ import annotations

from silt.errors import SiltError


class SparkStateError(SiltError):
    """Base class of silt_spark's own errors."""


class ForeignStateError(SparkStateError):
    """The state root belongs to another streaming query (its id is in the manifests).

    Use a new ``state_url``, restart the original query from its checkpoint, or build the
    operator with ``take_over=True`` to discard that state.
    """


class StateLostError(SparkStateError):
    """The query's checkpoint is past micro-batch 0 but the state root has no state of the
    query: it was deleted or moved while the checkpoint was kept. Restore it, or drop it on
    purpose with :func:`silt_spark.drop_state` to start over with empty state."""


class NotAnOperatorRootError(SparkStateError, ValueError):
    """:func:`silt_spark.drop_state` was given a URL that holds objects but is not the state
    root of a silt_spark operator (it deletes nothing then)."""


class StateAheadError(SparkStateError):
    """The shard already has versions newer than the micro-batch being run: the query's
    checkpoint is older than its state."""


class BatchConflictError(SparkStateError):
    """A shard could not commit its micro-batch's version, and that version is not there
    either: another writer committed on the shard's base (a zombie task of another query, or
    a copy of the state), or the version was withdrawn by its writer (its number is never
    committed again). The task fails rather than let the batch's state go missing; restart the
    query from its checkpoint, and run ``silt verify`` on the state root if it fails again."""


class LayoutMismatchError(SparkStateError, ValueError):
    """The state root was created with another operator kind, key-group or shard count."""


class TimeModeError(SparkStateError, ValueError):
    """A state variable asks for what the operator's ``time_mode`` does not allow (a TTL in
    ``"eventtime"`` mode, which PySpark refuses too)."""


class StateSchemaError(SparkStateError, ValueError):
    """A state variable's declared schema cannot replace the one its state was written with
    (narrowing, another type, a changed map key schema, another kind of variable: see
    ``docs/spark.md``, Evolving state schemas), or is not a schema at all. Raised when the
    query starts, before anything is written."""


class VersionNotFoundError(SparkStateError, LookupError):
    """:func:`silt_spark.read_state` was asked for a version no shard of the root committed;
    the message names the versions there are."""


class ShardPlacementError(SparkStateError):
    """An operator's tasks do not run as partitions ``0..num_shards - 1`` of their Spark stage,
    so a task cannot tell which shard it is: the operator's output was put in one stage with
    other partitions, as a ``union`` does when the operator is not its first input. Add
    ``.repartition(n)`` to the operator's output before the union (a stage boundary), or make
    the operator the union's first input."""


class ReplayInputError(SparkStateError):
    """A micro-batch was run again on a shard whose version of it is committed, but this
    attempt's input differs from the committed attempt's (one had rows, the other none): the
    query's plan or source changed between the attempts, and replaying would lose or repeat
    state. Restore the plan the batch ran with, or start with a new ``state_url``."""


class NotStreamingError(SparkStateError):
    """An operator ran outside a streaming query (no micro-batch id in the task)."""


__all__ = [
    "BatchConflictError",
    "ForeignStateError",
    "LayoutMismatchError",
    "NotAnOperatorRootError",
    "NotStreamingError",
    "ReplayInputError",
    "ShardPlacementError",
    "SparkStateError",
    "StateAheadError",
    "StateLostError",
    "StateSchemaError",
    "TimeModeError",
]
