"""silt_spark.transform_batches: the vectorized stateful processor.

A running count and sum written as a batch processor must give the output of the same logic as
silt's per-key processor and as Spark's own ``transformWithStateInPandas``, through a task
failure after a commit, a restart and a rescale from 2 to 3 shards; a query that switches from
the per-key processor to the batch processor on the same state continues its totals. List and
map state (appends, a list replaced, map entries put and removed, maps deleted), with a TTL,
give the per-key processor's output through the same failure, restart and rescale, and a query
switching per-key -> batch -> per-key on the same state gives it too. Bad input (output of the
wrong schema, a ``put`` or list ``append`` with another number of rows than keys, nulls in the
key columns of a state call, an exception in ``process``) fails the task with a message naming the
processor, the variable and what was wrong, and the failing batch commits nothing.

Without Spark: on a real shard LSM, whatever either processor writes the other reads
(randomized keys and values of many types), the batch's reads are one ``multi_get`` and a
``put`` one ``put_many``.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import time

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import silt
import silt_spark
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle
from pyspark.sql import functions as F
from silt.errors import InvalidArgumentError, InvalidTypeError
from silt_spark.operators import _varkeys
from silt_spark.operators.batch import BatchHandle, BatchStates
from silt_spark.operators.batch._state import BatchKeys
from silt_spark.operators.processor import _handle as _processor
from silt_spark.runtime import _codec, _layout, _rowcodec, _schema
from silt_spark.runtime._schema import Declared
from test_spark_event_time import Run, Variant, event_rows, run_all
from test_spark_processor_api import FakeTask
from test_spark_tws_fidelity import rocksdb  # noqa: F401 - the fixture

cloudpickle.register_pickle_by_value(sys.modules[__name__])

try:
    from pyspark.sql.streaming import StatefulProcessor as SparkProcessor
except ImportError:  # pragma: no cover - pyspark < 4
    SparkProcessor = object

OUT = "user string, n long, total long"
TOTALS = "n long, total long"


class CountSum(SparkProcessor):
    """The per-key running count and sum (for Spark's operator and silt's per-key one)."""

    def init(self, handle):
        self.totals = handle.getValueState("totals", TOTALS)

    def handleInputRows(self, key, rows, timerValues):
        n, total = self.totals.get() if self.totals.exists() else (0, 0)
        for df in rows:
            n += len(df)
            total += int(df["amount"].sum())
        self.totals.update((n, total))
        yield pd.DataFrame({"user": [key[0]], "n": [n], "total": [total]})


class BatchCountSum(silt_spark.BatchProcessor):
    """The same logic over a whole shard's micro-batch: no Python per key."""

    def init(self, handle):
        handle.getValueState("totals", TOTALS)

    def process(self, batch, state, timers):
        per_key = batch.group_by("user").aggregate([([], "count_all"), ("amount", "sum")])
        totals = state.value("totals")
        old = totals.get(per_key)
        n = pc.add(pc.fill_null(old["n"], 0), per_key["count_all"])
        total = pc.add(pc.fill_null(old["total"], 0), per_key["amount_sum"])
        totals.put(per_key, pa.table({"n": n, "total": total}))
        return pa.table({"user": per_key["user"], "n": n, "total": total})


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def _no_versions(state_url: str) -> list[int]:
    return [v for v in silt_spark.state_size(state_url).versions.values() if v is not None]


