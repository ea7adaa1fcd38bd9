"""``DB.multi_scan``: many small ranges at once, each SST block read once.

A model: over random puts, deletes, range deletes, values with a time to live, uploads,
commits (inline and uploaded) and compactions, ``multi_scan(ranges)`` equals ``scan`` of each
range, concatenated. The same with uploads in flight (:mod:`heldupload`): frozen memtables whose
uploads finish in any order, some of them while the ``multi_scan`` reads. And a count: ranges
that fall in the same blocks read those blocks once, where one ``scan`` per range reads them
again.
"""

from __future__ import annotations

import random

import pytest
import silt
from heldupload import HeldUploads
from hypothesis import given, settings
from hypothesis import strategies as st
from silt import paths
from silt.errors import InvalidArgumentError, InvalidTypeError
from silt.testing import FaultyStore
from silt.tiers.memory import MemoryStore

T0 = 1_700_000_000_000


def small(**changes: object) -> silt.Settings:
    return silt.Settings(memtable_bytes=2000, block_bytes=256, block_cache_bytes=1 << 20,
                         target_sst_bytes=4000, level1_bytes=8000, level_size_ratio=3,
                         l0_compaction_trigger=2, compaction="none").replace(**changes)


def key(i: int) -> bytes:
    return b"k%04d" % i


