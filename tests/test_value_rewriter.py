"""Value rewriters (silt.compaction.rewrite): compaction brings old values up to date.

The rewriter used here (``silt.testing.rewriters:prefixed``) turns an ``old`` prefix into a
``new`` one, the shape of a codec's version tag. Checked: every value compaction copies is
rewritten and no other, in the writer's thread and in the compaction subprocess; expiries and
tombstones stay; reads of keys compaction did not touch keep the old bytes; a name that cannot
load is refused when the DB opens, before anything is written.
"""

from __future__ import annotations

import json
import random

import pytest
import silt
from silt.compaction.compactor import run_compaction
from silt.compaction.task import CompactionTask
from silt.errors import InvalidArgumentError, InvalidTypeError

T0 = 1_700_000_000_000
REWRITER = "silt.testing.rewriters:prefixed"
CONFIG = json.dumps({"old": "v1:", "new": "v2:"})


def settings(**changes: object) -> silt.Settings:
    base = silt.Settings(
        memtable_bytes=1500, block_bytes=256, block_cache_bytes=64 * 1024,
        target_sst_bytes=3000, level1_bytes=6000, level_size_ratio=3,
        l0_compaction_trigger=2, l0_stall_trigger=5, inline_delta_bytes=0,
        value_rewriter=REWRITER, value_rewriter_config=CONFIG,
    )
    return base.replace(**changes)


def _records(db: silt.DB, info: object) -> list[tuple[bytes, object]]:
    return list(db._reader(info).iter_range(None, None))  # type: ignore[attr-defined, arg-type]


@pytest.mark.parametrize("mode", ["background", "thread"])
def test_compaction_rewrites_the_values_it_copies(file_url: str, mode: str) -> None:
    """Writes tagged ``v1:`` and ``x:`` (which the rewriter keeps), deletes among them; after
    compactions every compaction output holds no ``v1:`` value, reads give the same suffixes,
    and keys only in L0 still read their old bytes."""
    rng = random.Random(mode)
    model: dict[bytes, bytes | None] = {}
    with silt.open(file_url, settings=settings(compaction_mode=mode)) as db:
        for _round in range(10):
            for _ in range(60):
                k = b"k%04d" % rng.randrange(300)
                if rng.random() < 0.15:
                    db.delete(k)
                    model[k] = None
                else:
                    v = (b"v1:" if rng.random() < 0.8 else b"x:") + b"%d" % rng.randrange(1 << 40)
                    db.put(k, v)
                    model[k] = v
            db.commit()
            db.wait_for_compaction()
        db.commit()
        stats = db.stats()
        assert stats["compactions_adopted"] > 0
        if mode == "background":
            assert stats["compactions_in_subprocess"] > 0
        m = db.manifest
        assert m is not None and any(m.levels)
        in_levels = [r for run in m.levels for s in run for r in _records(db, s)]
        assert in_levels and not any(
            v is not None and v.startswith(b"v1:") for _, v in in_levels  # type: ignore[union-attr]
        )
        assert any(v is not None and v.startswith(b"x:") for _, v in in_levels)  # type: ignore[union-attr]
        rewritten = 0
        for k, want in model.items():
            got = db.get(k)
            if want is None or not want.startswith(b"v1:"):
                assert got == want
            else:
                assert got in (want, b"v2:" + want[3:])
                rewritten += got != want
        assert rewritten > 0
        # Keys of the L0 SSTs reads see were never copied by a compaction: their bytes are as
        # put. (Those are the view's: a compaction that finished after the last commit already
        # serves reads, with its rewritten values, while the manifest still lists its inputs.)
        newest = {k: v for r in db._view.l0 for k, v in r.iter_range(None, None)}
        for k, v in newest.items():
            if v is not None and db.get(k) is not None and model[k] == v:
                assert db.get(k) == v


def test_expiries_and_tombstones_survive_a_rewrite(tmp_path) -> None:
    """A value with a time to live keeps its expiry; a tombstone stays a tombstone."""
    clock = silt.ManualClock(T0)
    url = (tmp_path / "root").as_uri()
    with silt.open(url, settings=settings(compaction="ttl"), clock=clock) as db:
        db.put(b"a", b"v1:a", ttl=100)
        db.put(b"b", b"v1:b")
        db.put(b"c", b"v1:c")
        db.commit()
        db.delete(b"c")
        db.put(b"d", b"x:d", ttl=1000)
        db.commit()
        m = db.manifest
        assert m is not None
        task = CompactionTask(tuple(s.id for s in m.all_ssts()), "into_level", 1)
        rec = run_compaction(db.store, m, task, db.settings, clock)
        (out,) = rec.outputs
        got = dict(_records(db, out))
        assert got[b"a"] == (b"v2:a", T0 + 100_000)
        assert got[b"b"] == b"v2:b"
        assert got[b"c"] is None
        assert got[b"d"] == (b"x:d", T0 + 1_000_000)
        db.put(b"e", b"v1:e")
        # the DB's own compaction of the same inputs (started by the second commit) must be done
        # for the next commit to adopt it: under load it may still run
        assert db.wait_for_compaction(60)
        db.commit()  # adopts it
        assert db.stats()["compactions_adopted"] == 1
        assert db.get(b"a") == b"v2:a" and db.get(b"c") is None
        clock.advance(200_000)
        assert db.get(b"a") is None and db.get(b"d") == b"x:d"


@pytest.mark.parametrize("name, config, error, words", [
    ("silt.testing.rewriters", "", InvalidArgumentError, "'package.module:function'"),
    ("no_such_module_xyz:f", "", InvalidArgumentError, "cannot be imported"),
    ("silt.testing.rewriters:missing", "", InvalidArgumentError, "cannot be imported"),
    ("silt.testing.rewriters:not_a_factory", "", InvalidArgumentError, "not a function"),
    (REWRITER, 7, InvalidTypeError, "value_rewriter_config must be a str"),
])
def test_a_rewriter_that_cannot_load_is_refused_at_open(
        file_url: str, name: str, config: object, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        silt.open(file_url, settings=silt.Settings(value_rewriter=name,
                                                   value_rewriter_config=config))  # type: ignore[arg-type]
    assert silt.versions(file_url) == []


def test_a_rewriter_returning_no_bytes_fails_the_task_and_nothing_is_adopted(tmp_path) -> None:
    """A rewriter breaking its contract fails its compaction; the data is untouched."""
    clock = silt.ManualClock(T0)
    url = (tmp_path / "root").as_uri()
    bad = json.dumps({"old": "v1:", "new": "v2:"})
    with silt.open(url, settings=settings(compaction="none", value_rewriter_config=bad),
                   clock=clock) as db:
        db.put(b"a", b"v1:a")
        db.commit()
        m = db.manifest
        assert m is not None
        task = CompactionTask(tuple(s.id for s in m.all_ssts()), "into_level", 1)
        from silt.compaction import rewrite

        key = (REWRITER, bad)
        real = rewrite._loaded[key]
        rewrite._loaded[key] = lambda k, v: 42  # type: ignore[assignment, return-value]
        try:
            with pytest.raises(TypeError, match="not bytes or None"):
                run_compaction(db.store, m, task, db.settings, clock)
        finally:
            rewrite._loaded[key] = real
        assert db.get(b"a") == b"v1:a"
