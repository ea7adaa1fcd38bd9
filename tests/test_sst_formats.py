"""SST format versions: what format 2 changed (blocked bloom filters) and that format 1 is still
read, byte for byte as the previous silt wrote it.

Format 1 SSTs come from two places: ``tests/data/sst-format-1.sst``, written by the silt before
format 2 (600 keys with puts, tombstones and expiring puts, 512-byte blocks, 10 bloom bits per
key), and :func:`format1.as_format_1`, which rewrites a format 2 SST the way the previous
writer wrote it (its flat filter, format 1 in the properties and the footer): checked against
the previous writer's own pinned digests, then used for random SSTs.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import silt
import sstparts
from format1 import as_format_1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt import paths
from silt.cache import BlockCache
from silt.errors import CorruptionError
from silt.record import MISSING
from silt.sst import bloom as bloom_mod
from silt.sst.builder import SstInfo, build_sst
from silt.sst.format import BLOOM_LINE_BYTES, FOOTER, FOOTER_SIZE, SST_FORMAT_VERSION
from silt.sst.probe import lookup_groups, plan_probe
from silt.sst.reader import SstReader, get_levels
from silt.tiers.memory import MemoryStore

FIXTURE = Path(__file__).parent / "data" / "sst-format-1.sst"
HYP = settings(max_examples=60, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NOW = 1_700_000_000_000


def fixture_entries() -> tuple[list[bytes], list[object]]:
    """The entries tests/data/sst-format-1.sst was written from (by the previous silt)."""
    rng = random.Random(30)
    keys = sorted({b"k%05d" % rng.randrange(100000) for _ in range(600)})
    recs: list[object] = []
    for i, _ in enumerate(keys):
        c = rng.random()
        recs.append(b"v%d" % i * rng.randrange(1, 6) if c < 0.8 else None if c < 0.9
                    else (b"e%d" % i, 2**40 + i))
    return keys, recs


def test_new_ssts_are_format_2_with_blocked_filters() -> None:
    raw, info = build_sst("01ARZ3NDEKTSV4RRFFQ69G5FAV", [b"a", b"b"], [b"1", b"2"],
                          silt.Settings(bloom_bits_per_key=10))
    parts = sstparts.split(raw)
    assert SST_FORMAT_VERSION == parts.fmt == json.loads(parts.props)["format_version"] == 2
    assert len(parts.bloom) == 1 + BLOOM_LINE_BYTES  # the probe count, then one whole line
    reader = SstReader(MemoryStore(), "x", info, None, tail=raw[info.tail_offset:],
                       tail_start=info.tail_offset)
    assert reader.tail.bloom.blocked


def test_as_format_1_is_the_previous_writer() -> None:
    """The SST :func:`as_format_1` makes is byte for byte what the previous silt wrote: the
    digests its own pinned-format test held (format 1), and the fixture it wrote."""
    rng = random.Random(7)
    keys = sorted({rng.randbytes(rng.randrange(0, 30)) for _ in range(5000)})
    recs: list[object] = []
    for _ in keys:
        c = rng.random()
        recs.append(rng.randbytes(rng.randrange(0, 200)) if c < 0.7 else None if c < 0.85
                    else (rng.randbytes(rng.randrange(0, 50)), rng.randrange(0, 2**63)))
    previous = {0: "431b804f3bb3068a", 10: "a6e4ebe8160c9baa", 3: "c0b455c831eefc9f"}
    for bits, digest in previous.items():
        s = silt.Settings(block_bytes=4096, compression="none", bloom_bits_per_key=bits)
        raw, _ = build_sst("01ARZ3NDEKTSV4RRFFQ69G5FAV", keys, recs, s, created_ms=1234)
        assert hashlib.sha256(as_format_1(raw, keys, bits)).hexdigest()[:16] == digest, bits
    fkeys, frecs = fixture_entries()
    s = silt.Settings(block_bytes=512, compression="none", bloom_bits_per_key=10)
    raw, _ = build_sst("01HSILTFORMAT1FIXTURE00000", fkeys, frecs, s, created_ms=NOW)
    assert as_format_1(raw, fkeys, 10) == FIXTURE.read_bytes()


def _readers(store: MemoryStore, name: str, raw: bytes, info: SstInfo) -> list[SstReader]:
    return [
        SstReader(store, name, info, BlockCache(1 << 20)),
        SstReader(store, name, info, None, tail=raw[info.tail_offset:],
                  tail_start=info.tail_offset),
        SstReader(store, name, None, None, size=len(raw)),
    ]


def _check_reads(raw: bytes, keys: list[bytes], recs: list[object], probes: list[bytes],
                 blocked: bool) -> None:
    """Every way a DB reads an SST gives each stored record and nothing for other keys."""
    store = MemoryStore()
    name = paths.sst_key(paths.new_id())
    assert store.put_if_absent(name, raw)
    want = dict(zip(keys, recs))
    info = SstInfo(id=name, size=len(raw), tail_offset=FOOTER.unpack_from(
        raw, len(raw) - FOOTER_SIZE)[0], smallest=keys[0], largest=keys[-1], entries=len(keys))
    everything = sorted(set(keys) | set(probes))
    for reader in _readers(store, name, raw, info):
        bloom = reader.tail.bloom
        assert bloom is None or bloom.blocked == blocked
        for k in everything:
            assert reader.get(k) == want.get(k, MISSING)
        if reader.info is not None:
            assert [get_levels((reader,), (), k) for k in everything] == [
                want.get(k, MISSING) for k in everything]
        found: dict[bytes, object] = {}
        unresolved, blocks, groups = plan_probe(everything, 0, len(everything), bloom,
                                                reader.tail.last_keys)
        lookup_groups([reader.block(b) for b in blocks], groups, found, unresolved)
        assert found == {k: want[k] for k in keys}
        assert sorted(unresolved) == sorted(set(probes) - set(keys))
        assert list(reader.iter_range(None, None)) == list(zip(keys, recs))
        assert reader.verify() == len(keys)


def test_the_previous_silts_sst_reads_the_same() -> None:
    raw = FIXTURE.read_bytes()
    keys, recs = fixture_entries()
    assert sstparts.split(raw).fmt == 1
    rng = random.Random(5)
    _check_reads(raw, keys, recs, [b"k%05d" % rng.randrange(100000) for _ in range(2000)],
                 blocked=False)


entries = st.dictionaries(
    st.binary(max_size=24),
    st.one_of(st.binary(max_size=100), st.none(),
              st.tuples(st.binary(max_size=30), st.integers(1, 2**63 - 1))),
    min_size=1, max_size=200,
)


@HYP
@given(data=entries, probes=st.lists(st.binary(max_size=24), max_size=40),
       bits=st.sampled_from([0, 1, 4, 10, 33]), block_bytes=st.sampled_from([64, 512, 4096]))
def test_format_1_and_2_ssts_read_alike(data: dict, probes: list[bytes], bits: int,
                                        block_bytes: int) -> None:
    keys = sorted(data)
    recs = [data[k] for k in keys]
    s = silt.Settings(block_bytes=block_bytes, bloom_bits_per_key=bits)
    raw, _ = build_sst(paths.new_id(), keys, recs, s, created_ms=NOW)
    _check_reads(raw, keys, recs, probes, blocked=True)
    _check_reads(as_format_1(raw, keys, bits), keys, recs, probes, blocked=False)


@pytest.mark.parametrize("length", [1, 63, 65, 127])
def test_a_blocked_filter_of_partial_lines_is_corruption(length: int) -> None:
    keys = [b"k%03d" % i for i in range(50)]
    raw, _ = build_sst(paths.new_id(), keys, keys, silt.Settings(bloom_bits_per_key=10))
    parts = sstparts.split(raw)
    bad = sstparts.join(replace(parts, bloom=bytes([6]) + bytes(length)))
    store = MemoryStore()
    assert store.put_if_absent("bad", bad)
    with pytest.raises(CorruptionError, match="not whole 64-byte lines") as err:
        SstReader(store, "bad", None, None, size=len(bad)).tail  # noqa: B018
    assert (err.value.object_name, err.value.offset) == ("bad", len(parts.data))
    with pytest.raises(CorruptionError, match="not whole 64-byte lines"):
        SstReader(store, "bad", None, None, size=len(bad), tail=bad[len(parts.data):],
                  tail_start=len(parts.data))
    # the same bytes in a format 1 SST are a flat filter, and read
    flat = sstparts.join(replace(parts, fmt=1, bloom=bytes([6]) + bytes(length)))
    reader = SstReader(MemoryStore(), "flat", None, None, size=len(flat),
                       tail=flat[len(parts.data):], tail_start=len(parts.data))
    assert not reader.tail.bloom.blocked


def test_blocked_filter_false_positive_rate_at_the_default_bits_per_key() -> None:
    """At 10 bits per key (the default) the blocked filter's false-positive rate is near its
    theoretical ~0.95% (the flat filter's is 0.9-1.5% depending on its size, with its 32-bit
    double hashing), with no false negative; both filters are the same size to within a
    line."""
    rng = random.Random(11)
    member_set = {rng.randbytes(16) for _ in range(50_000)}
    members = sorted(member_set)
    others = [k for k in (rng.randbytes(16) for _ in range(200_000)) if k not in member_set]
    seq = [b"user:%08d" % i for i in range(0, 100_000, 2)]
    seq_others = [b"user:%08d" % i for i in range(1, 100_000, 2)]
    for keys, absent in ((members, others), (seq, seq_others)):
        blocked = bloom_mod.BloomFilter(bloom_mod.build_blocked_bloom(keys, 10), True)
        flat = bloom_mod.BloomFilter(bloom_mod.build_bloom(keys, 10))
        assert all(map(blocked.may_contain, keys))
        fp_blocked = sum(map(blocked.may_contain, absent)) / len(absent)
        assert 0.006 < fp_blocked < 0.0125, fp_blocked
        assert 0 <= blocked.nbytes - flat.nbytes < BLOOM_LINE_BYTES


def test_blocked_filter_sizes() -> None:
    assert bloom_mod.blocked_lines(0, 10) == 1
    assert bloom_mod.blocked_lines(1, 10) == 1
    assert bloom_mod.blocked_lines(51, 10) == 1  # 510 bits
    assert bloom_mod.blocked_lines(52, 10) == 2  # 520 bits
    assert bloom_mod.blocked_lines(10_000, 10) == 196
    for n in (0, 1, 52, 10_000):
        data = bloom_mod.build_blocked_bloom([b"%d" % i for i in range(n)], 10)
        assert len(data) == 1 + 64 * bloom_mod.blocked_lines(n, 10)
        assert data[0] == bloom_mod.probes_for(10) == 6


@pytest.mark.parametrize("fmt", [0, SST_FORMAT_VERSION + 1, 2**32 - 1])
def test_an_unknown_format_version_is_refused_before_its_filter_is_read(fmt: int) -> None:
    keys = [b"k%03d" % i for i in range(50)]
    raw, _ = build_sst(paths.new_id(), keys, keys, silt.Settings(bloom_bits_per_key=10))
    parts = sstparts.split(raw)
    bad = sstparts.join(replace(parts, fmt=fmt))
    with pytest.raises(CorruptionError, match=rf"format version {fmt} is not readable.*\[1, 2\]"):
        SstReader(MemoryStore(), "x", None, None, size=len(bad), tail=bad[len(parts.data):],
                  tail_start=len(parts.data))
