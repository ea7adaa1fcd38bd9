"""Unit tests of the storage formats and their building blocks: SSTs (blocks, bloom filter,
index, properties, footer), the block cache, manifests, object names and the merge."""

from __future__ import annotations

import os
import random
import zlib

import hypothesis.strategies as st
import pytest
import silt
from hypothesis import given, settings
from silt import paths
from silt.cache import BlockCache
from silt.errors import CorruptionError
from silt.manifest import Manifest
from silt.merge import live, merge_newest_first
from silt.record import MISSING
from silt.sst.block import Block, decode_block, encode_block, frame, unframe
from silt.sst.bloom import BloomFilter, build_bloom, probes_for
from silt.sst.builder import SstInfo, build_sst
from silt.sst.format import COMPRESSION_LZ4, COMPRESSION_NONE, FOOTER_SIZE, SST_MAGIC
from silt.sst.reader import SstReader
from silt.tiers.memory import MemoryStore

NOW = 1_700_000_000_000

records = st.one_of(
    st.binary(max_size=300),
    st.none(),
    st.tuples(st.binary(max_size=50), st.integers(min_value=1, max_value=2**63 - 1)),
)
entries = st.dictionaries(st.binary(max_size=24), records, min_size=1, max_size=250)


def write_sst(store: MemoryStore, data: dict[bytes, object], settings: silt.Settings,
              sst_id: str | None = None) -> tuple[str, SstInfo, bytes]:
    keys = sorted(data)
    sst_id = sst_id or paths.new_id()
    raw, info = build_sst(sst_id, keys, [data[k] for k in keys], settings, created_ms=NOW)
    name = paths.sst_key(sst_id)
    assert store.put_if_absent(name, raw)
    return name, info, raw


# --- SST round trip -----------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(
    data=entries,
    compression=st.sampled_from(["lz4", "none"]),
    block_bytes=st.sampled_from([64, 100, 512, 4096, 65536]),
    bloom=st.sampled_from([0, 1, 10, 20]),
    probes=st.lists(st.binary(max_size=24), max_size=20),
    bounds=st.tuples(st.none() | st.binary(max_size=3), st.none() | st.binary(max_size=3)),
    with_empty_key=st.booleans(),
)
def test_sst_round_trip(data, compression, block_bytes, bloom, probes, bounds, with_empty_key):
    if with_empty_key:
        data[b""] = b"the empty key"
    settings_ = silt.Settings(compression=compression, block_bytes=block_bytes,
                              bloom_bits_per_key=bloom)
    store = MemoryStore()
    name, info, raw = write_sst(store, data, settings_)
    keys = sorted(data)
    items = [(k, data[k]) for k in keys]

    assert info.size == len(raw)
    assert (info.smallest, info.largest, info.entries) == (keys[0], keys[-1], len(keys))
    assert info.tombstones == sum(r is None for r in data.values())
    expiries = [r[1] for r in data.values() if isinstance(r, tuple)]
    assert info.expiring == len(expiries)
    assert (info.min_expiry_ms, info.max_expiry_ms) == (
        (min(expiries), max(expiries)) if expiries else (0, 0)
    )
    assert int.from_bytes(raw[-8:], "little") == SST_MAGIC
    assert SstInfo.from_json(info.to_json()) == info

    readers = [
        SstReader(store, name, info, BlockCache(1 << 20)),  # lazy tail, one ranged GET
        SstReader(store, name, info, None, tail=raw[info.tail_offset:],
                  tail_start=info.tail_offset),  # tail handed over by the writer
        SstReader(store, name, None, None, size=len(raw)),  # from a listing
    ]
    for reader in readers:
        for k in keys:
            assert reader.get(k) == data[k]
        for k in probes:
            assert reader.get(k) == data.get(k, MISSING)
        assert list(reader.iter_range(None, None)) == items
        start, end = bounds
        assert list(reader.iter_range(start, end)) == [
            (k, r) for k, r in items
            if (start is None or k >= start) and (end is None or k < end)
        ]
        assert reader.verify() == len(keys)
        props = reader.properties
        assert props["entries"] == len(keys)
        assert props["compression"] == compression
        assert props["created_ms"] == NOW
        assert props["blocks"] == reader.num_blocks >= 1
        assert (reader.tail.bloom is None) == (bloom == 0)
        for k in keys:
            assert reader.may_contain(k)  # no false negatives, ever
            assert 0 <= reader.block_index_for(k) < reader.num_blocks
        assert reader.block_index_for(keys[-1] + b"\x00") == -1


