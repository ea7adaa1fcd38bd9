"""silt's tick source (silt_spark/runtime/_tick.py) in real queries: what a tick batch runs.

The answers of queries with the tick source are compared with Spark's own operators batch by
batch in tests/test_spark_event_time.py; here, how the tick's row reaches the batch: the
driver's source process returns it with the batch's offsets (a simple reader) and Spark serves
it from the driver's block manager, so no Python worker runs for the tick on an executor.
Spark's own metrics of the batch's scan of the tick source say so: it output the row, and its
Python metrics (bytes sent to and received from Python workers) stayed zero; a reader whose
rows come from a Python read task on an executor moves them in every batch it reads, even an
empty one (the first batch of a new query).
"""

from __future__ import annotations

import os

import pytest
import silt_spark
from test_spark_window import AGGS, Run, stream_rows

#: The metrics of a Python data source's scan that only a Python worker on an executor moves.
PYTHON_METRICS = ("pythonDataSent", "pythonDataReceived")


def plan_nodes(node, convert):
    """``node`` and every node under it, through adaptive execution's wrappers (the final plan
    of an ``AdaptiveSparkPlanExec``, the plan of each query stage)."""
    kind = node.getClass().getSimpleName()
    if kind == "AdaptiveSparkPlanExec":
        children = [node.executedPlan()]
    elif kind.endswith("QueryStageExec"):
        children = [node.plan()]
    else:
        children = list(convert.asJava(node.children()))
    yield node
    for child in children:
        yield from plan_nodes(child, convert)


def tick_scan_metrics(spark, query) -> dict[str, int]:
    """The metrics of the last micro-batch's scan of the tick source (its one column,
    ``tick``), from Spark's executed plan of that batch."""
    convert = spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters
    plan = query._jsq.streamingQuery().lastExecution().executedPlan()
    scans = [n for n in plan_nodes(plan, convert)
             if n.getClass().getSimpleName() == "MicroBatchScanExec"
             and [a.name() for a in convert.asJava(n.output())] == ["tick"]]
    assert len(scans) == 1, plan.toString()
    metrics = convert.asJava(scans[0].metrics())
    return {name: int(metrics[name].value()) for name in metrics}


@pytest.mark.parametrize("backlog", [0, 3], ids=["one-file-a-batch", "backlog-of-3"])
def test_each_tick_batch_serves_its_row_from_the_driver(spark, tmp_path, backlog):
    """Every batch that only ticks outputs its one tick row with no Python worker for the tick
    source (its scan's Python metrics are zero): after each batch that moved the watermark,
    one file at a time, and after a backlog of files written before the query starts (one data
    batch each, the ticks riding along with the second and third). So does a new query's
    first batch, before any input (its tick read is empty). Spark's batches are checked too:
    each tick batch comes right after the data batch(es), its one input row the tick."""
    state = (tmp_path / "state").as_uri()
    run = Run(spark, tmp_path)
    batches = stream_rows(7, backlog + 5)[1:]  # from the second on, each moves the watermark
    for rows in batches[:backlog]:
        run.write(rows)
    # Spark's file source reads files in modification-time order (ties in listing order): one
    # second apart, the backlog is read in the order written (each batch moves the watermark).
    for i, path in enumerate(sorted(run.src.glob("part-*"))):
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    run.start(silt_spark.window_aggregate(
        run.stream(), ["user"], "ts", "10 seconds", AGGS, state, 2,
        watermark_delay="3 seconds"))
    seen = []
    try:
        for rows in [None, *batches[backlog:]]:
            if rows is not None:
                run.write(rows)
            run.drain()
            last = run.query.lastProgress
            metrics = tick_scan_metrics(spark, run.query)
            seen.append((last["batchId"], last["numInputRows"], metrics))
    finally:
        run.stop()
    ticks = [1 if backlog else 0] + [1] * (len(batches) - backlog)
    for (batch_id, rows, metrics), tick in zip(seen, ticks, strict=True):
        assert metrics["numOutputRows"] == tick, batch_id
        assert rows == (tick if batch_id else 0), batch_id  # a tick batch: only the tick
        assert {name: metrics[name] for name in PYTHON_METRICS} == dict.fromkeys(
            PYTHON_METRICS, 0), batch_id
    # The first batch (before any input) or the backlog's batches and their tick batch, then
    # a data batch and its tick batch per file.
    first = backlog
    assert [b for b, _, _ in seen] == [first] + [
        first + 2 * i + 2 for i in range(len(batches) - backlog)]