def test_batch_processor_gives_the_per_key_processors_and_sparks_output(rocksdb, tmp_path):  # noqa: F811
    """Equal output through a task failure after commit (batch 1, shard 0), a restart and a
    rescale 2 -> 3 shards; a query switching from the per-key processor (2 shards) to the
    batch processor (3 shards) on the same state continues the totals; read_state reads the
    batch processor's state typed, as the per-key processor's."""
    batches = event_rows(11, 5)
    roots = {name: (tmp_path / f"{name}-state").as_uri()
             for name in ("perkey", "batch", "switch")}

    def perkey(run, n):
        return silt_spark.transform_with_state(
            run.stream(), CountSum(), ["user"], OUT, roots["perkey"], 2 + n)

    def batch(run, n):
        return silt_spark.transform_batches(
            run.stream(), BatchCountSum(), ["user"], OUT, roots["batch"], 2 + n)

    def switch(run, n):
        if n == 0:
            return silt_spark.transform_with_state(
                run.stream(), CountSum(), ["user"], OUT, roots["switch"], 2)
        return silt_spark.transform_batches(
            run.stream(), BatchCountSum(), ["user"], OUT, roots["switch"], 3)

    variants = {
        "spark": Variant(lambda run, _: run.stream().groupBy("user").transformWithStateInPandas(
            CountSum(), OUT, "Append", "None")),
        "perkey": Variant(perkey, (2,)),
        "batch": Variant(batch, (2,), fail=(1, 0)),
        "switch": Variant(switch, (3,)),
    }
    run_all(rocksdb, tmp_path, batches, variants)
    want = variants["spark"].output
    assert len(want) >= 5 * 8 and want["n"].max() > 5, want
    assert int(want.groupby("user")["n"].max().sum()) == sum(len(b) for b in batches)
    for name in ("perkey", "batch", "switch"):
        pd.testing.assert_frame_equal(_sorted(variants[name].output), _sorted(want),
                                      check_dtype=False, obj=name)
    # micro-batch by micro-batch too (the same batch ids: no event time, no tick batches)
    for b, df in variants["spark"].batches.items():
        pd.testing.assert_frame_equal(_sorted(variants["batch"].batches[b]), _sorted(df),
                                      check_dtype=False, obj=f"batch processor, batch {b}")
    assert set(silt_spark.state_size(roots["batch"]).versions) == {0, 1, 2}

    def typed(root):
        df = silt_spark.read_state(rocksdb, root, state_name="totals").toPandas()
        return _sorted(df.drop(columns=["shard_version"]))

    got = typed(roots["batch"])
    assert list(got.columns) == ["user", "n", "total", "expires_at_ms"]
    pd.testing.assert_frame_equal(got, typed(roots["perkey"]), obj="read_state")
    pd.testing.assert_frame_equal(got, typed(roots["switch"]), obj="read_state")


# --- list and map state ------------------------------------------------------------------------

LM_OUT = "user string, items long, total long, buckets long, count long"
DAY = 86_400_000


class ListMapPerKey(SparkProcessor):
    """Per key: a list of amounts (cut to its 3 largest past 6 elements) and a map bucket ->
    count (``amount % 3``; a bucket reaching 4 is removed, the map cleared by an amount below
    -15)."""

    def __init__(self, ttl=None):
        self.ttl = ttl

    def init(self, handle):
        self.items = handle.getListState("items", "amount long", self.ttl)
        self.buckets = handle.getMapState("buckets", "bucket int", "c long", self.ttl)

    def handleInputRows(self, key, rows, timerValues):
        amounts = [int(a) for df in rows for a in df["amount"]]
        self.items.appendList([(a,) for a in amounts])
        items = [a for (a,) in self.items.get()]
        if len(items) > 6:
            items = sorted(items)[-3:]
            self.items.put([(a,) for a in items])
        for a in amounts:
            c = self.buckets.getValue((a % 3,))
            self.buckets.updateValue((a % 3,), ((c[0] if c else 0) + 1,))
        for (b,), (c,) in list(self.buckets.iterator()):
            if c >= 4:
                self.buckets.removeKey((b,))
        if min(amounts) < -15:
            self.buckets.clear()
        counts = [c for _, (c,) in self.buckets.iterator()]
        yield pd.DataFrame({"user": [key[0]], "items": [len(items)], "total": [sum(items)],
                            "buckets": [len(counts)], "count": [sum(counts)]})