def test_small_blocks_make_many_blocks() -> None:
    store = MemoryStore()
    data = {b"k%04d" % i: b"v" * 20 for i in range(500)}
    _, info, _ = write_sst(store, data, silt.Settings(block_bytes=64, compression="none"))
    reader = SstReader(store, paths.sst_key(info.id), info, None)
    assert reader.num_blocks >= 100
    assert reader.verify() == 500


def test_build_sst_needs_entries() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        build_sst(paths.new_id(), [], [], silt.Settings())


def test_block_encoding_round_trip() -> None:
    keys = [b"", b"a", b"b" * 300, b"\xff"]
    recs: list[object] = [b"x", None, (b"ttl", NOW), b""]
    blk = Block(encode_block(keys, recs))
    assert len(blk) == 4
    assert [blk.get(k) for k in keys] == recs
    assert blk.get(b"zz") is MISSING
    assert list(blk.items_from(b"a", b"c")) == [(b"a", None), (b"b" * 300, (b"ttl", NOW))]


def _decoded_or_error(framed: object) -> object:
    try:
        b = decode_block(framed, "obj", 7)  # type: ignore[arg-type]
    except CorruptionError as exc:
        return ("corrupt", str(exc))
    return (list(b.keys), [b.record_at(i) for i in range(len(b))], bytes(b.values), b.charge,
            b.where)


def _unframed_then_block(framed: bytes) -> object:
    try:
        b = Block(unframe(framed, "obj", 7), "obj", 7)
    except CorruptionError as exc:
        return ("corrupt", str(exc))
    return (list(b.keys), [b.record_at(i) for i in range(len(b))], bytes(b.values), b.charge,
            b.where)


@pytest.mark.parametrize("values", [[b"v" * 100] * 60, [os.urandom(100) for _ in range(60)]])
@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_LZ4])
def test_decode_block_is_unframe_then_block(values: list[bytes], compression: int) -> None:
    # decode_block (what every block read goes through; compiled: decoded over the bytes read)
    # is exactly unframe then Block, damaged blocks included, whichever twin this run selects.
    keys = [b"%06d" % i for i in range(len(values))]
    framed = frame(encode_block(keys, [*values[:-2], None, (b"t", NOW)]), compression)
    assert _decoded_or_error(framed)[0] == keys  # type: ignore[index]
    assert _decoded_or_error(memoryview(framed)) == _unframed_then_block(framed)
    assert _decoded_or_error(bytearray(framed)) == _unframed_then_block(framed)
    rng = random.Random(7)
    cases = [framed[:n] for n in (0, 4, 5, 6, len(framed) - 1)] + [framed + b"\0"]
    for _ in range(60):
        damaged = bytearray(framed)
        damaged[rng.randrange(len(framed))] ^= 1 << rng.randrange(8)
        cases.append(bytes(damaged))
    body = bytes(rng.randrange(256) for _ in range(40))
    for code in (0, 1, 2):  # a valid checksum over garbage: the decoders must refuse it
        for b in (body, (10**6).to_bytes(4, "little") + body, (50).to_bytes(4, "little") + body):
            cases.append(b + bytes((code,)) + zlib.crc32(b + bytes((code,))).to_bytes(4, "little"))
    for case in cases:
        assert _decoded_or_error(case) == _unframed_then_block(case)


@pytest.mark.parametrize("payload", [b"", b"abc" * 1000, os.urandom(2000)])
@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_LZ4])
def test_frame_round_trip_and_checksum(payload: bytes, compression: int) -> None:
    framed = frame(payload, compression)
    assert unframe(framed, "obj", 7) == payload
    if compression == COMPRESSION_LZ4 and len(payload) == 3000:
        assert len(framed) < len(payload)  # compressible data is compressed
    for i in range(len(framed)):
        damaged = bytearray(framed)
        damaged[i] ^= 0x40
        with pytest.raises(CorruptionError) as info:
            unframe(bytes(damaged), "obj", 7)
        assert (info.value.object_name, info.value.offset) == ("obj", 7)
        if i > 64:
            break


# --- bloom filter -------------------------------------------------------------------------------


def test_bloom_no_false_negatives_and_low_false_positive_rate() -> None:
    rng = random.Random(1)
    members = {rng.randbytes(16) for _ in range(10_000)}
    others = {rng.randbytes(16) for _ in range(20_000)} - members
    bloom = BloomFilter(build_bloom(sorted(members), 10))
    assert all(bloom.may_contain(k) for k in members)
    fp = sum(bloom.may_contain(k) for k in others) / len(others)
    assert fp < 0.02, f"false positive rate {fp:.4f}"
    assert bloom.nbytes == 1 + 10_000 * 10 // 8


