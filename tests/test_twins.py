"""The compiled hot path (silt._speedups) against its pure-Python twins, in one process.

Both implementations are imported explicitly (whatever SILT_NO_EXTENSIONS selects for the rest of
the suite) and must produce byte-identical blocks, blooms and SSTs and equal results for random
inputs, including damaged block payloads. The nox ``tests`` session also runs the whole suite once
per implementation. Without a compiled build these tests are skipped, unless
SILT_REQUIRE_EXTENSIONS=1 is set: then a missing build fails them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import os
import random
import subprocess
import sys
import zlib
from bisect import bisect_left

import pytest
import silt
from format1 import as_format_1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt import memtable as mt
from silt import merge
from silt.errors import CorruptionError, InvalidArgumentError, InvalidTypeError
from silt.record import MISSING
from silt.sst import block as blk_mod
from silt.sst import bloom as bloom_mod
from silt.sst import builder as builder_mod
from silt.sst import probe as probe_mod
from silt.sst import reader as reader_mod

try:
    from silt import _speedups as C
except ImportError as exc:  # pragma: no cover - depends on the build
    if os.environ.get("SILT_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        raise ImportError(f"SILT_REQUIRE_EXTENSIONS=1, no silt._speedups: {exc}") from exc
    pytest.skip(f"silt._speedups is not compiled ({exc})", allow_module_level=True)

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

keys_st = st.lists(st.binary(max_size=24), max_size=60, unique=True).map(sorted)
record_st = st.one_of(
    st.binary(max_size=80),
    st.none(),
    st.tuples(st.binary(max_size=40), st.integers(0, 2**64 - 1)),
)


@st.composite
def entries(draw, min_size: int = 0) -> tuple[list[bytes], list[object]]:
    keys = draw(st.lists(st.binary(max_size=24), min_size=min_size, max_size=60,
                         unique=True).map(sorted))
    records = draw(st.lists(record_st, min_size=len(keys), max_size=len(keys)))
    return keys, records


def block_view(b: object) -> dict:
    """Everything observable about a decoded block."""
    n = len(b)  # type: ignore[arg-type]
    return {
        "len": n,
        "keys": list(b.keys),  # type: ignore[attr-defined]
        "records": [b.record_at(i) for i in range(n)],  # type: ignore[attr-defined]
        "kinds": bytes(b.kinds),  # type: ignore[attr-defined]
        "values": bytes(b.values),  # type: ignore[attr-defined]
        "value_ends": list(b.value_ends),  # type: ignore[attr-defined]
        "expiries": None if b.expiries is None else list(b.expiries),  # type: ignore[attr-defined]
        "where": b.where,  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize("twin", ["pure", "compiled"])
def test_a_block_over_a_buffer_rewritten_after_decoding_reads_only_inside_it(twin: str) -> None:
    # A block decoded over a memoryview (a direct reader's slice of a file's memory map) keeps
    # that buffer. If the bytes under it change afterwards (a file rewritten in place by
    # something outside silt), reads may return other bytes but never read outside the block.
    decode = blk_mod.decode_block_py if twin == "pure" else C.decode_block
    keys = [b"key-%04d" % i for i in range(60)]
    records = [b"v" * (i % 7) for i in range(60)]
    framed = bytearray(blk_mod.frame(blk_mod.encode_block_py(keys, records),
                                     blk_mod.COMPRESSION_NONE))
    blk = decode(memoryview(framed), "obj", 0)
    assert [blk.get(k) for k in keys] == records
    def outcome(read):  # a value, or the corruption error a damaged kind byte gives
        try:
            return read()
        except CorruptionError as exc:
            return exc

    for fill in (0x00, 0x7F, 0xFF):
        framed[:] = bytes([fill]) * len(framed)  # every offset, kind and key byte rewritten
        got = [outcome(lambda k=k: blk.get(k)) for k in keys]
        assert all(isinstance(r, CorruptionError) or r is MISSING or r is None
                   or len(r) <= len(framed) for r in got)
        if twin == "pure":
            assert got == records  # the pure twin decoded a copy
        assert len(blk.keys) == len(keys)
        assert [len(k) for k in blk.keys] == [len(k) for k in keys]  # the checked offsets
        listed = outcome(lambda: list(blk.items_from(None, None)))
        assert isinstance(listed, CorruptionError) or len(listed) == len(keys)


def test_block_charge_is_what_each_twin_holds() -> None:
    # The one difference between the twins' blocks: what the cache charges for one, the memory
    # each implementation holds for it (measured by RSS over thousands of cached 8 KiB blocks:
    # compiled ~payload + 1.0 KiB for 66 entries, pure ~payload + 6.7 KiB with its index; the
    # compiled block keeps an 8-byte prefix per entry, and a checked copy of its 2 x 4-byte
    # offsets when its buffer is not an immutable ``bytes``).
    for n in (0, 1, 66, 500):
        keys = [b"%08d" % i for i in range(n)]
        payload = blk_mod.encode_block_py(keys, [b"v" * 100] * n)
        assert blk_mod.Block_py(payload).charge == len(payload) + 48 * n + 200
        assert C.Block(payload).charge == len(payload) + 8 * n + 640
        framed = blk_mod.frame(payload, blk_mod.COMPRESSION_NONE)
        mapped = C.decode_block(memoryview(bytearray(framed)), "obj", 0)
        assert mapped.charge == len(payload) + 16 * n + 640


# --- selection ------------------------------------------------------------------------------------
def test_speedups_reports_every_accelerated_module() -> None:
    report = silt.speedups()
    assert set(report) == {"silt.sst.bloom", "silt.sst.block", "silt.sst.builder",
                           "silt.sst.reader", "silt.sst.tail", "silt.sst.probe", "silt.merge",
                           "silt.memtable", "silt.cache", "silt.tiers.blockread",
                           "silt.tiers.fdcache", "silt.metrics"}
    forced_pure = os.environ.get("SILT_NO_EXTENSIONS", "") not in ("", "0")
    assert all(v is (not forced_pure) for v in report.values())
    assert (blk_mod.Block is C.Block) is (not forced_pure)


def test_accelerate_keeps_pure_twins_and_swaps_compiled(monkeypatch) -> None:
    from silt import _ext

    for name in _ext.ACCELERATED:  # every module keeps each twin reachable as <name>_py
        mod = importlib.import_module(name)
        twins = [n[:-3] for n in vars(mod) if n.endswith("_py")]
        assert twins, name
        for n in twins:
            want = getattr(C, n) if mod.COMPILED else getattr(mod, f"{n}_py")
            assert getattr(mod, n) is want, (name, n)
    monkeypatch.delenv("SILT_NO_EXTENSIONS", raising=False)
    ns: dict = {"bloom_hash": bloom_mod.bloom_hash_py, "BlockCache": object}
    assert _ext.accelerate(ns, ["bloom_hash", "BlockCache"]) is True
    assert ns["bloom_hash"] is C.bloom_hash and ns["BlockCache"] is C.BlockCache
    assert ns["bloom_hash_py"] is bloom_mod.bloom_hash_py and ns["BlockCache_py"] is object
    monkeypatch.setenv("SILT_NO_EXTENSIONS", "1")
    ns = {"live": merge.live_py}
    assert _ext.accelerate(ns, ("live",)) is False
    assert ns == {"live": merge.live_py, "live_py": merge.live_py}


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items()
            if k not in ("SILT_NO_EXTENSIONS", "SILT_REQUIRE_EXTENSIONS")}
    full.update(env)
    src = os.path.dirname(os.path.dirname(silt.__file__))
    full["PYTHONPATH"] = src + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                          timeout=60)


def test_env_switches() -> None:
    pure = _run("import silt; print(sorted(set(silt.speedups().values())))",
                SILT_NO_EXTENSIONS="1")
    assert pure.returncode == 0 and pure.stdout.strip() == "[False]", pure.stderr
    comp = _run("import silt; print(sorted(set(silt.speedups().values())))",
                SILT_REQUIRE_EXTENSIONS="1")
    assert comp.returncode == 0 and comp.stdout.strip() == "[True]", comp.stderr
    # A missing build: an error with a clear message when required, pure Python otherwise.
    hide = "import sys; sys.modules['silt._speedups'] = None; import silt; print(silt.speedups())"
    missing = _run(hide, SILT_REQUIRE_EXTENSIONS="1")
    assert missing.returncode != 0
    assert "ImportError: SILT_REQUIRE_EXTENSIONS=1" in missing.stderr
    assert "pip install ./packages/core" in missing.stderr
    fallback = _run(hide)
    assert fallback.returncode == 0 and "True" not in fallback.stdout


# --- hashing and bloom filters --------------------------------------------------------------------
@FAST
@given(st.binary(max_size=300))
def test_crc32_and_bloom_hash(data: bytes) -> None:
    assert C.crc32(data) == zlib.crc32(data)
    assert C.bloom_hash(data) == bloom_mod.bloom_hash_py(data)


@FAST
@given(st.binary(max_size=20000), st.integers(0, 2**32 - 1), st.integers(0, 64))
def test_block_checksums_are_zlibs_crc32_whichever_implementation(
    data: bytes, running: int, cut: int
) -> None:
    from silt import checksum

    assert checksum.crc32(data) == zlib.crc32(data)
    assert checksum.crc32(data, running) == zlib.crc32(data, running)
    view = memoryview(data)[cut:]
    assert checksum.crc32(view) == zlib.crc32(view)


def test_the_fast_checksum_is_installed() -> None:
    from silt import checksum

    assert checksum.IMPLEMENTATION == "zlib-ng"  # a dependency of silt-core


@pytest.mark.skipif(sys.platform == "win32", reason="no dlsym there: lz4.block.decompress")
def test_the_compiled_decode_calls_lz4_directly() -> None:
    # lz4's own decompressor, found in the extension module behind lz4.block, writes a block
    # straight into the bytes the compiled block keeps; lz4.block.decompress stays the path
    # for any stream it rejects (one of each, byte-identical to the pure twin's decode).
    assert C.lz4_decompresses_in_place()
    keys = [b"k%05d" % i for i in range(300)]
    payload = blk_mod.encode_block_py(keys, [b"value" * 8] * 300)
    framed = blk_mod.frame(payload, blk_mod.COMPRESSION_LZ4)
    c = C.decode_block(framed, "o", 0)
    assert block_view(c) == block_view(blk_mod.decode_block_py(framed, "o", 0))
    body = framed[:-blk_mod.TRAILER_SIZE]
    size = int.from_bytes(body[:4], "little")
    for damaged in (
        (size + 1).to_bytes(4, "little") + body[4:],  # one byte short of what it says
        body[:4] + bytes([0xF0]) + bytes(len(body) - 5),  # a literal run past the stream
    ):
        code = blk_mod.COMPRESSION_LZ4
        bad = damaged + blk_mod.TRAILER.pack(code, zlib.crc32(bytes((code,)), zlib.crc32(damaged)))
        errors = []
        for decode in (C.decode_block, blk_mod.decode_block_py):
            with pytest.raises(CorruptionError, match="lz4 stream is invalid") as exc:
                decode(bad, "o", 0)
            errors.append(str(exc.value))
        assert errors[0] == errors[1]


@FAST
@given(st.lists(st.binary(max_size=20), max_size=200, unique=True), st.integers(0, 64),
       st.lists(st.binary(max_size=20), max_size=50))
def test_bloom_identical(keys: list[bytes], bits: int, probes: list[bytes]) -> None:
    data = bloom_mod.build_bloom_py(keys, bits)
    assert C.build_bloom(keys, bits) == data
    py, c = bloom_mod.BloomFilter_py(data), C.BloomFilter(data)
    assert py.nbytes == c.nbytes
    for key in keys:
        assert py.may_contain(key) and c.may_contain(key)
    for key in probes:
        h = bloom_mod.bloom_hash_py(key)
        assert py.may_contain(key) == c.may_contain(key) == c.may_contain_hash(h)


@FAST
@given(st.lists(st.binary(max_size=20), max_size=300, unique=True), st.integers(0, 64),
       st.lists(st.integers(0, 2**32 - 1), max_size=50))
def test_blocked_bloom_identical(keys: list[bytes], bits: int, hashes: list[int]) -> None:
    data = bloom_mod.build_blocked_bloom_py(keys, bits)
    assert C.build_blocked_bloom(keys, bits) == data
    assert len(data) == 1 + 64 * bloom_mod.blocked_lines(len(keys), bits)
    py, c = bloom_mod.BloomFilter_py(data, True), C.BloomFilter(data, True)
    assert py.blocked and c.blocked and py.nbytes == c.nbytes == len(data)
    for key in keys:
        assert py.may_contain(key) and c.may_contain(key)
    for h in hashes:
        assert py.may_contain_hash(h) == c.may_contain_hash(h)


@FAST
@given(st.binary(max_size=20), st.integers(1, 40), st.integers(1, 64))
def test_blocked_bloom_sets_bits_of_one_line(key: bytes, copies: int, bits: int) -> None:
    """Every probe of a key lands in the one 64-byte line its hash picks (a lookup reads one
    cache line), whichever twin writes."""
    for build in (bloom_mod.build_blocked_bloom_py, C.build_blocked_bloom):
        data = build([key] * copies, bits)
        lines = bloom_mod.blocked_lines(copies, bits)
        line = (bloom_mod.bloom_hash_py(key) * lines) >> 32
        touched = {i // 64 for i, byte in enumerate(data[1:]) if byte}
        assert touched == {line}
        assert 1 <= sum(bin(b).count("1") for b in data[1:]) <= bloom_mod.probes_for(bits)


@FAST
@given(st.binary(min_size=1, max_size=200), st.lists(st.integers(0, 2**32 - 1), max_size=8))
def test_blocked_bloom_twins_agree_on_any_bytes(data: bytes, hashes: list[int]) -> None:
    """Bytes a crafted SST may hold: both twins refuse a bit array of partial lines, or answer
    alike."""
    outcomes = []
    for cls in (bloom_mod.BloomFilter_py, C.BloomFilter):
        try:
            f = cls(data, True)
        except ValueError as exc:
            outcomes.append(str(exc))
            continue
        outcomes.append([f.may_contain_hash(h) for h in hashes])
    assert outcomes[0] == outcomes[1]
    assert isinstance(outcomes[0], str) == ((len(data) - 1) % 64 != 0 or len(data) == 1)


# --- blocks ---------------------------------------------------------------------------------------
@FAST
@given(entries(), st.lists(st.binary(max_size=24), max_size=20),
       st.binary(max_size=24) | st.none(), st.binary(max_size=24) | st.none())
def test_block_identical(kr, probes: list[bytes], start, end) -> None:
    keys, records = kr
    payload = blk_mod.encode_block_py(keys, records)
    assert C.encode_block(keys, records) == payload
    py, c = blk_mod.Block_py(payload, "o", 9), C.Block(payload, "o", 9)
    assert_blocks_agree(py, c, keys, probes, [(start, end)])


def assert_blocks_agree(py: object, c: object, keys: list[bytes], probes: list[bytes],
                        ranges: list[tuple[bytes | None, bytes | None]]) -> None:
    """The pure block ``py`` and the compiled ``c`` of the same payload show the same view,
    find the same record for every key and probe, list the same entries in each range and
    answer a sorted lookup of every other key and the probes alike."""
    assert block_view(py) == block_view(c)
    for key in keys + probes:
        assert c.get(key) == py.get(key)  # type: ignore[attr-defined]
    for lo, hi in ranges:
        assert list(py.items_from(lo, hi)) == list(c.items_from(lo, hi))  # type: ignore[attr-defined]
    found_py: dict = {}
    found_c: dict = {}
    miss_py: list = []
    miss_c: list = []
    probe = sorted(set(keys[::2] + probes))
    probe_mod.lookup_many_py(py, probe, found_py, miss_py)
    C.lookup_many(c, probe, found_c, miss_c)
    assert (found_py, miss_py) == (found_c, miss_c)


@st.composite
def prefixed_entries(draw) -> tuple[list[bytes], list[object], list[bytes]]:
    """A block whose keys share a long prefix (a key group's and a type's tag, as a Spark
    shard's keys do), and probes around it: the prefix cut short, equal, exceeded, and changed
    one byte up or down at any position."""
    prefix = draw(st.binary(min_size=1, max_size=20))
    keys = draw(st.lists(st.binary(max_size=6).map(lambda s: prefix + s), min_size=1,
                         max_size=60, unique=True).map(sorted))
    records = draw(st.lists(record_st, min_size=len(keys), max_size=len(keys)))
    probes = [prefix[:j] for j in range(len(prefix) + 1)] + [prefix + b"\x00", prefix + b"\xff"]
    for j in range(len(prefix)):
        for d in (-1, 1):
            if 0 <= prefix[j] + d <= 255:
                probes.append(prefix[:j] + bytes([prefix[j] + d]) + prefix[j + 1:])
    probes += draw(st.lists(st.binary(max_size=6).map(lambda s: prefix + s), max_size=10))
    return keys, records, probes


@FAST
@given(prefixed_entries(), st.integers(0, 100), st.integers(0, 100))
def test_blocks_of_keys_with_a_common_prefix_identical(kpr, a: int, b: int) -> None:
    """The compiled block searches past its keys' common prefix: every probe around that
    prefix finds what the pure twin finds, in a bytes payload and in a mapped buffer."""
    keys, records, probes = kpr
    payload = blk_mod.encode_block_py(keys, records)
    py = blk_mod.Block_py(payload, "o", 9)
    framed = blk_mod.frame(payload, blk_mod.COMPRESSION_NONE)
    bounds = sorted(probes)
    start, end = bounds[a % len(bounds)], bounds[b % len(bounds)]
    for c in (C.Block(payload, "o", 9), C.decode_block(memoryview(bytearray(framed)), "o", 9)):
        assert_blocks_agree(py, c, keys, probes, [(start, end), (start, None), (None, end)])


@pytest.mark.parametrize("middle", [b"pfx", b"pf", b"pfw\xff", b"pfy", b"pfx0"])
def test_a_block_whose_middle_key_leaves_the_common_prefix_is_corrupt(middle: bytes) -> None:
    # The first and last keys share "pfx"; a middle key that does not (shorter, below or
    # above it) breaks the order, and both twins say so; "pfx0" keeps the order: readable.
    keys = [b"pfx", middle, b"pfx1"]
    payload = blk_mod.encode_block_py(keys, [b"v", b"w", b"x"])
    for cls in (blk_mod.Block_py, C.Block):
        if middle == b"pfx0":
            assert cls(payload, "o", 0).get(middle) == b"w"
        else:
            with pytest.raises(CorruptionError, match="increasing order"):
                cls(payload, "o", 0)


def _decode(cls: type, payload: bytes) -> object:
    try:
        b = cls(payload, "obj", 3)
    except CorruptionError:
        return "corrupt"
    out = []
    for i in range(len(b)):  # type: ignore[arg-type]
        try:
            out.append(b.record_at(i))  # type: ignore[attr-defined]
        except CorruptionError:
            out.append("bad kind")
    return b.keys, out  # type: ignore[attr-defined]


@FAST
@given(entries(min_size=1), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                     min_size=1, max_size=4),
       st.integers(-8, 8))
def test_damaged_blocks_agree(kr, flips, cut: int) -> None:
    """Damaged payloads (never seen behind a checksum) are rejected or read alike."""
    payload = bytearray(blk_mod.encode_block_py(*kr))
    for pos, val in flips:
        payload[pos % len(payload)] = val
    if cut < 0:
        del payload[cut:]
    elif cut:
        payload += bytes(cut)
    data = bytes(payload)
    assert _decode(blk_mod.Block_py, data) == _decode(C.Block, data)


@FAST
@given(st.binary(max_size=64))
def test_garbage_blocks_agree(data: bytes) -> None:
    assert _decode(blk_mod.Block_py, data) == _decode(C.Block, data)


def _framed_view(decode, framed: object) -> object:
    try:
        b = decode(framed)
    except CorruptionError as exc:
        return ("corrupt", exc.object_name, exc.offset, str(exc))
    return block_view(b)


@FAST
@given(entries(), st.sampled_from([0, 1]), st.booleans(),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
       st.integers(-8, 8))
def test_decode_block_identical(kr, compression: int, compressible: bool, flips, cut: int) -> None:
    """The compiled decode_block (checksum, lz4, decode over the bytes read) against the pure
    unframe then Block: the same block or the same error, damaged frames included."""
    keys, records = kr
    if compressible:
        records = [b"z" * 50 if r.__class__ is bytes else r for r in records]
    framed = bytearray(blk_mod.frame(blk_mod.encode_block_py(keys, records), compression))
    for pos, val in flips:
        framed[pos % len(framed)] = val
    if cut < 0:
        del framed[cut:]
    elif cut:
        framed += bytes(cut)
    data = bytes(framed)

    def pure(f: object) -> object:
        return blk_mod.Block_py(blk_mod.unframe(f, "obj", 3), "obj", 3)  # type: ignore[arg-type]

    def compiled(f: object) -> object:
        return C.decode_block(f, "obj", 3)

    want = _framed_view(pure, data)
    assert _framed_view(compiled, data) == want
    assert _framed_view(compiled, memoryview(data)) == want
    assert _framed_view(compiled, memoryview(b"pad" + data)[3:]) == want  # a slice of a map
    assert _framed_view(compiled, memoryview(data + data)[::2]) == _framed_view(
        compiled, bytes(memoryview(data + data)[::2]))  # not contiguous: read as a copy
    assert _framed_view(lambda f: blk_mod.decode_block_py(f, "obj", 3), data) == want
    if not isinstance(want, tuple):
        payload = blk_mod.unframe(data, "obj", 3)
        assert C.decode_block(data, "obj", 3).charge == C.Block(payload).charge


@FAST
@given(st.binary(max_size=64), st.integers(0, 3))
def test_decode_block_of_garbage_with_a_valid_checksum_agrees(body: bytes, code: int) -> None:
    tail = bytes((code,))
    data = body + tail + zlib.crc32(body + tail).to_bytes(4, "little")
    want = _framed_view(lambda f: blk_mod.Block_py(blk_mod.unframe(f, "obj", 3), "obj", 3), data)
    assert _framed_view(lambda f: C.decode_block(f, "obj", 3), data) == want


# --- SSTs -----------------------------------------------------------------------------------------
def _build(impl: str, keys, records, s: silt.Settings) -> tuple[bytes, object]:
    names = ("encode_block", "build_blocked_bloom", "split_blocks")
    saved = {n: getattr(builder_mod, n) for n in names}
    if impl == "py":
        new = (blk_mod.encode_block_py, bloom_mod.build_blocked_bloom_py,
               builder_mod.split_blocks_py)
    else:
        new = (C.encode_block, C.build_blocked_bloom, C.split_blocks)
    try:
        for n, f in zip(names, new):
            setattr(builder_mod, n, f)
        return builder_mod.build_sst("01ARZ3NDEKTSV4RRFFQ69G5FAV", keys, records, s,
                                     created_ms=1234)
    finally:
        for n, f in saved.items():
            setattr(builder_mod, n, f)


@FAST
@given(entries(min_size=1), st.sampled_from([64, 256, 4096]), st.sampled_from([0, 1, 10, 33]),
       st.sampled_from(["none", "lz4"]))
def test_sst_identical(kr, block_bytes: int, bits: int, compression: str) -> None:
    keys, records = kr
    s = silt.Settings(block_bytes=block_bytes, bloom_bits_per_key=bits, compression=compression)
    assert C.split_blocks(keys, records, block_bytes) == builder_mod.split_blocks_py(
        keys, records, block_bytes)
    data_py, info_py = _build("py", keys, records, s)
    data_c, info_c = _build("c", keys, records, s)
    assert data_py == data_c
    assert info_py == info_c


def test_sst_format_is_pinned() -> None:
    """A fixed input gives fixed bytes (no compression, whose output may vary by lz4 version):
    docs/format.md must not change, whichever implementation writes."""
    rng = random.Random(7)
    keys = sorted({rng.randbytes(rng.randrange(0, 30)) for _ in range(5000)})
    recs: list[object] = []
    for _ in keys:
        c = rng.random()
        recs.append(rng.randbytes(rng.randrange(0, 200)) if c < 0.7 else None if c < 0.85
                    else (rng.randbytes(rng.randrange(0, 50)), rng.randrange(0, 2**63)))
    # SST format 2 (blocked bloom filters); tests/test_sst_formats.py pins format 1's bytes
    want = {0: "ba95448f67477537", 10: "15247a12d17bd4da", 3: "6c0e8b35799a6b76"}
    for bits, digest in want.items():
        s = silt.Settings(block_bytes=4096, compression="none", bloom_bits_per_key=bits)
        for impl in ("py", "c"):
            data, _ = _build(impl, keys, recs, s)
            assert hashlib.sha256(data).hexdigest()[:16] == digest, (impl, bits)


class _FakeReader:
    """Just what RangeIter needs from an SstReader: a tail and decoded blocks, read in runs of
    two (the reads are recorded)."""

    class _Tail:
        def __init__(self, last_keys: list[bytes]) -> None:
            self.last_keys = last_keys

    def __init__(self, payloads: list[bytes], cls: type) -> None:
        self.blocks = [cls(p) for p in payloads]
        self.tail = self._Tail([b.keys[-1] for b in self.blocks])
        self.loads: list[int] = []

    def cached_block(self, i: int) -> object:
        return None

    def run_end(self, first: int, max_bytes: int, limit: int | None = None) -> int:
        return max(first + 1, min(first + 2, len(self.blocks) if limit is None else limit))

    def read_run(self, first: int, stop: int, fill_cache: bool = True) -> list[object]:
        self.loads.append((first, stop))
        return self.blocks[first:stop]


@FAST
@given(entries(min_size=1), st.integers(1, 8), st.binary(max_size=24) | st.none(),
       st.binary(max_size=24) | st.none(), st.lists(st.binary(max_size=24), max_size=40),
       st.integers(0, 40))
def test_sst_reads_identical(kr, per_block: int, start, end, probes, bits: int) -> None:
    keys, records = kr
    payloads = [blk_mod.encode_block_py(keys[i:i + per_block], records[i:i + per_block])
                for i in range(0, len(keys), per_block)]
    fake_py = _FakeReader(payloads, blk_mod.Block_py)
    fake_c = _FakeReader(payloads, C.Block)
    assert list(reader_mod.RangeIter_py(fake_py, start, end)) == list(
        C.RangeIter(fake_c, start, end))
    assert fake_py.loads == fake_c.loads  # the same blocks are read
    lazy = _FakeReader(payloads, C.Block)
    it = C.RangeIter(lazy, start, end)
    assert iter(it) is it and lazy.loads == []  # nothing is read before the first item
    last_keys = fake_py.tail.last_keys
    bloom = bloom_mod.build_bloom_py(keys, bits)
    bf_py, bf_c = bloom_mod.BloomFilter_py(bloom), C.BloomFilter(bloom)
    for key in keys + probes:
        h = bloom_mod.bloom_hash_py(key)
        want = reader_mod.find_block_py(bf_py, last_keys, key)
        assert reader_mod.find_block_py(bf_py, last_keys, key, h) == want
        assert C.find_block(bf_c, last_keys, key) == want == C.find_block(bf_c, last_keys, key, h)
        assert C.find_block(None, last_keys, key) == reader_mod.find_block_py(None, last_keys, key)
    probe = sorted(set(keys + probes))
    lo = bisect_left(probe, keys[0])
    hi = bisect_left(probe, keys[-1] + b"\x00")
    assert probe_mod.plan_probe_py(probe, lo, hi, bf_py, last_keys) == C.plan_probe(
        probe, lo, hi, bf_c, last_keys)
    assert probe_mod.plan_probe_py(probe, 0, len(probe), None, last_keys) == C.plan_probe(
        probe, 0, len(probe), None, last_keys)


# keys that often share their first 8 bytes (the compiled index compares whole keys only then)
tied_keys_st = st.lists(
    st.sampled_from([b"", b"a" * 8, b"a" * 7 + b"b", b"\xff" * 8]).flatmap(
        lambda p: st.binary(max_size=4).map(lambda s: p + s)) | st.binary(max_size=10),
    max_size=80)


@FAST
@given(tied_keys_st, tied_keys_st, st.integers(-2, 90))
def test_key_index_bisects_like_the_last_keys(keys: list[bytes], probes: list[bytes],
                                              lo: int) -> None:
    """The compiled block index (8-byte prefixes, whole keys on ties) finds the same block as
    a bisect of the last keys, from any start; the pure twin has none (it bisects the list)."""
    from silt.sst import tail as tail_mod

    keys = sorted(set(keys))
    index = C.key_index(keys)
    assert len(index) == len(keys) and tail_mod.key_index_py(keys) is None
    for probe in probes + keys + [k + b"\x00" for k in keys]:
        assert index.lower_bound(probe) == bisect_left(keys, probe)
        assert index.lower_bound(probe, lo) == bisect_left(keys, probe, max(lo, 0))
    with pytest.raises(TypeError):
        C.key_index([b"a", "b"])


@FAST
@given(st.lists(st.dictionaries(st.binary(min_size=1, max_size=3), record_st, min_size=1,
                                max_size=30), min_size=1, max_size=4),
       st.lists(st.binary(max_size=4), max_size=30), st.sampled_from([0, 10]),
       st.booleans())
def test_get_from_identical(dicts: list[dict], probes: list[bytes], bits: int,
                            cached: bool) -> None:
    from silt.cache import BlockCache
    from silt.tiers.memory import MemoryStore

    store = MemoryStore()
    cache = BlockCache(1 << 20) if cached else None
    s = silt.Settings(block_bytes=64, bloom_bits_per_key=bits)
    readers = []
    for n, d in enumerate(dicts):
        keys = sorted(d)
        data, info = builder_mod.build_sst(f"sst{n}", keys, [d[k] for k in keys], s)
        store.put(f"sst{n}", data)
        readers.append(reader_mod.SstReader(store, f"sst{n}", info, cache))
    for key in probes + [k for d in dicts for k in d]:
        want = reader_mod.get_from_py(readers, key)
        assert C.get_from(readers, key) == want
        assert C.get_from(readers, key, bloom_mod.bloom_hash_py(key)) == want


@FAST
@given(st.lists(st.dictionaries(st.binary(min_size=1, max_size=3), record_st, min_size=1,
                                max_size=20), max_size=6),
       st.lists(st.lists(st.dictionaries(st.binary(min_size=1, max_size=3), record_st,
                                         min_size=1, max_size=20), max_size=3), max_size=3),
       st.lists(st.binary(max_size=4), max_size=30), st.sampled_from([0, 10]), st.booleans())
def test_get_levels_identical(l0_dicts: list[dict], level_runs: list[list[dict]],
                              probes: list[bytes], bits: int, cached: bool) -> None:
    # L0 SSTs overlap (newest first); each level is a run of SSTs with disjoint key ranges,
    # made from its dicts by cutting their union into consecutive pieces.
    from silt.cache import BlockCache
    from silt.tiers.memory import MemoryStore
    from silt.view import Level

    store = MemoryStore()
    cache = BlockCache(1 << 20) if cached else None
    s = silt.Settings(block_bytes=64, bloom_bits_per_key=bits)
    names = iter(range(10**6))

    def reader(d: dict) -> object:
        name = f"sst{next(names)}"
        keys = sorted(d)
        data, info = builder_mod.build_sst(name, keys, [d[k] for k in keys], s)
        store.put(name, data)
        return reader_mod.SstReader(store, name, info, cache)

    l0 = [reader(d) for d in l0_dicts]
    levels = []
    model = [dict(d) for d in l0_dicts]
    for run in level_runs:
        union: dict = {}
        for d in run:
            union.update(d)
        keys = sorted(union)
        cut = max(1, len(keys) // max(1, len(run)))
        pieces = [dict((k, union[k]) for k in keys[i:i + cut]) for i in range(0, len(keys), cut)]
        levels.append(Level([reader(p) for p in pieces if p]))
        model.append(union)
    bounds = C.key_bounds(l0, levels)  # with the L0 SSTs' ranges and filters beside
    pure_bounds = reader_mod.key_bounds_py(l0, levels)
    stored = [k for d in model for k in d]
    assert pure_bounds == ((min(stored), max(stored)) if stored else None)
    assert (bounds is None) is (pure_bounds is None)
    if bounds is not None:
        assert tuple(bounds) == pure_bounds == (bounds[-2], bounds[-1]) and bounds == pure_bounds
    edges = [b"", b"\xff" * 5] + [k + b"\x00" for k in stored] + [k[:-1] for k in stored]
    for key in probes + stored + edges:
        want = next((d[key] for d in model if key in d), MISSING)
        assert reader_mod.get_levels_py(l0, levels, key) == want
        assert reader_mod.get_levels_py(l0, levels, key, -1, pure_bounds) == want
        assert C.get_levels(l0, levels, key) == want
        assert C.get_levels(l0, levels, key, bloom_mod.bloom_hash_py(key)) == want
        assert C.get_levels(l0, levels, key, -1, bounds) == want  # twice: filters taken
        assert C.get_levels(l0, levels, key, -1, bounds) == want
        assert C.get_levels(l0, levels, key, -1, pure_bounds) == want
        assert C.get_levels(list(l0), levels, key, -1, bounds) == want  # built for another


class _PublicReader:
    """An SstReader seen through its public names only: what the compiled twin may reach."""

    __slots__ = ("_reader",)

    def __init__(self, reader: object) -> None:
        self._reader = reader

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(f"the compiled twin reached SstReader's private {name!r}")
        return getattr(self._reader, name)


@pytest.mark.parametrize("cached", [False, True])
def test_compiled_get_from_reaches_only_public_reader_names(cached: bool) -> None:
    from silt.cache import BlockCache
    from silt.tiers.memory import MemoryStore

    rnd = random.Random(7)
    store = MemoryStore()
    cache = BlockCache(1 << 20) if cached else None
    s = silt.Settings(block_bytes=64, bloom_bits_per_key=10)
    readers = []
    for n in range(3):
        keys = sorted({rnd.randbytes(3) for _ in range(40)})
        data, info = builder_mod.build_sst(f"sst{n}", keys, [k * 2 for k in keys], s)
        store.put(f"sst{n}", data)
        readers.append(reader_mod.SstReader(store, f"sst{n}", info, cache))
    public = [_PublicReader(r) for r in readers]
    probes = [rnd.randbytes(3) for _ in range(100)]
    for key in probes + [k for r in readers for k in r.tail.last_keys]:
        want = reader_mod.get_from_py(readers, key)
        assert C.get_from(public, key) == want
    fresh = [_PublicReader(reader_mod.SstReader(store, r.name, r.info, None)) for r in readers]
    key = readers[0].tail.last_keys[0]
    assert C.get_from(fresh, key) == key * 2  # the tail is fetched through the public property


# --- merging --------------------------------------------------------------------------------------
sources_st = st.lists(st.dictionaries(st.binary(max_size=6), record_st, max_size=25), max_size=6)


@FAST
@given(sources_st, st.integers(0, 2**64))
def test_merge_and_live_identical(dicts: list[dict], now: int) -> None:
    def srcs() -> list:
        return [iter(sorted(d.items())) for d in dicts]

    merged = list(merge.merge_newest_first_py(srcs()))
    assert list(C.merge_newest_first(srcs())) == merged
    assert list(C.live(iter(merged), now)) == list(merge.live_py(iter(merged), now))
    assert list(C.live(C.merge_newest_first(srcs()), now)) == list(
        merge.live_py(merge.merge_newest_first_py(srcs()), now))
    found = dict(merged)
    keys = [k for d in dicts for k in d] + [b"absent"]
    assert C.visible_many(keys, found, now) == merge.visible_many_py(keys, found, now)


@FAST
@given(st.lists(st.dictionaries(st.binary(max_size=2), st.binary(max_size=2), max_size=10),
                min_size=7, max_size=40))
def test_merge_many_sources_identical(dicts: list[dict]) -> None:
    """Past the sizes above: a tree of any shape (7 to 40 leaves, not only powers of two),
    sources of every length, ending at different times, sharing keys."""
    def srcs() -> list:
        return [iter(sorted(d.items())) for d in dicts]

    assert list(C.merge_newest_first(srcs())) == list(merge.merge_newest_first_py(srcs()))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 33])
def test_merge_newest_wins_among_many(n: int) -> None:
    """Source ``s`` holds the keys ``j`` with ``j % (s + 2) != 1`` (sources that start, skip
    and end at different keys, most keys in several): each key comes out once, in order, with
    the record of the newest (lowest) source holding it."""
    keys = [b"k%03d" % j for j in range(90)]
    held = [[j for j in range(len(keys)) if j % (s + 2) != 1] for s in range(n)]
    want = [(keys[j], b"%d" % min(s for s in range(n) if j in held[s]))
            for j in range(len(keys)) if any(j in h for h in held)]
    for impl in (C.merge_newest_first, merge.merge_newest_first_py):
        out = list(impl([iter([(keys[j], b"%d" % s) for j in held[s]]) for s in range(n)]))
        assert out == want


def test_merge_propagates_source_errors() -> None:
    def broken():
        yield (b"a", b"1")
        raise CorruptionError("x", 1, "boom")

    for impl in (C.merge_newest_first, merge.merge_newest_first_py):
        with pytest.raises(CorruptionError):
            list(impl([broken(), iter([(b"b", b"2")])]))
        # lazy, like the generator: nothing is pulled from a source before the first next()
        pulled: list[int] = []

        def source(n: int, pulled: list[int] = pulled):
            pulled.append(n)
            yield (b"k", b"v")

        it = impl([source(1), source(2)])
        assert pulled == []
        assert next(it) == (b"k", b"v") and sorted(pulled) == [1, 2]


# --- batch writes ---------------------------------------------------------------------------------
item_st = st.one_of(st.binary(max_size=12), st.just(bytearray(b"ba")), st.just("str"),
                    st.none())


@FAST
@given(st.lists(st.tuples(item_st, item_st), max_size=30), st.integers(0, 12),
       st.integers(0, 2000))
def test_write_helpers_identical(pairs, limit: int, budget: int) -> None:
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    assert C.check_pairs(keys, values, limit, limit) == mt.check_pairs_py(keys, values, limit,
                                                                          limit)
    assert C.check_pairs(keys, values[:-1], 8, 8) == mt.check_pairs_py(keys, values[:-1], 8, 8)
    assert C.check_keys_plain(keys, limit) == mt.check_keys_plain_py(keys, limit)
    assert C.check_keys_plain(values, 1 << 20) == mt.check_keys_plain_py(values, 1 << 20)
    ops = [(k, v, None) for k, v in pairs]
    ok = C.check_ops(ops, limit, limit)
    assert ok == mt.check_ops_py(ops, limit, limit)
    if ok:
        d_py: dict = {}
        d_c: dict = {}
        assert C.apply_ops(d_c, ops) == mt.apply_ops_py(d_py, ops)
        assert d_py == d_c
    if C.check_pairs(keys, values, 1 << 20, 1 << 20) < 0:
        d_py, d_c = {}, {}
        start = len(keys) // 3
        assert C.insert_pairs(d_c, keys, values, start, 5, budget) == mt.insert_pairs_py(
            d_py, keys, values, start, 5, budget)
        assert d_py == d_c


prefixed_key_st = st.tuples(st.sampled_from([b"", b"user:", b"user:000", b"\x00" * 8, b"\xff" * 9]),
                            st.binary(max_size=4)).map(lambda t: t[0] + t[1])


@FAST
@given(st.dictionaries(prefixed_key_st, record_st, max_size=300),
       st.lists(prefixed_key_st, max_size=30))
def test_sorted_items_and_split_found_identical(data: dict, probes: list[bytes]) -> None:
    assert C.sorted_items(data) == mt.sorted_items_py(data)
    keys = sorted(set(probes) | set(list(data)[::3]))
    found_py: dict = {}
    found_c: dict = {}
    assert C.split_found(keys, data, found_c) == mt.split_found_py(keys, data, found_py)
    assert found_py == found_c
    m = mt.Memtable()
    for k, r in data.items():
        m.put(k, r)
    assert m.sorted_items() == mt.sorted_items_py(data)
    assert m.sorted_keys() == sorted(data)


@FAST
@given(entries(min_size=1), st.lists(st.binary(max_size=24), max_size=30))
def test_lookup_groups_identical(kr, probes: list[bytes]) -> None:
    keys, records = kr
    payloads = [blk_mod.encode_block_py(keys[i:i + 3], records[i:i + 3])
                for i in range(0, len(keys), 3)]
    last_keys = [blk_mod.Block_py(p).keys[-1] for p in payloads]
    probe = sorted(set(keys + probes))
    _, ids, groups = probe_mod.plan_probe_py(probe, 0, len(probe), None, last_keys)
    out = []
    for cls, fn in ((blk_mod.Block_py, probe_mod.lookup_groups_py), (C.Block, C.lookup_groups)):
        found: dict = {}
        unresolved: list = []
        fn([cls(payloads[i]) for i in ids], groups, found, unresolved)
        out.append((found, unresolved))
    assert out[0] == out[1]


# --- the block cache ------------------------------------------------------------------------------
cache_ops_st = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 6), st.integers(0, 50)),
    st.tuples(st.just("get"), st.integers(0, 6)),
    st.tuples(st.just("get_many"), st.lists(st.integers(0, 6), max_size=5)),
    st.tuples(st.just("holds"), st.lists(st.integers(0, 6), max_size=5)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("resize"), st.integers(0, 120)),
), max_size=60)


@FAST
@given(st.integers(0, 120), cache_ops_st)
def test_block_cache_identical(capacity: int, ops: list) -> None:
    from silt import cache as cache_mod

    def run(cls: type) -> list:
        c = cls(capacity)
        out = []
        for op in ops:
            if op[0] == "put":
                out.append(c.put(("sst", op[1]), f"v{op[1]}-{op[2]}", op[2]))
            elif op[0] == "get":
                out.append(c.get(("sst", op[1])))
            elif op[0] == "get_many":
                out.append(c.get_many([("sst", i) for i in op[1]]))
            elif op[0] == "holds":  # a look: no hit, no miss, no mark
                out.append(c.holds([("sst", i) for i in op[1]]))
            elif op[0] == "resize":
                out.append(c.resize(op[1]))
            else:
                out.append(c.clear())
            out.append((len(c), c.used, c.hits, c.misses, c.evictions, c.capacity))
            out.append(c.holds([("sst", i) for i in range(7)]))  # the same entries evicted
        return out

    assert run(cache_mod.BlockCache_py) == run(C.BlockCache)


# --- DB.put_many (under whichever implementation the session selected) ----------------------------
def test_put_many(url: str, small: silt.Settings) -> None:
    rng = random.Random(3)
    keys = [rng.randbytes(8) for _ in range(5000)]
    values = [rng.randbytes(rng.randrange(0, 40)) for _ in keys]
    with silt.open(url, settings=small) as db:
        db.put(keys[0], b"old")
        db.put_many(keys, values)
        assert db.stats()["pending_parts"] > 1  # a full memtable froze between items
        want = dict(zip(keys, values))
        assert db.multi_get(keys) == [want[k] for k in keys]
        assert list(db.scan()) == sorted(want.items())
        db.put_many([bytearray(b"k1"), memoryview(b"k2")], [b"v1", bytearray(b"v2")])
        assert db.multi_get([b"k1", b"k2"]) == [b"v1", b"v2"]
        db.put_many([], [])
        # validated entirely before anything is applied
        for bad_keys, bad_values, err in [
            ([b"x", "str"], [b"1", b"2"], InvalidTypeError),
            ([b"x", b"y"], [b"1", None], InvalidTypeError),
            ([b"x", b"k" * (small.max_key_bytes + 1)], [b"1", b"2"], InvalidArgumentError),
            ([b"x", b"y"], [b"1"], InvalidArgumentError),
            (b"xy", [b"1", b"2"], InvalidTypeError),
        ]:
            with pytest.raises(err):
                db.put_many(bad_keys, bad_values)
            assert db.get(b"x") is None
        version = db.commit()
    with silt.open(url, version=version) as db:
        assert db.multi_get(keys[:100]) == [want[k] for k in keys[:100]]


def test_write_batch_fast_and_slow_paths_agree(url: str, small: silt.Settings) -> None:
    rng = random.Random(4)
    keys = [rng.randbytes(6) for _ in range(3000)]
    with silt.open(url, settings=small) as db:
        fast = silt.WriteBatch()
        slow = silt.WriteBatch()
        for i, k in enumerate(keys):
            if i % 7 == 0:
                fast.delete(k)
            else:
                fast.put(k, k * 2)
            slow.put(k + b"s", k, ttl=3600 if i % 2 else None)
        db.write(fast)
        db.write(slow)
        for i, k in enumerate(keys[:300]):
            assert db.get(k) == (None if i % 7 == 0 else k * 2)
            assert db.get(k + b"s") == k


def test_write_batch_delete_many_is_deletes_in_order(url: str) -> None:
    """``delete_many(keys)`` adds what ``delete(k)`` of each key in order adds, and the DB
    applies it the same way (a later op on a key wins)."""
    keys = [b"a", b"b", b"c", b"a"]
    many = silt.WriteBatch().put(b"a", b"1").delete_many(iter(keys)).put(b"c", b"3")
    one = silt.WriteBatch().put(b"a", b"1")
    for k in keys:
        one.delete(k)
    one.put(b"c", b"3")
    assert list(many) == list(one)
    with silt.open(url) as db:
        db.put(b"b", b"0")
        db.write(many)
        assert db.multi_get([b"a", b"b", b"c"]) == [None, None, b"3"]


# --- many keys against one SST (multi_get) --------------------------------------------------------
@FAST
@given(st.lists(st.binary(max_size=12) | st.sampled_from([b"", b"a" * 9, b"a" * 8, b"a" * 10]),
                max_size=300))
def test_sorted_unique_identical(keys: list[bytes]) -> None:
    want = sorted(set(keys))
    assert probe_mod.sorted_unique_py(keys) == want == C.sorted_unique(keys)


@FAST
@given(entries(min_size=1), st.lists(st.binary(max_size=24), max_size=80),
       st.sampled_from([64, 256, 4096]), st.sampled_from([0, 1, 10]), st.booleans())
def test_probe_sst_identical(kr, probes: list[bytes], block_bytes: int, bits: int,
                             flat: bool) -> None:
    """Both twins resolve the same keys to the same records, leave the others sorted, and ask
    ``fetch`` for the same blocks; over format 2 (blocked) and format 1 (flat) filters."""
    from silt import paths
    from silt.cache import BlockCache
    from silt.tiers.memory import MemoryStore

    keys, records = kr
    s = silt.Settings(block_bytes=block_bytes, bloom_bits_per_key=bits)
    raw, info = builder_mod.build_sst(paths.new_id(), keys, records, s)
    if flat:
        raw = as_format_1(raw, keys, bits)  # the same data blocks: the same tail offset
        info = dataclasses.replace(info, size=len(raw))
    store = MemoryStore()
    store.put_if_absent("x", raw)
    query = probe_mod.sorted_unique_py(keys[::2] + probes)
    want_found = {k: r for k, r in zip(keys, records) if k in set(query)}
    outcomes = []
    for probe in (probe_mod.probe_sst_py, C.probe_sst):
        reader = reader_mod.SstReader(store, "x", info, BlockCache(1 << 20))
        asked: list[list[int]] = []

        def fetch(r, ids, reader=reader, asked=asked):
            assert r is reader
            asked.append(list(ids))
            return [r.block(i) for i in ids]

        found: dict = {}
        rest = probe(reader, query, found, fetch)
        assert found == want_found
        assert rest == [k for k in query if k not in want_found]
        assert len(asked) <= 1 and all(asked[0] == sorted(set(asked[0])) for _ in asked)
        outcomes.append((found, rest, asked))
    assert outcomes[0] == outcomes[1]
