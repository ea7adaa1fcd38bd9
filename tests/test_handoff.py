"""A warm handle's state handed to another process (silt.handoff): taken only when intact and
exactly what was asked for, and a commit from it as safe as one from the handle that left it.

"Another process" is another handle on the same root, with no state in common: the record is
all that passes between them. Round-trip counts are in tests/test_round_trips.py.
"""

from __future__ import annotations

import json
import struct
import uuid

import pytest
import roundtrips
import silt
from silt import handoff, paths
from silt.checksum import crc32
from silt.errors import FencedError, InvalidArgumentError
from silt.plugins import open_store
from silt.versions import WITHDRAWN, Fate

SCOPE = "query/incarnation"


@pytest.fixture
def url() -> str:
    return f"memory://handoff-{uuid.uuid4().hex}"


#: Writers GC may collect behind at once (tests of GC passes).
NO_GRACE = silt.Settings(gc_grace_seconds=0)


def _committed(url: str, n: int = 2,
               settings: silt.Settings | None = None) -> tuple[silt.DB, bytes]:
    """A handle that committed versions 1..n, and the record it leaves."""
    db = silt.open(url, settings=settings)
    for v in range(1, n + 1):
        db.put(b"k", b"v%d" % v)
        db.put(b"only%d" % v, b"x")
        assert db.commit() == v
    record = db.handoff(SCOPE)
    assert record is not None
    return db, record


def _requests(db: silt.DB) -> int:
    return sum(roundtrips.foreground_requests(db).values())


def test_a_record_is_taken_for_its_root_scope_and_version_only(url: str) -> None:
    writer, record = _committed(url, 2)
    assert silt.resume(url, record, 1, scope=SCOPE) is None  # an older version asked for
    assert silt.resume(url, record, 3, scope=SCOPE) is None  # a newer one
    assert silt.resume(url, record, 2, scope="another query") is None
    assert silt.resume(url + "-other", record, 2, scope=SCOPE) is None
    older = silt.open(url, version=1)
    before = _requests(older)
    for version, scope in ((1, SCOPE), (2, "x"), (3, SCOPE)):
        assert not older.take_handoff(record, version, scope)
        assert older.version == 1
    assert older.stats()["handoffs_refused"] == 3
    assert older.take_handoff(record, 2, SCOPE) and older.version == 2
    assert _requests(older) == before and older.stats()["handoffs"] == 1
    assert older.get(b"k") == b"v2" and older.get(b"only1") == b"x"
    resumed = silt.resume(url, record, 2, scope=SCOPE)
    assert resumed is not None and resumed.warm and resumed.get(b"only2") == b"x"
    assert _requests(resumed) == 0
    for db in (writer, older, resumed):
        db.close()


def _recrc(data: bytes) -> bytes:
    """``data`` with its CRC made valid again (a crafted record)."""
    return data[:8] + struct.pack("<I", crc32(data[12:])) + data[12:]


def _with_header(record: bytes, **changes: object) -> bytes:
    """``record`` with header fields changed, its CRC valid (crafted)."""
    (size,) = struct.unpack_from("<I", record, 12)
    head = json.loads(record[16:16 + size])
    head.update(changes)
    new = json.dumps(head).encode()
    return _recrc(record[:12] + struct.pack("<I", len(new)) + new + record[16 + size:])


