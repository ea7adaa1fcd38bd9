"""The options of every JVM the Spark tests start: the local driver (tests/conftest.py), a
standalone cluster's master, workers and executors (tests/test_spark_cluster.py) and its
driver (tests/spark_cluster_job.py).

A test's JVM lives a minute or two and runs each query's code a handful of times, so the
optimizing JIT compiler (C2) costs CPU it never pays back, and a parallel garbage collector's
threads compete with the other pytest worker on a 2-core machine. C1 alone and the serial
collector run the Spark test files about a fifth faster (tws_fidelity + window, one worker:
88 s -> 68 s); behaviour is the same, only speed differs.
"""

from __future__ import annotations

#: ``-XX:TieredStopAtLevel=1``: compile with C1 only; ``-XX:+UseSerialGC``: one GC thread.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
