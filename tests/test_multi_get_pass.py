"""multi_get's per-SST pass: the compiled and pure-Python twins resolve the same keys to the same
records as ``get`` over randomized stores (overlapping L0 SSTs, tombstones, range deletes,
expired entries, absent keys inside and outside the ranges, repeats, keys on block
boundaries), make the same reads and cache the same blocks; and the compiled pass makes no
Python call per key or per block read.

The store is ``file://`` (its direct reader is what a cold local ``multi_get`` reads through)
with small blocks and a private block cache, reopened cold for each implementation.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycalls import python_calls
from silt import fetch as fetch_mod
from silt import view as view_mod
from silt.sst import probe as probe_mod

try:
    from silt import _speedups as C
except ImportError as exc:  # pragma: no cover - depends on the build
    if os.environ.get("SILT_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        raise ImportError(f"SILT_REQUIRE_EXTENSIONS=1, no silt._speedups: {exc}") from exc
    pytest.skip(f"silt._speedups is not compiled ({exc})", allow_module_level=True)

SMALL = silt.Settings(memtable_bytes=1500, block_bytes=96, block_cache_bytes=1 << 20,
                      bloom_bits_per_key=10, compaction="none")
NOW = 1_700_000_000_000
#: The pass's functions of each twin, as the read view and the block fetcher call them.
TWINS = {
    "pure": {"probe_sst": probe_mod.probe_sst_py, "read_runs": probe_mod.read_runs_py,
             "sorted_unique": probe_mod.sorted_unique_py},
    "compiled": {"probe_sst": C.probe_sst, "read_runs": C.read_runs,
                 "sorted_unique": C.sorted_unique},
}

def _use(m: pytest.MonkeyPatch, twin: str) -> None:
    """Make the read view and the block fetcher call ``twin``'s pass."""
    for name, fn in TWINS[twin].items():
        m.setattr(fetch_mod if name == "read_runs" else view_mod, name, fn)


# Keys that share their first 8 bytes often (the compiled index and blocks compare whole keys
# only then), and plain short ones.
key_st = st.one_of(
    st.sampled_from([b"k" * 8, b"k" * 7 + b"j", b"\x00" * 8]).flatmap(
        lambda p: st.binary(max_size=3).map(lambda s: p + s)),
    st.binary(min_size=1, max_size=4),
)
op_st = st.one_of(
    st.tuples(st.just("put"), key_st, st.binary(max_size=30)),
    st.tuples(st.just("ttl"), key_st, st.binary(max_size=10)),
    st.tuples(st.just("delete"), key_st),
    st.tuples(st.just("delete_range"), key_st, key_st),
    st.tuples(st.just("flush")),
    st.tuples(st.just("commit")),
)


def _build(root: Path, ops: list[tuple], clock: silt.ManualClock) -> list[bytes]:
    """Apply ``ops`` to a new DB at ``root`` (every part committed at the end); returns the
    keys written."""
    db = silt.open(root.as_uri(), settings=SMALL, clock=clock)
    written: list[bytes] = []
    for op in ops:
        if op[0] == "put":
            db.put(op[1], op[2])
            written.append(op[1])
        elif op[0] == "ttl":
            db.put(op[1], op[2], ttl=1.0)
            written.append(op[1])
        elif op[0] == "delete":
            db.delete(op[1])
        elif op[0] == "delete_range":
            lo, hi = sorted((op[1], op[2]))
            if lo < hi:
                db.delete_range(lo, hi)
        elif op[0] == "flush":
            db.flush()
        else:
            db.commit()
    db.commit()
    db.close()
    return written


