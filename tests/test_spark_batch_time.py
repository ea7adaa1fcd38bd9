"""silt_spark.transform_batches with timers, in Spark: a batch processor registering timers
for many keys at once and handling the due ones in ``expired(keys, times, state)`` gives the
per-key processor's output for the same logic (``transform_with_state``, itself checked
against Spark's ``transformWithStateInPandas`` in tests/test_spark_event_time.py), in event
time (micro-batch by micro-batch, late rows dropped) and in processing time, through a task
failure after commit, a restart with a rescale, and a query switching processors on the same
state with timers pending across each switch.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import silt_spark
from pyspark import cloudpickle
from test_spark_event_time import (
    QUIET,
    TIMER_OUT,
    Idle,
    SparkProcessor,
    Variant,
    _ms,
    assert_same_batches,
    event_rows,
    run_all,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["user", "what", "ms"]).reset_index(drop=True)


def _ts_ms(column) -> pa.Array:
    """A timestamp column as int64 ms."""
    us = column.cast(pa.timestamp("us", "UTC")).cast(pa.int64())
    return pc.divide(us, 1000)


def _counts(state, keys):
    """``rows`` of ``keys`` (a table with ``user`` and ``count_all``) plus their new rows,
    stored; the new counts."""
    rows = state.value("rows")
    n = pc.add(pc.fill_null(rows.get(keys)["n"], 0), keys["count_all"])
    rows.put(keys, pa.table({"n": n}))
    return n


def _per_user(batch):
    return batch.group_by("user", use_threads=False).aggregate([([], "count_all")]).select(
        ["user", "count_all"])


class BatchIdle(silt_spark.BatchProcessor):
    """Idle (tests/test_spark_event_time.py) for all the keys of a batch at once."""

    def init(self, handle):
        handle.getValueState("rows", "n long")

    def process(self, batch, state, timers):
        keys = _per_user(batch)
        n = _counts(state, keys)
        timers.register(batch.select(["user"]), pc.add(_ts_ms(batch["ts"]), 2000))
        wm = timers.getCurrentWatermarkInMs()
        return pa.table({"user": keys["user"], "what": [f"in:{v}" for v in n.to_pylist()],
                         "ms": [wm] * keys.num_rows})

    def expired(self, keys, times, state):
        n = pc.fill_null(state.value("rows").get(keys)["n"], 0).to_pylist()
        return pa.table({"user": keys["user"], "what": [f"fired:{v}" for v in n], "ms": times})


def test_event_time_timers_equal_the_per_key_processors(spark, tmp_path):
    """Event time: the batch processor's output equals the per-key processor's micro-batch by
    micro-batch (late rows dropped, quiet keys' timers fired in the no-data batches), through
    a task failure after commit and a restart with a rescale 2 -> 3; a query switching
    per-key -> batch -> per-key with timers pending gives the same output too."""
    roots = {name: (tmp_path / f"{name}-state").as_uri() for name in ("perkey", "batch", "switch")}
    opts = {"time_mode": "EventTime", "event_time_column": "ts", "watermark_delay": "3 seconds"}

    def perkey(run, n):
        return silt_spark.transform_with_state(run.stream(), Idle(), ["user"], TIMER_OUT,
                                               roots["perkey"], 2, **opts)

    def batch(run, n):
        return silt_spark.transform_batches(run.stream(), BatchIdle(), ["user"], TIMER_OUT,
                                            roots["batch"], 2 + n, **opts)

    def switch(run, n):
        if n == 1:
            return silt_spark.transform_batches(run.stream(), BatchIdle(), ["user"], TIMER_OUT,
                                                roots["switch"], 3, **opts)
        return silt_spark.transform_with_state(run.stream(), Idle(), ["user"], TIMER_OUT,
                                               roots["switch"], 2, **opts)

    variants = {"perkey": Variant(perkey), "batch": Variant(batch, (2,), fail=(1, 0)),
                "switch": Variant(switch, (1, 3))}
    run_all(spark, tmp_path, event_rows(3, 4), variants)
    want = variants["perkey"]
    fired = want.output[want.output["what"].str.startswith("fired")]
    assert set(QUIET) <= set(fired["user"]) and len(fired) > 15
    for name in ("batch", "switch"):
        pd.testing.assert_frame_equal(_sorted(variants[name].output), _sorted(want.output),
                                      check_dtype=False, obj=name)
        assert_same_batches(variants[name].batches, want.batches, _sorted, name)


#: Far-future timers stay pending (a key keeps one at FAR + its row count).
FAR = 4_000_000_000_000


class PendingPerKey(SparkProcessor):
    """Processing time: a timer at each row's event time (in the past: it fires after the
    batch's rows) and one far-future timer per key at ``FAR + rows so far`` (moved when the
    count changes, so pending across batches); reports the count and the pending timers."""

    def init(self, handle):
        self.handle = handle
        self.rows = handle.getValueState("rows", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = self.rows.get()[0] if self.rows.exists() else 0
        for df in rows:
            n += len(df)
            for t in df["ts"]:
                self.handle.registerTimer(_ms(t))
        for old in list(self.handle.listTimers()):
            if old >= FAR:
                self.handle.deleteTimer(old)
        self.handle.registerTimer(FAR + n)
        self.rows.update((n,))
        pending = len(list(self.handle.listTimers()))
        yield pd.DataFrame({"user": [key[0]], "what": [f"in:{n}:{pending}"], "ms": [0]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        n = self.rows.get()[0] if self.rows.exists() else 0
        yield pd.DataFrame({"user": [key[0]], "what": [f"fired:{n}"],
                            "ms": [expiredTimerInfo.getExpiryTimeInMs()]})


class PendingBatch(silt_spark.BatchProcessor):
    """PendingPerKey for all the keys of a batch at once."""

    def init(self, handle):
        handle.getValueState("rows", "n long")

    def process(self, batch, state, timers):
        keys = _per_user(batch)
        users = keys.select(["user"])
        n = _counts(state, keys)
        timers.register(batch.select(["user"]), batch["ts"])  # timestamps: whole ms
        old = timers.list(users)
        far = old.filter(pc.greater_equal(old["time"], FAR))
        timers.delete(far.select(["user"]), far["time"])
        timers.register(users, pc.add(n, FAR))
        listed = timers.list(users).group_by("user").aggregate([([], "count_all")])
        pending = dict(zip(listed["user"].to_pylist(), listed["count_all"].to_pylist()))
        what = [f"in:{v}:{pending[u]}" for u, v in zip(keys["user"].to_pylist(),
                                                      n.to_pylist())]
        return pa.table({"user": keys["user"], "what": what, "ms": [0] * keys.num_rows})

    def expired(self, keys, times, state):
        n = pc.fill_null(state.value("rows").get(keys)["n"], 0).to_pylist()
        return pa.table({"user": keys["user"], "what": [f"fired:{v}" for v in n], "ms": times})


def test_processing_time_timers_equal_the_per_key_processors(spark, tmp_path):
    """Processing time: timers in the past fire after the batch's rows, far-future ones stay
    pending (moved, listed); the batch processor's output equals the per-key processor's
    through a task failure after commit and a restart with a rescale 2 -> 3, and a query
    switching per-key -> batch -> per-key with timers pending gives the same output (each
    processor lists and moves the far timers the other registered)."""
    roots = {name: (tmp_path / f"{name}-state").as_uri() for name in ("perkey", "batch", "switch")}
    opts = {"time_mode": "ProcessingTime"}

    def perkey(run, n):
        return silt_spark.transform_with_state(run.stream(), PendingPerKey(), ["user"],
                                               TIMER_OUT, roots["perkey"], 2, **opts)

    def batch(run, n):
        return silt_spark.transform_batches(run.stream(), PendingBatch(), ["user"], TIMER_OUT,
                                            roots["batch"], 2 + n, **opts)

    def switch(run, n):
        if n == 1:
            return silt_spark.transform_batches(run.stream(), PendingBatch(), ["user"],
                                                TIMER_OUT, roots["switch"], 3, **opts)
        return silt_spark.transform_with_state(run.stream(), PendingPerKey(), ["user"],
                                               TIMER_OUT, roots["switch"], 2, **opts)

    variants = {"perkey": Variant(perkey), "batch": Variant(batch, (2,), fail=(1, 0)),
                "switch": Variant(switch, (1, 2))}
    run_all(spark, tmp_path, event_rows(5, 3), variants)
    want = variants["perkey"].output
    assert want["what"].str.startswith("fired").sum() > 40
    pending = want["what"].str.extract(r"^in:\d+:(\d+)$")[0].dropna().astype(int)
    assert pending.min() >= 1 and pending.max() > 2, want  # the far timer, and past ones
    for name in ("batch", "switch"):
        pd.testing.assert_frame_equal(_sorted(variants[name].output), _sorted(want),
                                      check_dtype=False, obj=name)


class TtlBatch(BatchIdle):
    def init(self, handle):
        handle.getValueState("rows", "n long", 60_000)


def test_time_options_are_checked_when_the_query_is_built(spark, tmp_path):
    """A TTL in event time, a bad time_mode, an event-time column missing: refused when the
    query is built, nothing written under the state root."""
    import pytest
    from silt.errors import InvalidArgumentError

    (tmp_path / "in").mkdir()
    df = spark.readStream.schema("user string, amount long, ts timestamp").parquet(
        str(tmp_path / "in"))
    root = tmp_path / "state"
    cases = [
        (TtlBatch(), {"time_mode": "EventTime", "event_time_column": "ts"},
         r"TtlBatch declares state 'rows' with a TTL .* time_mode='eventtime'"),
        (BatchIdle(), {"time_mode": "sometimes"}, r"time_mode must be one of"),
        (BatchIdle(), {"time_mode": "EventTime"}, r"needs event_time_column"),
        (BatchIdle(), {"time_mode": "EventTime", "event_time_column": "t"},
         r"event_time_column 't' is not in the DataFrame"),
    ]
    for processor, opts, message in cases:
        with pytest.raises(InvalidArgumentError, match=message):
            silt_spark.transform_batches(df, processor, ["user"], TIMER_OUT, root.as_uri(), 2,
                                         **opts)
    assert not root.exists()


# --- sessionization (the example of docs/spark.md) --------------------------------------------

GAP = 5_000
SESSION_OUT = "user string, start long, end long, n long"


class SessionsPerKey(SparkProcessor):
    """Event-time gap sessions, one key at a time: a row within GAP ms after the session's
    last row extends it, a later one closes it; the session's timer at last + GAP closes it
    when the watermark passes."""

    def init(self, handle):
        self.handle = handle
        self.session = handle.getValueState("session", "start long, last long, n long")

    def handleInputRows(self, key, rows, timerValues):
        ts = sorted(_ms(t) for df in rows for t in df["ts"])
        start, last, n = self.session.get() if self.session.exists() else (None, None, 0)
        closed = []
        for t in ts:
            if last is not None and t > last + GAP:
                closed.append((key[0], start, last, n))
                start, last, n = None, None, 0
            start = t if start is None else min(start, t)
            last = t if last is None else max(last, t)
            n += 1
        for old in list(self.handle.listTimers()):
            self.handle.deleteTimer(old)
        self.handle.registerTimer(last + GAP)
        self.session.update((start, last, n))
        if closed:
            yield pd.DataFrame(closed, columns=["user", "start", "end", "n"])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        start, last, n = self.session.get()
        self.session.clear()
        yield pd.DataFrame({"user": [key[0]], "start": [start], "end": [last], "n": [n]})


class Sessions(silt_spark.BatchProcessor):
    """SessionsPerKey for all the keys of a batch at once (the docs' example)."""

    def init(self, handle):
        handle.getValueState("session", "start long, last long, n long")

    def process(self, batch, state, timers):
        session = state.value("session")
        users = batch.group_by("user").aggregate([])
        old = session.get(users)                             # start, last, n (nulls: none)
        held = pc.is_valid(old["n"])
        ms = pc.divide(batch["ts"].cast(pa.timestamp("us")).cast(pa.int64()), 1000)
        rows = pa.concat_tables([                            # each open session as one row
            pa.table({"user": batch["user"], "start": ms, "last": ms,
                      "n": pa.array([1] * batch.num_rows, pa.int64())}),
            pa.table({"user": users["user"], "start": old["start"], "last": old["last"],
                      "n": old["n"]}).filter(held),
        ]).sort_by([("user", "ascending"), ("last", "ascending")])
        u, last = rows["user"].to_numpy(zero_copy_only=False), rows["last"].to_numpy()
        new = np.ones(len(u), bool)                          # a row opening a session
        new[1:] = (u[1:] != u[:-1]) | (last[1:] > last[:-1] + GAP)
        rows = rows.append_column("sid", pa.array(np.cumsum(new)))
        per = rows.group_by(["user", "sid"]).aggregate(
            [("start", "min"), ("last", "max"), ("n", "sum")]).sort_by("sid")
        pu = per["user"].to_numpy(zero_copy_only=False)
        is_open = pa.array(np.append(pu[1:] != pu[:-1], True))  # a user's last session
        now, done = per.filter(is_open), per.filter(pc.invert(is_open))
        timers.delete(users.filter(held), pc.add(old["last"].filter(held), GAP))
        timers.register(now.select(["user"]), pc.add(now["last_max"], GAP))
        session.put(now, pa.table({"start": now["start_min"], "last": now["last_max"],
                                   "n": now["n_sum"]}))
        return pa.table({"user": done["user"], "start": done["start_min"],
                         "end": done["last_max"], "n": done["n_sum"]})

    def expired(self, keys, times, state):
        session = state.value("session")
        s = session.get(keys)
        session.delete(keys)
        return pa.table({"user": keys["user"], "start": s["start"], "end": s["last"],
                         "n": s["n"]})


def test_sessionization_equals_the_per_key_processors(spark, tmp_path):
    """The docs' sessionization as a batch processor gives the per-key processor's sessions
    micro-batch by micro-batch, through a restart with a rescale 2 -> 3 (sessions open and
    their timers pending across it)."""
    roots = {name: (tmp_path / f"{name}-state").as_uri() for name in ("perkey", "batch")}
    opts = {"time_mode": "EventTime", "event_time_column": "ts", "watermark_delay": "3 seconds"}
    variants = {
        "perkey": Variant(lambda run, n: silt_spark.transform_with_state(
            run.stream(), SessionsPerKey(), ["user"], SESSION_OUT, roots["perkey"], 2, **opts)),
        "batch": Variant(lambda run, n: silt_spark.transform_batches(
            run.stream(), Sessions(), ["user"], SESSION_OUT, roots["batch"], 2 + n, **opts),
            (2,)),
    }
    run_all(spark, tmp_path, event_rows(11, 4), variants)
    want = variants["perkey"]
    assert len(want.output) > 12 and (want.output["n"] > 1).any()
    quiet = {r[0] for rows in event_rows(11, 4)[:2] for r in rows} & set(QUIET)
    assert len(quiet) >= 3 and quiet <= set(want.output["user"])  # closed by their timers

    def order(df):
        return df.sort_values(["user", "start"]).reset_index(drop=True)

    pd.testing.assert_frame_equal(order(variants["batch"].output), order(want.output),
                                  check_dtype=False)
    assert_same_batches(variants["batch"].batches, want.batches, order, "sessions")
