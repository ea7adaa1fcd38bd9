"""silt_spark.transform_batches against Spark's own ``transformWithStateInPandas``: list state,
map state, event-time timers and an initial state together.

One processor written for PySpark (one key at a time: a list of amounts cut to its 3 largest
past 6 elements, a map bucket -> count with entries removed and maps cleared, one event-time
timer per key moved to 2 s after its latest row, the list emptied when it fires, an initial
state seeding lists, maps and timers) runs through Spark's operator in event time, and the same
logic as a batch processor (whole micro-batches in pyarrow and pandas) runs through silt at 2
shards rescaled to 3 and at 1 shard rescaled to 2, each restarted (given the initial state
again, ignored) with a task failing after its commit (in micro-batch 0, where the initial state
is applied, and in micro-batch 1). The outputs must be equal micro-batch by micro-batch, with
the same batch ids (Spark's no-data batches, where its timers fire, are silt's tick batches).

Value state against Spark is in tests/test_spark_batch_processor.py. TTLs and processing-time
timers are not compared here: Spark allows TTLs in processing time only, where its query runs a
no-data micro-batch after every batch for ever (its own harness, in
tests/test_spark_tws_fidelity.py, for the per-key processor); the batch processor's are compared
with the per-key processor's (tests/test_spark_batch_processor.py, test_spark_batch_time.py).
"""

from __future__ import annotations

import sys

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import silt_spark
from pyspark import cloudpickle
from test_spark_batch_processor import ListMapBatch, ListMapPerKey
from test_spark_batch_time import _ts_ms
from test_spark_event_time import QUIET, Variant, _ms, assert_same_batches, event_rows, run_all
from test_spark_tws_fidelity import rocksdb  # noqa: F401 - the fixture

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUT = "user string, what string, ms long, items long, total long, buckets long, count long"
COLUMNS = ["user", "what", "ms", "items", "total", "buckets", "count"]
#: Keys seeded by the initial state: ``(user, amount, timer ms)``; ``zed`` and ``nobody`` have
#: no rows, so only their initial timers fire (and show their seeded lists and maps).
INITIAL = [("u0", 5, 101_000), ("u0", -3, 101_000), ("u1", 7, 104_000), ("u5", 1, 130_000),
           ("u5", 2, 130_000), ("u5", 4, 130_000), ("zed", 9, 104_500),
           ("nobody", -2, 121_000), ("nobody", 8, 121_000)]


class ListsMapsTimers(ListMapPerKey):
    """ListMapPerKey (one key at a time), with event-time timers and an initial state: a key's
    initial rows are appended to its list, counted in bucket 0 of its map, and set a timer at
    their ``at``; each batch of rows replaces the key's timers (``listTimers``, deleted) by one 2 s
    after its latest row; a firing timer reports the key's list and map and empties the list."""

    def init(self, handle):
        super().init(handle)
        self.handle = handle

    def handleInitialState(self, key, initialState, timerValues):
        self.items.appendList([(int(a),) for a in initialState["amount"]])
        self.buckets.updateValue((0,), (len(initialState),))
        self.handle.registerTimer(int(initialState["at"].max()))

    def handleInputRows(self, key, rows, timerValues):
        rows = list(rows)
        top = max(_ms(t) for df in rows for t in df["ts"])
        for old in list(self.handle.listTimers()):
            self.handle.deleteTimer(old)
        self.handle.registerTimer(top + 2000)
        for df in super().handleInputRows(key, iter(rows), timerValues):
            yield df.assign(what="in", ms=timerValues.getCurrentWatermarkInMs())[COLUMNS]

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        items = [a for (a,) in self.items.get()]
        counts = [c for _, (c,) in self.buckets.iterator()]
        self.items.clear()
        yield pd.DataFrame({"user": [key[0]], "what": ["fired"],
                            "ms": [expiredTimerInfo.getExpiryTimeInMs()],
                            "items": [len(items)], "total": [sum(items)],
                            "buckets": [len(counts)], "count": [sum(counts)]})


def _summary(keys: pa.Table, state) -> pd.DataFrame:
    """Per row of ``keys`` (distinct users): its list's size and sum, its map's size and
    count sum."""
    lists = state.list("items").get(keys).to_pandas()
    maps = state.map("buckets").get(keys).to_pandas()
    return (pd.DataFrame({"user": keys["user"].to_pylist()}).set_index("user")
            .join(lists.groupby("user")["amount"].agg(items="size", total="sum"))
            .join(maps.groupby("user")["c"].agg(buckets="size", count="sum"))
            .fillna(0).astype("int64").reset_index())


