"""Reads of runs of adjacent SST blocks: scan read-ahead (``Readahead``/``RangeIter``),
``SstReader.read_run`` and ``multi_get``'s coalesced misses (``fetch.BlockFetcher``).

Checked against a dict model on real SSTs in a memory store (both twins: the suite runs with
and without the compiled extension), counting the ranged GETs, and with a damaged block in the
middle of a run, which must still raise ``CorruptionError`` naming the object.
"""

from __future__ import annotations

import random
import threading

import hypothesis.strategies as st
import pytest
import silt
from hypothesis import given, settings
from silt import paths
from silt.cache import BlockCache
from silt.errors import CorruptionError
from silt.fetch import BlockFetcher, coalesce
from silt.metrics import MeteredStore, Metrics
from silt.sst.builder import build_sst
from silt.sst.reader import READAHEAD_FIRST, SstReader
from silt.tiers.memory import MemoryStore

NOW = 1_700_000_000_000

values = st.one_of(st.binary(max_size=40), st.none(),
                   st.tuples(st.binary(max_size=20), st.integers(1, 2**63 - 1)))
models = st.dictionaries(st.binary(min_size=1, max_size=6), values, min_size=1, max_size=300)
bound = st.none() | st.binary(max_size=3)


def make_sst(data: dict[bytes, object], block_bytes: int = 64, cache: BlockCache | None = None
             ) -> tuple[SstReader, Metrics, bytes]:
    """One SST of ``data`` in a fresh memory store behind a request counter."""
    keys = sorted(data)
    sst_id = paths.new_id(NOW)
    raw, info = build_sst(sst_id, keys, [data[k] for k in keys],
                          silt.Settings(block_bytes=block_bytes), created_ms=NOW)
    metrics = Metrics()
    store = MeteredStore(MemoryStore(), metrics)
    name = paths.sst_key(sst_id)
    store.put(name, raw)
    reader = SstReader(store, name, info, cache)
    reader.tail  # noqa: B018 - load the tail before counting block reads
    metrics.requests.clear()
    return reader, metrics, raw


def range_gets(metrics: Metrics) -> int:
    return sum(n for (_, kind), (n, _) in metrics.requests.items() if kind == "RANGE_GET")


@settings(max_examples=60, deadline=None)
@given(models, bound, bound, st.booleans())
def test_range_reads_in_runs_match_the_model(data, start, end, cached) -> None:
    cache = BlockCache(1 << 20) if cached else None
    reader, _, _ = make_sst(data, cache=cache)
    want = [(k, data[k]) for k in sorted(data)
            if (start is None or k >= start) and (end is None or k < end)]
    assert list(reader.iter_range(start, end, fill_cache=cached)) == want
    assert list(reader.iter_range(start, end)) == want  # again, from the cache when filled
    n = reader.num_blocks
    first = random.Random(len(data)).randrange(n)
    stop = reader.run_end(first, 1 << 30)
    assert stop == n
    run = reader.read_run(first, stop, fill_cache=False)
    assert [list(b.items_from(None, None)) for b in run] == [
        list(reader.read_block(i, fill_cache=False).items_from(None, None))
        for i in range(first, stop)]


def test_a_scan_reads_runs_of_blocks_not_one_block_per_request() -> None:
    data = {b"k%05d" % i: b"v" * 30 for i in range(3000)}
    reader, metrics, _ = make_sst(data)
    assert list(reader.iter_range(None, None)) == sorted(data.items())
    blocks = reader.num_blocks
    gets = range_gets(metrics)
    assert blocks > 200 and gets < blocks / 20, (gets, blocks)
    # a bounded scan reads no further than the block holding its end
    metrics.requests.clear()
    got = list(reader.iter_range(b"k00100", b"k00103"))
    assert [k for k, _ in got] == [b"k00100", b"k00101", b"k00102"]
    assert range_gets(metrics) == 1
    t = reader.tail
    assert metrics.requests[("read", "RANGE_GET")][1] <= 2 * max(t.block_sizes)
    assert READAHEAD_FIRST < sum(t.block_sizes)


