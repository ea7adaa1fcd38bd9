"""Decoding an SST tail's index block: the compiled twin of ``decode_index`` against the
pure-Python one on real and damaged index blocks (equal results, or equal errors), and the
decoding's Python work not growing with the number of blocks.

Both twins are imported explicitly, whatever SILT_NO_EXTENSIONS selects for the rest of the
suite; without a compiled build these tests are skipped unless SILT_REQUIRE_EXTENSIONS=1 is set.
"""

from __future__ import annotations

import gc
import os
import random
import struct
from array import array
from pathlib import Path

import pytest
import silt
import sstparts
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pycalls import python_calls
from silt.errors import CorruptionError
from silt.sst import tail as tail_mod
from silt.sst.builder import build_sst
from silt.sst.format import FOOTER, FOOTER_SIZE

try:
    from silt import _speedups as C
except ImportError as exc:  # pragma: no cover - depends on the build
    if os.environ.get("SILT_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        raise ImportError(f"SILT_REQUIRE_EXTENSIONS=1, no silt._speedups: {exc}") from exc
    pytest.skip(f"silt._speedups is not compiled ({exc})", allow_module_level=True)

TWINS = {"py": tail_mod.decode_index_py, "c": C.decode_index}
FAST = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _sst(keys: list[bytes], block_bytes: int) -> bytes:
    s = silt.Settings(block_bytes=block_bytes, bloom_bits_per_key=10, compression="none")
    return build_sst("01ARZ3NDEKTSV4RRFFQ69G5FAV", keys, [k[::-1] for k in keys], s)[0]


CID = 5 << 32  # a cache id as silt.cache.block_key_base gives them


def _outcome(decode, index: bytes, filter_off: int, cache_id: int | None) -> tuple:
    """What ``decode`` gives: its results with the arrays' types, or the error it raises."""
    try:
        offsets, sizes, last_keys, block_keys = decode(index, filter_off, cache_id, "s.sst", 77)
    except CorruptionError as exc:
        return ("error", exc.object_name, exc.offset, exc.detail, str(exc))
    assert type(offsets) is array and type(sizes) is array
    assert type(last_keys) is list and all(type(k) is bytes for k in last_keys)
    return (offsets.typecode, offsets.tolist(), sizes.typecode, sizes.tolist(), last_keys,
            block_keys)


def _agree(index: bytes, filter_off: int) -> list[tuple]:
    """Both twins' outcomes (with and without a cache id), asserted equal."""
    outs = []
    for cache_id in (None, CID):
        py = _outcome(TWINS["py"], index, filter_off, cache_id)
        assert _outcome(TWINS["c"], index, filter_off, cache_id) == py
        outs.append(py)
    return outs


keys_st = st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=120,
                   unique=True).map(sorted)


@FAST
@given(keys_st, st.sampled_from([64, 128, 1024]))
def test_twins_decode_real_index_blocks_identically(keys: list[bytes], block_bytes: int) -> None:
    parts = sstparts.split(_sst(keys, block_bytes))
    plain, cached = _agree(parts.index, len(parts.data))
    offsets, sizes, last_keys = sstparts.parse_index(parts.index)
    assert plain == ("Q", offsets, "I", sizes, last_keys, None)
    assert cached[5] == [CID + i for i in range(len(offsets))]
    assert last_keys[-1] == keys[-1]


@st.composite
def damaged(draw) -> tuple[bytes, int]:
    """A real index block and filter offset, damaged in one of the ways a checksum would not
    catch if the writer (or a crafted object) produced them."""
    keys = draw(keys_st)
    parts = sstparts.split(_sst(keys, draw(st.sampled_from([64, 128]))))
    index, filter_off = parts.index, len(parts.data)
    offsets, sizes, last = sstparts.parse_index(index)
    n = len(offsets)
    how = draw(st.sampled_from(["flips", "cut", "swap", "offsets", "sizes", "count", "filter",
                                "ends", "garbage"]))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    if how == "flips":
        buf = bytearray(index)
        for _ in range(draw(st.integers(1, 4))):
            buf[rnd.randrange(len(buf))] ^= 1 << rnd.randrange(8)
        index = bytes(buf)
    elif how == "cut":
        index = index[:draw(st.integers(0, len(index) - 1))]
    elif how == "swap" and n > 1:
        i, j = rnd.randrange(n), rnd.randrange(n)
        last[i], last[j] = last[j], last[i]
        index = sstparts.make_index(offsets, sizes, last)
    elif how == "offsets":
        offsets[rnd.randrange(n)] += draw(st.sampled_from([-1, 1, 2**40, 2**63]))
        index = sstparts.make_index([o % 2**64 for o in offsets], sizes, last)
    elif how == "sizes":
        sizes[rnd.randrange(n)] = draw(st.sampled_from([0, 4, 5, 0xFFFF_FFFF]))
        index = sstparts.make_index(offsets, sizes, last)
    elif how == "count":
        index = sstparts.make_index(offsets, sizes, last,
                                    count=draw(st.sampled_from([0, n - 1, n + 1, 2**32 - 1])))
    elif how == "filter":
        filter_off = draw(st.sampled_from([0, filter_off - 1, filter_off + 1, 2**64 - 1]))
    elif how == "ends":
        ends = list(struct.unpack_from(f"<{n}I", index, 4 + 12 * n))
        ends[rnd.randrange(n)] = draw(st.integers(0, 2**32 - 1))
        index = index[:4 + 12 * n] + struct.pack(f"<{n}I", *ends) + index[4 + 16 * n:]
    elif how == "garbage":
        index = draw(st.binary(max_size=80))
    return index, filter_off