class ListMapBatch(silt_spark.BatchProcessor):
    """ListMapPerKey's logic over a whole micro-batch (pyarrow and pandas, no code per key)."""

    def __init__(self, ttl=None):
        self.ttl = ttl

    def init(self, handle):
        handle.getListState("items", "amount long", self.ttl)
        handle.getMapState("buckets", "bucket int", "c long", self.ttl)

    def process(self, batch, state, timers):
        items, buckets = state.list("items"), state.map("buckets")
        items.append(batch.select(["user"]), batch.select(["amount"]))
        keys = batch.group_by("user").aggregate([("amount", "min")])
        lists = items.get(keys).to_pandas()
        size = lists.groupby("user")["amount"].transform("size")
        top = lists[size > 6].sort_values("amount", kind="stable").groupby("user").tail(3)
        if len(top):
            items.put(top[["user"]], top[["amount"]])
            lists = pd.concat([lists[size <= 6], top])
        rows = batch.select(["user", "amount"]).to_pandas()
        rows["bucket"] = rows["amount"] % 3
        new = rows.groupby(["user", "bucket"]).size().rename("n").reset_index()
        both = new.merge(buckets.get(keys).to_pandas(), on=["user", "bucket"], how="left")
        both["c"] = both["c"].fillna(0).astype("int64") + both["n"]
        buckets.put(both[["user"]], both[["bucket"]], both[["c"]])
        full = buckets.get(keys).to_pandas()
        full = full[full["c"] >= 4]
        buckets.remove(full[["user"]], full[["bucket"]])
        buckets.delete(keys.filter(pc.less(keys["amount_min"], -15)))
        maps = buckets.get(keys).to_pandas()
        out = (pd.DataFrame({"user": keys["user"].to_pylist()}).set_index("user")
               .join(lists.groupby("user")["amount"].agg(items="size", total="sum"))
               .join(maps.groupby("user")["c"].agg(buckets="size", count="sum")))
        return out.fillna(0).astype("int64").reset_index()


def test_list_and_map_state_equal_the_per_key_processor_and_switch_both_ways(spark, tmp_path):
    """List and map state: the batch processor's output equals the per-key processor's
    through a task failure after commit (batch 1, shard 0), a restart and a rescale 2 -> 3
    shards; a query switching per-key (2 shards) -> batch (3 shards) -> per-key (2 shards) on
    the same state gives the same output; read_state reads the same lists and maps, every
    entry with the variables' one-day TTL."""
    batches = event_rows(5, 5)
    roots = {name: (tmp_path / f"{name}-state").as_uri() for name in ("perkey", "batch", "switch")}

    def perkey(run, n):
        return silt_spark.transform_with_state(
            run.stream(), ListMapPerKey(DAY), ["user"], LM_OUT, roots["perkey"], 2)

    def batch(run, n):
        return silt_spark.transform_batches(
            run.stream(), ListMapBatch(DAY), ["user"], LM_OUT, roots["batch"], 2 + n)

    def switch(run, n):
        if n == 1:
            return silt_spark.transform_batches(
                run.stream(), ListMapBatch(DAY), ["user"], LM_OUT, roots["switch"], 3)
        return silt_spark.transform_with_state(
            run.stream(), ListMapPerKey(DAY), ["user"], LM_OUT, roots["switch"], 2)

    variants = {"perkey": Variant(perkey), "batch": Variant(batch, (2,), fail=(1, 0)),
                "switch": Variant(switch, (2, 4))}
    before = int(time.time() * 1000)
    run_all(spark, tmp_path, batches, variants)
    want = variants["perkey"].output
    most = max(pd.Series([r[0] for rows in batches for r in rows]).value_counts())
    assert most > 6 and want["items"].max() == 6  # lists were cut (put) and grew again
    assert len(want) >= 5 * 5 and (want["buckets"] == 0).any()
    assert want["buckets"].max() == 3 and want["count"].max() >= 3, want
    for name in ("batch", "switch"):
        pd.testing.assert_frame_equal(_sorted(variants[name].output), _sorted(want),
                                      check_dtype=False, obj=name)

    after = int(time.time() * 1000)

    def stored(root, name):
        df = silt_spark.read_state(spark, root, state_name=name).toPandas()
        # written while the queries ran: expiring a day after
        assert df["expires_at_ms"].between(before + DAY, after + DAY).all(), df
        return _sorted(df.drop(columns=["shard_version", "expires_at_ms"]))

    for name in ("items", "buckets"):
        got = stored(roots["perkey"], name)
        assert len(got) > 10, got
        pd.testing.assert_frame_equal(stored(roots["batch"], name), got, obj=name)
        pd.testing.assert_frame_equal(stored(roots["switch"], name), got, obj=name)


# --- bad input -------------------------------------------------------------------------------

