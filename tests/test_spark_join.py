"""silt_spark.join against Spark's own stream-stream join, for every join type.

Parquet files, one per micro-batch, each holding rows of both sides (filtered into the left and
the right stream), go through Spark's join (``withWatermark`` on both sides, the same time
range) and through ``silt_spark.join`` at 1, 2 and 7 shards, with late rows on both sides,
keys that go quiet, a restart that rescales between shard counts, and a task that fails after
its shard committed; the final outputs must be equal. As in tests/test_spark_event_time.py,
Spark runs a no-data batch after each batch that moves the watermark (where it emits unmatched
rows), and silt's tick source gives a silt query the same batch.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import silt
import silt_spark
from pyspark import cloudpickle
from pyspark.sql import functions as F
from silt.errors import InvalidArgumentError, InvalidTypeError
from silt_spark.operators.join import _buffers
from silt_spark.runtime import _names
from sparkconf import lockstep_polling
from test_spark_event_time import assert_same_batches, run_backlog, start_query
from test_spark_operator import fail_after_commit, shard_versions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SOURCE = "side string, user string, v long, t timestamp"
COLUMNS = ["luser", "lv", "lt", "ruser", "rv", "rt"]
USERS = [f"u{i}" for i in range(10)]
QUIET = USERS[7:]  # rows in the first two batches only
BASE_MS = 100_000
#: left time between right time - 4 s and right time + 2 s; delays 3 s (left), 2 s (right)
RANGE = ("4 seconds", "2 seconds")
DELAYS = ("3 seconds", "2 seconds")
HOWS = ["inner", "left", "right", "full", "left_semi"]
SPARK_HOW = {"inner": "inner", "left": "left_outer", "right": "right_outer",
             "full": "full_outer", "left_semi": "left_semi"}


class JoinRun:
    """One source folder, one parquet file per micro-batch holding both sides' rows (a ``side``
    column): each side is a filter of the same stream, so a batch always has both sides' rows of
    its file (two folders would let a query start a batch between the two files)."""

    def __init__(self, spark, tmp_path: Path, name: str) -> None:
        self.spark = spark
        self.src = tmp_path / f"{name}-in"
        self.src.mkdir()
        self.checkpoint = tmp_path / f"{name}-chk"
        self.outputs: dict[int, pd.DataFrame] = {}
        self.files = 0
        self.query = None

    def write(self, left: list, right: list) -> None:
        rows = [("L", *r) for r in left] + [("R", *r) for r in right]
        table = pa.table({
            "side": pa.array([r[0] for r in rows], pa.string()),
            "user": pa.array([r[1] for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
            "t": pa.array([r[3] * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
        })
        tmp = self.src / f".tmp-{self.files:05d}"
        pq.write_table(table, tmp)
        os.replace(tmp, self.src / f"part-{self.files:05d}.parquet")
        self.files += 1

    def streams(self):
        both = (self.spark.readStream.schema(SOURCE).option("maxFilesPerTrigger", 1)
                .parquet(str(self.src)))
        return (both.where("side = 'L'").selectExpr("user AS luser", "v AS lv", "t AS lt"),
                both.where("side = 'R'").selectExpr("user AS ruser", "v AS rv", "t AS rt"))

    def start(self, out_df) -> None:
        outputs = self.outputs

        def sink(df, batch_id):
            outputs[batch_id] = df.toPandas()

        self.query = (out_df.writeStream.foreachBatch(sink)
                      .option("checkpointLocation", str(self.checkpoint))
                      .trigger(processingTime="0 seconds").start())

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


def join_rows(seed: int, n_batches: int) -> list[tuple[list, list]]:
    """``(left rows, right rows)`` per batch, ``(user, value, event ms)``: batch ``b`` around
    ``BASE + 10 s * b``, plus rows at, just after and far before the watermark (late)."""
    rng = random.Random(seed)
    out = []
    top = [None, None]
    for b in range(n_batches):
        users = USERS if b < 2 else USERS[:7]
        base = BASE_MS + 10_000 * b
        sides = []
        for _ in (0, 1):
            rows = [(rng.choice(users), rng.randrange(1000), base - 6000 + 500 * rng.randrange(20))
                    for _ in range(14)]
            if b:
                wm = min(top[0] - 3000, top[1] - 2000)
                rows += [(rng.choice(users), 5000 + i, t)
                         for i, t in enumerate((wm, wm + 1, wm - 12_000, wm + 500))]
            rng.shuffle(rows)
            sides.append(rows)
        for s in (0, 1):
            m = max(r[2] for r in sides[s])
            top[s] = m if top[s] is None else max(top[s], m)
        out.append((sides[0], sides[1]))
    return out


def spark_join(how: str, watermarks: tuple[bool, bool] = (True, True)):
    def build(run, _):
        left, right = run.streams()
        if watermarks[0]:
            left = left.withWatermark("lt", DELAYS[0])
        if watermarks[1]:
            right = right.withWatermark("rt", DELAYS[1])
        cond = F.expr("luser = ruser AND lt >= rt - interval 4 seconds "
                      "AND lt <= rt + interval 2 seconds")
        return left.join(right, cond, SPARK_HOW[how])
    return build


def silt_join(tmp_path, name: str, how: str, layouts: list[int],
              watermarks: tuple[bool, bool] = (True, True)):
    state = (tmp_path / f"{name}-state").as_uri()
    delays = [d if w else None for d, w in zip(DELAYS, watermarks)]

    def build(run, n):
        left, right = run.streams()
        return silt_spark.join(
            left, right, [("luser", "ruser")], how, state_url=state, num_shards=layouts[n],
            left_time_column="lt", right_time_column="rt", left_watermark_delay=delays[0],
            right_watermark_delay=delays[1], time_range=RANGE,
        )
    return build


def run_all(spark, tmp_path, batches, variants: dict) -> tuple[dict[str, pd.DataFrame],
                                                               dict[str, str]]:
    """Drive every query over ``batches`` in lockstep (each drained before the next files).
    ``variants``: name -> (build, restart batch indexes, (batch, shard) to fail).
    Returns each query's output and its query id."""
    runs = {name: JoinRun(spark, tmp_path, name) for name in variants}
    starts = dict.fromkeys(variants, 0)
    query_ids: dict[str, str] = {}
    markers = {}
    for name in variants:
        markers[name] = tmp_path / f"{name}-failed"
        markers[name].mkdir()

    def start(name):
        build, _, fail = variants[name]
        out = build(runs[name], starts[name])
        if fail is not None:
            out = fail_after_commit(out, fail[0], str(markers[name]), fail[1])
        runs[name].query = start_query(lambda: (runs[name].start(out), runs[name].query)[1])
        query_ids[name] = str(runs[name].query.id)

    with lockstep_polling(spark):
        try:
            for i, pair in enumerate(batches):
                for name, (_, restarts, _) in variants.items():
                    if i in restarts:
                        runs[name].stop()
                        starts[name] += 1
                        start(name)
                    runs[name].write(*pair)
                    if i == 0:  # the first files wait when a query starts (as in run_all of
                        start(name)  # tests/test_spark_event_time.py)
                for name in variants:
                    runs[name].query.processAllAvailable()
        finally:
            for run in runs.values():
                run.stop()
    out = {}
    ids = {}
    for name, (_, _, fail) in variants.items():
        frames = [df for _, df in sorted(runs[name].outputs.items()) if len(df)]
        out[name] = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        want = [f"failed-{fail[0]}-{fail[1]}"] if fail else []
        assert os.listdir(markers[name]) == want, f"{name}: the injected failure"
        ids[name] = query_ids[name]
    return out, ids


