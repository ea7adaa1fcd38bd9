"""Processors written as for PySpark's own ``transformWithStateInPandas`` / ``transformWithState``
(in the style of Spark's TWS test processors: value, list and map state, state TTLs, an
initial state, event-time timers with ``listTimers``, ``deleteIfExists``, the Row API) give
Spark's answers under silt.

Each comparison runs the same processor through Spark's operator and through silt on the same
input files, silt restarted and rescaled from 2 to 3 shards mid-stream (``run_all`` of
``test_spark_event_time``), and requires equal output. The processors put into their output
what they were handed (pandas dtypes, Python types of Rows, keys and state values,
``listTimers()`` in a firing timer), so any difference in what crosses into user code shows.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
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
            "what": [f"fired:{type(key).__name__}:{self.count.get()[0]}:{timers}:{signs}"],
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
        )),
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
    assert all(f"[{ms}]" in w and ":Row:" in w for w, ms in zip(fired["what"], fired["ms"]))
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
        )),
        "silt": Variant(silt_rows, RESTARTS),
    }
    run_all(rocksdb, tmp_path, batches, variants)
    want, got = variants["spark"].output, variants["silt"].output
    u0 = want[want["user"] == "u0"].sort_values("ms")
    assert u0["ms"].iloc[0] > 12 and "Row:int:datetime:UTC" in u0["what"].iloc[0], u0
    assert sum(int(w.split(":")[1]) for w in want["what"]) == sum(len(b) for b in batches)
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want), check_dtype=False,
                                  obj="Row processor, silt 2 -> 3 shards")


class Expiring(SparkProcessor):
    """Processing time with state TTLs (Spark's TTL test processors' pattern): a count, a list
    and a map whose TTL (an hour) outlives the run, and a value whose TTL (1 ms) has passed by
    the next micro-batch; reports what each variable holds when a key's rows come."""

    def init(self, handle):
        hour = 3_600_000
        self.count = handle.getValueState("count", "n long", ttlDurationMs=hour)
        self.amounts = handle.getListState("amounts", "amount long", ttlDurationMs=hour)
        self.signs = handle.getMapState("signs", "sign string", "n long", ttlDurationMs=hour)
        self.brief = handle.getValueState("brief", "n long", ttlDurationMs=1)

    def handleInputRows(self, key, rows, timerValues):
        # read before this batch writes: a 1 ms TTL set in an earlier batch has passed
        brief = self.brief.get() if self.brief.exists() else None
        n = self.count.get()[0] if self.count.exists() else 0
        for df in rows:
            n += len(df)
            self.amounts.appendList([(int(a),) for a in df["amount"]])
            for a in df["amount"]:
                sign = ("neg" if a < 0 else "pos",)
                have = self.signs.getValue(sign)
                self.signs.updateValue(sign, ((have[0] if have else 0) + 1,))
        self.count.update((n,))
        self.brief.update((n,))
        amounts = [a[0] for a in self.amounts.get()]
        signs = sorted((k[0], v[0]) for k, v in self.signs.iterator())
        yield pd.DataFrame({
            "user": [key[0]],
            "what": [f"in:{n}:brief={brief}:{len(amounts)}:{sum(amounts)}:{signs}"],
            "ms": [n],
        })


class BatchExpiring(silt_spark.BatchProcessor):
    """Expiring over a whole micro-batch (``transform_batches``): the same variables and TTLs,
    the same report per key, from columns instead of one key at a time."""

    def init(self, handle):
        hour = 3_600_000
        handle.getValueState("count", "n long", hour)
        handle.getListState("amounts", "amount long", hour)
        handle.getMapState("signs", "sign string", "n long", hour)
        handle.getValueState("brief", "n long", 1)

    def process(self, batch, state, timers):
        rows = batch.select(["user", "amount"]).to_pandas()
        per_key = rows.groupby("user", sort=False).size()
        keys = pa.table({"user": list(per_key.index)})
        brief = state.value("brief").get(keys)["n"].to_pylist()  # before this batch writes
        old = state.value("count").get(keys)["n"].to_pylist()
        n = [(o or 0) + int(r) for o, r in zip(old, per_key)]
        state.list("amounts").append(batch.select(["user"]), batch.select(["amount"]))
        rows["sign"] = np.where(rows["amount"] < 0, "neg", "pos")
        new = rows.groupby(["user", "sign"]).size().rename("k").reset_index()
        signs = state.map("signs")
        both = new.merge(signs.get(keys).to_pandas(), on=["user", "sign"], how="left")
        both["n"] = both["n"].fillna(0).astype("int64") + both["k"]
        signs.put(both[["user"]], both[["sign"]], both[["n"]])
        state.value("count").put(keys, pa.table({"n": n}))
        state.value("brief").put(keys, pa.table({"n": n}))
        amounts = state.list("amounts").get(keys).to_pandas().groupby("user")["amount"]
        held = signs.get(keys).to_pandas().sort_values(["user", "sign"]).groupby("user")
        what = []
        for user, count, was in zip(per_key.index, n, brief):
            got = amounts.get_group(user)
            have = held.get_group(user)
            pairs = [(str(a), int(b)) for a, b in zip(have["sign"], have["n"])]
            what.append(f"in:{count}:brief={was}:{len(got)}:{int(got.sum())}:{pairs}")
        return pd.DataFrame({"user": list(per_key.index), "what": what, "ms": n})


