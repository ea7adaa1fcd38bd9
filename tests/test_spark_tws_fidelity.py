"""Processors written as for PySpark's own ``transformWithStateInPandas`` / ``transformWithState``
(in the style of Spark's TWS test processors) give Spark's answers under silt.

Each comparison runs the same processor through Spark's operator and through silt on the same
input files, silt restarted and rescaled from 2 to 3 shards mid-stream (``run_all`` of
``test_spark_event_time``), and requires equal output. The processors put into their output
what they were handed (pandas dtypes, Python types of Rows, keys and state values,
``listTimers()`` in a firing timer), so any difference in what crosses into user code shows.
"""

from __future__ import annotations

import sys

import pandas as pd
import pytest
import silt_spark
from pyspark import cloudpickle
from pyspark.sql import Row
from test_spark_event_time import QUIET, Variant, event_rows, run_all

cloudpickle.register_pickle_by_value(sys.modules[__name__])

try:
    from pyspark.sql.streaming import StatefulProcessor as SparkProcessor
except ImportError:  # pragma: no cover - pyspark < 4
    SparkProcessor = object

OUT = "user string, what string, ms long"
#: silt: 2 shards, then (restarted before batch 2) 3.
LAYOUTS = [(2, 0), (3, 2)]


@pytest.fixture(scope="module")
def rocksdb(spark):
    """Spark's transformWithState needs the RocksDB state store."""
    provider = "spark.sql.streaming.stateStore.providerClass"
    old = spark.conf.get(provider, None)
    spark.conf.set(provider, "org.apache.spark.sql.execution.streaming.state."
                             "RocksDBStateStoreProvider")
    yield spark
    if old is None:
        spark.conf.unset(provider)
    else:
        spark.conf.set(provider, old)


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(df.columns)).reset_index(drop=True)