class BadBatch(silt_spark.BatchProcessor):
    """Counts like BatchCountSum until a batch holds user ``bad``; then does ``what`` wrong."""

    def __init__(self, what):
        self.what = what

    def init(self, handle):
        handle.getValueState("totals", TOTALS)
        handle.getListState("seen", "amount long")

    def process(self, batch, state, timers):
        per_key = batch.group_by("user").aggregate([([], "count_all"), ("amount", "sum")])
        totals = state.value("totals")
        old = totals.get(per_key)
        new = pa.table({"n": pc.add(pc.fill_null(old["n"], 0), per_key["count_all"]),
                        "total": pc.add(pc.fill_null(old["total"], 0), per_key["amount_sum"])})
        bad = "bad" in per_key["user"].to_pylist()
        out = pa.table({"user": per_key["user"], "n": new["n"], "total": new["total"]})
        if not bad:
            totals.put(per_key, new)
            return out
        # good keys' state first: it must not be committed either
        totals.put(per_key, new)
        if self.what == "schema":
            return out.drop_columns(["total"])
        if self.what == "rows":
            totals.put(per_key, new.slice(0, per_key.num_rows - 1))
        if self.what == "null":
            totals.put(per_key.set_column(0, "user", pa.nulls(per_key.num_rows, pa.string())),
                       new)
        if self.what == "list":
            state.list("seen").append(per_key.select(["user"]), pa.table({"amount": [1]}))
        if self.what == "raise":
            raise ValueError("boom: the processor's own error")
        return out


BAD = {
    "schema": ["BadBatch", "process returned the columns ['user', 'n']",
               "output_schema has ['user', 'n', 'total'] (missing ['total'])"],
    "rows": ["BadBatch state 'totals'.put", "got 2 keys but 1 value rows"],
    "null": ["BadBatch state 'totals'.put", "the key columns ['user'] hold a null in row 0"],
    "list": ["BadBatch state 'seen'.append", "got 2 keys but 1 element rows"],
    "raise": ["ValueError: boom: the processor's own error", "in batch processor BadBatch"],
}


@pytest.fixture(scope="module")
def same_shard_as_bad(spark):
    """A user routed to the shard of user ``bad`` (2 shards, 256 key groups), by Spark's own
    ``xxhash64``."""
    users = ["bad", *(f"u{i}" for i in range(20))]
    rows = (spark.createDataFrame([(u,) for u in users], "user string")
            .select("user", F.pmod(F.xxhash64("user"), F.lit(256)).alias("kg")).collect())
    shard = {r.user: _layout.shard_of(r.kg, 2, 256) for r in rows}
    return next(u for u in users[1:] if shard[u] == shard["bad"])


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_fails_the_task_and_commits_nothing(spark, tmp_path, what, same_shard_as_bad):
    """Batch 0 commits on both shards; batch 1 (user ``bad`` and a user of the same shard,
    whose state is put first) fails its task, naming the processor, the variable and what was
    wrong; no shard's version moves."""
    state = (tmp_path / "state").as_uri()
    run = Run(spark, tmp_path, "q")
    run.write([(f"u{i}", i, 1000) for i in range(8)])
    run.start(silt_spark.transform_batches(run.stream(), BadBatch(what), ["user"], OUT,
                                           state, 2))
    try:
        run.drain()
        before = silt_spark.state_size(state).versions
        assert sorted(v for v in before.values() if v is not None) == [0, 0]
        run.write([("bad", 5, 2000), ("bad", 6, 2000), (same_shard_as_bad, 1, 2000)])
        with pytest.raises(Exception) as failed:
            run.drain()
    finally:
        run.stop()
    message = str(failed.value)
    for part in BAD[what]:
        assert part in message, message
    assert "micro-batch 1" in message and "nothing of this micro-batch was committed" in message
    assert silt_spark.state_size(state).versions == before
    assert sorted(run.outputs) == [0]


