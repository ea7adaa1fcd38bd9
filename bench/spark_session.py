"""Where bench/spark_bench.py's queries run and keep their state: the SparkSession it makes
(local[2], Spark's RocksDB store for the native peers, cold local dirs after each restart) and,
for ``--s3-latency-ms``, moto's S3 server behind a proxy that adds latency to every request."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

#: The checkout whose tests/ folder holds the servers (``SILT_SRC``: another checkout's).
_SRC = Path(os.environ.get("SILT_SRC") or Path(__file__).resolve().parents[1])


class RemoteState:
    """moto's S3 server behind the test suite's fault proxy, adding ``latency_ms`` to every
    answer (tests/servers.py, tests/faultproxy.py): state that lives in a remote object store.
    Spark's Python workers inherit the credentials from this process's environment."""

    def __init__(self, latency_ms: float) -> None:
        sys.path.insert(0, str(_SRC / "tests"))
        import boto3
        from faultproxy import FaultProxy
        from servers import start_moto

        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        self.server = start_moto()
        self.proxy = FaultProxy(self.server.url).start()
        self.proxy.latency = latency_ms / 1000.0
        self.bucket = "silt-spark-bench"
        client = boto3.client("s3", endpoint_url=self.server.url, region_name="us-east-1")
        client.create_bucket(Bucket=self.bucket)
        client.close()

    def url(self, prefix: str, cache_dir: Path | None = None) -> str:
        url = f"s3://{self.bucket}/{prefix}?endpoint_url={self.proxy.url}"
        if cache_dir is not None:
            url += f"&cache=ssd&cache_dir={cache_dir}"
        return url

    def stop(self) -> None:
        self.proxy.stop()
        self.server.stop()


def session_factory(shards: int, driver_memory: str, maintenance: int,
                    extra: dict[str, str], local_root) -> Any:
    """A function making the benchmark's SparkSession: local[2], ``shards`` shuffle partitions,
    Spark's RocksDB state store with changelog checkpointing (the native peers' store), silt's
    GC pass every ``maintenance`` batches, ``extra`` settings first. Each session it makes gets
    new, empty local dirs under ``local_root()`` (the native store's working copies among
    them), so a session made after ``stop()`` restarts cold."""
    from pyspark.sql import SparkSession

    def make() -> Any:
        builder = SparkSession.builder
        for k, v in extra.items():
            builder = builder.config(k, v)
        made = (
            builder.master("local[2]").appName("silt-spark-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(shards))
            .config("spark.sql.streaming.stateStore.providerClass",
                    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
            .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
            .config("spark.driver.memory", driver_memory)
            .config("spark.silt.maintenance.intervalBatches", str(maintenance))
            .config("spark.local.dir", str(Path(tempfile.mkdtemp(dir=local_root(),
                                                                 prefix="local-"))))
            .getOrCreate()
        )
        made.sparkContext.setLogLevel("ERROR")
        return made

    return make