def test_bloom_on_similar_keys() -> None:
    members = [b"user:%08d" % i for i in range(0, 20_000, 2)]
    others = [b"user:%08d" % i for i in range(1, 20_000, 2)]
    bloom = BloomFilter(build_bloom(members, 10))
    assert all(bloom.may_contain(k) for k in members)
    assert sum(bloom.may_contain(k) for k in others) / len(others) < 0.02


def test_bloom_probes() -> None:
    assert probes_for(10) == 6
    assert probes_for(1) == 1
    assert probes_for(64) == 30
    tiny = BloomFilter(build_bloom([b"only"], 10))
    assert tiny.may_contain(b"only")
    assert tiny.nbytes == 1 + 8  # at least 64 bits


# --- block cache --------------------------------------------------------------------------------


def test_block_cache_eviction_and_byte_bound() -> None:
    cache = BlockCache(100)
    cache.put("a", "A", 40)
    cache.put("b", "B", 40)
    assert cache.used == 80
    assert cache.get("a") == "A"  # a hit marks a: it has a second chance
    cache.put("c", "C", 40)  # evicts b, never hit (tests/test_block_cache.py: the order)
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c")) == ("A", "C")
    assert cache.used == 80 and len(cache) == 2 and cache.evictions == 1
    cache.put("a", "A2", 10)  # replacing an entry re-charges it
    assert cache.used == 50 and cache.get("a") == "A2"
    cache.put("big", "X", 101)  # larger than the whole cache: not cached, nothing evicted
    assert cache.get("big") is None and len(cache) == 2
    cache.put("d", "D", 90)  # evicts as many as needed
    assert cache.used <= 100


def test_block_cache_get_many_is_get_in_order() -> None:
    cache = BlockCache(100)
    for name in "abc":
        cache.put(name, name.upper(), 30)
    hits, misses = cache.hits, cache.misses
    assert cache.get_many(["c", "x", "a"]) == ["C", None, "A"]
    assert (cache.hits - hits, cache.misses - misses) == (2, 1)
    assert cache.get_many([]) == []
    cache.put("d", "D", 30)  # evicts b, never hit (a, hit, has a second chance)
    assert cache.get("b") is None
    cache.put("e", "E", 30)  # then a, whose mark that pass spent (c still has its own)
    assert cache.get_many(["c", "a", "d", "e"]) == ["C", None, "D", "E"]
    assert cache.get("d") == "D"
    assert cache.hits >= 5 and cache.misses >= 2
    cache.clear()
    assert cache.used == 0 and len(cache) == 0


def test_db_block_cache_is_bounded(url: str) -> None:
    settings_ = silt.Settings(memtable_bytes=32 * 1024, block_bytes=256, block_cache_bytes=4096)
    with silt.open(url, settings=settings_) as db:
        for i in range(3000):
            db.put(b"k%05d" % i, b"v%d" % i)
        db.commit()
    with silt.open(url, settings=settings_) as db:
        for i in range(0, 3000, 7):
            assert db.get(b"k%05d" % i) == b"v%d" % i
            assert db.cache.used <= 4096
        assert db.cache.evictions > 0
        before = db.cache.hits
        db.get(b"k00007")
        db.get(b"k00007")
        assert db.cache.hits > before


# --- manifests ----------------------------------------------------------------------------------

def _valid_sst(size: int, tail_back: int, a: bytes, b: bytes, **fields) -> SstInfo:
    """An entry that decoding accepts: room for a footer after the tail, keys in order."""
    tail_offset = size - FOOTER_SIZE - tail_back % (size - FOOTER_SIZE + 1)
    return SstInfo(size=size, tail_offset=tail_offset, smallest=min(a, b), largest=max(a, b),
                   **fields)


ssts = st.builds(
    _valid_sst,
    id=st.builds(paths.new_id, st.integers(0, 2**48 - 1), st.binary(min_size=10, max_size=10)),
    size=st.integers(FOOTER_SIZE, 2**40),
    tail_back=st.integers(0, 2**40),
    a=st.binary(max_size=10),
    b=st.binary(max_size=10),
    entries=st.integers(0, 2**32),
    tombstones=st.integers(0, 100),
    expiring=st.integers(0, 100),
    min_expiry_ms=st.integers(0, 2**63 - 1),
    max_expiry_ms=st.integers(0, 2**63 - 1),
)