def test_bad_processors_are_refused_when_the_query_is_built(spark, tmp_path):
    """A TTL of -5 ms, variables without a schema (a map without a user key schema), a list field
    named as a key column, deleteIfExists, initial_state without process_initial: refused
    before anything is written."""
    (tmp_path / "in").mkdir()
    events = spark.readStream.schema("user string, amount long").json(str(tmp_path / "in"))
    state = (tmp_path / "state").as_uri()

    class Declares(silt_spark.BatchProcessor):
        def __init__(self, how):
            self.how = how

        def init(self, handle):
            if self.how == "list":
                handle.getListState("items")
            elif self.how == "map":
                handle.getMapState("m", None, "n long")
            elif self.how == "clash":
                handle.getListState("items", "user string, n long")
            elif self.how == "ttl":
                handle.getValueState("n", "n long", -5)
            elif self.how == "delete":
                handle.deleteIfExists("n")
            else:
                handle.getValueState("n")

        def process(self, batch, state, timers):
            return None

    for how, words in (("list", "list state 'items' without a schema"),
                       ("map", "map state 'm' without a user key schema"),
                       ("clash", "with the fields ['user'], named as key columns ['user']"),
                       ("ttl", "state 'n': ttlDurationMs must be a positive number of ms"),
                       ("delete", "calls handle.deleteIfExists('n'): transform_batches does "
                                  "not serve it"),
                       ("untyped", "without a schema")):
        with pytest.raises(InvalidArgumentError, match=re.escape(words)) as e:
            silt_spark.transform_batches(events, Declares(how), "user", OUT, state, 2)
        assert "Declares" in str(e.value)
    with pytest.raises(InvalidTypeError, match="needs a process_initial"):
        silt_spark.transform_batches(events, BatchCountSum(), "user", OUT, state, 2,
                                     initial_state=spark.createDataFrame([("a", 1)],
                                                                         "user string, n long"))
    assert not (tmp_path / "state").exists()


# --- without Spark: one state, two processors --------------------------------------------------

KEY_TYPES = {
    "string": (pa.string(), st.one_of(st.none(), st.text(max_size=6))),
    "long": (pa.int64(), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))),
    "int": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "timestamp": (pa.timestamp("us", tz="UTC"), st.datetimes(
        min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1),
        timezones=st.just(dt.UTC))),
    "binary": (pa.binary(), st.binary(max_size=5)),
}
VALUE = (("n", "bigint", False), ("note", "string", True), ("x", "double", True))
VALUE_ARROW = pa.schema([("n", pa.int64(), False), ("note", pa.string()), ("x", pa.float64())])


def _task(db):
    """A FakeTask that also counts ``put_many`` and ``write`` batches."""
    task = FakeTask(db)
    for name in ("put_many", "write"):
        setattr(db, name, task._counted(name, getattr(db, name)))
    return task


def _registry():
    return _schema.evolve({}, {"v": Declared("value", None, VALUE, False)})


def _batch_handle(task, key_table, kgs, columns):
    handle = BatchHandle(task, "P", _registry(), {"v": VALUE_ARROW})
    var = handle.getValueState("v", "n long, note string, x double")
    encoded = _rowcodec.encode_tuples([key_table[c] for c in columns]).to_list()
    handle._bind(BatchKeys(columns, encoded, kgs, "P"))
    return handle, var


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), types=st.lists(st.sampled_from(sorted(KEY_TYPES)), min_size=1,
                                       max_size=3))