def test_ttl_processor_gives_sparks_output(rocksdb, tmp_path):
    """State TTLs in processing time, through Spark's transformWithStateInPandas and silt (2
    shards, restarted and rescaled to 3), the processor as written for PySpark and the same
    logic as a batch processor (``transform_batches``): the same output. Processing time is
    the clock's, so what is compared is chosen to be decided by the run, not by its speed:
    TTLs of an hour expire in none (the variables live across the restart and the rescale),
    and one of 1 ms has passed in all by the next micro-batch (Spark's next batch starts
    later than 1 ms after the previous; silt's task reads more than 1 ms after the previous
    batch's wrote): every key finds it gone.

    Spark allows TTLs in its "ProcessingTime" mode only, where it runs a no-data micro-batch
    after every batch, for ever (``processAllAvailable`` never settles): its query runs on a
    1 s trigger, and each file is waited for until its batch's output is in (a condition,
    with a generous timeout)."""
    import time

    from test_spark_event_time import Run, start_query

    batches = event_rows(9, 4)
    spark_run, silt_run = Run(rocksdb, tmp_path, "spark"), Run(rocksdb, tmp_path, "silt")
    batch_run = Run(rocksdb, tmp_path, "batch")

    def start_spark():
        out = (spark_run.stream().groupBy("user")
               .transformWithStateInPandas(Expiring(), OUT, "Append", "ProcessingTime"))
        outputs = spark_run.outputs

        def sink(df, batch_id):
            outputs[batch_id] = df.toPandas()

        spark_run.query = start_query(lambda: (
            out.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(spark_run.checkpoint))
            .trigger(processingTime="1 second").start()))

    def start_silt(n):
        out = silt_spark.transform_with_state(
            silt_run.stream(), Expiring(), ["user"], OUT, (tmp_path / "ttl").as_uri(),
            LAYOUTS[n][0], time_mode="ProcessingTime")
        silt_run.query = start_query(lambda: (silt_run.start(out), silt_run.query)[1])

    def start_batch(n):
        out = silt_spark.transform_batches(
            batch_run.stream(), BatchExpiring(), ["user"], OUT, (tmp_path / "ttl-batch").as_uri(),
            LAYOUTS[n][0], time_mode="ProcessingTime")
        batch_run.query = start_query(lambda: (batch_run.start(out), batch_run.query)[1])

    infra_restarts = []

    def spark_read(files):
        """Wait until Spark's query has emitted the output of ``files`` files (each file's
        batch has rows for its keys; its no-data batches emit nothing).

        Spark's query starts Python processes as it runs: its first micro-batch checks the
        processor's state schema in a fresh Python process on the driver
        (``TransformWithStateInPySparkPythonPreInitRunner``), its tasks fork workers. At load
        15-20 on a 2-core host such a process missed Spark's fixed 10 s to connect back in
        three attempts of this test in a row, and the query died with "Python worker failed
        to connect back" (or "Timed out while waiting for the Python worker to connect
        back"). Such a death is Spark's infrastructure, not its answer: the query is
        restarted from its checkpoint (Spark's own recovery re-runs the unfinished
        micro-batch, and the sink keys outputs by batch id), at most 3 times. Any other
        failure fails the test."""
        deadline = time.monotonic() + 600
        while sum(len(df) > 0 for df in list(spark_run.outputs.values())) < files:
            error = spark_run.query.exception() if not spark_run.query.isActive else None
            if (error is not None and "Python worker" in str(error)
                    and "to connect back" in str(error)
                    and len(infra_restarts) < 3):
                infra_restarts.append(str(error).splitlines()[0])
                spark_run.stop()
                start_spark()
                continue
            assert error is None and time.monotonic() < deadline, error or "timed out"
            time.sleep(0.2)

    try:
        for i, rows in enumerate(batches):
            if i in RESTARTS:
                silt_run.stop()
                start_silt(RESTARTS.index(i) + 1)
                batch_run.stop()
                start_batch(RESTARTS.index(i) + 1)
            spark_run.write(rows)
            silt_run.write(rows)
            batch_run.write(rows)
            if i == 0:
                start_spark()
                start_silt(0)
                start_batch(0)
            silt_run.drain()
            batch_run.drain()
            spark_read(i + 1)
    finally:
        spark_run.stop()
        silt_run.stop()
        batch_run.stop()

    def output(run):
        return pd.concat([df for _, df in sorted(run.outputs.items()) if len(df)],
                         ignore_index=True)

    want, got = output(spark_run), output(silt_run)
    # every key's rows counted across the restart, none of the 1 ms values left
    assert want.groupby("user")["ms"].max().sum() == sum(len(b) for b in batches)
    assert want["what"].str.contains(":brief=None:").all()
    assert (want["ms"] > want.groupby("user")["ms"].transform("min")).any()  # keys come back
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want), check_dtype=False,
                                  obj="TTL processor, silt 2 -> 3 shards")
    pd.testing.assert_frame_equal(_sorted(output(batch_run)), _sorted(want), check_dtype=False,
                                  obj="TTL batch processor, silt 2 -> 3 shards")


