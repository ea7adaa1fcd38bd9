"""Fuzzing the metadata parsers and SST decoders: damaged or crafted bytes are a CorruptionError.

Inputs start from real encoded objects (a manifest with levels, references and meta; SSTs with
puts, tombstones and expiring entries, lz4 and uncompressed) and are mutated: bytes flipped,
inserted or deleted, JSON values spliced, regions rewritten behind freshly computed checksums,
or replaced by random bytes. The contract, for the manifest parser, the SST tail (footer, index,
bloom filter, properties) and the block decoders:

* the result is a :class:`~silt.errors.CorruptionError`, never another exception, never a hang
  (every example runs under a hypothesis deadline);
* never wrong data: an SST whose stored bytes were damaged (checksums left as they were) either
  raises ``CorruptionError`` or returns exactly the original data. Behind re-computed checksums a
  crafted block can hold other valid data (no checksum can tell), so there only the first rule
  applies.

The suite runs once per implementation (``SILT_NO_EXTENSIONS=1`` or the compiled build), so the
readers and decoders here are whichever is selected; where both are importable the block and
bloom twins are also run side by side and must agree (see also tests/test_twins.py).
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import replace
from typing import Any

import pytest
import silt
import sstparts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt import paths
from silt.errors import CorruptionError
from silt.manifest import MANIFEST_MAGIC, Manifest
from silt.record import MISSING
from silt.sst import block as blk_mod
from silt.sst import bloom as bloom_mod
from silt.sst.builder import SstInfo, build_sst
from silt.sst.format import COMPRESSION_LZ4, COMPRESSION_NONE, FOOTER, FOOTER_SIZE
from silt.sst.reader import SstReader, SstTail, read_ranges
from silt.tiers.memory import MemoryStore

FUZZ = settings(
    max_examples=250, deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- real objects to start from -----------------------------------------------------------------

NAME = "sst/fuzzed.sst"
KEYS = [b"key-%03d" % i for i in range(48)]


def _records() -> list[object]:
    out: list[object] = []
    for i, _ in enumerate(KEYS):
        if i % 7 == 3:
            out.append(None)
        elif i % 5 == 1:
            out.append((b"exp-%d" % i, 1_800_000_000_000 + i))
        else:
            out.append(b"value-%d-" % i + bytes([i]) * (i % 13))
    return out


RECORDS = _records()
#: Probes: every key, keys between them, before the first and after the last.
PROBES = [b"", b"a", *KEYS, b"key-0005", b"key-047x", b"zzz"]


def _build(compression: str) -> tuple[bytes, SstInfo]:
    s = silt.Settings(block_bytes=128, compression=compression, bloom_bits_per_key=10)
    return build_sst("fuzzed", KEYS, RECORDS, s, created_ms=1_700_000_000_000)


SSTS = {c: _build(c) for c in ("lz4", "none")}


def read_everything(data: bytes, info: SstInfo | None) -> tuple[list, list]:
    """Every entry (a scan), every probe's record and a full verify of the SST ``data``."""
    store = MemoryStore()
    store.put(NAME, data)
    reader = SstReader(store, NAME, info, None, size=len(data))
    items = list(reader.iter_range(None, None))
    gets = [reader.get(k) for k in PROBES]
    reader.verify()
    return items, gets


EXPECTED = {c: read_everything(raw, info) for c, (raw, info) in SSTS.items()}


def test_the_starting_objects_read_back() -> None:
    for c, (items, gets) in EXPECTED.items():
        assert [k for k, _ in items] == KEYS, c
        assert [r for _, r in items] == RECORDS
        assert gets[2:2 + len(KEYS)] == RECORDS
        assert all(g is MISSING for g in gets[:2] + gets[2 + len(KEYS):])


def _manifest() -> Manifest:
    (_, a), (_, b) = SSTS["lz4"], SSTS["none"]
    ref = replace(b, id="01HZZZZZZZZZZZZZZZZZZZZZZZ", db="kg-0-127", clipped=True,
                  clip_start=b"key-010", clip_end=None, smallest=b"key-010")
    return Manifest(
        version=7, parent=5, writer_id="w" * 32, token="t" * 32, created_ms=1_700_000_000_000,
        l0=(a, replace(b, id="01HYYYYYYYYYYYYYYYYYYYYYYY")),
        levels=((), (ref, replace(a, id="01HXXXXXXXXXXXXXXXXXXXXXXX"))),
        meta={"query": "9f0c", "watermark": "1700000000000", "note": "été ✓"},
    )