class BatchListsMapsTimers(ListMapBatch):
    """ListsMapsTimers for all the keys of a shard's micro-batch at once (each key has at most
    one timer, so ``expired`` sees each key once)."""

    def process_initial(self, rows, state, timers):
        state.list("items").append(rows.select(["user"]), rows.select(["amount"]))
        per_key = rows.group_by("user").aggregate([([], "count_all"), ("at", "max")])
        users = per_key.select(["user"])
        state.map("buckets").put(users, pa.table({"bucket": [0] * per_key.num_rows}),
                                 pa.table({"c": per_key["count_all"]}))
        timers.register(users, per_key["at_max"])

    def process(self, batch, state, timers):
        latest = batch.group_by("user").aggregate([("ts", "max")])
        users = latest.select(["user"])
        old = timers.list(users)
        timers.delete(old.select(["user"]), old["time"])
        timers.register(users, pc.add(_ts_ms(latest["ts_max"]), 2000))
        out = pa.Table.from_pandas(super().process(batch, state, timers), preserve_index=False)
        n = out.num_rows
        return (out.append_column("what", pa.array(["in"] * n))
                .append_column("ms", pa.array([timers.getCurrentWatermarkInMs()] * n,
                                              pa.int64())).select(COLUMNS))

    def expired(self, keys, times, state):
        out = _summary(keys, state)
        state.list("items").delete(keys)
        return out.assign(what="fired", ms=times.to_pylist())[COLUMNS]


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df[sorted(df.columns)].sort_values(["user", "what", "ms"]).reset_index(drop=True)


def test_lists_maps_timers_and_initial_state_equal_sparks_transform_with_state(
        rocksdb, tmp_path):  # noqa: F811
    """Spark's transformWithStateInPandas in event time with an initial state, and the batch
    processor at 2 -> 3 shards (a task failing after committing micro-batch 0, where the
    initial state is applied) and 1 -> 2 shards (one failing after micro-batch 1), each
    restarted before micro-batch 2 given the initial state again: equal output micro-batch by
    micro-batch (rows, late rows dropped, timers fired in the no-data batches, quiet keys' and
    initial-only keys' timers included)."""
    batches = event_rows(7, 4)
    initial = rocksdb.createDataFrame(INITIAL, "user string, amount long, at long")
    opts = {"time_mode": "EventTime", "event_time_column": "ts", "watermark_delay": "3 seconds"}

    def silt_batch(name, layouts):
        state = (tmp_path / f"{name}-state").as_uri()
        return lambda run, n: silt_spark.transform_batches(
            run.stream(), BatchListsMapsTimers(), ["user"], OUT, state, layouts[n],
            initial_state=initial, **opts)

    variants = {
        "spark": Variant(lambda run, _: (
            run.stream().withWatermark("ts", "3 seconds").groupBy("user")
            .transformWithStateInPandas(ListsMapsTimers(), OUT, "Append", "EventTime",
                                        initialState=initial.groupBy("user")))),
        "b2to3": Variant(silt_batch("b2to3", (2, 3)), (2,), fail=(0, 0)),
        "b1to2": Variant(silt_batch("b1to2", (1, 2)), (2,), fail=(1, 0)),
    }
    run_all(rocksdb, tmp_path, batches, variants)
    spark_run = variants.pop("spark")
    want = spark_run.output
    fired = want[want["what"] == "fired"]
    inputs = want[want["what"] == "in"]
    # what the comparison covers, as Spark ran it
    assert len(spark_run.batches) > len(batches)  # no-data batches, where timers fire
    assert set(QUIET) <= set(fired["user"]) and len(fired) >= 12, fired
    seeded = fired.set_index("user").loc[["zed", "nobody"]]
    assert seeded[["items", "total", "buckets", "count"]].values.tolist() == [
        [1, 9, 1, 1], [2, 6, 1, 2]], seeded  # initial-only keys: their seeded state
    fired_in = {u: b for b, df in sorted(spark_run.batches.items())
                for u in df[df["what"] == "fired"]["user"]}
    assert any(b > fired_in.get(u, b) for b, df in spark_run.batches.items()
               for u in df[df["what"] == "in"]["user"]), fired_in  # keys back after a fire
    assert inputs["items"].max() == 6 and (inputs["buckets"] == 0).any(), inputs  # cut, cleared
    u0 = inputs[inputs["user"] == "u0"].sort_values("ms").iloc[0]
    assert u0["items"] == 2 + sum(r[0] == "u0" for r in batches[0]), u0  # the seeded list
    for name, v in variants.items():
        pd.testing.assert_frame_equal(_sorted(v.output), _sorted(want), check_dtype=False,
                                      obj=name)
        assert_same_batches(v.batches, spark_run.batches, _sorted, name)
