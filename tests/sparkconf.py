"""What every Spark JVM the tests start runs with: the local driver (tests/conftest.py), a
standalone cluster's master, workers and executors (tests/test_spark_cluster.py) and its
driver (tests/spark_cluster_job.py). Each setting changes speed only, never an answer: the
comparisons with Spark's own operators run Spark's queries and silt's under the same settings.

Measured on the 2-core machine (one pytest worker, quiet; ``test_every_join_type_equals_spark``
drives 15 queries in lockstep, tws_fidelity + window one query at a time):

* :data:`TEST_JVM_OPTIONS`: a test's JVM lives a minute or two and runs each query's code a
  handful of times, so the optimizing JIT compiler (C2) costs CPU it never pays back, and a
  parallel garbage collector's threads compete with the other pytest worker. C1 alone and the
  serial collector: tws_fidelity + window 88 s -> 68 s, the standalone-cluster file 189 s -> 94 s.
* ``checkpointFileManagerClass``: Spark's default manager for ``file://`` checkpoints goes
  through Hadoop's ``FileContext``, whose rename runs ``readlink`` in a child process four times
  per file written where Hadoop's native library is missing (pyspark ships none): 4,608 child
  processes of the JVM in the join test. The ``FileSystem`` manager renames in-process (a
  rename on one local file system is atomic either way).
* :func:`lockstep_polling`: a query with no new input polls its sources every 10 ms
  (``spark.sql.streaming.pollingDelay``), and a file source lists its folder each time (Spark's
  ``InMemoryFileIndex``): with 15 queries in lockstep, 14 wait while one runs, and those
  listings were half of the JVM's CPU. Polling every 200 ms there: the join test 113 s -> 82 s.
  Only the lockstep harnesses use it: for a test that runs one query at a time, each batch
  would start up to 0.2 s later, and the whole suite took longer with it set for every test.
* ``spark.sql.codegen.wholeStage`` off: every micro-batch plans its query anew, and
  whole-stage code generation writes, cleans and looks up (in Spark's cache of compiled
  classes) the Java source of each stage every time, for batches of a few dozen rows. The
  operators then run without fused stages; Spark's expressions are still compiled. Driver JVM
  CPU in ``test_windows_equal_spark_batch_by_batch_over_a_backlog``, two runs each in
  alternation (other work on the machine): 37.2 and 34.9 s with it on, 32.3 and 31.3 s off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: ``-XX:TieredStopAtLevel=1``: compile with C1 only; ``-XX:+UseSerialGC``: one GC thread.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: Spark confs of every test session, beside the JVM options (see the module docstring).
TEST_SPARK_CONF = {
    "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
    "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
    "spark.sql.streaming.checkpointFileManagerClass": "org.apache.spark.sql.execution."
    "streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "spark.sql.codegen.wholeStage": "false",
}
#: How often an idle query polls its sources while many queries run in lockstep.
LOCKSTEP_POLLING = "200ms"


@contextmanager
def session_conf(spark: Any, key: str, value: str) -> Iterator[None]:
    """Spark conf ``key`` is ``value`` inside (for the queries started there: Spark reads most
    streaming settings when a query starts); the session's own setting is back afterwards."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def lockstep_polling(spark: Any) -> Any:
    """Queries started inside poll idle sources every :data:`LOCKSTEP_POLLING`."""
    return session_conf(spark, "spark.sql.streaming.pollingDelay", LOCKSTEP_POLLING)