def test_a_damaged_or_crafted_record_is_refused(url: str) -> None:
    writer, record = _committed(url, 2)
    bad: list[object] = [b"", b"SILTHOF1", record[:-1], record + b"\0", record[:len(record) // 2],
                         b"x" * len(record), "a str", None, 7]
    bad += [record[:i] + bytes([record[i] ^ 0x40]) + record[i + 1:]
            for i in range(0, len(record), max(1, len(record) // 97))]
    markers = json.loads(record[16:16 + struct.unpack_from("<I", record, 12)[0]])["markers"]
    bad += [
        _with_header(record, version=1),  # names version 1, holds version 2's manifest
        _with_header(record, url=handoff.url_digest(url + "x")),
        _with_header(record, markers={**markers, "horizon": 3}),  # below its horizon
        _with_header(record, markers={**markers, "epoch": -1}),
        _with_header(record, markers={**markers, "pins": "nope"}),
        _with_header(record, scope=None),
        _recrc(record[:-3] + b"xyz"),  # the manifest's own checksum fails
        _recrc(b"SILTHOF2" + record[8:]),
    ]
    older = silt.open(url, version=1)
    for data in bad:
        assert silt.resume(url, data, 2, scope=SCOPE) is None, data  # type: ignore[arg-type]
        assert not older.take_handoff(data, 2, SCOPE)  # type: ignore[arg-type]
        assert older.version == 1
    # the crafted header naming version 1 is refused for version 1 too: its manifest is 2's
    assert silt.resume(url, _with_header(record, version=1), 1, scope=SCOPE) is None
    with pytest.raises(silt.errors.InvalidTypeError):
        silt.resume(url, record, "2", scope=SCOPE)  # type: ignore[arg-type]
    with pytest.raises(silt.errors.InvalidTypeError):
        older.take_handoff(record, 2, scope=b"x")  # type: ignore[arg-type]
    writer.close()
    older.close()


def test_only_a_settled_handle_that_committed_its_base_leaves_a_record(url: str) -> None:
    writer, record = _committed(url, 1)
    opened = silt.open(url)
    assert opened.handoff(SCOPE) is None  # did not commit its base
    taken = silt.resume(url, record, 1, scope=SCOPE)
    assert taken is not None and taken.handoff(SCOPE) is None  # nor did this one
    writer.put(b"pending", b"1")
    assert writer.handoff(SCOPE) is None  # holds an uncommitted write
    with pytest.raises(InvalidArgumentError, match="uncommitted"):
        writer.take_handoff(record, 1, SCOPE)
    assert writer.commit() == 2 and writer.handoff(SCOPE) is not None
    taken.put(b"x", b"1")
    with pytest.raises(silt.CommitConflict):  # version 2 is the writer's
        taken.commit()
    for db in (writer, opened, taken):
        db.close()


def test_a_record_a_newer_version_superseded_conflicts_at_commit(url: str) -> None:
    """The record names version 1, but another writer committed 2 since (a record left
    before, or a zombie's written late): taken for version 1 as asked, its commit of 2 fails
    its create-only PUT, as the leaving handle's own commit would; nothing is lost."""
    writer, record = _committed(url, 1)
    with silt.open(url) as other:
        other.put(b"k", b"other")
        assert other.commit(2) == 2
    taken = silt.resume(url, record, 1, scope=SCOPE)
    assert taken is not None
    taken.put(b"k", b"stale")
    with pytest.raises(silt.CommitConflict, match="already committed"):
        taken.commit(2)
    writer.put(b"k", b"stale too")
    with pytest.raises(silt.CommitConflict):
        writer.commit(2)
    with silt.open(url) as fresh:
        assert (fresh.version, fresh.get(b"k")) == (2, b"other")
    taken.close()
    writer.close()


def test_a_record_whose_successor_was_withdrawn_conflicts_as_withdrawn(url: str) -> None:
    """A writer on top of version 1 created 2 and withdrew it (its checks failed): the
    number is dead for everyone, the record's taker included."""
    writer, record = _committed(url, 1)
    with silt.open(url) as other:
        other.put(b"k", b"withdrawn")
        assert other.commit(2) == 2
        token = other.manifest.token
    store = open_store(url)
    fate = Fate(2, WITHDRAWN, "a test's withdrawal", token)
    assert store.put_if_absent(paths.fate_key(2), fate.encode())
    taken = silt.resume(url, record, 1, scope=SCOPE)
    assert taken is not None
    taken.put(b"k", b"three")
    with pytest.raises(silt.CommitConflict) as info:
        taken.commit(2)
    assert info.value.withdrawn
    assert taken.commit() == 3  # the next free number, past the withdrawn one
    with silt.open(url) as fresh:
        assert (fresh.version, fresh.get(b"k")) == (3, b"three")
    taken.close()
    writer.close()


def test_a_zombie_record_whose_version_gc_passed_is_fenced(url: str) -> None:
    """Versions 2..6 were committed and GC collected every version below 6 since the record
    of version 1 was left: version 2's name is free again, and the taker's commit creates it,
    then finds the horizon above it and withdraws it (FencedError), exactly as the leaving
    handle's commit would; the latest state is intact."""
    writer, record = _committed(url, 1, NO_GRACE)
    with silt.open(url, settings=NO_GRACE) as other:
        for v in range(2, 7):
            other.put(b"k", b"v%d" % v)
            other.commit(v)
        report = other.gc(retain_versions=1, grace_seconds=0)
        assert report.deleted_manifests
    taken = silt.resume(url, record, 1, scope=SCOPE, settings=NO_GRACE)
    assert taken is not None
    taken.put(b"k", b"zombie")
    with pytest.raises(FencedError, match="horizon"):
        taken.commit(2)
    with silt.open(url) as fresh:
        assert (fresh.version, fresh.get(b"k")) == (6, b"v6")
        assert 2 not in silt.versions(url)
    with silt.open(url, settings=NO_GRACE) as current:  # knows the horizon (6) once it commits
        current.put(b"k", b"v7")
        assert current.commit() == 7
        assert not current.take_handoff(record, 1, SCOPE) and current.version == 7
    taken.close()
    writer.close()


def test_a_record_whose_gc_markers_changed_since_commits_after_reading_them(url: str) -> None:
    """A GC pass ran after the record was left: the taker's commit finds the next epoch and
    lists gc/, as the leaving handle's would, and commits."""
    writer, record = _committed(url, 3, NO_GRACE)
    with silt.open(url, settings=NO_GRACE) as other:
        other.gc(retain_versions=1, grace_seconds=0)
    taken = silt.resume(url, record, 3, scope=SCOPE, settings=NO_GRACE)
    assert taken is not None
    taken.put(b"k", b"v4")
    before = taken.stats()["requests_by_kind"]["LIST"]
    assert taken.commit(4) == 4
    assert taken.stats()["requests_by_kind"]["LIST"] > before
    with silt.open(url) as fresh:
        assert (fresh.version, fresh.get(b"k"), fresh.get(b"only1")) == (4, b"v4", b"x")
    taken.close()
    writer.close()


def test_a_record_carries_the_writer_grace_only_when_its_marker_is_known(url: str) -> None:
    """The record carries the leaving handle's own grace when it created that grace's marker
    or a listing of gc/ showed it (silt.handoff, "The writer grace"); a handle that knows of no
    such marker carries none, so its taker announces before its first upload."""
    grace_ms = int(silt.Settings().gc_grace_seconds * 1000)
    store = open_store(url)
    inline, record = _committed(url, 1)  # inline deltas only: no upload, no marker anywhere
    assert handoff.decode(record, url, SCOPE, 1).grace is None
    assert not list(store.list(paths.GRACE_PREFIX))
    inline.close()
    uploader = silt.open(url, settings=silt.Settings(inline_delta_bytes=0))
    uploader.put(b"u", b"1")
    assert uploader.commit() == 2  # created the marker before its upload
    assert handoff.decode(uploader.handoff(SCOPE), url, SCOPE, 2).grace == grace_ms
    listed = silt.open(url)  # commits inline; lists gc/ after its PUT (memory:// is local)
    listed.put(b"l", b"1")
    assert listed.commit() == 3
    record = listed.handoff(SCOPE)
    assert handoff.decode(record, url, SCOPE, 3).grace == grace_ms
    other_grace = silt.Settings(gc_grace_seconds=grace_ms / 1000 + 1)
    taker = silt.resume(url, record, 3, scope=SCOPE, settings=other_grace)
    assert taker is not None
    taker.put(b"t", b"1")
    taker.flush()  # another grace than the record's: announced before the upload
    assert store.get(paths.grace_key(grace_ms + 1000)) == b""
    for db in (uploader, listed, taker):
        db.close()


def test_a_record_with_a_malformed_grace_is_refused(url: str) -> None:
    writer, record = _committed(url, 1)
    for grace in (-1, "1", True, 1.5, [1]):
        assert silt.resume(url, _with_header(record, grace=grace), 1, scope=SCOPE) is None
    assert silt.resume(url, _with_header(record, grace=None), 1, scope=SCOPE) is not None
    writer.close()
