"""silt_spark.transform_batches with ``initial_state``: a batch processor seeded through
``process_initial(rows, state, timers)`` (once per shard, in micro-batch 0, before ``process``)
gives the output and the state of the per-key processor seeded through ``handleInitialState``,
through a task failure after committing batch 0, a restart given the initial state again
(ignored) and a rescale; a key with initial state only is in the state, with no output.
"""

from __future__ import annotations

import sys

import pandas as pd
import pyarrow as pa
import silt_spark
from pyspark import cloudpickle
from test_spark_batch_processor import LM_OUT, ListMapBatch, ListMapPerKey, _sorted
from test_spark_event_time import Variant, event_rows, run_all

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class SeededPerKey(ListMapPerKey):
    """ListMapPerKey, its lists and maps seeded from the initial state."""

    def handleInitialState(self, key, initialState, timerValues):
        self.items.appendList([(int(a),) for a in initialState["amount"]])
        self.buckets.updateValue((0,), (len(initialState),))


class SeededBatch(ListMapBatch):
    """ListMapBatch, seeded as SeededPerKey, for all the shard's initial keys at once."""

    def process_initial(self, rows, state, timers):
        state.list("items").append(rows.select(["user"]), rows.select(["amount"]))
        per_key = rows.group_by("user").aggregate([([], "count_all")])
        state.map("buckets").put(per_key, pa.table({"bucket": [0] * per_key.num_rows}),
                                 per_key.select(["count_all"]).rename_columns(["c"]))


def test_initial_state_equals_the_per_key_processors(spark, tmp_path):
    """initial_state: the batch processor's output and state equal the per-key processor's
    through a task failure after committing batch 0 (its initial state applied once), a
    restart given the initial state again (ignored) and a rescale 2 -> 3; a key with initial
    state only is in the state, with no output."""
    initial = spark.createDataFrame(
        [("u0", 5), ("u0", -3), ("u1", 7), ("u5", 1), ("u5", 2), ("u5", 4), ("zed", 9)],
        "user string, amount long")
    roots = {name: (tmp_path / f"{name}-state").as_uri() for name in ("perkey", "batch")}

    def perkey(run, n):
        return silt_spark.transform_with_state(
            run.stream(), SeededPerKey(), ["user"], LM_OUT, roots["perkey"], 2,
            initial_state=initial.groupBy("user"))

    def batch(run, n):
        return silt_spark.transform_batches(
            run.stream(), SeededBatch(), ["user"], LM_OUT, roots["batch"], 2 + n,
            initial_state=initial)

    variants = {"perkey": Variant(perkey), "batch": Variant(batch, (2,), fail=(0, 0))}
    run_all(spark, tmp_path, event_rows(7, 4), variants)
    want = variants["perkey"].output
    assert "zed" not in set(want["user"]) and len(want) >= 4 * 5
    pd.testing.assert_frame_equal(_sorted(variants["batch"].output), _sorted(want),
                                  check_dtype=False)
    for name in ("items", "buckets"):
        got = [_sorted(silt_spark.read_state(spark, roots[v], state_name=name).toPandas()
                       .drop(columns=["shard_version", "expires_at_ms"])) for v in roots]
        pd.testing.assert_frame_equal(got[1], got[0], obj=name)
    items = silt_spark.read_state(spark, roots["batch"], state_name="items").toPandas()
    assert items[items["user"] == "zed"]["amount"].tolist() == [9]
