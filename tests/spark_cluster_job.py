"""The driver of tests/test_spark_cluster.py, run as its own process against a standalone cluster.

    python spark_cluster_job.py <master URL> <work folder> [<state root URL>]

Starts (or restarts, from their checkpoints) two streaming queries over the JSON files in
``<work>/in``: a ``silt_spark.aggregate`` and a ``silt_spark.transform_with_state``, 4 shards
each, state under ``<work>/state-*`` (file://, a folder every executor of this machine sees).
Given a state root URL (an object store's, with the store's options as JSON in the environment
variable ``SILT_CLUSTER_STORAGE_OPTIONS``), it runs instead the aggregate with its state under
that root and, beside it, Spark's own ``groupBy().agg()`` (update mode, Spark's state store in
its checkpoint) over the same input, as the reference.
It processes every file present (one micro-batch per file), stops the queries and exits. Each
micro-batch's output is written to ``<work>/out/<query>/<batch id>.json`` (overwritten when a
batch re-runs), and the silt_spark metrics the driver received to
``<work>/out/<query>/metrics-<batch id>.json``.

The session runs in this process so the test's own local SparkSession (tests/conftest.py) and
this cluster session never meet in one JVM.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import silt_spark
from pyspark.sql import SparkSession
from sparkconf import TEST_SPARK_CONF

SCHEMA = "user string, device string, amount long"
AGGS = ["count", "sum(amount)", "min(amount)", "max(amount)"]
PROFILE_SCHEMA = "user string, count long, total long, devices long"


class Profile(silt_spark.StatefulProcessor):
    """Per user: events and their total (a value), events per device (a map)."""

    def init(self, handle):
        self.stats = handle.getValueState("stats", "count long, total long")
        self.devices = handle.getMapState("devices", "device string", "n long")

    def handleInputRows(self, key, rows, timerValues):
        df = pd.concat(list(rows))
        count, total = self.stats.get() or (0, 0)
        count += len(df)
        total += int(df["amount"].sum())
        self.stats.update((count, total))
        for device, n in df.groupby("device").size().items():
            old = self.devices.getValue((device,))
            self.devices.updateValue((device,), ((old[0] if old else 0) + int(n),))
        devices = len(list(self.devices.keys()))
        yield pd.DataFrame({"user": [key[0]], "count": [count], "total": [total],
                            "devices": [devices]})


def session(master: str) -> SparkSession:
    env = {k: os.environ[k] for k in ("PYTHONPATH", "SILT_NO_EXTENSIONS",
                                      "SILT_REQUIRE_EXTENSIONS", "SILT_DISABLE_PLUGIN_AUTOLOAD")
           if k in os.environ}
    builder = (
        SparkSession.builder.master(master)
        .appName("silt-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.task.maxFailures", "2")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
    )
    for k, v in TEST_SPARK_CONF.items():
        builder = builder.config(k, v)
    for k, v in env.items():  # the executors' Python workers import silt and silt_spark
        builder = builder.config(f"spark.executorEnv.{k}", v)
    return builder.getOrCreate()


def silt_queries(stream, work: Path) -> dict:
    """The two silt operators with their state on this machine's disk (file://)."""
    return {
        "aggregate": silt_spark.aggregate(
            stream(), ["user"], AGGS, state_url=(work / "state-agg").as_uri(), num_shards=4,
        ),
        "processor": silt_spark.transform_with_state(
            stream(), Profile(), ["user"], PROFILE_SCHEMA,
            state_url=(work / "state-proc").as_uri(), num_shards=4,
        ),
    }


def remote_queries(stream, root: str) -> dict:
    """silt's aggregate with its state under ``root`` (an object store), and Spark's own."""
    from pyspark.sql import functions as F

    options = json.loads(os.environ.get("SILT_CLUSTER_STORAGE_OPTIONS", "{}"))
    return {
        "aggregate": silt_spark.aggregate(
            stream(), ["user"], AGGS, state_url=root, num_shards=4, storage_options=options,
        ),
        "spark": stream().groupBy("user").agg(
            F.count("*").alias("count"), F.sum("amount").alias("sum(amount)"),
            F.min("amount").alias("min(amount)"), F.max("amount").alias("max(amount)"),
        ),
    }


def main(master: str, work: Path, root: str | None = None) -> None:
    spark = session(master)
    spark.sparkContext.setLogLevel("WARN")
    out = work / "out"

    def stream():
        return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
            str(work / "in")
        )

    def sink(name: str):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)

        def write(df, batch_id):
            pdf = df.toPandas()
            tmp = folder / f".{batch_id}.tmp"
            tmp.write_text(pdf.to_json(orient="records"))
            os.replace(tmp, folder / f"{batch_id}.json")

        return write

    frames = silt_queries(stream, work) if root is None else remote_queries(stream, root)
    queries = {
        # Spark's own aggregate emits, as silt's does, each key updated by a micro-batch.
        name: df.writeStream.queryName(name).foreachBatch(sink(name))
        .outputMode("update" if name == "spark" else "append")
        .option("checkpointLocation", str(work / f"chk-{name}")).start()
        for name, df in frames.items()
    }
    try:
        for name, q in queries.items():
            q.processAllAvailable()
            if name == "spark":
                continue
            for b in {r["batch_id"] for r in silt_spark.metrics(q)}:
                (out / name / f"metrics-{b}.json").write_text(
                    json.dumps(silt_spark.metrics(q, b))
                )
    finally:
        for q in queries.values():
            q.stop()
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:4])