# --- the class: every column type, nulls in some keys' rows, another session time zone --------

TYPES = ("user string, n32 int, f32 float, flag boolean, d date, ts timestamp, "
         "ntz timestamp_ntz, dec decimal(10,2), bin binary, ln long, arr array<int>")


class Handed(SparkProcessor):
    """Reports what each key was handed: its key's types, each frame's dtypes, index and
    values (pandas), or each Row (``transformWithState``), and the timestamp it stored in the
    batch before (as given: a naive ``Timestamp`` or an aware ``datetime``)."""

    def init(self, handle):
        self.last = handle.getValueState("last", "ts timestamp")

    def handleInputRows(self, key, rows, timerValues):
        seen = []
        for part in rows:
            if isinstance(part, pd.DataFrame):
                seen.append(f"{dict(part.dtypes.astype(str))} {list(part.index)} "
                            f"{[repr(v) for v in part.itertuples(index=False)]}")
            else:
                seen.append(repr(part))
        before = self.last.get()
        last = part["ts"].iloc[-1] if isinstance(part, pd.DataFrame) else part.ts
        if last is not None and not pd.isna(last):
            self.last.update((last,))
        what = f"{[type(k).__name__ for k in key]} {seen} {before!r}"
        if isinstance(part, pd.DataFrame):
            yield pd.DataFrame({"user": [key[0]], "what": [what], "ms": [len(seen)]})
        else:
            yield Row(user=key[0], what=what, ms=len(seen))


def _typed_rows(seed: int, int_nulls: bool = False):
    import datetime as dt
    import decimal
    import random

    import pyarrow as pa

    rng = random.Random(seed)
    rows = []
    for k in range(14):
        nulls = rng.random() < 0.5  # some keys have nulls in their rows, some none
        for _ in range(rng.randint(1, 4)):
            def v(x, nulls=nulls):
                return None if nulls and rng.random() < 0.4 else x

            w = v if int_nulls else (lambda x: x)
            ts = dt.datetime(2024, 3, 10, 9, 30, tzinfo=dt.UTC) + dt.timedelta(
                seconds=rng.randrange(10**6), microseconds=rng.randrange(10**6))
            rows.append({
                # no nulls in int and boolean columns against Spark: it picks their dtype
                # (int64 or float64, bool or object) by its whole Arrow batch, other keys' rows
                # included
                "user": f"u{k}", "n32": w(rng.randrange(-99, 99)), "f32": v(rng.random()),
                "flag": w(rng.random() < 0.5), "d": v(dt.date(2024, 1, 1) + dt.timedelta(
                    days=rng.randrange(900))), "ts": v(ts), "ntz": v(ts.replace(tzinfo=None)),
                "dec": v(decimal.Decimal(rng.randrange(-10**6, 10**6)) / 100),
                "bin": v(bytes(rng.randrange(256) for _ in range(3))),
                "ln": w(rng.randrange(-10**12, 10**12)),
                "arr": v([rng.randrange(9) for _ in range(rng.randrange(3))]),
            })
    schema = pa.schema([
        ("user", pa.string()), ("n32", pa.int32()), ("f32", pa.float32()),
        ("flag", pa.bool_()), ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")), ("dec", pa.decimal128(10, 2)), ("bin", pa.binary()),
        ("ln", pa.int64()), ("arr", pa.list_(pa.int32())),
    ])
    return pa.Table.from_pylist(rows, schema=schema)


