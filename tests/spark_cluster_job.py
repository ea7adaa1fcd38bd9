"""The driver of tests/test_spark_cluster.py, run as its own process against a standalone cluster.

    python spark_cluster_job.py <master URL> <work folder>

Starts (or restarts, from their checkpoints) two streaming queries over the JSON files in
``<work>/in``: a ``silt_spark.aggregate`` and a ``silt_spark.transform_with_state``, 4 shards
each, state under ``<work>/state-*`` (file://, a folder every executor of this machine sees).
It processes every file present (one micro-batch per file), stops both queries and exits. Each
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
    for k, v in env.items():  # the executors' Python workers import silt and silt_spark
        builder = builder.config(f"spark.executorEnv.{k}", v)
    return builder.getOrCreate()


def main(master: str, work: Path) -> None:
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

    frames = {
        "aggregate": silt_spark.aggregate(
            stream(), ["user"], AGGS, state_url=(work / "state-agg").as_uri(), num_shards=4,
        ),
        "processor": silt_spark.transform_with_state(
            stream(), Profile(), ["user"], PROFILE_SCHEMA,
            state_url=(work / "state-proc").as_uri(), num_shards=4,
        ),
    }
    queries = {
        name: df.writeStream.queryName(name).foreachBatch(sink(name))
        .option("checkpointLocation", str(work / f"chk-{name}")).start()
        for name, df in frames.items()
    }
    try:
        for name, q in queries.items():
            q.processAllAvailable()
            for b in {r["batch_id"] for r in silt_spark.metrics(q)}:
                (out / name / f"metrics-{b}.json").write_text(
                    json.dumps(silt_spark.metrics(q, b))
                )
    finally:
        for q in queries.values():
            q.stop()
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