def _read(root: Path, clock: silt.ManualClock, twin: str, batch: list[bytes],
          monkeypatch: pytest.MonkeyPatch) -> tuple[list, list, dict, dict]:
    """``multi_get(batch)`` of a cold handle through ``twin``'s pass, then ``get`` of each key;
    with the requests and the block cache's counts the multi_get made."""
    with monkeypatch.context() as m:
        _use(m, twin)
        # Reads stay local whatever they take: the fetcher times a local read and, when it
        # waited over fetch.REMOTE_READ_SECONDS (a loaded machine), reads on as from an object
        # store (runs with gaps), which changes the blocks read and cached by timing alone.
        m.setattr(fetch_mod, "REMOTE_READ_SECONDS", float("inf"))
        db = silt.open(root.as_uri(), settings=SMALL, clock=clock)
        try:
            before = dict(db.stats()["requests_by_kind"])
            got = db.multi_get(batch)
            st_ = db.stats()
            reads = {k: v - before.get(k, 0) for k, v in st_["requests_by_kind"].items()}
            cache = {k: st_[k] for k in ("cache_hits", "cache_misses", "cache_bytes")}
            again = db.multi_get(batch)  # warm: every block from the cache
            assert again == got
            gets = [db.get(k) for k in batch]
        finally:
            db.close()
    return got, gets, reads, cache


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(op_st, min_size=1, max_size=120), st.lists(key_st, max_size=40),
       st.integers(0, 2), st.randoms(use_true_random=False))
def test_the_twins_resolve_a_batch_as_get_does(tmp_path_factory, monkeypatch, ops, absent,
                                               expire, rnd: random.Random) -> None:
    root = tmp_path_factory.mktemp("mg")
    clock = silt.ManualClock(NOW)
    written = _build(root, ops, clock)
    clock.set(NOW + (0, 500, 5000)[expire])  # none, none yet, or every TTL entry expired
    # stored keys, absent ones (in and outside the ranges), the smallest and largest key
    # possible, and repeats, in any order
    batch = written + absent + [b"", b"\xff" * 12] + rnd.sample(written, min(5, len(written)))
    rnd.shuffle(batch)
    outcomes = {twin: _read(root, clock, twin, batch, monkeypatch) for twin in TWINS}
    got, gets, _, _ = outcomes["compiled"]
    assert got == gets  # multi_get answers as get does
    assert outcomes["pure"] == outcomes["compiled"]  # same answers, reads and cache fills


def test_the_compiled_pass_makes_no_python_call_per_key_or_block(tmp_path, monkeypatch) -> None:
    """A cold multi_get of 2,000 keys over two SSTs of ~1,000 blocks each: the engine's own
    Python calls are a few per SST, not per key or per block read (the store's direct reader,
    a Python closure of the tier, is the one call per read left). The old glue made five per
    missed run (read_run, run_bytes, _get_range, decode_run, _place)."""
    _use(monkeypatch, "compiled")
    # the pass's local path whatever a read takes (see _read: at load a read over
    # fetch.REMOTE_READ_SECONDS turns the fetcher to the object-store path and its pool)
    monkeypatch.setattr(fetch_mod, "REMOTE_READ_SECONDS", float("inf"))
    s = silt.Settings(block_bytes=256, block_cache_bytes=64 << 20, compaction="none")
    db = silt.open(tmp_path.as_uri(), settings=s)
    rnd = random.Random(5)
    keys = [rnd.randbytes(16) for _ in range(8000)]
    for part in (keys[:4000], keys[4000:]):
        db.put_many(part, [k[:4] * 5 for k in part])
        db.flush()
    db.commit()
    db.close()
    db = silt.open(tmp_path.as_uri(), settings=s)
    ssts = db.stats()["l0_ssts"]
    assert ssts >= 2
    batch = rnd.sample(keys, 2000)
    db.multi_get(batch[:10])  # the tails are loaded (one wave): not what is counted
    misses = db.stats()["cache_misses"]
    reads = db.stats()["requests_by_kind"]["RANGE_GET"]
    calls = python_calls(lambda: db.multi_get(batch))
    missed = db.stats()["cache_misses"] - misses
    read = db.stats()["requests_by_kind"]["RANGE_GET"] - reads
    db.close()
    assert missed > 500 and read > 100  # a cold batch: most of its blocks read, in runs
    # the pass's own glue (the block cache and blocks are the session's twins: pure Python
    # under SILT_NO_EXTENSIONS=1, whatever the pass)
    glue = ("view.py", "fetch.py", "probe.py", "reader.py", "db.py")
    engine: Counter = Counter()
    for (f, _), n in calls.items():
        if f in glue:
            engine[f] += n
    # a few per SST (its planning, the first missed run read alone and timed), not per key
    # (2,000) or per block read (500 and more)
    assert sum(engine.values()) <= 25 * ssts, engine