def ranges_of(rng: random.Random, n: int) -> list[tuple[bytes, bytes]]:
    """Sorted, disjoint ranges over the key space: prefixes, single keys, wider spans."""
    points = sorted(rng.sample(range(0, 520), 2 * n))
    out = []
    for a, b in zip(points[::2], points[1::2]):
        kind = rng.random()
        if kind < 0.3:
            out.append((key(a), key(a) + b"\x00"))  # one key
        elif kind < 0.5:
            out.append((b"k%03d" % (a // 10), b"k%03d" % (a // 10 + 1)))  # a prefix of 10
        else:
            out.append((key(a), key(b)))
    # prefixes may overlap the spans next to them: keep them sorted and disjoint
    out.sort()
    clean: list[tuple[bytes, bytes]] = []
    for s, e in out:
        if clean and s < clean[-1][1]:
            continue
        clean.append((s, e))
    return clean


#: What the generated trees held, over the examples (checked once they have all run).
shapes: dict[str, bool] = {}
seen_shapes: dict[str, int] = {}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_multi_scan_equals_a_scan_per_range(seed: int) -> None:
    rng = random.Random(seed)
    clock = silt.ManualClock(T0)
    settings_ = small(inline_delta_bytes=rng.choice([0, 32 * 1024]), compaction="leveled")
    with silt.open(f"memory://ms-{seed}", settings=settings_, clock=clock) as db:
        for round_ in range(rng.randrange(2, 7)):
            for _ in range(rng.randrange(10, 80)):
                r = rng.random()
                k = key(rng.randrange(500))
                if r < 0.1:
                    db.delete(k)
                elif r < 0.15:
                    a = rng.randrange(500)
                    db.delete_range(key(a), key(a + rng.randrange(1, 30)))
                elif r < 0.25:
                    db.put(k, b"t%d" % round_, ttl=rng.choice([1, 1000]))
                else:
                    db.put(k, b"v%d-%d" % (round_, rng.randrange(1000)))
            action = rng.random()
            if action < 0.5:
                db.commit()
            elif action < 0.7:
                db.flush()  # an uploaded part, not committed yet
            if rng.random() < 0.5:
                db.wait_for_compaction()
                db.commit()  # adopts what compaction wrote
            clock.advance(rng.choice([0, 500, 2000]))
        m = db.manifest
        shapes.update({"levels": bool(m and any(m.levels)), "l0": bool(m and m.l0),
                       "inline": bool(m and m.inline), "tombstones": bool(
                           m and m.range_tombstones)})
        ranges = ranges_of(rng, rng.randrange(1, 25))
        want = [kv for s, e in ranges for kv in db.scan(s, e)]
        assert db.multi_scan(ranges) == want
    for k, v in shapes.items():
        seen_shapes[k] = seen_shapes.get(k, 0) + v


def test_the_model_saw_every_shape_of_tree() -> None:
    """(Runs after the model test:) levels, L0, inline deltas and range tombstones all
    occurred, so the equality above covered each source kind."""
    if not seen_shapes:
        test_multi_scan_equals_a_scan_per_range()
    assert all(seen_shapes.get(k) for k in ("levels", "l0", "inline", "tombstones")), seen_shapes


@pytest.mark.parametrize("seed", range(24))
def test_multi_scan_equals_a_scan_per_range_while_uploads_finish(seed: int) -> None:
    """Each round overwrites the keys in several frozen memtables whose uploads are held, lets
    some finish in a random order (an older part still uploading, a newer one done), and lets
    others finish from inside the ``multi_scan`` (at its first block read, after it looked at
    the parts): every range reads the newest value, as ``scan`` and the model do."""
    rng = random.Random(seed)
    store = FaultyStore(MemoryStore(None))
    held = HeldUploads(store, limit=6)
    settings_ = small(memtable_bytes=rng.choice([300, 700]), block_cache_bytes=0,
                      inline_delta_bytes=0, upload_parallelism=8, max_pending_flushes=64)
    model: dict[bytes, bytes] = {}
    mid_read = 0
    with silt.open("memory://held", store=store, settings=settings_) as db, held:
        for i in range(0, 200, 3):  # a committed base under the parts: an SST to read
            db.put(key(i), b"base-%d" % i)
            model[key(i)] = b"base-%d" % i
        db.commit()
        for round_ in range(4):
            held.holding = True
            for gen in range(rng.randrange(2, 6)):
                for i in rng.sample(range(200), 40):
                    v = b"r%d-g%d-%d" % (round_, gen, i)
                    db.put(key(i), v)
                    model[key(i)] = v
            held.settle(db)
            # Some finish now, in any order; of the rest, some (in the first round, all)
            # finish once the multi_scan has looked at the parts.
            n = len(held.held)
            for _ in range(rng.randrange(n + 1) if round_ else rng.randrange(max(n, 1))):
                held.release(db, rng.randrange(1 << 16))
            later = rng.randrange(len(held.held) + 1) if round_ else len(held.held)
            finished: list[str] = []
            armed = [later > 0]

            def finish_some(op: str, k: str, n: int = later, armed: list[bool] = armed,
                            finished: list[str] = finished) -> None:
                if armed[0]:
                    armed[0] = False
                    finished.extend(held.release(db, rng.randrange(1 << 16)) for _ in range(n))

            store.on_call("get_range", finish_some, times=1,
                          predicate=lambda k: k.startswith(paths.SST_PREFIX))
            ranges = ranges_of(rng, rng.randrange(1, 25))
            got = db.multi_scan(ranges)
            armed[0] = False  # no block read: the uploads go below
            mid_read += bool(finished)
            want = [kv for s, e in ranges for kv in db.scan(s, e)]
            assert want == [(k, v) for s, e in ranges for k, v in sorted(model.items())
                            if s <= k < e]
            assert got == want, (round_, finished)
            held.release_all(db)
            if rng.random() < 0.5:
                db.commit()
    assert mid_read, "no upload finished inside a multi_scan"


def test_ranges_in_the_same_blocks_read_them_once(file_url: str) -> None:
    settings_ = small(block_bytes=4096, memtable_bytes=1 << 20, inline_delta_bytes=0)
    with silt.open(file_url, settings=settings_) as db:
        for i in range(5000):
            db.put(key(i % 10_000) + b"/%d" % i, b"x" * 40)
        db.commit()
    # 60 one-key prefixes inside a narrow span of keys: a handful of blocks
    ranges = [(key(i) + b"/", key(i) + b"/\xff") for i in range(2000, 2060)]

    def reads(fn) -> tuple[object, int]:
        with silt.open(file_url, settings=settings_) as db:
            db.get(key(0) + b"/0")  # the SST's tail, before counting
            before = db.stats()["requests"]["read"]["RANGE_GET"]["count"]
            got = fn(db)
            return got, db.stats()["requests"]["read"]["RANGE_GET"]["count"] - before

    together, n_multi = reads(lambda db: db.multi_scan(ranges))
    apart, n_scans = reads(lambda db: [kv for s, e in ranges for kv in db.scan(s, e)])
    assert together == apart and len(together) == 60
    assert n_multi == 1  # the blocks are adjacent: one run, one read
    assert n_scans >= 10 * n_multi  # a scan per range reads its blocks again


def test_multi_scan_refuses_bad_ranges_naming_them(tmp_path) -> None:
    with silt.open((tmp_path / "r").as_uri()) as db:
        db.put(b"a", b"1")
        assert db.multi_scan([]) == []
        assert db.multi_scan([(b"a", b"b")]) == [(b"a", b"1")]
        with pytest.raises(InvalidTypeError, match="sequence of"):
            db.multi_scan(b"ab")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError, match="pairs of bytes"):
            db.multi_scan([b"a"])  # type: ignore[list-item]
        with pytest.raises(InvalidArgumentError, match="is empty"):
            db.multi_scan([(b"b", b"a")])
        with pytest.raises(InvalidArgumentError, match="sorted by start and must not overlap"):
            db.multi_scan([(b"a", b"c"), (b"b", b"d")])
