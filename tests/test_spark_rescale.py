"""Rescaling a silt_spark operator across restarts (4 -> 7 -> 2 shards) keeps all state without
copying it (the new shards' first manifests reference the old shards' SSTs), and ``read_state``
shows it (latest and time travel)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import silt
import silt_spark
from pyspark import cloudpickle
from silt_spark.runtime import _layout, _root
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


def _shards_of(spark, users: set[str], num_shards: int) -> set[int]:
    """The shards (of ``num_shards``, 256 key groups) that own ``users``, by Spark's hash."""
    from pyspark.sql import functions as F

    kgs = spark.createDataFrame([(u,) for u in users], "user string").select(
        F.pmod(F.xxhash64("user"), F.lit(256)).alias("kg")).toPandas()["kg"]
    return {_layout.shard_of(int(kg), num_shards, 256) for kg in kgs}


def _first_manifest(shard_dir: Path) -> silt.Manifest:
    versions = silt.versions(shard_dir.as_uri())
    return silt.read_manifest(silt.open_store(shard_dir.as_uri()), versions[0])


def test_rescale_4_7_2_references_state_and_read_state_time_travels(spark, run, tmp_path):
    state_dir = tmp_path / "state"
    state = state_dir.as_uri()
    # Batches 2 and 3 (the first of each new layout) have rows of one user only, so most new
    # shards start with no input at all: whatever SSTs of their own they have was copied.
    batches = [batch(50, n=60, users=24), batch(51, n=60, users=24),
               [("u3", "d1", 7), ("u3", "d2", 9)], [("u5", "d0", 1)],
               batch(54, n=40, users=24)]

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
    go(7, batches[2:3])
    middle = _snapshot(state_dir)
    go(2, batches[3:5])

    want = profile_model(batches)
    for b in range(5):
        assert_frames(run.outputs[b], want[b])
    # Old layouts' shards gain only refs/ markers (for their GC); nothing else is written.
    after = _snapshot(state_dir)
    for before in (old, middle):
        for name, objects in before.items():
            assert [o for o in after[name] if not o.startswith("refs/")] == \
                [o for o in objects if not o.startswith("refs/")]
    desc = _root.read_descriptor(state)
    assert [x["num_shards"] for x in desc["layouts"]] == [4, 7, 2]
    # No SST was rewritten: each new shard's first version references the old SSTs (by the
    # folders that own them: after the second rescale mostly still the 4-shard layout's) and
    # holds SSTs of its own only for the rows of its first batch.
    first_layout = {d for d in old}
    for gen, count, first_batch in ((1, 7, 2), (2, 2, 3)):
        shards = sorted(d for d in after if d.endswith(f"-g{gen}"))
        assert len(shards) == count
        rows_in = _shards_of(spark, {u for u, _, _ in batches[first_batch]}, count)
        for j, d in enumerate(shards):
            m = _first_manifest(state_dir / d)
            assert m.version == first_batch
            refs = [s for s in m.all_ssts() if s.db]
            # an old shard's inline deltas (silt.inline) are no objects: the reference copies
            # their bytes into this manifest, clipped like any reference
            copied = [s for s in m.all_ssts() if s.inline and s.clipped]
            own = [s for s in m.all_ssts() if not s.db and s not in copied]
            # owners: the folders of earlier layouts that hold the objects (never a copy)
            assert refs or copied
            assert {s.db for s in refs} <= (first_layout if gen == 1 else set(middle))
            assert m.meta["spark.rescale_copied_entries"] == "0"
            assert int(m.meta["spark.rescale_referenced_ssts"]) >= len(refs)  # before unifying
            if j not in rows_in:
                assert own == []
            else:
                assert sum(s.entries for s in own) <= 10
            for s in refs:
                assert all(o.startswith(("refs/", "manifest/", "sst/", "gc/", "epoch/",
                                         "compaction/"))
                           for o in after[s.db])
    # read_state: the latest state, and the state as of batch 1 (before any rescale) and of
    # batch 2 (in the 2-shard layout) read through the current layout.
    assert _stats(spark, state) == _model_stats(batches)
    assert _stats(spark, state, version=1) == _model_stats(batches[:2])
    assert _stats(spark, state, version=2) == _model_stats(batches[:3])
    assert _stats(spark, state, version=3) == _model_stats(batches[:4])
    full = silt_spark.read_state(spark, state).toPandas()
    assert list(full.columns) == [
        "user", "state", "map_key", "value", "expires_at_ms", "shard_version"
    ]
    assert set(full["state"]) == {"stats", "sizes", "devices"}
    devices = full[(full["state"] == "devices") & (full["user"] == "u0")]
    seen = [r for rows in batches for r in rows if r[0] == "u0"]
    assert {json.loads(k)[0]: json.loads(v)[0] for k, v in zip(devices.map_key, devices.value)} \
        == pd.Series([d for _, d, _ in seen]).value_counts().to_dict()