def test_every_type_reaches_user_code_as_spark_hands_it(rocksdb, tmp_path):
    """Two batches of many column types (nulls in some keys' rows only), in a session time
    zone other than UTC, with a small maxRecordsPerBatch (a key's rows in several frames):
    pandas frames and Rows as Spark hands them, through silt at 2 shards."""
    import pyarrow.parquet as pq

    spark = rocksdb
    src = tmp_path / "typed"
    src.mkdir()
    for i in range(2):
        pq.write_table(_typed_rows(i), src / f"part-{i}.parquet")
    settings = {"spark.sql.session.timeZone": "America/Los_Angeles",
                "spark.sql.execution.arrow.maxRecordsPerBatch": "3"}
    old = {k: spark.conf.get(k) for k in settings}
    outputs: dict[str, list] = {}
    try:
        for k, v in settings.items():
            spark.conf.set(k, v)

        def stream():
            return spark.readStream.schema(TYPES).option("maxFilesPerTrigger", 1).parquet(
                str(src))

        queries = {
            "spark-pandas": stream().groupBy("user").transformWithStateInPandas(
                Handed(), OUT, "Append", "None"),
            "spark-row": stream().groupBy("user").transformWithState(
                Handed(), OUT, "Append", "None"),
            "silt-pandas": silt_spark.transform_with_state(
                stream(), Handed(), ["user"], OUT, (tmp_path / "p").as_uri(), 2),
            "silt-row": silt_spark.transform_with_state(
                stream(), Handed(), ["user"], OUT, (tmp_path / "r").as_uri(), 2,
                rows_format="row"),
        }
        for name, df in queries.items():  # one at a time: Spark's TWS workers start slowly
            out = outputs.setdefault(name, [])
            q = df.writeStream.foreachBatch(
                lambda d, _, out=out: out.extend(map(tuple, d.collect()))
            ).option("checkpointLocation", str(tmp_path / f"chk-{name}")).start()
            try:
                q.processAllAvailable()
            finally:
                q.stop()
    finally:
        for k, v in old.items():
            spark.conf.set(k, v)
    for fmt in ("pandas", "row"):
        want = sorted(outputs[f"spark-{fmt}"])
        assert len(want) == 28, fmt  # 14 keys in each of 2 batches
        got = sorted(outputs[f"silt-{fmt}"])
        assert len(got) == len(want), fmt
        for g, w in zip(got, want):
            assert g[1][-120:] == w[1][-120:], fmt  # the tail: the stored value read back
            assert g == w, fmt
    text = " ".join(w for _, w, _ in outputs["spark-pandas"])
    # the dtypes this compares: naive ns timestamps, per-key dtypes, frames of <= 3 rows
    assert all(t in text for t in ("datetime64[ns]", "int64", "NaT", "Timestamp(", "date("))
    assert "UTC" not in text and "datetime64[us" not in text
    assert "datetime.datetime(2024" in text  # stored timestamps read back
    assert any(ms > 1 for _, _, ms in outputs["spark-pandas"])


@pytest.mark.parametrize("seed", range(12))
def test_frames_from_one_conversion_equal_sparks_steps_per_key(seed):
    """silt converts a shard's rows once (``Frames``); each key's frames must equal those of
    Spark's own steps on the key's rows (``chunks``): dtypes, values, index, key; nulls
    anywhere, two time zones, keys split into several frames or not."""
    from silt_spark.runtime import _spark_pandas as sp

    table = _typed_rows(seed, int_nulls=True).sort_by("user")
    users = table["user"].to_pylist()
    bounds = [i for i in range(len(users) + 1)
              if i in (0, len(users)) or users[i] != users[i - 1]]
    for tz in ("UTC", "Asia/Kolkata"):
        for most in (2, 10_000):
            conf = sp.PandasConf(timezone=tz, max_records=most)
            frames = sp.Frames(table, conf)
            for a, b in itertools.pairwise(bounds):
                got, want = frames.of(a, b), sp.chunks(table.slice(a, b - a), conf)
                assert len(got) == len(want) == -(-(b - a) // most)
                for g, w in zip(got, want):
                    pd.testing.assert_frame_equal(g, w)
                    assert sp.key_of(g, [0]) == sp.key_of(w, [0]) == (users[a],)
