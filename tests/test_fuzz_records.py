"""Fuzzing the checkpoint and compaction-record parsers: whatever the bytes, the answer is a
well-formed object or :class:`~silt.errors.CorruptionError` naming the object; never another
exception, never a hang, never a silently different value.

* random bytes, and random bytes behind each kind's magic;
* every single-byte change, truncation and extension of a valid object (the checksum must catch
  each one: a damaged object is never read as different data);
* crafted objects with a *valid* checksum whose JSON fields are replaced by random JSON values,
  or nested deeply enough to exhaust the parser's recursion.
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt import paths
from silt.checkpoints import CHECKPOINT_MAGIC, Checkpoint, decode_checkpoint, encode_checkpoint
from silt.compaction.record import RECORD_MAGIC, CompactionRecord
from silt.compaction.task import CompactionTask
from silt.errors import CorruptionError
from silt.sst.builder import SstInfo

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
T0 = 1_700_000_000_000
CP_KEY = "checkpoint/nightly"
REC_ID = paths.new_id(T0, bytes(10))
REC_KEY = paths.compaction_key(REC_ID)


def _record() -> CompactionRecord:
    outputs = tuple(
        SstInfo(id=paths.new_id(T0, bytes([i]) * 10), size=4000 + i, tail_offset=3000,
                smallest=b"a%d" % i, largest=b"b%d" % i, entries=10, tombstones=1)
        for i in range(2)
    )
    task = CompactionTask(inputs=("01HF7YAT00N24PJVEMMNZ4ENWC", "01HF7YAT0011B26YVXGRG3EF2B"),
                          mode="into_level", target_level=1, drop_tombstones=True, reason="l0")
    return CompactionRecord(id=REC_ID, base_version=7, created_ms=T0, task=task,
                            outputs=outputs, input_bytes=9000)


RECORD = _record()
RECORD_BYTES = RECORD.encode()
CHECKPOINT_BYTES = encode_checkpoint(42, T0, "5f0c" * 8)


def decode_record(data: bytes) -> CompactionRecord | None:
    try:
        return CompactionRecord.decode(data, REC_KEY)
    except CorruptionError as exc:
        assert exc.object_name == REC_KEY
        return None


def decode_cp(data: bytes) -> Checkpoint | None:
    try:
        return decode_checkpoint(data, CP_KEY)
    except CorruptionError as exc:
        assert exc.object_name == CP_KEY
        return None


def framed(magic: bytes, fmt: int, body: bytes) -> bytes:
    """An object with a valid checksum around ``body`` (what a crafted object looks like)."""
    rest = struct.pack("<I", fmt) + body
    return magic + struct.pack("<I", zlib.crc32(rest)) + rest


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=12,
)


# --- round trips --------------------------------------------------------------------------------


def test_valid_objects_round_trip() -> None:
    assert CompactionRecord.decode(RECORD_BYTES, REC_KEY) == RECORD
    assert decode_checkpoint(CHECKPOINT_BYTES, CP_KEY) == Checkpoint(42, T0, "5f0c" * 8, 2)
    assert CHECKPOINT_BYTES.startswith(CHECKPOINT_MAGIC)


# --- random bytes -------------------------------------------------------------------------------


@FAST
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    assert decode_record(data) is None
    decode_cp(data)  # may parse only as a bare-JSON (format 1) checkpoint


@FAST
@given(st.binary(max_size=300), st.integers(0, 3))
def test_random_bytes_behind_the_magic(tail: bytes, fmt: int) -> None:
    assert decode_record(RECORD_MAGIC + tail) is None
    assert decode_cp(CHECKPOINT_MAGIC + tail) is None
    # ... even with a valid checksum: random bytes are not a JSON object.
    decode_record(framed(RECORD_MAGIC, fmt, tail))
    decode_cp(framed(CHECKPOINT_MAGIC, fmt, tail))


# --- damage to valid objects: always caught ----------------------------------------------------


@pytest.mark.parametrize(("data", "decode"), [(RECORD_BYTES, decode_record),
                                              (CHECKPOINT_BYTES, decode_cp)])
def test_every_single_byte_change_is_caught(data: bytes, decode: Any) -> None:
    rng = random.Random(len(data))
    for i in range(len(data)):
        for delta in {1, 0x80, rng.randrange(1, 256)}:
            damaged = bytearray(data)
            damaged[i] ^= delta
            assert decode(bytes(damaged)) is None, f"byte {i} ^ {delta:#x} went unnoticed"
    for n in range(len(data)):
        assert decode(data[:n]) is None, f"truncated to {n} bytes"
    assert decode(data + b"\0") is None and decode(data + b" ") is None


@FAST
@given(st.data())
def test_random_mutations_are_caught(data: st.DataObject) -> None:
    for original, decode in ((RECORD_BYTES, decode_record), (CHECKPOINT_BYTES, decode_cp)):
        buf = bytearray(original)
        for _ in range(data.draw(st.integers(1, 6))):
            op = data.draw(st.sampled_from(["flip", "insert", "delete", "swap"]))
            i = data.draw(st.integers(0, len(buf) - 1))
            if op == "flip":
                buf[i] ^= data.draw(st.integers(1, 255))
            elif op == "insert":
                buf.insert(i, data.draw(st.integers(0, 255)))
            elif op == "delete" and len(buf) > 1:
                del buf[i]
            else:
                j = data.draw(st.integers(0, len(buf) - 1))
                buf[i], buf[j] = buf[j], buf[i]
        if bytes(buf) != original:
            assert decode(bytes(buf)) is None


# --- crafted objects: valid checksum, hostile fields ---------------------------------------------


RECORD_BODY = json.loads(RECORD_BYTES[16:])
OUTPUT_BODY = RECORD_BODY["outputs"][0]


@FAST
@given(st.sampled_from(sorted(RECORD_BODY)), json_values)
def test_records_with_a_hostile_field(field: str, value: Any) -> None:
    body = dict(RECORD_BODY, **{field: value})
    decode_record(framed(RECORD_MAGIC, 1, json.dumps(body).encode()))


@FAST
@given(st.sampled_from([*sorted(OUTPUT_BODY), "clip", "db"]), json_values)
def test_record_outputs_with_a_hostile_field(field: str, value: Any) -> None:
    body = dict(RECORD_BODY, outputs=[dict(OUTPUT_BODY, **{field: value})])
    rec = decode_record(framed(RECORD_MAGIC, 1, json.dumps(body).encode()))
    if rec is not None:  # accepted: then it is one of silt's own outputs, with sane numbers
        (out,) = rec.outputs
        assert not out.db and not out.clipped
        assert 0 <= out.tail_offset < out.size and out.entries >= 1


@FAST
@given(st.sampled_from(["version", "created_ms", "token", "other"]), json_values)
def test_checkpoints_with_a_hostile_field(field: str, value: Any) -> None:
    body = json.dumps({"version": 3, "created_ms": T0, "token": "t", field: value}).encode()
    for data in (framed(CHECKPOINT_MAGIC, 2, body), body):  # format 2, and format 1 (bare)
        cp = decode_cp(data)
        if cp is not None:
            assert type(cp.version) is int and 0 <= cp.version <= paths.MAX_VERSION


@pytest.mark.parametrize("depth", [50, 100_000])
def test_deeply_nested_json_is_corruption_not_a_crash(depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    record = RECORD_BYTES[16:].replace(b'"reason":"l0"', b'"reason":' + nested)
    assert decode_record(framed(RECORD_MAGIC, 1, record)) is None
    cp = b'{"version":1,"token":' + nested + b"}"
    assert decode_cp(framed(CHECKPOINT_MAGIC, 2, cp)) is None
    assert decode_cp(cp) is None


@pytest.mark.parametrize("number", [b"1e400", b"-1", b"Infinity", b"NaN", b"1" * 5000, b"true",
                                    b"100000000000000000000", b"2.5", b"[7]", b'"7"'])
def test_hostile_numbers(number: bytes) -> None:
    cp = b'{"version":' + number + b"}"
    assert decode_cp(cp) is None and decode_cp(framed(CHECKPOINT_MAGIC, 2, cp)) is None
    for field in (b'"base_version":7', b'"size":4000', b'"entries":10'):
        name = field.split(b":")[0]
        record = RECORD_BYTES[16:].replace(field, name + b":" + number, 1)
        assert decode_record(framed(RECORD_MAGIC, 1, record)) is None


def test_ids_that_are_paths_are_refused() -> None:
    for bad in ("../../etc/passwd", "a/b", "", "x" * 26, REC_ID.lower()):
        body = dict(RECORD_BODY, outputs=[dict(OUTPUT_BODY, id=bad)])
        assert decode_record(framed(RECORD_MAGIC, 1, json.dumps(body).encode())) is None
        body = dict(RECORD_BODY, id=bad)
        assert decode_record(framed(RECORD_MAGIC, 1, json.dumps(body).encode())) is None
