"""Typed ``read_state`` of the built-in operators (``state_name`` = their state's name): an
aggregate's groups as the operator emits them, a deduplicator's remembered keys, a join's
buffered rows per side, a processor's timers. On a real SparkSession, against the operators' own
outputs and against the JSON form (an independent decoding of the same entries).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import silt_spark
from pyspark import cloudpickle
from silt.errors import InvalidArgumentError
from silt_spark.operators.join import _buffers
from silt_spark.operators.join import _reader as _join_state
from silt_spark.runtime import _names
from test_spark_join import JoinRun, join_rows, silt_join
from test_spark_operator import AGGS, Run, batch

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _latest_per_user(outputs: dict[int, pd.DataFrame], upto: int) -> pd.DataFrame:
    """Each user's row in the last micro-batch (<= ``upto``) that emitted it."""
    frames = [outputs[b].assign(_b=b) for b in sorted(outputs) if b <= upto]
    both = pd.concat(frames).sort_values("_b").drop_duplicates("user", keep="last")
    return both.drop(columns="_b").sort_values("user").reset_index(drop=True)


def test_an_aggregate_reads_as_its_output_columns(spark: Any, tmp_path: Path) -> None:
    state = (tmp_path / "state").as_uri()
    run = Run(spark, tmp_path)
    run.start(silt_spark.aggregate(run.stream(), ["user"], AGGS, state, num_shards=2))
    try:
        for seed in (1, 2, 3):
            run.write(batch(seed))
            run.drain()
    finally:
        run.stop()
    df = silt_spark.read_state(spark, state, state_name="aggregate")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("user", "string"), ("count", "bigint"), ("sum(amount)", "bigint"),
        ("min(amount)", "bigint"), ("max(amount)", "bigint"), ("avg(amount)", "double"),
        ("shard_version", "bigint"),
    ]
    for version in (None, 1):
        got = silt_spark.read_state(spark, state, version=version, state_name="aggregate")
        got = got.toPandas().sort_values("user").reset_index(drop=True)
        want = _latest_per_user(run.outputs, 2 if version is None else version)
        pd.testing.assert_frame_equal(got.drop(columns="shard_version"), want,
                                      check_dtype=False, obj=f"version {version}")
        assert (got["shard_version"] <= (2 if version is None else 1)).all()
    with pytest.raises(InvalidArgumentError, match=r"has no state 'window'.*'aggregate'"):
        silt_spark.read_state(spark, state, state_name="window")
    # The typed change feed: each group whose output moved, its rows before and after as the
    # operator emitted them.
    feed = silt_spark.read_changes(spark, state, 0, 2, state_name="aggregate")
    assert [(f.name, f.dataType.simpleString()) for f in feed.schema.fields] == [
        ("user", "string"), ("change_type", "string"),
        ("old_value", "struct<count:bigint,sum(amount):bigint,min(amount):bigint,"
                      "max(amount):bigint,avg(amount):double>"),
        ("new_value", "struct<count:bigint,sum(amount):bigint,min(amount):bigint,"
                      "max(amount):bigint,avg(amount):double>"),
        ("shard", "int"),
    ]

    def rounded(row: Any) -> Any:
        return None if row is None else {k: round(float(v), 9) for k, v in row.items()}

    for a, b in ((0, 2), (1, 2)):
        before, after = (_latest_per_user(run.outputs, v).set_index("user").to_dict("index")
                         for v in (a, b))
        got = {r.user: (r.change_type, rounded(r.old_value and r.old_value.asDict()),
                        rounded(r.new_value and r.new_value.asDict()))
               for r in silt_spark.read_changes(spark, state, a, b, "aggregate").collect()}
        want = {u: ("insert" if u not in before else "update", rounded(before.get(u)),
                    rounded(row))
                for u, row in after.items() if rounded(before.get(u)) != rounded(row)}
        assert got == want and any(c[0] == "update" for c in got.values()), (a, b)
    with pytest.raises(InvalidArgumentError, match=r"has no state 'seen'"):
        silt_spark.read_changes(spark, state, 0, 2, state_name="seen")