MANIFEST = _manifest()
MANIFEST_BYTES = MANIFEST.encode()


def test_the_starting_manifest_round_trips() -> None:
    assert Manifest.decode(MANIFEST_BYTES, "m") == MANIFEST


# --- mutations ----------------------------------------------------------------------------------

edits = st.lists(
    st.tuples(st.sampled_from(["flip", "set", "insert", "delete"]), st.integers(0, 2**20),
              st.integers(1, 255)),
    min_size=1, max_size=4,
)


def mutate(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for op, pos, val in ops:
        if op == "insert":
            out.insert(pos % (len(out) + 1), val)
            continue
        if not out:
            continue
        i = pos % len(out)
        if op == "flip":
            out[i] ^= val
        elif op == "set":
            out[i] = val
        else:
            del out[i:i + 1 + val % 4]
    return bytes(out)


def corruption_or(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or the string ``"corrupt"`` when it raises CorruptionError (any other
    exception fails the test)."""
    try:
        return fn(*args)
    except CorruptionError as exc:
        assert exc.object_name and isinstance(exc.detail, str)
        return "corrupt"


# --- SSTs: stored bytes damaged (checksums as they were) ----------------------------------------


@FUZZ
@given(compression=st.sampled_from(["lz4", "none"]), ops=edits, with_info=st.booleans())
def test_damaged_sst_is_corruption_or_the_original_data(compression, ops, with_info) -> None:
    raw, info = SSTS[compression]
    damaged = mutate(raw, ops)
    got = corruption_or(read_everything, damaged, info if with_info else None)
    assert got == "corrupt" or got == EXPECTED[compression], (ops, got)


@FUZZ
@given(compression=st.sampled_from(["lz4", "none"]), ops=edits)
def test_damaged_sst_ranges_are_corruption_or_the_original_layout(compression, ops) -> None:
    raw, _ = SSTS[compression]
    got = corruption_or(read_ranges, mutate(raw, ops), NAME)
    assert got == "corrupt" or got == read_ranges(raw, NAME)


@FUZZ
@given(data=st.binary(max_size=400), tail_start=st.integers(-4, 500))
def test_random_bytes_are_not_an_sst(data: bytes, tail_start: int) -> None:
    """Random bytes never pass the footer's magic and checksum."""
    size = max(tail_start, 0) + len(data)
    assert corruption_or(SstTail, data, tail_start, size, NAME) == "corrupt"
    assert corruption_or(read_ranges, data, NAME) == "corrupt"
    assert corruption_or(read_everything, data, None) == "corrupt"


# --- SSTs: crafted regions behind freshly computed checksums ------------------------------------

REGIONS = ["bloom", "props", "index", "data", "footer"]


def craft(raw: bytes, region: str, ops: list[tuple[str, int, int]], lz4_frame: bool) -> bytes:
    """``raw`` with one region's payload mutated and every checksum recomputed."""
    parts = sstparts.split(raw)
    if region == "footer":
        f = list(FOOTER.unpack_from(raw, len(raw) - FOOTER_SIZE))
        head = mutate(struct.pack("<QIQIQII", *f[:7]), ops)[:40].ljust(40, b"\0")
        fields = struct.unpack("<QIQIQII", head)
        return raw[:-FOOTER_SIZE] + sstparts.footer(*fields)
    if region == "data":
        offsets, sizes, keys = sstparts.parse_index(parts.index)
        i = ops[0][1] % len(offsets)
        payload = blk_mod.unframe(raw[offsets[i]:offsets[i] + sizes[i]], NAME, offsets[i])
        framed = blk_mod.frame(mutate(payload, ops),
                               COMPRESSION_LZ4 if lz4_frame else COMPRESSION_NONE)
        blocks = [raw[o:o + s] for o, s in zip(offsets, sizes)]
        blocks[i] = framed
        new_sizes = [len(b) for b in blocks]
        new_offsets = [sum(new_sizes[:j]) for j in range(len(blocks))]
        return sstparts.join(replace(parts, data=b"".join(blocks),
                                     index=sstparts.make_index(new_offsets, new_sizes, keys)))
    payload = mutate(getattr(parts, region), ops)
    if lz4_frame:
        framed = blk_mod.frame(payload, COMPRESSION_LZ4)
        return sstparts.join(parts, **{f"{region}_framed": framed})
    return sstparts.join(replace(parts, **{region: payload}))


@FUZZ
@given(compression=st.sampled_from(["lz4", "none"]), region=st.sampled_from(REGIONS),
       ops=edits, lz4_frame=st.booleans(), with_info=st.booleans())
def test_crafted_sst_regions_are_corruption_or_readable(
    compression, region, ops, lz4_frame, with_info
) -> None:
    raw, info = SSTS[compression]
    data = craft(raw, region, ops, lz4_frame)
    tail_offset = FOOTER.unpack_from(data, len(data) - FOOTER_SIZE)[0]
    use = None
    if with_info and 0 <= tail_offset <= len(data) - FOOTER_SIZE:
        use = replace(info, size=len(data), tail_offset=tail_offset)
    got = corruption_or(read_everything, data, use)
    if got != "corrupt":
        items, _ = got
        keys = [k for k, _ in items]
        assert keys == sorted(set(keys))  # whatever a crafted SST holds, it reads as an SST
    corruption_or(read_ranges, data, NAME)


# --- blocks, blooms and frames: both twins ------------------------------------------------------

BLOCKS = [blk_mod.Block_py]
BLOOMS = [bloom_mod.BloomFilter_py]
if blk_mod.COMPILED:
    BLOCKS.append(blk_mod.Block)
    BLOOMS.append(bloom_mod.BloomFilter)


def block_outcome(cls: type, payload: bytes) -> Any:
    """Everything a reader can observe of ``payload`` decoded by ``cls``; CorruptionError at any
    step ends the observation with ``"corrupt"``."""
    try:
        b = cls(payload, "blk", 5)
    except CorruptionError as exc:
        assert exc.object_name == "blk" and exc.offset == 5
        return "corrupt"
    seen: list[Any] = [len(b), list(b.keys)]
    for i in range(len(b)):
        seen.append(corruption_or(b.record_at, i))
    for k in [*b.keys[:8], b"", b"key-0", b"\xff"]:
        seen.append(corruption_or(b.get, k))
    seen.append(corruption_or(lambda: list(b.items_from(None, None))))
    seen.append(corruption_or(lambda: list(b.items_from(b"key-01", b"key-03"))))
    return seen


def _payloads() -> list[bytes]:
    out = []
    for raw, _ in SSTS.values():
        parts = sstparts.split(raw)
        offsets, sizes, _ = sstparts.parse_index(parts.index)
        out += [blk_mod.unframe(raw[o:o + s], NAME, o) for o, s in zip(offsets, sizes)]
    return out


PAYLOADS = _payloads()


@FUZZ
@given(which=st.integers(0, len(PAYLOADS) - 1), ops=edits)
def test_damaged_block_payloads_are_corruption_or_decoded_alike(which: int, ops) -> None:
    payload = mutate(PAYLOADS[which], ops)
    outcomes = [block_outcome(cls, payload) for cls in BLOCKS]
    assert all(o == outcomes[0] for o in outcomes), outcomes


@FUZZ
@given(payload=st.binary(max_size=300))
def test_random_block_payloads_are_corruption_or_decoded_alike(payload: bytes) -> None:
    outcomes = [block_outcome(cls, payload) for cls in BLOCKS]
    assert all(o == outcomes[0] for o in outcomes), outcomes


@FUZZ
@given(framed=st.binary(max_size=200), compression=st.sampled_from([0, 1, 2, 255]),
       size=st.integers(0, 2**32 - 1), raw=st.booleans())
def test_frames_are_corruption_or_their_payload(framed: bytes, compression, size, raw) -> None:
    """Random frames, and lz4 frames whose size prefix claims anything up to 4 GiB, behind a
    valid checksum: the payload or CorruptionError, never a huge allocation."""
    body = framed if raw else size.to_bytes(4, "little") + framed
    data = sstparts.frame_raw(body, compression)
    got = corruption_or(blk_mod.unframe, data, "f", 0)
    if got != "corrupt":
        assert compression in (COMPRESSION_NONE, COMPRESSION_LZ4)
        assert compression == COMPRESSION_LZ4 or got == body
        assert len(got) <= 255 * len(body)
    got = corruption_or(blk_mod.unframe, framed, "f", 0)  # random bytes as a frame
    assert got == "corrupt" or len(got) <= 255 * len(framed)


@FUZZ
@given(data=st.binary(min_size=1, max_size=64), hashes=st.lists(st.integers(0, 2**32 - 1),
                                                                  max_size=8))
def test_bloom_twins_agree_on_any_bytes(data: bytes, hashes: list[int]) -> None:
    filters = [cls(data) for cls in BLOOMS]
    for h in hashes:
        answers = {f.may_contain_hash(h) for f in filters}
        assert len(answers) == 1


# --- manifests ----------------------------------------------------------------------------------


def with_checksum(body: bytes, fmt: int = 2) -> bytes:
    rest = struct.pack("<I", fmt) + body
    return MANIFEST_MAGIC + struct.pack("<I", zlib.crc32(rest)) + rest


def decode_outcome(data: bytes) -> Any:
    got = corruption_or(Manifest.decode, data, paths.manifest_key(7))
    if got != "corrupt":
        check_well_formed(got)
    return got


def check_well_formed(m: Manifest) -> None:
    """A manifest that decodes is one the engine can use: right types and ranges, and it
    encodes and decodes to itself."""
    assert type(m.version) is int and 0 <= m.version <= paths.MAX_VERSION
    assert m.parent is None or (type(m.parent) is int and 0 <= m.parent < m.version)
    assert isinstance(m.writer_id, str) and isinstance(m.token, str)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in m.meta.items())
    for s in m.all_ssts():
        assert type(s.size) is int and FOOTER_SIZE <= s.size < 2**63
        assert type(s.tail_offset) is int and 0 <= s.tail_offset <= s.size - FOOTER_SIZE
        assert type(s.entries) is int and s.entries >= 0
        assert s.smallest <= s.largest
    json.dumps(m.meta).encode()  # printable: no lone surrogates
    assert Manifest.decode(m.encode(), "again") == m


@FUZZ
@given(ops=edits)
def test_damaged_manifest_is_corruption(ops) -> None:
    data = mutate(MANIFEST_BYTES, ops)
    got = decode_outcome(data)
    assert got == "corrupt" or (data == MANIFEST_BYTES and got == MANIFEST)


@FUZZ
@given(ops=edits)
def test_manifest_body_bytes_behind_a_valid_checksum(ops) -> None:
    body = MANIFEST_BYTES[16:]
    decode_outcome(with_checksum(mutate(body, ops)))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(blacklist_categories=()), max_size=6)
    | st.sampled_from(["", "00", "zz", "ff" * 3, "kg-0-1", "../x", "\ud800"]),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