@settings(max_examples=100, deadline=None)
@given(
    version=st.integers(0, paths.MAX_VERSION),
    parent=st.none() | st.integers(0, paths.MAX_VERSION),
    l0=st.lists(ssts, max_size=4),
    levels=st.lists(st.lists(ssts, max_size=3), max_size=3),
    meta=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=4),
    token=st.text(min_size=1, max_size=32),
)
def test_manifest_round_trip(version, parent, l0, levels, meta, token) -> None:
    if parent is not None and parent >= version:  # a parent precedes its version
        parent = parent % version if version else None
    m = Manifest(
        version=version, parent=parent, writer_id="w" * 32, token=token, created_ms=NOW,
        l0=tuple(l0), levels=tuple(tuple(lv) for lv in levels), meta=meta,
    )
    data = m.encode()
    assert data[:8] == b"SILTMNF1"
    back = Manifest.decode(data, "manifest/x")
    assert back == m
    assert list(back.all_ssts()) == [*l0, *(s for lv in levels for s in lv)]
    assert back.encode() == data  # deterministic encoding


def test_manifest_written_by_a_commit_decodes(url: str, small: silt.Settings) -> None:
    with silt.open(url, settings=small) as db:
        for i in range(2000):
            db.put(b"k%05d" % i, b"x" * 40)
        db.commit(meta={"watermark": "42"})
        written = db.manifest
    store = silt.open_store(url)
    try:
        read = silt.read_manifest(store, 1)
    finally:
        store.close()
    assert read == written
    assert read.parent is None and read.meta["watermark"] == "42"
    assert set(read.meta) == {"watermark", "silt.requests"}  # and what the writer paid
    assert len(read.l0) >= 2
    assert sum(s.entries for s in read.l0) == 2000


# --- object names -------------------------------------------------------------------------------


@given(
    t1=st.integers(0, 2**48 - 2),
    dt=st.integers(1, 10**9),
    r1=st.binary(min_size=10, max_size=10),
    r2=st.binary(min_size=10, max_size=10),
)
def test_new_id_sorts_by_time(t1: int, dt: int, r1: bytes, r2: bytes) -> None:
    t2 = min(t1 + dt, 2**48 - 1)
    a, b = paths.new_id(t1, r1), paths.new_id(t2, r2)
    assert len(a) == len(b) == 26
    assert set(a) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    assert a < b
    assert paths.id_time_ms(a) == t1 and paths.id_time_ms(b) == t2
    assert paths.parse_sst_key(paths.sst_key(a)) == a


def test_new_ids_are_unique_and_time_ordered() -> None:
    ids = [paths.new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    times = [paths.id_time_ms(i) for i in ids]
    assert times == sorted(times)


@given(st.lists(st.integers(0, paths.MAX_VERSION), min_size=2, max_size=20))
def test_manifest_keys_sort_like_versions(versions: list[int]) -> None:
    keys = [paths.manifest_key(v) for v in versions]
    assert sorted(keys) == [paths.manifest_key(v) for v in sorted(versions)]
    assert [paths.parse_manifest_key(k) for k in keys] == versions
    assert paths.parse_manifest_key("manifest/12") is None
    assert paths.parse_manifest_key("sst/00000000000000000001") is None


# --- merging ------------------------------------------------------------------------------------

sources = st.lists(
    st.dictionaries(st.binary(max_size=3), records, max_size=15), min_size=1, max_size=6
)


@given(sources)
def test_merge_newest_first_precedence(dicts: list[dict[bytes, object]]) -> None:
    iters = [iter(sorted(d.items())) for d in dicts]
    merged = list(merge_newest_first(iters))
    expected: dict[bytes, object] = {}
    for d in reversed(dicts):  # oldest first, so newer sources overwrite
        expected.update(d)
    assert merged == sorted(expected.items())


@given(sources, st.integers(0, 2**63 - 1))
def test_live_drops_tombstones_and_expired(dicts: list[dict[bytes, object]], now: int) -> None:
    merged = list(merge_newest_first([iter(sorted(d.items())) for d in dicts]))
    out = list(live(merged, now))
    expected = []
    for k, r in merged:
        if isinstance(r, bytes):
            expected.append((k, r))
        elif isinstance(r, tuple) and now < r[1]:
            expected.append((k, r[0]))
    assert out == expected
