"""The driver's read of ``spark.silt.storage.*`` (``silt_spark.runtime._storage.from_conf``),
which runs each time an operator is built, a restart included: the same options as pyspark's
``getAll`` of both confs gives (SparkConf entries, the SQL conf's winning for a name set in
both), with a handful of calls into the JVM instead of two or three per conf entry."""

from __future__ import annotations

from typing import Any

from silt_spark.runtime._storage import CONF_PREFIX, _from_getall, from_conf


def counted_jvm_calls(spark: Any, monkeypatch: Any) -> list[int]:
    """Count the commands the driver sends to the JVM from now on (every py4j object of the
    session sends through the one gateway client)."""
    client = spark.sparkContext._gateway._gateway_client
    send = client.send_command
    calls = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return send(*args, **kwargs)

    monkeypatch.setattr(client, "send_command", counting)
    return calls


def test_the_options_of_both_confs_with_a_few_jvm_calls(spark: Any, monkeypatch: Any) -> None:
    spark_conf = spark.sparkContext._conf  # the running context's SparkConf
    both, only_spark, only_sql = (CONF_PREFIX + n for n in ("region", "endpoint_url", "a.b"))
    spark_conf.set(both, "from-sparkconf")
    spark_conf.set(only_spark, "http://127.0.0.1:1")
    spark.conf.set(both, "from-sql")
    spark.conf.set(only_sql, "x=y, z")
    spark.conf.set("spark.silt.storagex", "not under the prefix")
    try:
        calls = counted_jvm_calls(spark, monkeypatch)
        got = from_conf(spark)
        used = calls[0]
        calls[0] = 0
        assert got == _from_getall(spark)  # what pyspark's getAll of both confs gives
        through_getall = calls[0]
        monkeypatch.undo()
        assert got["region"] == "from-sql"
        assert got["endpoint_url"] == "http://127.0.0.1:1"
        assert got["a.b"] == "x=y, z"
        assert not any(k.startswith("x") for k in got)
        # pyspark's getAll: two or three calls per entry of either conf (about 300 here).
        assert used <= 40 and through_getall > 100, (used, through_getall)
    finally:
        for key in (both, only_spark):
            spark_conf._jconf.remove(key)
        for key in (both, only_sql, "spark.silt.storagex"):
            spark.conf.unset(key)
    assert from_conf(None) == {}
