"""The body of an operator's ``mapInArrow`` function in a Spark task: the batch's identity read
from the task context, the shard's task (:class:`silt_spark.runtime._shard.ShardTask`) opened,
run, committed and released, the task measured, and every input row checked to belong to the
shard (:func:`placed`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from silt.tierkit import public_url

from ..errors import NotStreamingError, ShardPlacementError
from . import _guard, _lifecycle, _metrics, _progress, _watermark
from ._layout import KG_COLUMN
from ._ndarrays import to_numpy
from ._root import OperatorSpec
from ._shard import ShardTask

#: Why a shard task runs as the wrong partition, and what to do: both placement checks say it.
_MISPLACED = (
    "its output shares a stage with other partitions (a union in which it is not the first "
    "input), or adaptive query execution coalesced its shuffle. Add .repartition(n) to the "
    "operator's output before the union, or make it the first input, and keep "
    "spark.sql.adaptive.enabled off"
)


def run_shard(
    spec: OperatorSpec,
    batches: Iterator[Any],
    process: Callable[[ShardTask, Iterator[Any]], Iterator[Any]],
    report: Any = None,
    progress_schema: Any = None,
) -> Iterator[Any]:
    """The body of the operator's ``mapInArrow`` function: open, process, commit, release.

    ``process`` gets the task's batches already checked to belong to its shard (:func:`placed`),
    so no operator checks key groups itself.

    Each task is measured (:mod:`silt_spark.runtime._metrics`): its counts go into the committed
    manifest's meta, and a successful task's record is added to ``report`` (the driver's
    metrics accumulator, or ``None``). With ``progress_schema`` (the stage's Arrow schema,
    :mod:`silt_spark.runtime._progress`), output batches carry the null metrics column and the task
    ends with its metrics row.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if batch_id is None:
        raise NotStreamingError(
            "silt_spark operators run on streaming DataFrames only (spark.readStream ...): the "
            "state version is the micro-batch id"
        )
    query_id = ctx.getLocalProperty("sql.streaming.queryId") or ""
    _guard.check_task(ctx.getLocalProperty(_guard.REFUSED), spec)  # refused when it started
    shard = ctx.partitionId()
    if shard >= spec.num_shards:
        raise ShardPlacementError(
            f"a task of the silt_{spec.kind} operator at {public_url(spec.root)} runs as "
            f"partition {shard} of its stage, but the operator has {spec.num_shards} shards: "
            f"{_MISPLACED}"
        )
    task = ShardTask(spec, shard, int(batch_id), query_id, ctx.attemptNumber(),
                     run_id=_watermark.run_of_task(ctx))
    probe = task.probe = _metrics.TaskProbe(task)
    stage = _progress.Stage(progress_schema) if progress_schema is not None else None
    ok = False
    try:
        if task.may_need_migration():
            _ = task.db  # a rescaled layout's shard takes its state at its first batch
        out = _lifecycle.checked_first(task.origin_checked, probe.count_out(
            process(task, placed(task, probe.count_in(batches)))))
        yield from out if stage is None else stage.data(out)
        task.meta_updates.update(probe.meta())
        task.finish()
        ok = True
    finally:
        record = probe.record() if ok else None
        task.release(ok)
    _metrics.report(report, record)
    if stage is not None and record is not None:
        yield stage.metrics(record)


def placed(task: ShardTask, batches: Iterator[Any]) -> Iterator[Any]:
    """``batches``, each checked by :func:`check_key_groups` as it passes (rows of a key group
    below 0 are tick or heartbeat rows, which belong to every shard): the one check, for every
    operator, that the task's rows are its shard's. (By numpy: ``pyarrow.compute`` costs a
    fresh worker 30-40 ms to import, see ``_arrowcompute``.)"""
    for b in batches:
        i = b.schema.get_field_index(KG_COLUMN)
        if i >= 0 and b.num_rows:
            kg = to_numpy(b.column(i))
            check_key_groups(task, kg[kg >= 0] if kg.min() < 0 else kg)
        yield b


def check_key_groups(task: ShardTask, kg_array: Any) -> None:
    """Fail loudly if a row reached a shard that does not own its key group (``kg_array``: a
    numpy array of key groups)."""
    if len(kg_array) == 0:
        return
    lo, hi = int(kg_array.min()), int(kg_array.max())
    if lo < task.first_kg or hi > task.last_kg:
        # The task's partition number is not its shard: the same misplacement as a partition
        # past the shard count (whichever task of the stage fails first reports it).
        raise ShardPlacementError(
            f"shard {task.shard} owns key groups {task.first_kg}..{task.last_kg} but received "
            f"rows of key groups {lo}..{hi}: the operator's task runs as another partition "
            f"than its shard: {_MISPLACED}"
        )