class Sessions(SparkProcessor):
    """Pandas, event time: value, list and map state, a variable declared then deleted (as
    Spark's basic test processor does), one event-time timer per key 2 s after its latest row
    (older ones found with ``listTimers`` and deleted); reports dtypes, state values' types and
    the timers listed while one fires."""

    def init(self, handle):
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self.amounts = handle.getListState("amounts", "amount long, ts timestamp")
        self.signs = handle.getMapState("signs", "sign string", "n long")
        self.temp = handle.getValueState("tempState", "n long")
        handle.deleteIfExists("tempState")

    def handleInputRows(self, key, rows, timerValues):
        n = self.count.get()[0] if self.count.exists() else 0
        top = 0
        dtypes = set()
        for df in rows:
            n += len(df)
            dtypes.add(",".join(f"{c}={t}" for c, t in df.dtypes.items()))
            top = max(top, int((df["ts"].astype("int64") // 10**6).max()))  # ns -> ms
            self.amounts.appendList([(int(a), t) for a, t in zip(df["amount"], df["ts"])])
            for a in df["amount"]:
                sign = ("neg" if a < 0 else "pos",)
                have = self.signs.getValue(sign)
                self.signs.updateValue(sign, ((have[0] if have else 0) + 1,))
        self.count.update((n,))
        for t in list(self.handle.listTimers()):
            self.handle.deleteTimer(t)
        self.handle.registerTimer(top + 2000)
        last = list(self.amounts.get())[-1]
        yield pd.DataFrame({
            "user": [key[0]],
            "what": [f"in:{n}:{type(key[0]).__name__}:{'|'.join(sorted(dtypes))}:{last!r}"],
            "ms": [timerValues.getCurrentWatermarkInMs()],
        })

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        timers = list(self.handle.listTimers())
        signs = sorted((k[0], v[0]) for k, v in self.signs.iterator())
        yield pd.DataFrame({
            "user": [key[0]],
            "what": [f"fired:{self.count.get()[0]}:{timers}:{signs}"],
            "ms": [expiredTimerInfo.getExpiryTimeInMs()],
        })


class RowCounter(SparkProcessor):
    """Row-based (``transformWithState``), seeded from an initial state: counts a key's Rows
    (Spark's guide example), keeps a map of its amounts to their event times, and yields a Row
    whose fields are in another order than the output schema (matched by name)."""

    def init(self, handle):
        self.count = handle.getValueState("count", "n long")
        self.seen = handle.getMapState("seen", "amount long", "ts timestamp")

    def handleInitialState(self, key, initialState, timerValues):
        n = self.count.get()[0] if self.count.exists() else 0
        self.count.update((n + initialState.seed,))

    def handleInputRows(self, key, rows, timerValues):
        n = self.count.get()[0] if self.count.exists() else 0
        k = 0
        kinds = set()
        for row in rows:
            k += 1
            kinds.add(f"{type(row).__name__}:{type(row.amount).__name__}:"
                      f"{type(row.ts).__name__}:{row.ts.tzinfo}")
            self.seen.updateValue((row.amount,), (row.ts,))
        self.count.update((n + k,))
        stored = sorted(self.seen.values())[0]
        yield Row(ms=n + k, what=f"rows:{k}:{sorted(kinds)}:{stored!r}", user=key[0])


INITIAL = [("u0", 5), ("u0", 7), ("u3", 100), ("nobody", 1)]


RESTARTS = tuple(i for _, i in LAYOUTS[1:])


def test_pandas_processor_in_event_time_gives_sparks_output(rocksdb, tmp_path):
    """deleteIfExists after a declaration, Spark's dtypes (ns timestamps: a timer at the
    latest row + 2 s), state values' types, listTimers() while a timer fires."""
    batches = event_rows(7, 4)

    def silt_sessions(run, n):
        return silt_spark.transform_with_state(
            run.stream(), Sessions(), ["user"], OUT, (tmp_path / "sessions").as_uri(),
            LAYOUTS[n][0], time_mode="EventTime", event_time_column="ts",
            watermark_delay="3 seconds")

    variants = {
        "spark": Variant(lambda run, _: (
            run.stream().withWatermark("ts", "3 seconds").groupBy("user")
            .transformWithStateInPandas(Sessions(), OUT, "Append", "EventTime")
        ), tick=False),
        "silt": Variant(silt_sessions, RESTARTS),
    }
    run_all(rocksdb, tmp_path, batches, variants)
    want, got = variants["spark"].output, variants["silt"].output
    fired = want[want["what"].str.startswith("fired")]
    assert set(QUIET) <= set(fired["user"]) and len(fired) >= 12
    # what Spark handed over, as this run shows it: dtypes, a str key, state values as naive
    # datetimes, the firing timer among listTimers()
    first = want[want["what"].str.startswith("in")]["what"].iloc[0]
    assert ("user=object,amount=int64,ts=datetime64[ns]" in first
            and ":str:" in first and "datetime.datetime(" in first
            and "tzinfo" not in first), first
    assert all(f"[{ms}]" in w for w, ms in zip(fired["what"], fired["ms"]))
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want), check_dtype=False,
                                  obj="pandas processor, silt 2 -> 3 shards")


def test_row_processor_with_initial_state_gives_sparks_output(rocksdb, tmp_path):
    """transformWithState's Row API: Rows in (counted one by one), Rows out by field name,
    handleInitialState per initial Row, timestamps in Rows and in state as Spark gives them."""
    batches = event_rows(8, 4)
    initial = rocksdb.createDataFrame(INITIAL, "user string, seed long")

    def silt_rows(run, n):
        return silt_spark.transform_with_state(
            run.stream(), RowCounter(), ["user"], OUT, (tmp_path / "rows").as_uri(),
            LAYOUTS[n][0], rows_format="row", initial_state=initial.groupBy("user"))

    variants = {
        "spark": Variant(lambda run, _: (
            run.stream().groupBy("user").transformWithState(
                RowCounter(), OUT, "Append", "None", initialState=initial.groupBy("user"))
        ), tick=False),
        "silt": Variant(silt_rows, RESTARTS, tick=False),
    }
    run_all(rocksdb, tmp_path, batches, variants)
    want, got = variants["spark"].output, variants["silt"].output
    u0 = want[want["user"] == "u0"].sort_values("ms")
    assert u0["ms"].iloc[0] > 12 and "Row:int:datetime:UTC" in u0["what"].iloc[0], u0
    assert sum(int(w.split(":")[1]) for w in want["what"]) == sum(len(b) for b in batches)
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want), check_dtype=False,
                                  obj="Row processor, silt 2 -> 3 shards")