def test_coalesce_groups_adjacent_blocks_within_the_gap_and_size() -> None:
    reader, _, _ = make_sst({b"k%05d" % i: b"v" * 30 for i in range(500)})
    assert coalesce(reader, [0, 1, 2, 5, 6, 9], 0, 1 << 20) == [(0, 3), (5, 7), (9, 10)]
    sizes = reader.tail.block_sizes
    gap2 = sizes[3] + sizes[4]
    assert coalesce(reader, [0, 1, 2, 5, 6, 10], gap2, 1 << 20) == [(0, 7), (10, 11)]
    assert coalesce(reader, [0, 5], gap2, sizes[0] + gap2) == [(0, 1), (5, 6)]
    assert coalesce(reader, [0, 1, 2], 0, 0) == [(0, 1), (1, 2), (2, 3)]


@settings(max_examples=40, deadline=None)
@given(models, st.lists(st.binary(min_size=1, max_size=6), max_size=40), st.booleans())
def test_multi_get_with_coalesced_misses_matches_the_model(data, probes, remote) -> None:
    """Both fetch paths (serial reads for a local store, coalesced runs on the pool for a slow
    one) give the model's values."""
    fetch = BlockFetcher(3)
    try:
        url = f"memory://runs-{random.getrandbits(64):x}"
        with silt.open(url, settings=silt.Settings(block_bytes=64, block_cache_bytes=0)) as db:
            for k, v in data.items():
                if v is None:
                    db.delete(k)
                elif isinstance(v, tuple):
                    db.put(k, v[0])
                else:
                    db.put(k, v)
            db.commit()
            keys = sorted({*data, *probes})
            want = [None if not isinstance(data.get(k), bytes | tuple) else (
                data[k][0] if isinstance(data[k], tuple) else data[k]) for k in keys]
            db._fetch = fetch
            fetch.read_seconds = 1.0 if remote else 0.0
            assert db.multi_get(keys) == want
    finally:
        fetch.close()
        silt.tiers.memory.MemoryStore.drop(url.split("://")[1])


def reads(db: silt.DB) -> int:
    return db.stats()["requests"].get("read", {}).get("RANGE_GET", {}).get("count", 0)


def test_a_slow_store_gets_coalesced_multi_get_reads(tmp_path) -> None:
    """With reads timed as remote, the blocks a multi_get misses are read as coalesced runs:
    fewer ranged GETs than blocks."""
    settings_ = silt.Settings(block_bytes=128, block_cache_bytes=0)
    keys = [b"k%05d" % i for i in range(4000)]
    with silt.open((tmp_path / "root").as_uri(), settings=settings_) as db:
        db.put_many(keys, [b"v" * 40] * len(keys))
        db.commit()
        wanted = keys[::7]  # ~every third block of each SST
        db._fetch.read_seconds = 1.0
        before = reads(db)
        assert db.multi_get(wanted) == [b"v" * 40] * len(wanted)
        gets = reads(db) - before
        assert gets < len(wanted) / 10, gets


@pytest.mark.parametrize("how", ["scan", "multi_get", "read_run"])
def test_a_damaged_block_inside_a_run_raises_corruption(how: str) -> None:
    data = {b"k%05d" % i: b"v%d" % i * 5 for i in range(2000)}
    reader, _, raw = make_sst(data)
    t = reader.tail
    mid = len(t.block_offsets) // 2
    damaged = bytearray(raw)
    damaged[t.block_offsets[mid] + 3] ^= 0x40
    reader.store.inner.put(reader.name, bytes(damaged))  # type: ignore[attr-defined]
    with pytest.raises(CorruptionError) as err:
        if how == "scan":
            list(reader.iter_range(None, None))
        elif how == "read_run":
            reader.read_run(mid - 2, mid + 3)
        else:
            fetch = BlockFetcher(2)
            try:
                fetch.read_seconds = 1.0
                fetch(reader, list(range(mid - 3, mid + 3)))
            finally:
                fetch.close()
    assert reader.name in str(err.value)
    assert str(t.block_offsets[mid]) in str(err.value)


class FakeClocks:
    """A wall clock and a CPU clock that only the store's requests move."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def now(self) -> float:
        return self.wall

    def cpu_now(self) -> float:
        return self.cpu


class TimedStore(MemoryStore):
    """A local store whose ranged GETs each cost ``cpu`` seconds of the reading thread's CPU
    (work, such as a cold page cache's copies) and ``wait`` seconds of waiting (a slow
    request: a network mount) on ``clocks``; records each request's thread."""

    local = True

    def __init__(self, clocks: FakeClocks, *, cpu: float, wait: float) -> None:
        super().__init__()
        self.clocks, self.cpu, self.wait = clocks, cpu, wait
        self.threads: list[int] = []

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self.threads.append(threading.get_ident())
        self.clocks.cpu += self.cpu
        self.clocks.wall += self.cpu + self.wait
        return super().get_range(key, start, length)


