"""Rescaling a silt_spark operator across restarts (4 -> 2 -> 3 shards) keeps all state, and
``read_state`` shows it (latest and time travel)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import silt
import silt_spark
from pyspark import cloudpickle
from silt_spark import _shard
from test_spark_operator import (
    PROFILE_SCHEMA,
    Profile,
    Run,
    assert_frames,
    batch,
    profile_model,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def run(spark, tmp_path):
    r = Run(spark, tmp_path)
    yield r
    r.stop()


def _snapshot(root: Path) -> dict[str, list[str]]:
    """Every object under each shard folder (to prove old shards are never modified)."""
    return {
        d.name: sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
        for d in sorted(root.iterdir()) if d.is_dir()
    }


def _stats(spark, state: str, version: int | None = None) -> dict[str, tuple]:
    df = silt_spark.read_state(spark, state, version).filter("state = 'stats'").toPandas()
    return {r.user: tuple(json.loads(r.value)) for r in df.itertuples()}


def _model_stats(batches: list[list[tuple]]) -> dict[str, tuple]:
    df = pd.DataFrame([r for rows in batches for r in rows], columns=["user", "device", "amount"])
    return {u: (len(g), int(g["amount"].sum())) for u, g in df.groupby("user")}


def test_rescale_4_2_3_keeps_state_and_read_state_time_travels(spark, run, tmp_path):
    state_dir = tmp_path / "state"
    state = state_dir.as_uri()
    batches = [batch(50 + i, n=30, users=8) for i in range(5)]

    def go(num_shards: int, rows_list: list[list[tuple]]) -> None:
        run.start(silt_spark.transform_with_state(
            run.stream(), Profile(), ["user"], PROFILE_SCHEMA, state_url=state,
            num_shards=num_shards,
        ))
        for rows in rows_list:
            run.write(rows)
            run.drain()
        run.stop()

    go(4, batches[:2])
    old = _snapshot(state_dir)
    go(2, batches[2:3])
    go(3, batches[3:5])

    want = profile_model(batches)
    for b in range(5):
        assert_frames(run.outputs[b], want[b])
    # The old layouts' shards were read, never written.
    after = _snapshot(state_dir)
    for name, objects in old.items():
        assert after[name] == objects
    desc = _shard.read_descriptor(state)
    assert [x["num_shards"] for x in desc["layouts"]] == [4, 2, 3]
    new_shards = [d for d in after if d.endswith("-g2")]
    assert len(new_shards) == 3
    for d in new_shards:
        assert "rescaled_from" in str(silt.open((state_dir / d).as_uri()).meta)

    # read_state: the latest state, and the state as of batch 1 (before any rescale) and of
    # batch 2 (in the 2-shard layout) read through the current layout.
    assert _stats(spark, state) == _model_stats(batches)
    assert _stats(spark, state, version=1) == _model_stats(batches[:2])
    assert _stats(spark, state, version=2) == _model_stats(batches[:3])
    full = silt_spark.read_state(spark, state).toPandas()
    assert list(full.columns) == [
        "user", "state", "map_key", "value", "expires_at_ms", "shard_version"
    ]
    assert set(full["state"]) == {"stats", "sizes", "devices"}
    devices = full[(full["state"] == "devices") & (full["user"] == "u0")]
    seen = [r for rows in batches for r in rows if r[0] == "u0"]
    assert {json.loads(k)[0]: json.loads(v)[0] for k, v in zip(devices.map_key, devices.value)} \
        == pd.Series([d for _, d, _ in seen]).value_counts().to_dict()
