"""``silt_spark.read_changes``: a change feed between micro-batches, from the manifests' deltas.

A real streaming aggregate runs three batches; the feed between every pair of versions is
compared with a model of the per-key state at each batch.
"""

from __future__ import annotations

import json
import os

import pytest
import silt_spark
from silt.errors import InvalidArgumentError


def _write(folder, n, rows):
    tmp = folder / f".part-{n}"
    with open(tmp, "w") as f:
        for user, amount in rows:
            f.write(json.dumps({"user": user, "amount": amount}) + "\n")
    os.replace(tmp, folder / f"part-{n:05d}.json")


def test_the_change_feed_matches_the_states_between_batches(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    state = (tmp_path / "state").as_uri()
    batches = [[("a", 1), ("b", 2), ("c", 3)], [("a", 10), ("d", 4)], [("b", 5), ("e", 6)]]
    df = spark.readStream.schema("user string, amount long").option(
        "maxFilesPerTrigger", 1).json(str(src))
    query = (silt_spark.aggregate(df, ["user"], ["count", "sum(amount)"], state_url=state,
                                  num_shards=3)
             .writeStream.foreachBatch(lambda out, b: out.count())
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    try:
        for n, rows in enumerate(batches):
            _write(src, n, rows)
            query.processAllAvailable()
    finally:
        query.stop()
    # the model: each user's (count, sum) after each batch
    model, states = {}, []
    for rows in batches:
        for user, amount in rows:
            c, s = model.get(user, (0, 0))
            model[user] = (c + 1, s + amount)
        states.append(dict(model))
    for a, b in ((0, 1), (1, 2), (0, 2)):
        rows = silt_spark.read_changes(spark, state, a, b).collect()
        got = {r.user: r.change_type for r in rows}
        want = {u: ("insert" if u not in states[a] else "update")
                for u in states[b] if states[a].get(u) != states[b][u]}
        assert got == want, (a, b)
        assert all(r.state == "aggregate" and r.new_value is not None for r in rows)
        assert all((r.old_value is None) == (r.change_type == "insert") for r in rows)
    with pytest.raises(InvalidArgumentError, match="below"):
        silt_spark.read_changes(spark, state, 2, 1)
    with pytest.raises(silt_spark.errors.VersionNotFoundError):
        silt_spark.read_changes(spark, state, 0, 99)