def test_either_processor_reads_what_the_other_wrote(tmp_path_factory, data, types):
    """Random keys (several columns and types, nulls included) and values: the per-key
    processor's writes read back through the batch variable and the reverse, as equal bytes;
    the batch's reads are one multi_get, a put one put_many, a delete one write batch."""
    columns = [f"k{i}" for i in range(len(types))]
    rows = data.draw(st.lists(st.tuples(*(KEY_TYPES[t][1] for t in types)), min_size=1,
                              max_size=12, unique=True))
    keys = pa.table({c: pa.array([r[i] for r in rows], KEY_TYPES[t][0])
                     for i, (c, t) in enumerate(zip(columns, types))})
    kgs = data.draw(st.lists(st.integers(0, 255), min_size=len(rows), max_size=len(rows)))
    values = data.draw(st.lists(st.tuples(st.integers(-5, 5), st.none() | st.text(max_size=4),
                                          st.none() | st.floats(allow_nan=False)),
                                min_size=len(rows), max_size=len(rows)))
    task = _task(silt.open(tmp_path_factory.mktemp("shard").as_uri()))
    try:
        # the per-key processor writes every other key
        h = _processor.StatefulProcessorHandle(task, "none", _registry())
        per_key = h.getValueState("v", "n long, note string, x double")
        as_tuples = list(zip(*(keys[c].to_pylist() for c in columns)))
        h._prefetch((kg, _codec.encode(k)) for kg, k in zip(kgs, as_tuples))
        for i in range(0, len(rows), 2):
            h._bind(kgs[i], _codec.encode(as_tuples[i]))
            per_key.update(values[i])
        task.commit(1)

        gets = []
        real_multi_get = task.db.multi_get
        task.db.multi_get = lambda ks: gets.append(len(ks)) or real_multi_get(ks)
        _, var = _batch_handle(task, keys, kgs, columns)
        assert gets == [len(rows)]
        read = var.get(keys)
        assert read.schema == pa.schema([f.with_nullable(True) for f in VALUE_ARROW])
        got = read.to_pylist()
        want = [dict(zip(VALUE_ARROW.names, values[i])) if i % 2 == 0
                else dict.fromkeys(VALUE_ARROW.names) for i in range(len(rows))]
        assert got == want
        assert var.exists(keys).to_pylist() == [i % 2 == 0 for i in range(len(rows))]
        # the batch processor writes the others (reversed order) and deletes key 0
        odd = list(range(1, len(rows), 2))[::-1]
        task.writes.clear()
        var.put(keys.take(pa.array(odd, pa.int64())), pa.Table.from_pylist(
            [dict(zip(VALUE_ARROW.names, values[i])) for i in odd], VALUE_ARROW))
        var.delete(keys.take([0]))
        assert [w[0] for w in task.writes] == (["put_many"] if odd else []) + ["write"]
        assert gets == [len(rows)]  # served from the prefetch and its own writes
        after = [None if i == 0 else values[i] for i in range(len(rows))]
        assert var.get(keys).to_pylist() == [
            dict.fromkeys(VALUE_ARROW.names) if v is None else dict(zip(VALUE_ARROW.names, v))
            for v in after]
        task.commit(2)

        h = _processor.StatefulProcessorHandle(task, "none", _registry())
        per_key = h.getValueState("v", "n long, note string, x double")
        h._prefetch((kg, _codec.encode(k)) for kg, k in zip(kgs, as_tuples))
        for i in range(len(rows)):
            h._bind(kgs[i], _codec.encode(as_tuples[i]))
            assert per_key.get() == (None if after[i] is None else after[i])
            if after[i] is not None:
                entry = _varkeys.key_prefix(kgs[i], _codec.encode(as_tuples[i])) + b"\x01v"
                assert task.db.get(entry) == _schema.codecs(_registry())["v"].encode(after[i])
    finally:
        task.db.close()


def test_state_calls_refuse_keys_outside_the_batch_and_bad_values(tmp_path):
    """Each refusal names the processor, the variable and the call, before anything is
    written."""
    task = _task(silt.open(tmp_path.as_uri()))
    try:
        keys = pa.table({"user": ["a", "b"]})
        handle, var = _batch_handle(task, keys, [1, 2], ["user"])
        good = pa.table({"n": [1, 2], "note": ["x", None], "x": [0.5, None]})
        cases = [
            (lambda: var.get(pa.table({"user": ["c"]})), "P state 'v'.get: row 0 ('c',) is not"),
            (lambda: var.put(pa.table({"who": ["a"]}), good),
             "P state 'v'.put: keys lack the key columns ['user']"),
            (lambda: var.put(keys, good.drop_columns(["x"])), "(missing ['x'])"),
            (lambda: var.put(keys, good.append_column("y", pa.array([1, 2]))),
             "(not in it: ['y'])"),
            (lambda: var.put(keys, pa.table({"n": [1, None], "note": ["x", "y"],
                                             "x": [1.0, 2.0]})), "P state 'v'.put"),
            (lambda: var.put(pa.table({"user": ["a", "a"]}), good), "the same key more than"),
            (lambda: var.delete(pa.table({"user": [None]}, pa.schema([("user", pa.string())]))),
             "hold a null in row 0"),
            (lambda: BatchStates(handle).value("w"), "P has no value state 'w'"),
        ]
        for call, words in cases:
            with pytest.raises(InvalidArgumentError) as e:
                call()
            assert words in str(e.value), str(e.value)
        assert task.writes == [] and not task.changed
        var.put(keys, good)
        assert var.get(keys.take([1, 0])).to_pylist() == [
            {"n": 2, "note": None, "x": None}, {"n": 1, "note": "x", "x": 0.5}]
    finally:
        task.db.close()
