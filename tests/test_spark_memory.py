"""spark.silt.memoryBudget: read and checked on the driver, applied in every Python worker."""

from __future__ import annotations

import sys

import pandas as pd
import pytest
import silt
import silt_spark
from pyspark import cloudpickle
from silt.errors import InvalidArgumentError
from silt_spark.runtime import _api
from test_spark_operator import SCHEMA, Run

cloudpickle.register_pickle_by_value(sys.modules[__name__])

CONF = "spark.silt.memoryBudget"


class WorkerBudget(silt_spark.StatefulProcessor):
    """Emits, per user, the silt memory budget of the Python worker that ran it."""

    def init(self, handle):
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):
        self.n.update((1,))
        yield pd.DataFrame({"user": [key[0]], "budget": [silt.memory_budget().capacity]})


@pytest.fixture
def conf(spark):
    yield spark.conf
    spark.conf.unset(CONF)


@pytest.mark.parametrize("text, want", [
    ("3m", 3 << 20), ("2g", 2 << 30), ("2GB", 2 << 30), ("1048576", 1 << 20), (" 4 m ", 4 << 20),
])
def test_the_conf_is_read_as_a_spark_size(spark, conf, tmp_path, text, want):
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    assert _api._memory_budget(stream) is None
    conf.set(CONF, text)
    assert _api._memory_budget(stream) == want


@pytest.mark.parametrize("text, match", [
    ("lots", "must be a size"), ("-1g", "must be a size"), ("0", "at least|between"),
    ("1k", "between"), ("99999999999t", "between"),
])
def test_bad_budgets_fail_when_the_operator_is_built(spark, conf, tmp_path, text, match):
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    conf.set(CONF, text)
    state = (tmp_path / "state").as_uri()
    with pytest.raises(InvalidArgumentError, match=match) as info:
        silt_spark.aggregate(stream, ["user"], ["count"], state, num_shards=1)
    assert CONF in str(info.value)
    assert not (tmp_path / "state").exists()


def test_workers_run_under_the_conf_budget(spark, conf, tmp_path):
    conf.set(CONF, "3m")
    run = Run(spark, tmp_path)
    run.start(silt_spark.transform_with_state(
        run.stream(), WorkerBudget(), ["user"], "user string, budget long",
        state_url=(tmp_path / "state").as_uri(), num_shards=2,
    ))
    try:
        run.write([("u1", "d", 1), ("u2", "d", 2), ("u3", "d", 3)])
        run.drain()
    finally:
        run.stop()
    assert sorted(run.outputs[0]["budget"]) == [3 << 20] * 3