TREE = json.loads(MANIFEST_BYTES[16:])
TREE_PATHS = _paths(TREE)


_HOLE = "\x00hole\x00"


def splice(tree: Any, path: tuple, action: str, value: Any) -> tuple[Any, bytes]:
    """A copy of ``tree`` with the node at ``path`` replaced by ``value``, deleted, or wrapped
    in up to 3000 levels of lists (``action``); returns the tree (``None`` when wrapped) and
    its JSON text (written without recursing, as a crafted file would be)."""
    tree = json.loads(json.dumps(tree))
    wrapped = None
    if not path:
        tree = value if action == "replace" else tree
    else:
        parent = tree
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        if action == "replace":
            parent[last] = value
        elif action == "delete":
            del parent[last]
        else:
            depth = value if isinstance(value, int) and not isinstance(value, bool) else 3
            wrapped = (abs(depth) % 3000, parent[last])
            parent[last] = _HOLE
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    if wrapped is not None:
        depth, node = wrapped
        inner = "[" * depth + json.dumps(node, sort_keys=True, separators=(",", ":")) + "]" * depth
        text = text.replace(json.dumps(_HOLE), inner)
        tree = None
    return tree, text.encode()


@FUZZ
@given(path=st.sampled_from(TREE_PATHS), action=st.sampled_from(["replace", "delete", "wrap"]),
       value=json_values, fmt=st.sampled_from([1, 2]))
def test_spliced_manifest_json_is_corruption_or_well_formed(path, action, value, fmt) -> None:
    tree, body = splice(TREE, path, action, value)
    got = decode_outcome(with_checksum(body, fmt))
    if got != "corrupt" and tree == TREE:
        assert got == MANIFEST


@pytest.mark.parametrize("depth", [10, 1000, 100_000, 1_000_000])
def test_deeply_nested_manifests_are_corruption_quickly(depth: int) -> None:
    for body in (b"[" * depth + b"]" * depth,
                 b'{"version":1,"meta":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}",
                 b"[" * depth):  # unterminated
        with pytest.raises(CorruptionError) as info:
            Manifest.decode(with_checksum(body), "m")
        if depth > 16:  # refused before parsing
            assert f"JSON nested {depth + (body[0] == 123)} levels deep" in str(info.value)