def test_a_deduplicator_reads_as_its_keys_and_first_batch(spark: Any, tmp_path: Path) -> None:
    state = (tmp_path / "state").as_uri()
    run = Run(spark, tmp_path)
    run.start(silt_spark.deduplicate(run.stream(), ["user", "device"], state, num_shards=2))
    batches = [batch(4, n=12, users=5), batch(5, n=12, users=7)]
    try:
        for rows in batches:
            run.write(rows)
            run.drain()
    finally:
        run.stop()
    first: dict[tuple, int] = {}
    for b, rows in enumerate(batches):
        for user, device, _ in rows:
            first.setdefault((user, device), b)
    df = silt_spark.read_state(spark, state, state_name="seen")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("user", "string"), ("device", "string"), ("first_batch_id", "bigint"),
        ("expires_at", "timestamp"), ("shard_version", "bigint"),
    ]
    rows = df.collect()
    assert {(r.user, r.device): r.first_batch_id for r in rows} == first
    assert all(r.expires_at is None for r in rows)  # no ttl, no event time: kept for ever
    # The change feed from batch 0 to 1: the keys batch 1 saw first, typed.
    feed = silt_spark.read_changes(spark, state, 0, 1, state_name="seen").collect()
    assert {(r.user, r.device): (r.change_type, r.old_value, r.new_value.first_batch_id)
            for r in feed} == {k: ("insert", None, 1) for k, b in first.items() if b == 1}
    # A root from before key types were recorded has one JSON key column: typed reads would
    # have to guess the key columns, so they are refused (the JSON form still reads).
    descriptor = tmp_path / "state" / _names.DESCRIPTOR
    legacy = json.loads(descriptor.read_text())
    del legacy["key_columns"]
    descriptor.write_text(json.dumps(legacy))
    for read in (lambda: silt_spark.read_state(spark, state, state_name="seen"),
                 lambda: silt_spark.read_changes(spark, state, 0, 1, state_name="seen")):
        with pytest.raises(InvalidArgumentError, match="recorded its key types"):
            read()
    assert silt_spark.read_state(spark, state).columns[0] == "key"


def test_a_joins_buffers_read_typed_per_side(spark: Any, tmp_path: Path) -> None:
    run = JoinRun(spark, tmp_path, "typed")
    build = silt_join(tmp_path, "typed", "left", [2])
    run.start(build(run, 0))
    try:
        for left, right in join_rows(3, 3):
            run.write(left, right)
            run.query.processAllAvailable()
    finally:
        run.stop()
    state = (tmp_path / "typed-state").as_uri()
    # Each side's buffer as that side names its columns: its own key column, its other
    # columns, then what the read adds (no prefixed copy of the key, no left name on the right).
    for side, names in (("left", ("luser", "lv", "lt")), ("right", ("ruser", "rv", "rt"))):
        typed = silt_spark.read_state(spark, state, state_name=side)
        assert [(f.name, f.dataType.simpleString()) for f in typed.schema.fields] == [
            (names[0], "string"), (names[1], "bigint"), (names[2], "timestamp"),
            ("event_time", "timestamp"), ("matched", "boolean"), ("shard_version", "bigint"),
        ]
    # (two states of two schemas: without state_name, the JSON form of both)
    assert silt_spark.read_state(spark, state).columns == silt_spark.read_state(
        spark, state, raw=True).columns
    for side, cols in (("left", ("luser", "lv", "lt")), ("right", ("ruser", "rv", "rt"))):
        typed = silt_spark.read_state(spark, state, state_name=side).collect()
        as_json = [r for r in silt_spark.read_state(spark, state).collect() if r.state == side]
        assert typed and len(typed) == len(as_json)
        want = sorted(
            (r[0], *json.loads(r.value)["row"][:2], json.loads(r.value)["matched"])
            for r in as_json
        )
        got = sorted((r[0], r[cols[0]], r[cols[1]], r.matched) for r in typed)
        assert got == want
        for r in typed:
            assert r[cols[2]] == r.event_time and isinstance(r.event_time, dt.datetime)
        # The change feed, typed, against the JSON feed (same entries, decoded apart).
        typed_feed = silt_spark.read_changes(spark, state, 0, 2, state_name=side).collect()
        json_feed = [r for r in silt_spark.read_changes(spark, state, 0, 2).collect()
                     if r.state == side]
        assert typed_feed and len(typed_feed) == len(json_feed)

        def fields(value: Any, cols: tuple[str, ...] = cols) -> Any:
            """(the row's second column, matched); its first, the key, is the row's key."""
            if value is None:
                return None
            if isinstance(value, str):
                v = json.loads(value)
                return (v["row"][1], v["matched"])
            return (value[cols[1]], value.matched)

        assert sorted(((r[0], r.change_type, fields(r.old_value), fields(r.new_value))
                       for r in typed_feed), key=repr) == sorted(
            ((r[0], r.change_type, fields(r.old_value), fields(r.new_value))
             for r in json_feed), key=repr)


