"""A handle handed over (silt.handoff) uploads its first SST without announcing its writer grace
again when the handle that left the record knew its marker exists: the commit is a warm
commit's 3 round trips (the SST, the manifest PUT, the GET of the next GC epoch), where it
was 4 (the grace marker's create-only PUT before the upload), once per handle handed over.

The grace carried is only the leaving handle's own; a taker with another grace, or a record
that carries none (written before the field existed), announces before its first upload as
any new writer does. The commits' checks after the PUT are the same in every case.
Costs on ``memory://`` and each tier's emulator, as in tests/test_round_trips.py.
"""

from __future__ import annotations

import json
import struct

import pytest
import silt
from silt import handoff, paths
from silt.checksum import crc32
from test_round_trips import LONGER, UPLOADED, Root, _check, _keys, root  # noqa: F401

pytestmark = pytest.mark.flaky(reruns=2, only_rerun=[LONGER])

SCOPE = "q/1"


def _leave(root: Root) -> tuple[silt.DB, bytes]:  # noqa: F811
    """A handle that uploaded SSTs and committed versions 1..2 (its grace announced), and the
    record it leaves."""
    db = silt.open(root.url, settings=UPLOADED)
    for v in (1, 2):
        db.put(b"k%d" % v, b"v")
        assert db.commit() == v
    record = db.handoff(SCOPE)
    assert record is not None
    return db, record


def _upload_and_commit(db: silt.DB, store: object, version: int) -> object:
    for k in _keys(0, 50):
        db.put(k, b"w")
    with store.operation() as op:  # type: ignore[attr-defined]
        assert db.commit() == version
    return op


def _header(record: bytes) -> dict[str, object]:
    (size,) = struct.unpack_from("<I", record, 12)
    return json.loads(record[16:16 + size])


def _without_grace(record: bytes) -> bytes:
    """``record`` as a writer before the ``grace`` field wrote it (CRC valid)."""
    (size,) = struct.unpack_from("<I", record, 12)
    head = _header(record)
    del head["grace"]
    new = json.dumps(head, sort_keys=True, separators=(",", ":")).encode()
    body = struct.pack("<I", len(new)) + new + record[16 + size:]
    return record[:8] + struct.pack("<I", crc32(body)) + body


def test_a_resumed_handle_uploads_without_announcing_its_grace_again(
        root: Root) -> None:  # noqa: F811 - the fixture
    """silt.resume, then a commit that uploads an SST: 3 round trips, the SST first. Before:
    4, the grace marker's PUT first (the record carried no grace)."""
    leaver, record = _leave(root)
    store = root.slow()
    resumed = silt.resume(root.url, record, 2, scope=SCOPE, store=store, settings=UPLOADED)
    assert resumed is not None
    op = _upload_and_commit(resumed, store, 3)
    _check(op, 3, {"put_if_absent": 2, "get": 1})  # type: ignore[arg-type]
    assert op.waves()[0][0][1].startswith("sst/"), op  # type: ignore[attr-defined]
    assert resumed.get(b"k00007") == b"w" and resumed.get(b"k1") == b"v"
    assert _header(record)["grace"] == int(UPLOADED.gc_grace_seconds * 1000)
    resumed.close()
    leaver.close()


def test_an_older_handle_that_takes_the_record_uploads_without_announcing(
        root: Root) -> None:  # noqa: F811 - the fixture
    """DB.take_handoff on a handle opened at a version (its open read no markers, it never
    uploaded: its grace not known announced): its first upload after the record is the
    commit's first request. Before: the grace marker's PUT came first."""
    leaver, record = _leave(root)
    older, store = root.open(version=1, settings=UPLOADED)
    assert older.take_handoff(record, 2, SCOPE)
    op = _upload_and_commit(older, store, 3)
    _check(op, 3, {"put_if_absent": 2, "get": 1})  # type: ignore[arg-type]
    assert op.waves()[0][0][1].startswith("sst/"), op  # type: ignore[attr-defined]
    older.close()
    leaver.close()


def _commits_after_announcing(db: silt.DB, store: object, version: int,
                              settings: silt.Settings) -> None:
    """``db`` uploads and commits ``version`` in 4 round trips, the first the create-only PUT
    of the marker of ``settings``' grace."""
    op = _upload_and_commit(db, store, version)
    _check(op, 4, {"put_if_absent": 3, "get": 1})  # type: ignore[arg-type]
    assert op.waves()[0] == [  # type: ignore[attr-defined]
        ("put_if_absent", paths.grace_key(int(settings.gc_grace_seconds * 1000)))], op


def test_a_taker_with_another_grace_or_an_old_record_announces_its_own(
        root: Root) -> None:  # noqa: F811 - the fixture
    """The record says only that the leaving writer's grace is announced: a taker with another
    grace, or given a record without the field, creates its marker before its first upload
    (4 round trips, the marker's PUT first)."""
    leaver, record = _leave(root)
    other = UPLOADED.replace(gc_grace_seconds=UPLOADED.gc_grace_seconds + 1)
    store = root.slow()
    taker = silt.resume(root.url, record, 2, scope=SCOPE, store=store, settings=other)
    assert taker is not None
    _commits_after_announcing(taker, store, 3, other)
    assert store.get(paths.grace_key(int(other.gc_grace_seconds * 1000))) == b""
    old = _without_grace(taker.handoff(SCOPE))  # type: ignore[arg-type]
    assert handoff.decode(old, root.url, SCOPE, 3).grace is None
    store = root.slow()
    again = silt.resume(root.url, old, 3, scope=SCOPE, store=store, settings=UPLOADED)
    assert again is not None
    _commits_after_announcing(again, store, 4, UPLOADED)
    for db in (leaver, taker, again):
        db.close()
