"""silt_spark.deduplicate in real streaming queries, compared with a plain-Python model: each
key's first row (in input order) is emitted once; a key is remembered for the TTL."""

from __future__ import annotations

import json
import os
import time

import pandas as pd
import pytest
import silt
import silt_spark
from silt_spark.operators import dedup as _dedup
from silt_spark.runtime import _shard
from test_spark_operator import Run as OperatorRun
from test_spark_operator import fail_after_commit, shard_versions

SCHEMA = "id string, src string, n long"
COLUMNS = ["id", "src", "n"]


class Run(OperatorRun):
    """JSON files of this module's columns, one per micro-batch."""

    schema = SCHEMA

    def write(self, rows: list[tuple]) -> None:
        tmp = self.src / f".tmp-{self.files:05d}"
        with open(tmp, "w") as f:
            for r in rows:
                f.write(json.dumps(dict(zip(COLUMNS, r))) + "\n")
        os.replace(tmp, self.src / f"part-{self.files:05d}.json")
        self.files += 1


def dedup_model(batches: list[list[tuple]], key: list[int]) -> list[pd.DataFrame]:
    seen: set[tuple] = set()
    out = []
    for rows in batches:
        first = []
        for r in rows:
            k = tuple(r[i] for i in key)
            if k not in seen:
                seen.add(k)
                first.append(r)
        out.append(pd.DataFrame(first, columns=COLUMNS))
    return out


def assert_same(got: pd.DataFrame | None, want: pd.DataFrame, what: str) -> None:
    got = got if got is not None else pd.DataFrame(columns=COLUMNS)
    assert list(got.columns) == COLUMNS
    # Rows come out in input order within a shard; compare as sets of rows.
    g = got.astype(object).sort_values(COLUMNS, na_position="first").reset_index(drop=True)
    w = want.astype(object).sort_values(COLUMNS, na_position="first").reset_index(drop=True)
    pd.testing.assert_frame_equal(g, w, check_dtype=False, obj=what)


def rows_for(seed: int, n: int = 40) -> list[tuple]:
    """Rows whose ids repeat within and across batches; ``n`` tells rows apart, so the model
    can check which duplicate was kept; some ids are null (nulls compare equal)."""
    import random

    rng = random.Random(seed)
    return [
        (None if rng.random() < 0.05 else f"e{rng.randrange(60)}", f"s{rng.randrange(2)}",
         seed * 1000 + i)
        for i in range(n)
    ]


def test_dedup_matches_model_across_restart_and_failed_task(spark, tmp_path):
    """Keys (id, src), duplicates within a batch and across batches: the first row of each
    key is emitted once, also across a restart and a task that fails after committing."""
    state = (tmp_path / "state").as_uri()
    markers = tmp_path / "markers"
    markers.mkdir()
    batches = [rows_for(i) for i in range(5)]
    run = Run(spark, tmp_path)

    def build():
        return fail_after_commit(
            silt_spark.deduplicate(run.stream(), ["id", "src"], state, 3), 1, str(markers)
        )

    try:
        run.start(build())
        for rows in batches[:3]:
            run.write(rows)
            run.drain()
        query_id = str(run.query.id)
        run.stop()
        run.start(build())
        for rows in batches[3:]:
            run.write(rows)
            run.drain()
    finally:
        run.stop()
    want = dedup_model(batches, [0, 1])
    for b in range(5):
        assert_same(run.outputs.get(b), want[b], f"batch {b}")
    assert sum(len(w) for w in want[1:]) > 0 and sum(len(w) for w in want) < 200
    failed = sorted(p.name for p in markers.iterdir())
    assert failed and all(name.startswith("failed-1-") for name in failed)
    # One state entry per distinct key, each holding the batch that first saw it.
    for name in shard_versions(state):
        with silt.open(f"{state}/{name}") as db:
            assert db.meta[_shard.META_QUERY_ID] == query_id
            assert all(k[2:3] == _dedup.DEDUP_TAG for k, _ in db.scan())
    entries = {(r.id, r.src): r.first_batch_id
               for r in silt_spark.read_state(spark, state).collect()}
    assert entries == {(r[0], r[1]): b for b, w in enumerate(want) for r in w.itertuples(False)}


#: The processing-time TTL of the test below: long enough that its first two batches run within
#: it with a wide margin on a loaded 2-core machine (6 s left little room for two batches).
TTL_S = 12


def test_dedup_ttl_forgets_keys_in_processing_time(spark, tmp_path):
    state = (tmp_path / "state").as_uri()
    run = Run(spark, tmp_path)
    first = [("a", "x", 1), ("b", "x", 2), ("a", "x", 3)]
    try:
        run.start(silt_spark.deduplicate(run.stream(), "id", state, 2, ttl=f"{TTL_S} seconds"))
        t0 = time.monotonic()
        run.write(first)
        run.drain()
        # Batch 0 ran before this moment, so its keys' TTL runs out by this moment + TTL_S.
        first_done = time.monotonic()
        run.write([("a", "y", 4), ("c", "y", 5)])  # within the TTL: only c is new
        run.drain()
        within = time.monotonic() - t0
        time.sleep(max(0.0, first_done + TTL_S + 0.5 - time.monotonic()))
        run.write([("a", "z", 6), ("b", "z", 7), ("c", "z", 8)])  # a and b expired
        sent = time.time()
        run.drain()
        # Typed: each key remembered, with the batch that saw it and when the TTL forgets it
        # (read at once: the keys batch 2 saw again are kept TTL_S from then).
        seen = silt_spark.read_state(spark, state, state_name="seen").collect()
        read = time.time()
    finally:
        run.stop()
    assert within < TTL_S, "the first two batches took longer than the TTL"
    assert_same(run.outputs[0], pd.DataFrame([first[0], first[1]], columns=COLUMNS), "batch 0")
    assert_same(run.outputs[1], pd.DataFrame([("c", "y", 5)], columns=COLUMNS), "batch 1")
    got = set(run.outputs[2]["id"])
    assert {"a", "b"} <= got  # their TTL ran out: emitted again
    assert len(run.outputs[2]) == len(got)
    again = {r.id: r for r in seen if r.first_batch_id == 2}
    assert set(again) == got  # emitted again in batch 2: remembered from batch 2
    for r in again.values():
        assert sent + TTL_S - 1 <= r.expires_at.timestamp() <= read + TTL_S


def test_dedup_bad_input_is_refused(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    stream = spark.readStream.schema(SCHEMA).json(str(src))
    state = (tmp_path / "state").as_uri()
    with pytest.raises(ValueError, match="not in the DataFrame"):
        silt_spark.deduplicate(stream, ["nope"], state, 2)
    with pytest.raises(ValueError, match="at least one column"):
        silt_spark.deduplicate(stream, [], state, 2)
    with pytest.raises(ValueError, match="ttl must be positive"):
        silt_spark.deduplicate(stream, "id", state, 2, ttl=0)
    with pytest.raises(TypeError, match="ttl must be ms"):
        silt_spark.deduplicate(stream, "id", state, 2, ttl=1.5)
    silt_spark.deduplicate(stream, "id", state, 2)
    with pytest.raises(silt_spark.errors.LayoutMismatchError, match="dedup"):
        silt_spark.aggregate(stream, "id", ["count"], state, 2)