@pytest.mark.parametrize("twin", ["pure", "compiled"])
@pytest.mark.parametrize("damage", ["none", "short", "flipped", "transient", "gone"])
def test_read_runs_reads_checks_and_caches_as_read_run_does(twin: str, damage: str) -> None:
    """Both twins of ``read_runs`` return the blocks ``SstReader.read_run`` returns, cache
    them, retry a transient failure of the direct reader through ``get_range``, and report a
    short read, a damaged block (with its offset) and a gone SST as ``read_run`` does."""
    from silt import paths
    from silt.cache import BlockCache
    from silt.errors import CorruptionError, NotFoundError, TransientStoreError
    from silt.sst.builder import build_sst
    from silt.sst.reader import SstReader
    from silt.tiers.memory import MemoryStore

    keys = [b"k%04d" % i for i in range(400)]
    name = paths.sst_key(paths.new_id(NOW))
    raw, info = build_sst(name, keys, [k * 3 for k in keys], silt.Settings(block_bytes=128))
    store = MemoryStore()
    store.put(name, raw)
    reader = SstReader(store, name, info, BlockCache(1 << 20))
    t = reader.tail
    runs = [(0, 1), (3, 6), (9, 10)]
    wanted = [0, 3, 5, 9]
    bad = t.block_offsets[4] + 2  # a byte inside block 4, in the middle of a run

    def read(start: int, length: int) -> bytes:
        data = raw[start:start + length]
        if damage == "short":
            return data[:-1]
        if damage == "flipped" and start <= bad < start + length:
            i = bad - start
            return data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]
        if damage == "transient":
            raise TransientStoreError("a flaky read")
        if damage == "gone":
            raise NotFoundError(name)
        return data

    where = {i: j for j, i in enumerate(wanted)}
    out: list = [None] * len(wanted)
    fn = TWINS[twin]["read_runs"]
    if damage in ("none", "transient"):
        fn(reader, read, runs, where, out)
        fresh = SstReader(store, name, info, None)
        assert [list(b.items_from(None, None)) for b in out] == [
            list(fresh.read_block(i, fill_cache=False).items_from(None, None)) for i in wanted]
        assert reader.cached_blocks(list(range(10))).count(None) == 10 - 5  # every block read
        return
    with pytest.raises((CorruptionError, NotFoundError)) as err:
        fn(reader, read, runs, where, out)
    if damage == "short":
        assert "block truncated" in str(err.value)
    elif damage == "flipped":
        assert isinstance(err.value, CorruptionError)
        assert str(t.block_offsets[4]) in str(err.value) and name in str(err.value)
    else:
        assert isinstance(err.value, NotFoundError) and name in str(err.value)


def test_every_read_caches_a_block_under_its_tails_own_key(tmp_path) -> None:
    """Gets, multi_gets and their misses put and look up each block under the tail's own key
    (``SstTail.block_keys``), so the cache's dict finds it by identity; the keys are the ints
    ``cache_id + i`` (silt.cache.block_key)."""
    s = silt.Settings(block_bytes=128, block_cache_bytes=8 << 20, compaction="none")
    db = silt.open(tmp_path.as_uri(), settings=s)
    keys = [b"k%05d" % i for i in range(3000)]
    db.put_many(keys, keys)
    db.flush()
    db.commit()
    db.close()
    db = silt.open(tmp_path.as_uri(), settings=s)
    try:
        assert db.get(keys[10]) == keys[10]  # a miss of get
        assert db.multi_get(keys[::7]) == keys[::7]  # misses of multi_get, in runs
        assert db.multi_get(keys[::7]) == keys[::7]  # hits
        (reader,) = db._state.view.l0
        own = reader.tail.block_keys
        cached = list(db.cache._data)
        assert len(cached) > 100
        assert all(k is own[k - reader.cache_id] for k in cached)
    finally:
        db.close()