def test_a_join_rows_columns_never_repeat_a_name_of_the_typed_read() -> None:
    """A side's key columns lead under the side's own names (the row's copy of them is not
    shown again); its other columns keep their names, except one named as a column the typed
    read adds after the row (``event_time``, ``matched``, ``shard_version``; Spark compares
    names without case), prefixed ``row_`` until it is free: every column has its own name."""
    side = [["id", "string"], ["event_time", "timestamp"], ["Matched", "int"],
            ["row_event_time", "bigint"], ["SHARD_VERSION", "bigint"], ["v", "double"]]
    other = [["v", "double"], ["rid", "string"]]
    desc = {"key_columns": [["id", "string"]], _buffers.JOIN_KEYS: {"left": ["id"],
                                                                 "right": ["rid"]},
            _buffers.SIDE_TYPES: {"left": side, "right": other}}
    assert _join_state.side_keys(desc, "left") == [["id", "string"]]
    assert _join_state.side_keys(desc, "right") == [["rid", "string"]]
    columns = _join_state.typed_columns(desc, "left")
    assert columns == [("row_event_time", "timestamp"), ("row_Matched", "int"),
                       ("row_row_event_time", "bigint"), ("row_SHARD_VERSION", "bigint"),
                       ("v", "double"), ("event_time", "timestamp"), ("matched", "boolean")]
    assert _join_state.typed_columns(desc, "right") == [
        ("v", "double"), ("event_time", "timestamp"), ("matched", "boolean")]
    for name in ("left", "right"):
        keys = [n for n, _ in _join_state.side_keys(desc, name)]
        names = [n.lower() for n in [*keys, *(n for n, _ in _join_state.typed_columns(desc, name)),
                                     "shard_version"]]
        assert len(set(names)) == len(names)
    # A root from before the key names were recorded: both sides' keys under the left names.
    del desc[_buffers.JOIN_KEYS]
    assert _join_state.side_keys(desc, "right") == [["id", "string"]]


class Reminder(silt_spark.StatefulProcessor):
    """Registers a timer per key in 2096, offset by its largest amount (ms)."""

    def init(self, handle):
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues):
        top = max(int(df["amount"].max()) for df in rows)
        self.handle.registerTimer(4_000_000_000_000 + top)
        return iter(())


def test_a_processors_timers_read_typed(spark: Any, tmp_path: Path) -> None:
    state = (tmp_path / "state").as_uri()
    run = Run(spark, tmp_path)
    batches = [batch(6, n=20, users=6), batch(7, n=8, users=6)]
    run.start(silt_spark.transform_with_state(
        run.stream(), Reminder(), ["user"], "user string", state_url=state, num_shards=2,
        time_mode="processingtime"))
    try:
        for rows in batches:
            run.write(rows)
            run.drain()
    finally:
        run.stop()
    timers: list[set[tuple[str, int]]] = []
    for rows in batches:
        top: dict[str, int] = {}
        for user, _, amount in rows:
            top[user] = max(top.get(user, amount), amount)
        timers.append((timers[-1] if timers else set())
                      | {(u, 4_000_000_000_000 + a) for u, a in top.items()})
    df = silt_spark.read_state(spark, state, version=0, state_name="__timer__")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("user", "string"), ("timer", "timestamp"), ("shard_version", "bigint")]
    got = {(r.user, r.ms) for r in df.selectExpr("user", "unix_millis(timer) AS ms").collect()}
    assert got == timers[0]
    # The change feed: the timers batch 1 registered, each an insert with its time.
    feed = silt_spark.read_changes(spark, state, 0, 1, state_name="__timer__")
    got = {(r.user, r.change_type, r.old, r.ms) for r in feed.selectExpr(
        "user", "change_type", "old_value AS old", "unix_millis(new_value.timer) AS ms").collect()}
    assert got == {(u, "insert", None, ms) for u, ms in timers[1] - timers[0]} != set()
