"""Object-store options passed with a Spark job: ``storage_options=`` and
``spark.silt.storage.<name>`` reach the executors, and the secret is never shown.

The state lives on a moto S3 server that checks credentials, while the driver's and the
executors' environments hold wrong credentials and a dead endpoint: the query can only work if
the options travelled with the job.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import replace
from typing import Any

import pytest
import silt_spark
import test_storage_options as common
from pyspark import cloudpickle
from silt.errors import InvalidArgumentError
from silt.plugins import open_store
from silt_spark.runtime import _names, _root
from test_spark_operator import Run
from test_storage_options import FAKE_SECRET, capture_logs, s3_options

# The fixtures of the core's storage-options tests: moto with IAM auth, a wrong AWS
# environment, and the tiers registered in this process.
moto_auth = common.moto_auth
wrong_aws_env = common.wrong_aws_env
tier_plugins = common.tier_plugins

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: What the executors' environment holds: wrong credentials, a dead endpoint, plugin discovery
#: on (the s3:// tier is found through its entry point there).
WORKER_ENV = {
    "SILT_DISABLE_PLUGIN_AUTOLOAD": "0",
    "AWS_ACCESS_KEY_ID": "AKIDWRONGWRONGWRONG0",
    "AWS_SECRET_ACCESS_KEY": "wrong-secret",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_DEFAULT_REGION": "eu-north-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture
def worker_env(spark: Any, tmp_path: Any) -> Any:
    env = spark.sparkContext.environment
    saved = dict(env)
    env.update(WORKER_ENV, AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    yield
    env.clear()
    env.update(saved)


def test_aggregate_on_s3_with_options_from_the_job_only(
    spark: Any, tmp_path: Any, moto_auth: dict[str, str], wrong_aws_env: None,
    worker_env: None, caplog: pytest.LogCaptureFixture,
) -> None:
    capture_logs(caplog)
    url = f"s3://silt-auth/spark-{uuid.uuid4().hex[:8]}/totals"
    options = s3_options(moto_auth)
    secret = options.pop("secret_access_key")
    conf_key = "spark.silt.storage.secret_access_key"
    spark.conf.set(conf_key, secret)  # the secret from the conf, the rest as an argument
    try:
        run = Run(spark, tmp_path)
        run.write([("a", "d", 1), ("b", "d", 2), ("a", "d", 3)])
        out = silt_spark.aggregate(run.stream(), ["user"], ["count", "sum(amount)"],
                                   state_url=url, num_shards=2, storage_options=options)
        plan = out._jdf.queryExecution().toString()
        run.start(out)
        run.drain()
        run.write([("a", "d", 10)])
        run.drain()
        run.query.stop()
        got = run.outputs[1].set_index("user").sort_index()
        assert got.loc["a", "count"] == 3 and got.loc["a", "sum(amount)"] == 14

        full = {**options, "secret_access_key": secret}
        # the secret from the conf again, merged with the argument's options
        state = silt_spark.read_state(spark, url, storage_options=options).toPandas()
        assert sorted(state["user"]) == ["a", "b"]
        size = silt_spark.state_size(url, storage_options=full)
        assert size.entries >= 2 and size.bytes > 0
        store = open_store(url, storage_options=full)
        try:
            descriptor = store.get(_names.DESCRIPTOR).decode()
        finally:
            store.close()
    finally:
        spark.conf.unset(conf_key)
    for text in (plan, descriptor, caplog.text):
        assert secret not in text
    spec = _root.OperatorSpec(kind="aggregate", root=url, num_shards=2,
                               storage_options={"secret_access_key": FAKE_SECRET})
    assert FAKE_SECRET not in repr(spec) and FAKE_SECRET not in repr(replace(spec, generation=1))


def test_unknown_storage_option_fails_the_build_before_anything_is_written(
    spark: Any, tmp_path: Any, moto_auth: dict[str, str], wrong_aws_env: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    capture_logs(caplog)
    url = f"s3://silt-auth/spark-{uuid.uuid4().hex[:8]}/bad"
    run = Run(spark, tmp_path)
    run.write([("a", "d", 1)])
    options = s3_options(moto_auth, secret_access_key=FAKE_SECRET, acess_key="typo")
    with pytest.raises(InvalidArgumentError, match=r"unknown storage option.*'acess_key'") as info:
        silt_spark.aggregate(run.stream(), ["user"], ["count"], state_url=url, num_shards=2,
                             storage_options=options)
    assert "access_key_id" in str(info.value)  # the accepted names are listed
    assert FAKE_SECRET not in str(info.value) and FAKE_SECRET not in caplog.text
    with pytest.raises(TypeError, match="storage option 'region' must be a str"):
        silt_spark.aggregate(run.stream(), ["user"], ["count"], state_url=url, num_shards=2,
                             storage_options={**s3_options(moto_auth), "region": 5})
    store = open_store(url, storage_options=s3_options(moto_auth))
    try:
        assert list(store.list()) == []
    finally:
        store.close()
