"""A DB opened read-only (``silt.open(url, read_only=True)``, silt.readonly): its open on a
remote store makes the requests a reader needs and no more (the GC markers, which only a
commit uses, are not listed), and every write is refused at the API boundary, before any
request. ``silt get`` and ``silt scan`` open read-only.

Request counts on ``memory://`` and each tier's emulator behind a latency, as in
tests/test_round_trips.py.
"""

from __future__ import annotations

import uuid

import pytest
import silt
import slowtier
from silt import plugins
from silt.cli import main
from silt.errors import ClosedError, InvalidTypeError, ReadOnlyError
from silt.readonly import ReadOnlyDB
from test_round_trips import (  # noqa: F401 - the fixture "root"
    LONGER,
    SETTINGS,
    Root,
    _check,
    _two_versions,
    root,
)

pytestmark = pytest.mark.flaky(reruns=2, only_rerun=[LONGER])


def test_a_read_only_cold_open_lists_the_versions_then_reads_the_manifest(
        root: Root) -> None:  # noqa: F811 - the fixture
    """The LIST of manifest/; then the manifest and its fate record at once: 2 round trips,
    1 LIST (a writer's open lists the GC epoch and gc/ too: 3 LISTs). With ``at_most`` the
    guessed manifest goes out with the LIST and its SST's tail with the fate record, as for a
    writer; on an empty root, 1 LIST."""
    _two_versions(root)
    store = root.slow()
    for at_most in (None, 1):
        with store.operation() as op:
            db = silt.open(root.url, store=store, settings=SETTINGS, at_most=at_most,
                           read_only=True)
        if at_most is None:
            _check(op, 2, {"list": 1, "get": 2})
            assert op.waves() == [[("list", "manifest/")],
                                  [("get", "manifest/00000000000000000002"),
                                   ("get", "manifest/00000000000000000002.fate")]], op
        else:
            _check(op, 2, {"list": 1, "get": 2, "get_range": 1})
            assert op.waves()[0] == [("get", "manifest/00000000000000000001"),
                                     ("list", "manifest/")], op
        assert isinstance(db, ReadOnlyDB) and db.read_only and not db.warm
        assert db.version == (2 if at_most is None else 1)
        assert db.get(b"k00001") == b"v" * 50
        db.close()
    empty = Root(f"memory://ro-{uuid.uuid4().hex}")
    store = empty.slow()
    with store.operation() as op:
        db = silt.open(empty.url, store=store, read_only=True)
    _check(op, 1, {"list": 1})
    assert db.version is None and db.get(b"x") is None
    db.close()


def test_a_read_only_open_at_a_version_still_checks_that_it_is_retained(
        root: Root) -> None:  # noqa: F811 - the fixture
    """``version=``: the listing of gc/ says whether GC collected the version, which a reader
    needs too: the same requests as a writer's open."""
    _two_versions(root)
    store = root.slow()
    with store.operation() as op:
        db = silt.open(root.url, store=store, version=1, read_only=True)
    _check(op, 2, {"get": 2, "list": 1})
    assert ("list", "gc/") in op.waves()[1]
    assert db.get(b"k00300") is None and db.get(b"k00000") == b"v" * 50
    db.close()


def _writes(db: silt.DB, source: silt.DB) -> list[tuple[str, object]]:
    """Every write of the API, as ``(what the error names, the call)``."""
    return [
        ("put()", lambda: db.put(b"k", b"v")),
        ("put()", lambda: db.put(b"k", b"v", ttl=5)),
        ("put_many()", lambda: db.put_many([b"k"], [b"v"])),
        ("delete()", lambda: db.delete(b"k00001")),
        ("delete_range()", lambda: db.delete_range(b"a", b"z")),
        ("write()", lambda: db.write(silt.WriteBatch().put(b"k", b"v"))),
        ("flush()", db.flush),
        ("commit()", db.commit),
        ("commit()", lambda: db.commit(9, meta={"a": "b"})),
        ("reference()", lambda: db.reference(source)),
        ("checkpoint()", lambda: db.checkpoint("ro")),
        ("gc()", lambda: db.gc(retain_versions=1)),
    ]


def test_every_write_of_a_read_only_handle_is_refused_before_any_request(
        root: Root) -> None:  # noqa: F811 - the fixture
    _two_versions(root)
    db, store = root.open(read_only=True)
    with silt.open(root.url) as source:
        with store.operation() as op:
            for what, call in _writes(db, source):
                with pytest.raises(ReadOnlyError, match=r"read_only=True: " + what[:-2]):
                    call()  # type: ignore[operator]
        assert op.total == 0, op
        assert db.version == 2 and db.get(b"k00001") == b"v" * 50
        assert db.handoff("s") is None
    assert silt.versions(root.url) == [1, 2]
    db.close()
    with pytest.raises(ClosedError):
        db.put(b"k", b"v")


def test_a_read_only_handle_is_a_references_source() -> None:
    """A rescaled shard references its old shards' state from read-only handles."""
    base = f"memory://ro-ref-{uuid.uuid4().hex}"
    with silt.open(f"{base}/old") as old:
        old.put(b"a", b"1")
        old.commit()
    with silt.open(f"{base}/old", read_only=True) as source, silt.open(f"{base}/new") as new:
        assert new.reference(source) >= 1
        assert new.commit() == 1
    with silt.open(f"{base}/new") as check:
        assert check.get(b"a") == b"1"


def test_read_only_must_be_a_bool() -> None:
    for bad in (1, "yes", None):
        with pytest.raises(InvalidTypeError, match="read_only must be a bool"):
            silt.open(f"memory://ro-{uuid.uuid4().hex}", read_only=bad)  # type: ignore[arg-type]


def test_silt_get_and_scan_open_read_only(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``silt get`` and ``silt scan`` on a remote root (``slow://``: remote, timed) list no GC
    markers: the versions' LIST, then the manifest and its fate record. Before: the GC epoch
    and gc/ were listed too."""
    monkeypatch.setattr(plugins, "DEFAULT_PLUGINS",
                        (*plugins.DEFAULT_PLUGINS, ("slow", "slowtier")))
    plugins.reset_registry()
    name = f"ro-cli-{uuid.uuid4().hex}"
    try:
        with silt.open(f"memory://{name}") as w:
            w.put(b"k", b"v")
            w.commit()
        for argv in (["get", f"slow://memory/{name}", "k"],
                     ["scan", f"slow://memory/{name}"]):
            with slowtier.TIMELINE.operation() as op:
                assert main(argv) == 0
            kinds = [(kind, key.split("/")[0]) for wave in op.waves() for kind, key in wave]
            assert ("list", "epoch") not in kinds and ("list", "gc") not in kinds, op
            assert kinds.count(("list", "manifest")) == 1, op
        assert "v" in capsys.readouterr().out
    finally:
        plugins.reset_registry()