class SlowCache:
    """A block cache whose every insert, the end of a block's decoding, waits ``wait`` seconds
    on ``clocks`` (a loaded machine's decoding thread waiting for the CPU)."""

    def __init__(self, clocks: FakeClocks, wait: float) -> None:
        self.inner, self.clocks, self.wait = BlockCache(1 << 22), clocks, wait

    def put(self, key: object, blk: object, charge: int) -> None:
        self.clocks.wall += self.wait
        self.inner.put(key, blk, charge)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.mark.parametrize("cpu, wait, decode_wait, pooled", [
    (0.005, 0.0, 0.0, False), (0.0, 0.0, 0.005, False), (0.0, 0.005, 0.0, True),
    (0.005, 0.005, 0.0, True)])
def test_a_local_store_is_read_as_remote_by_its_waits_not_its_work(cpu, wait, decode_wait,
                                                                    pooled) -> None:
    """The fetcher moves a local store's reads to its pool when its requests wait (a network
    mount), never because they take CPU time or because decoding their blocks took long:
    decoding a cold SST's runs of blocks takes milliseconds of CPU that a pool cannot overlap
    (a cold multi_get on file:// went to the pool midway, starting its threads, and its runs
    waited for the GIL behind one another)."""
    data = {b"k%05d" % i: b"v%d" % i * 5 for i in range(3000)}
    keys = sorted(data)
    sst_id = paths.new_id(NOW)
    raw, info = build_sst(sst_id, keys, [data[k] for k in keys], silt.Settings(block_bytes=64),
                          created_ms=NOW)
    clocks = FakeClocks()
    store = TimedStore(clocks, cpu=cpu, wait=wait)
    name = paths.sst_key(sst_id)
    store.put(name, raw)
    reader = SstReader(store, name, info, SlowCache(clocks, decode_wait))  # type: ignore[arg-type]
    reader.tail  # noqa: B018 - the tail is not a block read
    store.threads.clear()
    wanted = list(range(0, len(reader.tail.block_offsets), 2))  # every run is one block
    assert len(wanted) > 20
    fetch = BlockFetcher(3, clock=clocks.now, cpu_clock=clocks.cpu_now)
    try:
        got = fetch(reader, wanted)
    finally:
        fetch.close()
    assert len(store.threads) == len(wanted)
    off_thread = [t for t in store.threads if t != threading.get_ident()]
    assert bool(off_thread) == pooled, (len(off_thread), fetch.read_seconds)
    fresh = SstReader(MemoryStore(), name, info, None)
    fresh.store.put(name, raw)
    assert [list(b.items_from(None, None)) for b in got] == [
        list(fresh.read_block(i, fill_cache=False).items_from(None, None)) for i in wanted]


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_coalesce_and_missing_runs_twins_agree(data) -> None:
    """The compiled ``coalesce`` and ``missing_runs`` (the fetcher's plan of a multi_get's
    missed blocks) give the pure twins' runs and places, for any gap and size limit."""
    from silt.sst import probe

    reader, _, _ = make_sst({b"k%05d" % i: b"v" * 30 for i in range(400)})
    n = reader.num_blocks
    indexes = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=40)))
    cached = data.draw(st.lists(st.booleans(), min_size=len(indexes), max_size=len(indexes)))
    if all(cached):
        cached[0] = False
    out = [object() if c else None for c in cached]
    gap = data.draw(st.sampled_from([0, 100, 1 << 16]))
    most = data.draw(st.sampled_from([0, 300, 1 << 20]))
    twins = [(probe.coalesce_py, probe.missing_runs_py)]
    if probe.COMPILED:
        twins.append((probe.coalesce, probe.missing_runs))
    got = [(co(reader, indexes, gap, most), mr(reader, indexes, out, gap, most))
           for co, mr in twins]
    assert all(g == got[0] for g in got)
    where, runs = got[0][1]
    assert list(where) == [i for i, c in zip(indexes, cached) if not c]
    assert all(out[j] is None for j in where.values())
    assert [i for a, b in runs for i in range(a, b) if i in where] == list(where)