@FAST
@given(damaged())
def test_twins_agree_on_damaged_index_blocks(case: tuple[bytes, int]) -> None:
    index, filter_off = case
    for out in _agree(index, filter_off):
        if out[0] == "error":
            assert out[1:3] == ("s.sst", 77)
            assert out[3] in INDEX_ERRORS, out[3]
        event(out[3] if out[0] == "error" else "decoded")


INDEX_ERRORS = {f"malformed index block ({what})" for what in (
    "index regions do not add up", "data block offsets and sizes do not tile the object",
    "key offsets decrease", "last keys of the blocks are not in increasing order")}


@pytest.mark.parametrize("twin", ["py", "c"])
def test_each_malformed_index_names_its_first_failed_check(twin: str) -> None:
    """The messages, and which one wins when several checks fail, are the same in both twins:
    the index block being shorter than its header or its arrays is a CorruptionError too (a
    3-byte index was a struct.error, and an array cut mid-value a ValueError's text)."""
    decode = TWINS[twin]
    keys = [b"k%03d" % i for i in range(40)]
    parts = sstparts.split(_sst(keys, 64))
    offsets, sizes, last = sstparts.parse_index(parts.index)
    end = len(parts.data)
    make = sstparts.make_index
    cases = {
        parts.index[:3]: "index regions do not add up",
        parts.index[:4 + 8 * len(offsets) + 3]: "index regions do not add up",
        parts.index[:-1]: "index regions do not add up",
        parts.index + b"x": "index regions do not add up",
        make(offsets, sizes, last, count=len(offsets) + 1): "index regions do not add up",
        make([0, *offsets[2:], 1], sizes, last): "do not tile the object",
        make(offsets, [*sizes[:-1], 4], last): "do not tile the object",
        # Blocks out of order and keys out of order: the tiling is checked first.
        make(offsets[::-1], sizes[::-1], last[::-1]): "do not tile the object",
        make(offsets, sizes, [last[1], last[0], *last[2:]]): "not in increasing order",
        make(offsets, sizes, [*last[:-1], last[-2]]): "not in increasing order",
    }
    for index, what in cases.items():
        with pytest.raises(CorruptionError, match=f"malformed index block .*{what}"):
            decode(index, end, None, "s.sst", 77)
    n = len(offsets)
    ends = list(struct.unpack_from(f"<{n}I", parts.index, 4 + 12 * n))
    ends[3] = ends[1]  # key offsets decrease, and the keys would be out of order too
    bad = parts.index[:4 + 12 * n] + struct.pack(f"<{n}I", *ends) + parts.index[4 + 16 * n:]
    with pytest.raises(CorruptionError, match=r"\(key offsets decrease\)"):
        decode(bad, end, None, "s.sst", 77)
    with pytest.raises(CorruptionError, match="do not tile"):
        decode(parts.index, end + 1, None, "s.sst", 77)
    assert decode(make([], [], []), 0, CID, "s.sst", 77)[2:] == ([], [])
    with pytest.raises(TypeError, match="cache id is an int"):  # the old (id, index) key's id
        decode(parts.index, end, "01ARZ3NDEKTSV4RRFFQ69G5FAV", "s.sst", 77)


SILT_DIR = str(Path(silt.__file__).parent)


@pytest.mark.parametrize("twin", ["py", "c"])
def test_decoding_a_tail_makes_no_python_call_per_block(twin: str, monkeypatch) -> None:
    """An SST tail of 20 blocks and one of 2,000 are decoded with the same number of Python
    calls: the index's checks, last keys and block cache keys take no Python step a block
    (they were four generator passes and a comprehension over the blocks, about 7 ms for a
    tail of 10k blocks)."""
    monkeypatch.setattr(tail_mod, "decode_index", TWINS[twin])
    counts = []
    for n in (20, 2000):
        keys = [b"key-%06d" % i for i in range(n * 4)]
        data = _sst(keys, 64)
        start = FOOTER.unpack_from(data, len(data) - FOOTER_SIZE)[0]
        t = None

        def decode(data=data, start=start) -> None:
            nonlocal t
            t = tail_mod.SstTail(data[start:], start, len(data), "s.sst", CID)

        counts.append(sum(python_calls(decode, SILT_DIR).values()))
        assert len(t.last_keys) >= n and t.block_keys[-1] == CID + len(t.last_keys) - 1
    assert counts[0] == counts[1], counts


def test_compiled_block_cache_keys_cost_the_garbage_collector_nothing() -> None:
    """The compiled twin's block keys (ints) are not tracked by the garbage collector: a tail
    of thousands of blocks adds nothing to its passes."""
    parts = sstparts.split(_sst([b"key-%06d" % i for i in range(400)], 64))
    keys = C.decode_index(parts.index, len(parts.data), CID, "s.sst", 77)[3]
    assert len(keys) > 10 and not any(map(gc.is_tracked, keys))