def norm(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    df = df[columns].copy()
    for c in columns:
        if c in ("lt", "rt"):
            df[c] = pd.to_datetime(df[c]).dt.tz_localize(None).astype("datetime64[us]")
        elif c in ("lv", "rv"):
            df[c] = df[c].astype("Int64")
        else:
            df[c] = df[c].astype(object).where(df[c].notna(), None)
    return df.sort_values(columns, na_position="first").reset_index(drop=True)


def made_before_the_time_index(spark, tmp_path, name: str, how: str) -> None:
    """Create the root of ``silt_join(tmp_path, name, ...)`` as silt_spark did before outer
    sides kept a time index: its descriptor without the field (``_buffers.TIME_INDEX``)."""
    silt_join(tmp_path, name, how, [1])(JoinRun(spark, tmp_path, f"{name}-pre"), 0)
    path = tmp_path / f"{name}-state" / _names.DESCRIPTOR
    desc = json.loads(path.read_text())
    assert desc.pop(_buffers.TIME_INDEX) == 1  # a new root keeps the index
    path.write_text(json.dumps(desc, sort_keys=True))


def index_entries(state: str) -> dict[int, int]:
    """Time index entries per side in the latest versions of a join root's shards of layout
    generation 2 (1, 2, then 7 shards)."""
    counts = {0: 0, 1: 0}
    for name, versions in shard_versions(state).items():
        if not versions or not name.endswith("-g2"):
            continue
        with silt.open(f"{state}/{name}") as db:
            for kg in range(256):
                for side in (0, 1):
                    h = _buffers.index_head(kg, side)
                    counts[side] += sum(1 for _ in db.scan(h, _buffers.prefix_end(h)))
    return counts


def test_every_join_type_equals_spark(spark, tmp_path):
    """Every join type, all queries in lockstep: Spark's join, and silt at 1, then 2, then 7
    shards (two restarts, each a rescale), for three of the types with a task that fails after
    its shard committed; a full outer join also on a root made before outer sides kept a time
    index (evicting by bucket scans, as it always did)."""
    batches = join_rows(1, 4)
    variants = {}
    # (batch, partition): each file's batch is followed by a tick batch; batch 6 has 7 shards
    fails = {"inner": (2, 1), "right": (6, 3), "left_semi": (0, 0)}
    for how in HOWS:
        variants[f"spark-{how}"] = (spark_join(how), (), None)
        variants[how] = (silt_join(tmp_path, how, how, [1, 2, 7]), (1, 3), fails.get(how))
    made_before_the_time_index(spark, tmp_path, "legacy", "full")
    variants["legacy"] = (silt_join(tmp_path, "legacy", "full", [1, 2, 7]), (1, 3), (2, 0))
    out, ids = run_all(spark, tmp_path, batches, variants)
    for how in [*HOWS, "legacy"]:
        want = out[f"spark-{'full' if how == 'legacy' else how}"]
        columns = ["luser", "lv", "lt"] if how == "left_semi" else COLUMNS
        assert list(want.columns) == columns
        assert len(want) > 10, how
        if how in ("left", "full"):
            assert want["ruser"].isna().sum() > 3, how  # unmatched left rows came out
        if how in ("right", "full"):
            assert want["luser"].isna().sum() > 3, how
        assert set(QUIET) & set(want[columns[0]].dropna()), how
        got = out[how]
        assert list(got.columns) == columns, how
        pd.testing.assert_frame_equal(norm(got, columns), norm(want, columns),
                                      check_dtype=False, obj=how)
    # An outer side's time index lists exactly its buffered rows; the old root has none.
    for how, outer in (("full", (1, 1)), ("left", (1, 0)), ("right", (0, 1)),
                       ("inner", (0, 0)), ("legacy", (0, 0))):
        state = (tmp_path / f"{how}-state").as_uri()
        rows = silt_spark.read_state(spark, state).toPandas()
        buffered = [(rows["state"] == side).sum() for side in ("left", "right")]
        assert index_entries(state) == {s: buffered[s] * outer[s] for s in (0, 1)}, how

    # Inspection: read_state shows each side's buffer; the metrics and the manifests count it.
    state = (tmp_path / "full-state").as_uri()
    rows = silt_spark.read_state(spark, state).toPandas()
    assert set(rows["state"]) == {"left", "right"}
    assert {"matched", "row"} <= set(json.loads(rows["value"][0]))
    records = silt_spark.metrics(ids["full"])
    last = max(r["batch_id"] for r in records)
    for side in ("left", "right"):
        buffered = sum(r[f"buffered_{side}"] for r in records if r["batch_id"] == last)
        assert buffered == (rows["state"] == side).sum() > 0, side
        assert sum(r[f"evicted_{side}"] for r in records) > 0, side
        meta = 0
        for name in shard_versions(state):
            with silt.open(f"{state}/{name}") as db:
                if name.endswith("-g2"):
                    meta += int(db.meta.get(f"spark.join_buffered_{side}", 0))
        assert meta == buffered, side


def test_a_large_bucket_is_probed_key_by_key_with_sparks_answers(spark, tmp_path):
    """A bucket holding many more buffered rows than the batch probes keys there is read with
    one prefix scan per probed key (``_buffers.SCAN_ROWS_PER_SEEK``), not whole: one key group
    (``key_groups=1``), 160 left rows of 8 users in one 6 s bucket, then batches of a few right
    rows of 2 users (160 > 2 * 32) and a late bulk of right rows (every key probed: read whole).
    The output equals Spark's inner and left outer joins."""
    rng = random.Random(7)
    bulk = [(f"u{rng.randrange(8)}", i, BASE_MS + 100 * rng.randrange(50)) for i in range(160)]
    batches = [
        (bulk, []),
        ([], [("u1", 1, BASE_MS + 2000), ("u2", 2, BASE_MS + 2500)]),
        ([], [("u3", 3, BASE_MS + 1000), ("u9", 4, BASE_MS + 1200)]),
        ([], [(f"u{i % 8}", 10 + i, BASE_MS + 3000 + 10 * i) for i in range(40)]),
    ]

    def silt_build(how):
        state = (tmp_path / f"big-{how}-state").as_uri()

        def build(run, n):
            left, right = run.streams()
            return silt_spark.join(
                left, right, [("luser", "ruser")], how, state_url=state, num_shards=1,
                key_groups=1, left_time_column="lt", right_time_column="rt",
                left_watermark_delay=DELAYS[0], right_watermark_delay=DELAYS[1],
                time_range=RANGE,
            )
        return build

    variants = {}
    for how in ("inner", "left"):
        variants[f"spark-{how}"] = (spark_join(how), (), None)
        variants[how] = (silt_build(how), (), None)
    out, ids = run_all(spark, tmp_path, batches, variants)
    for how in ("inner", "left"):
        records = silt_spark.metrics(ids[how])
        assert sum(r.get("probe_key_scans", 0) for r in records) >= 4, how  # batches 1 and 2
        assert sum(r.get("probe_bucket_scans", 0) for r in records) >= 1, how  # batch 3
        want = out[f"spark-{how}"]
        assert (want["ruser"].notna()).sum() > 40, how  # the probes matched
        pd.testing.assert_frame_equal(norm(out[how], COLUMNS), norm(want, COLUMNS),
                                      check_dtype=False, obj=how)


def test_join_refuses_bad_arguments_before_any_state(spark, tmp_path):
    stream = (spark.readStream.schema(SOURCE).parquet(str(tmp_path)))
    left = stream.selectExpr("user AS luser", "v AS lv", "t AS lt")
    right = stream.selectExpr("user AS ruser", "v AS rv", "t AS rt")
    url = (tmp_path / "state").as_uri()
    ok = dict(state_url=url, num_shards=2, left_time_column="lt", right_time_column="rt",
              time_range=("1 second", "1 second"))
    cases = [
        (dict(on=[("luser", "ruser")], how="cross"), InvalidArgumentError, "how must be"),
        (dict(on=[("luser", "rv")]), InvalidTypeError, "same type|one type"),
        (dict(on=[("luser", "nope")]), InvalidArgumentError, "not in the right"),
        (dict(on=[]), InvalidArgumentError, "must name the join key"),
        (dict(on=[("luser", "ruser")], how="left", time_range=None), InvalidArgumentError,
         "needs event time and a time_range"),
        (dict(on=[("luser", "ruser")], right_time_column=None), InvalidArgumentError,
         "or neither"),
        (dict(on=[("luser", "ruser")], time_range=("-2 seconds", "1 second")),
         InvalidArgumentError, "is empty"),
        (dict(on=[("luser", "ruser")], left_time_column="lv"), InvalidTypeError, "timestamp"),
        (dict(on=["luser"]), InvalidArgumentError, "not in the right"),
        # Spark's rule: the side whose rows come out with nulls needs the other's watermark
        (dict(on=[("luser", "ruser")], how="left", right_watermark_delay=None),
         InvalidArgumentError, "watermark on the right side"),
        (dict(on=[("luser", "ruser")], how="left_semi", right_watermark_delay=None),
         InvalidArgumentError, "watermark on the right side"),
        (dict(on=[("luser", "ruser")], how="right", left_watermark_delay=None),
         InvalidArgumentError, "watermark on the left side"),
        (dict(on=[("luser", "ruser")], how="full", left_watermark_delay=None,
              right_watermark_delay=None), InvalidArgumentError, "at least one side"),
    ]
    for kw, err, msg in cases:
        with pytest.raises(err, match=msg):
            silt_spark.join(left, right, **{**ok, **kw})
    both = right.withColumnRenamed("rv", "lv")
    with pytest.raises(InvalidArgumentError, match="rename one side"):
        silt_spark.join(left, both, [("luser", "ruser")], **ok)
    assert not (tmp_path / "state").exists()  # refused before anything was written


def test_full_outer_and_semi_joins_equal_spark_batch_by_batch_over_a_backlog(spark, tmp_path):
    """Back-to-back batches (a backlog read by availableNow runs, no-data batches only at
    their ends): rows late against the previous batch's watermark are dropped, rows expired by
    this batch's are not buffered, unmatched outer rows come out when this batch's watermark
    expires them, and each run ends with Spark's no-data batch (silt's tick) emitting the
    rows the last file's watermark expired: the same rows in the same micro-batches."""
    batches = join_rows(8, 7)
    # the second round's event times continue after the first's
    rounds = [batches[:4], [tuple([(u, v, t + 10_000) for u, v, t in rows] for rows in pair)
                            for pair in batches[4:]]]
    builds = {}
    for how in ("full", "left_semi"):
        builds[f"spark-{how}"] = lambda run, how=how: spark_join(how)(run, 0)
        builds[how] = lambda run, how=how: silt_join(tmp_path, how, how, [3])(run, 0)
    out = run_backlog(spark, tmp_path, rounds, builds, JoinRun)
    for how in ("full", "left_semi"):
        want = out[f"spark-{how}"]
        columns = ["luser", "lv", "lt"] if how == "left_semi" else COLUMNS
        assert len(want) == len(batches) + 2, how  # a no-data batch after each run
        rows = pd.concat(want.values())
        assert len(rows) > 20, how
        if how == "full":
            assert rows["ruser"].isna().sum() > 3 and rows["luser"].isna().sum() > 3
            assert want[max(want)]["luser"].isna().any()  # emitted by the final no-data batch
        assert_same_batches(out[how], want, lambda df, c=columns: norm(df, c), how)


def test_a_side_without_data_and_a_restart_keep_sparks_watermark(spark, tmp_path):
    """Spark's two rules for several inputs, against Spark's left outer join: the watermark
    stays at 0 while one side has had no data (the right side's first row, at 101 s, is not
    late and matches the left row at 100 s), and a restart forgets each side's maximum (the
    left side's 200 s before the restart does not count after it: the right row at 170 s is
    not late and matches the left row at 168 s). silt restarts and rescales 1 -> 2 shards
    there."""
    batches = [
        ([("u1", 1, 100_000), ("u1", 2, 120_000)], []),
        ([("u3", 3, 125_000)], [("u1", 4, 101_000), ("u3", 5, 124_000)]),
        ([("u4", 6, 200_000)], [("u1", 7, 103_000), ("u4", 8, 150_000)]),
        ([("u2", 9, 168_000)], [("u2", 10, 190_000)]),
        ([], [("u2", 11, 170_000)]),
        ([("u5", 12, 300_000)], [("u5", 13, 300_000)]),
    ]
    variants = {
        "spark-left": (spark_join("left"), (3,), None),
        "left": (silt_join(tmp_path, "left", "left", [1, 2]), (3,), None),
    }
    out, _ = run_all(spark, tmp_path, batches, variants)
    want = norm(out["spark-left"], COLUMNS)
    # What the two rules decide, in Spark's own output: the late-looking right rows matched.
    matched = set(zip(want["lv"].dropna().astype(int), want["rv"].fillna(-1).astype(int)))
    assert {(1, 4), (9, 11)} <= matched, matched
    pd.testing.assert_frame_equal(norm(out["left"], COLUMNS), want, check_dtype=False)


def test_a_watermark_on_one_side_only_equals_spark(spark, tmp_path):
    """Spark accepts a watermark on one input of a join: that side's late rows are dropped,
    the other's never are, and no row of either side expires (a side's rows expire only when
    both have a watermark). Spark's join and silt's (1, then 2, then 7 shards, three of them
    with a task that fails after its shard committed) on the same files, for an inner, a
    right outer (watermark on the left, Spark's requirement), a left outer (on the right) and
    a full join (on the left); Spark refuses a left outer join with the watermark on the left,
    as silt does when the join is built."""
    batches = join_rows(3, 4)
    cases = {"inner": (True, False), "right": (True, False), "left": (False, True),
             "full": (True, False)}
    variants = {}
    # (batch, partition) of a task that fails after its shard committed: no tick batches
    # here, so file i is batch i (1 shard, then 2 from batch 1, 7 from batch 3)
    fails = {"inner": (2, 1), "left": (3, 5), "full": (0, 0)}
    for how, marks in cases.items():
        variants[f"spark-{how}"] = (spark_join(how, marks), (), None)
        variants[how] = (silt_join(tmp_path, how, how, [1, 2, 7], marks), (1, 3),
                         fails.get(how))
    out, _ = run_all(spark, tmp_path, batches, variants)
    for how in cases:
        want = out[f"spark-{how}"]
        assert len(want) > 10, how
        pd.testing.assert_frame_equal(norm(out[how], COLUMNS), norm(want, COLUMNS),
                                      check_dtype=False, obj=how)
    # Rows late on the watermarked side only: Spark dropped some (fewer than all input rows
    # at the watermark's edge came out), and the unwatermarked side's came out in full.
    inner = out["spark-inner"]
    assert (inner["rv"] == 5002).any()  # a right row 12 s behind the watermark matched
    run = JoinRun(spark, tmp_path, "refused")
    query = spark_join("left", (True, False))(run, 0)
    with pytest.raises(Exception, match=r"(?i)watermark"):
        run.start(query)
        run.query.processAllAvailable()
    run.stop()
