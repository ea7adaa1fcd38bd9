"""silt_spark.join against Spark's own stream-stream join, for every join type.

Two folders of parquet files (orders on the left, payments on the right), one file per side per
micro-batch, go through Spark's join (``withWatermark`` on both sides, the same time range) and
through ``silt_spark.join`` at 1, 2 and 7 shards, with late rows on both sides, keys that go
quiet, a restart that rescales between shard counts, and a task that fails after its shard
committed; the final outputs must be equal. As in tests/test_spark_event_time.py, Spark runs a
no-data batch after each batch that moves the watermark (where it emits unmatched rows); a silt
query has no Spark state, so each silt run ends with one empty pair of files (a ``tick``).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import silt_spark
from pyspark import cloudpickle
from pyspark.sql import functions as F
from test_spark_operator import fail_after_commit

cloudpickle.register_pickle_by_value(sys.modules[__name__])

LEFT = "luser string, lv long, lt timestamp"
RIGHT = "ruser string, rv long, rt timestamp"
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


def _write(folder: Path, n: int, rows: list[tuple[str, int, int]], names: list[str]) -> None:
    table = pa.table({
        names[0]: pa.array([r[0] for r in rows], pa.string()),
        names[1]: pa.array([r[1] for r in rows], pa.int64()),
        names[2]: pa.array([r[2] * 1000 for r in rows], pa.timestamp("us", tz="UTC")),
    })
    tmp = folder / f".tmp-{n:05d}"
    pq.write_table(table, tmp)
    os.replace(tmp, folder / f"part-{n:05d}.parquet")


class JoinRun:
    """Two source folders (left, right), a checkpoint, each micro-batch's output."""

    def __init__(self, spark, tmp_path: Path, name: str) -> None:
        self.spark = spark
        self.src = (tmp_path / f"{name}-left", tmp_path / f"{name}-right")
        for s in self.src:
            s.mkdir()
        self.checkpoint = tmp_path / f"{name}-chk"
        self.outputs: dict[int, pd.DataFrame] = {}
        self.files = 0
        self.query = None

    def write(self, left: list, right: list) -> None:
        _write(self.src[0], self.files, left, ["luser", "lv", "lt"])
        _write(self.src[1], self.files, right, ["ruser", "rv", "rt"])
        self.files += 1

    def streams(self):
        return tuple(
            self.spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
            .parquet(str(src)) for schema, src in zip((LEFT, RIGHT), self.src)
        )

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


def spark_join(how: str):
    def build(run, _):
        left, right = run.streams()
        left = left.withWatermark("lt", DELAYS[0])
        right = right.withWatermark("rt", DELAYS[1])
        cond = F.expr("luser = ruser AND lt >= rt - interval 4 seconds "
                      "AND lt <= rt + interval 2 seconds")
        return left.join(right, cond, SPARK_HOW[how])
    return build


def silt_join(tmp_path, name: str, how: str, layouts: list[int]):
    state = (tmp_path / f"{name}-state").as_uri()

    def build(run, n):
        left, right = run.streams()
        return silt_spark.join(
            left, right, [("luser", "ruser")], how, state_url=state, num_shards=layouts[n],
            left_time_column="lt", right_time_column="rt", left_watermark_delay=DELAYS[0],
            right_watermark_delay=DELAYS[1], time_range=RANGE,
        )
    return build


def run_all(spark, tmp_path, batches, variants: dict) -> dict[str, pd.DataFrame]:
    """Drive every query over ``batches`` in lockstep (each drained before the next files).
    ``variants``: name -> (build, restart batch indexes, tick, (batch, shard) to fail)."""
    runs = {name: JoinRun(spark, tmp_path, name) for name in variants}
    starts = dict.fromkeys(variants, 0)
    markers = {}
    for name in variants:
        markers[name] = tmp_path / f"{name}-failed"
        markers[name].mkdir()

    def start(name):
        build, _, _, fail = variants[name]
        out = build(runs[name], starts[name])
        if fail is not None:
            out = fail_after_commit(out, fail[0], str(markers[name]), fail[1])
        runs[name].start(out)

    try:
        for name in variants:
            start(name)
        for i, pair in enumerate([*batches, None]):
            for name, (_, restarts, tick, _) in variants.items():
                if pair is None and not tick:
                    continue
                if i in restarts:
                    runs[name].stop()
                    starts[name] += 1
                    start(name)
                runs[name].write(*(pair or ([], [])))
            for name, (_, _, tick, _) in variants.items():
                if pair is not None or tick:
                    runs[name].query.processAllAvailable()
    finally:
        for run in runs.values():
            run.stop()
    out = {}
    for name, (_, _, _, fail) in variants.items():
        frames = [df for _, df in sorted(runs[name].outputs.items()) if len(df)]
        out[name] = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        want = [f"failed-{fail[0]}-{fail[1]}"] if fail else []
        assert os.listdir(markers[name]) == want, f"{name}: the injected failure"
    return out


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


@pytest.mark.parametrize("how", HOWS)
def test_join_equals_spark(spark, tmp_path, how):
    """Every join type at 1, 2 and 7 shards: a rescale 1 -> 7 at a restart, and 7 -> 2 with a
    task that fails after its shard committed."""
    batches = join_rows(HOWS.index(how) + 1, 5)
    variants = {
        "spark": (spark_join(how), (), False, None),
        "s1to7": (silt_join(tmp_path, "s1to7", how, [1, 7]), (3,), True, None),
        "s7to2": (silt_join(tmp_path, "s7to2", how, [7, 2]), (2,), True, (1, 3)),
    }
    out = run_all(spark, tmp_path, batches, variants)
    want = out.pop("spark")
    columns = ["luser", "lv", "lt"] if how == "left_semi" else COLUMNS
    assert list(want.columns) == columns
    assert len(want) > 10
    if how in ("left", "full"):
        assert want["ruser"].isna().sum() > 3  # unmatched left rows came out
    if how in ("right", "full"):
        assert want["luser"].isna().sum() > 3
    assert set(QUIET) & set(want[columns[0]].dropna())
    for name, got in out.items():
        assert list(got.columns) == columns, name
        pd.testing.assert_frame_equal(norm(got, columns), norm(want, columns),
                                      check_dtype=False, obj=f"{how} {name}")
