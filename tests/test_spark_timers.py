"""silt_spark timers in real streaming queries: event-time timers on the query-wide watermark
(firing in shards that get no rows, across a restart) and processing-time timers on an idle
stream kept alive by the heartbeat source."""

from __future__ import annotations

import sys
import time

import pandas as pd
import pytest
import silt_spark
from pyspark import cloudpickle
from pyspark.sql import functions as F
from silt_spark.runtime import _layout
from test_spark_operator import Run

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUT = "user string, what string, ms long"


@pytest.fixture
def run(spark, tmp_path):
    r = Run(spark, tmp_path)
    yield r
    r.stop()


class Sessions(silt_spark.StatefulProcessor):
    """Per row: an event-time timer at ``amount + 1000`` (``amount`` is the event time, ms)."""

    def init(self, handle):
        self.handle = handle
        self.rows = handle.getValueState("rows", "n long")

    def handleInputRows(self, key, rows, timerValues):
        df = pd.concat(list(rows))
        self.rows.update(((self.rows.get() or (0,))[0] + len(df),))
        for t in df["amount"]:
            self.handle.registerTimer(int(t) + 1000)
        yield (key[0], "in", timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield (key[0], f"fired:{self.rows.get()[0]}", expiredTimerInfo.getExpiryTimeInMs())


def _rows(out: pd.DataFrame, what: str) -> set[tuple]:
    return {(r.user, r.ms) for r in out.itertuples() if r.what.startswith(what)}


def test_event_time_timers_fire_in_idle_shards_and_survive_restart(spark, run, tmp_path):
    """One query-wide watermark: a timer fires in the first batch whose watermark (from the
    batches before it) is at or past it, in every shard, also in shards that get no rows and
    across a restart; timers due before a batch fire before its rows, and late rows (at or
    before the watermark) never reach the processor. Without silt's tick source
    (``spark.silt.tick=false``: no batch between the files; with it, the outputs are Spark's
    batch by batch, tests/test_spark_event_time.py)."""
    spark.conf.set("spark.silt.tick", "false")
    try:
        _event_time_timers(spark, run, tmp_path)
    finally:
        spark.conf.unset("spark.silt.tick")


def _event_time_timers(spark, run, tmp_path):
    state = (tmp_path / "state").as_uri()
    users = [f"u{i}" for i in range(9)]
    kg = {r.user: r.kg for r in spark.createDataFrame([(u,) for u in users], "user string")
          .select("user", F.pmod(F.xxhash64("user"), F.lit(256)).alias("kg")).collect()}
    shard = {u: _layout.shard_of(kg[u], 2, 256) for u in users}
    assert len(set(shard.values())) == 2

    def build():
        return silt_spark.transform_with_state(
            run.stream(), Sessions(), ["user"], OUT, state_url=state, num_shards=2,
            time_mode="EventTime", event_time_column="amount", watermark_delay=0,
        )

    run.start(build())
    # Batch 0 (watermark 0): each user at 1000 and 5000 -> timers 2000 and 6000.
    run.write([(u, "d", t) for u in users for t in (1000, 5000)])
    run.drain()
    # Batch 1 (watermark 5000): every 2000 timer fires, in both shards, before u0's row.
    run.write([("u0", "d", 5500), ("u1", "d", 5000)])  # u1's row is late
    run.drain()
    run.stop()
    run.start(build())  # the timers come back from the manifests, the watermark from markers
    run.write([("u0", "d", 8000)])  # batch 2 (watermark 5500): nothing due
    run.drain()
    run.write([("u1", "d", 9000)])  # batch 3 (watermark 8000): 6000 and 6500 fire everywhere
    run.drain()
    run.stop()

    out = run.outputs
    assert _rows(out[0], "in") == {(u, 0) for u in users}
    assert _rows(out[1], "in") == {("u0", 5000)}
    assert _rows(out[1], "fired") == {(u, 2000) for u in users}
    assert _rows(out[2], "in") == {("u0", 5500)}
    assert _rows(out[2], "fired") == set()
    assert _rows(out[3], "fired") == {(u, 6000) for u in users} | {("u0", 6500)}
    assert _rows(out[3], "in") == {("u1", 8000)}
    fired_u0 = {r.what for r in out[3].itertuples() if r.user == "u0"}
    assert fired_u0 == {"fired:4"}  # u0's 4 rows so far; fired before batch 3's rows


class Reminder(silt_spark.StatefulProcessor):
    """A processing-time timer 1.5 s after a key's first row."""

    def init(self, handle):
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues):
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1500)
        return iter(())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        late = timerValues.getCurrentProcessingTimeInMs() - expiredTimerInfo.getExpiryTimeInMs()
        yield (key[0], "fired", late)


def test_processing_time_timers_fire_on_an_idle_stream_with_heartbeat(run, tmp_path):
    state = (tmp_path / "state").as_uri()
    run.write([("a", "d", 1), ("b", "d", 2)])
    run.start(silt_spark.transform_with_state(
        run.stream(), Reminder(), ["user"], OUT, state_url=state, num_shards=2,
        time_mode="processingtime", heartbeat=True,
    ))
    deadline = time.monotonic() + 60
    fired: set[str] = set()
    while time.monotonic() < deadline and fired != {"a", "b"}:
        time.sleep(0.5)
        fired = {r.user for df in list(run.outputs.values()) for r in df.itertuples()}
    run.stop()
    assert fired == {"a", "b"}, "timers did not fire on the idle stream"
    rows = [r for df in run.outputs.values() for r in df.itertuples()]
    assert len(rows) == 2 and all(r.ms >= 0 for r in rows)  # once each, never early
