"""The ``file://`` tier: the conformance suite plus crash safety, races and URL parsing."""

from __future__ import annotations

import errno
import multiprocessing
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from silt.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    SiltError,
    StoreError,
    TransientStoreError,
)
from silt.store import ObjectInfo
from silt.testing import StoreConformance, exception_texts
from silt.tiers import file as file_tier
from silt.tiers.file import TMP_DIR, FileStore


class TestFileStoreConformance(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: pathlib.Path) -> FileStore:
        return FileStore(tmp_path / "root")


@pytest.fixture
def store(tmp_path: pathlib.Path) -> FileStore:
    return FileStore(tmp_path / "root")


def tmp_files(store: FileStore) -> list[str]:
    return sorted(os.listdir(os.path.join(store.root, TMP_DIR)))


# --- construction and URLs ---------------------------------------------------------------------


def test_root_is_created_with_parents_on_first_write(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "a" / "b" / "c"
    store = FileStore(root)
    # Opening (and reading) changes nothing on disk: readers and the CLI leave roots alone.
    assert list(store.list()) == []
    with pytest.raises(NotFoundError):
        store.get("x")
    assert not (tmp_path / "a").exists()
    store.put("k", b"v")
    assert root.is_dir()
    assert (root / TMP_DIR).is_dir()
    assert store.get("k") == b"v"
    assert store.root == str(root)
    assert store.url == root.as_uri()
    assert repr(store) == f"FileStore({root.as_uri()!r})"


def test_root_that_is_a_file_is_rejected(tmp_path: pathlib.Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(StoreError, match="not a directory"):
        FileStore(tmp_path / "f")


def test_relative_root_is_made_absolute(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = FileStore("rel")
    assert store.root == str(tmp_path / "rel")


@pytest.mark.parametrize("bad", [None, 3, b"/tmp/x"])
def test_root_type_is_checked(bad: object) -> None:
    with pytest.raises(InvalidTypeError):
        FileStore(bad)  # type: ignore[arg-type]


def test_from_url(tmp_path: pathlib.Path) -> None:
    store = FileStore.from_url(f"file://{tmp_path}/x", {})
    assert store.root == str(tmp_path / "x")
    store.put("k", b"v")
    again = FileStore.from_url(store.url, {})
    assert again.get("k") == b"v"
    assert FileStore.from_url(f"file://localhost{tmp_path}/x", {}).root == store.root
    assert FileStore.from_url(f"file://LOCALHOST{tmp_path}/x", {}).root == store.root


def test_from_url_decodes_percent_escapes(tmp_path: pathlib.Path) -> None:
    store = FileStore.from_url(f"file://{tmp_path}/my%20state", {})
    assert store.root == str(tmp_path / "my state")
    assert store.url == (tmp_path / "my state").as_uri()
    assert FileStore.from_url(store.url, {}).root == store.root


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file://tmp/x", "names the host 'tmp'"),
        ("file://./x", "relative path"),
        ("file://", "names no path"),
        ("file://server.example.com/share", "mount the share"),
        ("s3://bucket/prefix", "file:// URLs"),
        ("/tmp/x", "not a store URL"),
    ],
)
def test_from_url_rejects_bad_urls(url: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        FileStore.from_url(url, {})
    if url.startswith("file://"):
        assert "file:///" in str(info.value)  # says how to write it


def test_from_url_rejects_options(tmp_path: pathlib.Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"unknown option\(s\) 'fsync'.*accepts: none"):
        FileStore.from_url(f"file://{tmp_path}", {"fsync": "0"})
    with pytest.raises(InvalidArgumentError, match="'mode'"):
        FileStore.from_url(f"file://{tmp_path}?mode=fast", {})


def test_registers_through_the_hook() -> None:
    added: dict[str, object] = {}

    class Registry:
        def add_tier(self, scheme: str, factory: object) -> None:
            added[scheme] = factory

    file_tier.silt_register(Registry())
    assert added == {"file": FileStore.from_url}


# --- keys --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["", "../escape", "a/../../b", "/abs", "a\\b", "a\x00b", "a//b", "a/", "./a", ".", "..",
     ".tmp/x", ".tmp"],
)
def test_invalid_keys_are_rejected(store: FileStore, key: str) -> None:
    with pytest.raises(InvalidArgumentError):
        store.put(key, b"x")
    with pytest.raises(InvalidArgumentError):
        store.put_if_absent(key, b"x")
    with pytest.raises(InvalidArgumentError):
        store.get(key)
    with pytest.raises(InvalidArgumentError):
        store.delete_many([key])
    assert not os.path.exists(os.path.join(os.path.dirname(store.root), "escape"))


def test_bad_argument_types(store: FileStore) -> None:
    with pytest.raises(InvalidTypeError):
        store.put("k", "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        store.get(1)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        store.delete_many("k")
    with pytest.raises(InvalidTypeError):
        store.get_range("k", 1.5, 2)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        store.get_range("k", -1, 2)
    with pytest.raises(InvalidTypeError):
        store.list(None)  # type: ignore[arg-type]


def test_bytes_like_data_is_accepted(store: FileStore) -> None:
    store.put("a", bytearray(b"ba"))
    assert store.put_if_absent("b", memoryview(b"mv")) is True
    assert store.get("a") == b"ba"
    assert store.get("b") == b"mv"


def test_delete_validates_every_key_before_deleting(store: FileStore) -> None:
    store.put("k", b"v")
    with pytest.raises(InvalidArgumentError):
        store.delete_many(["k", "../x"])
    assert store.get("k") == b"v"


def test_object_and_directory_conflict(store: FileStore) -> None:
    store.put("a", b"file")
    with pytest.raises(StoreError, match="both an object and a directory"):
        store.put("a/b", b"x")
    with pytest.raises(StoreError, match="both an object and a directory"):
        store.put_if_absent("a/b", b"x")
    store.put("d/e", b"x")
    with pytest.raises(StoreError, match="both an object and a directory"):
        store.put("d", b"x")
    with pytest.raises(StoreError, match="both an object and a directory"):
        store.put_if_absent("d", b"x")
    with pytest.raises(NotFoundError):
        store.get("d")
    store.delete_many(["d", "a/b"])  # not objects: ignored
    assert [i.key for i in store.list()] == ["a", "d/e"]
    assert tmp_files(store) == []


# --- atomicity and crash safety ----------------------------------------------------------------


@pytest.mark.parametrize("method", ["put", "put_if_absent"])
def test_failed_fsync_leaves_no_file(
    store: FileStore, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StoreError, match="I/O error") as info:
        getattr(store, method)("manifest/00000000000000000001", b"data")
    assert not isinstance(info.value, TransientStoreError)
    monkeypatch.undo()
    assert not os.path.exists(os.path.join(store.root, "manifest", "00000000000000000001"))
    assert list(store.list()) == []
    assert tmp_files(store) == []  # the temp file is removed on failure


def test_failed_replace_keeps_old_version(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put("k", b"old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(StoreError, match="free space"):
        store.put("k", b"new")
    monkeypatch.undo()
    assert store.get("k") == b"old"
    assert tmp_files(store) == []


def test_failed_write_midway_leaves_no_file(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = open

    class HalfWriter:
        def __init__(self, f: object) -> None:
            self.f = f

        def __enter__(self) -> HalfWriter:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> int:
            self.f.write(data[: len(data) // 2])  # type: ignore[attr-defined]
            raise OSError(errno.ENOSPC, "No space left on device")

    def fake_open(path: str, mode: str = "r", *args: object, **kwargs: object) -> object:
        f = real_open(path, mode, *args, **kwargs)  # type: ignore[call-overload]
        return HalfWriter(f) if mode == "xb" else f

    monkeypatch.setattr(file_tier, "open", fake_open, raising=False)
    with pytest.raises(StoreError, match="No space left"):
        store.put_if_absent("sst/x.sst", b"0123456789")
    monkeypatch.undo()
    assert list(store.list()) == []
    assert tmp_files(store) == []
    assert store.put_if_absent("sst/x.sst", b"0123456789") is True


SILT_SRC = str(pathlib.Path(file_tier.__file__).resolve().parents[2])

CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from silt.tiers.file import FileStore

    root, method, fatal = sys.argv[1], sys.argv[2], sys.argv[3]
    store = FileStore(root)
    real = getattr(os, fatal)

    def crash(*args, **kwargs):
        os._exit(17)  # the process dies between writing the temp file and publishing it

    setattr(os, fatal, crash)
    getattr(store, method)("manifest/00000000000000000002", b"complete manifest")
    os._exit(0)
    """
)


@pytest.mark.parametrize(("method", "fatal"), [("put", "replace"), ("put_if_absent", "link")])
def test_crash_before_publish_leaves_only_temp_garbage(
    store: FileStore, method: str, fatal: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, store.root, method, fatal],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([SILT_SRC, *sys.path])},
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 17, proc.stderr.decode()
    assert len(tmp_files(store)) == 1  # the crashed writer's complete temp file
    assert list(store.list()) == []
    assert list(store.list("manifest/")) == []
    with pytest.raises(NotFoundError):
        store.get("manifest/00000000000000000002")
    # The garbage does not disturb later writers.
    assert store.put_if_absent("manifest/00000000000000000002", b"mine") is True
    assert store.get("manifest/00000000000000000002") == b"mine"
    assert [i.key for i in store.list()] == ["manifest/00000000000000000002"]


def test_file_system_without_hard_links(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    with pytest.raises(StoreError, match="needs a file system with hard links"):
        store.put_if_absent("k", b"v")
    monkeypatch.undo()
    assert list(store.list()) == []
    assert tmp_files(store) == []


def test_put_if_absent_on_existing_key_writes_nothing(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.put("k", b"v")
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    assert store.put_if_absent("k", b"other") is False
    assert fsyncs == []
    assert store.get("k") == b"v"


def test_stale_temp_files_are_ignored(store: FileStore) -> None:
    tmp = os.path.join(store.root, TMP_DIR)
    os.makedirs(tmp)
    for name in ("123-456-deadbeef.tmp", "sub"):
        open(os.path.join(tmp, name), "wb").close()
    store.put("k", b"v")
    assert list(store.list()) == [ObjectInfo("k", 1)]
    assert list(store.list(".tmp")) == []
    assert list(store.list(".tmp/")) == []
    assert list(store.list("", start_after=".")) == [ObjectInfo("k", 1)]


def test_temp_dir_removed_by_hand_is_recreated(store: FileStore) -> None:
    store.put("first", b"0")
    os.rmdir(os.path.join(store.root, TMP_DIR))
    store.put("k", b"v")
    assert store.get("k") == b"v"


def test_parent_directory_removed_by_hand_is_recreated(store: FileStore) -> None:
    store.put("dir/a", b"1")
    store.delete_many(["dir/a"])
    os.rmdir(os.path.join(store.root, "dir"))
    store.put("dir/b", b"2")
    assert store.put_if_absent("dir/c", b"3") is True
    assert [i.key for i in store.list()] == ["dir/b", "dir/c"]


def _race_worker(root: str, index: int, barrier: object, results: object) -> None:
    store = FileStore(root)
    payload = f"process-{index}-".encode() * 1000
    barrier.wait(timeout=60)  # type: ignore[attr-defined]
    won = store.put_if_absent("manifest/00000000000000000042", payload)
    results.put((index, won))  # type: ignore[attr-defined]


def test_put_if_absent_race_across_processes(store: FileStore) -> None:
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_race_worker, args=(store.root, i, barrier, results))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = dict(results.get(timeout=120) for _ in range(n))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    winners = [i for i, won in outcomes.items() if won]
    assert len(winners) == 1, outcomes
    assert store.get("manifest/00000000000000000042") == f"process-{winners[0]}-".encode() * 1000
    assert tmp_files(store) == []


# --- listing -----------------------------------------------------------------------------------


def test_list_walks_only_the_prefix_directory(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ["manifest/00000000000000000001", "manifest/00000000000000000002",
                "sst/a.sst", "sst/b.sst", "kg-0-1/sst/c.sst", "compaction/x"]:
        store.put(key, b"v")
    scanned: list[str] = []
    real_scandir = os.scandir

    def recording_scandir(path: str) -> object:
        scanned.append(os.path.relpath(path, store.root))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)
    assert [i.key for i in store.list("manifest/000")] == [
        "manifest/00000000000000000001", "manifest/00000000000000000002"]
    assert scanned == ["manifest"]
    scanned.clear()
    assert [i.key for i in store.list("kg-0-1/sst/")] == ["kg-0-1/sst/c.sst"]
    assert scanned == [os.path.join("kg-0-1", "sst")]
    scanned.clear()
    assert [i.key for i in store.list("kg")] == ["kg-0-1/sst/c.sst"]
    assert scanned == [".", "kg-0-1", os.path.join("kg-0-1", "sst")]
    scanned.clear()
    assert [i.key for i in store.list(start_after="manifest/00000000000000000002")] == [
        "sst/a.sst", "sst/b.sst"]
    assert "compaction" not in scanned and "kg-0-1" not in scanned
    scanned.clear()
    assert list(store.list("nothing/here/")) == []
    assert list(store.list("../")) == []
    assert list(store.list("/abs/")) == []


def test_list_is_lazy(store: FileStore) -> None:
    store.put("a/1", b"1")
    store.put("b/1", b"1")
    listing = store.list()
    assert next(listing) == ObjectInfo("a/1", 1)
    # Directories are read when the listing reaches them, not up front.
    store.delete_many(["b/1"])
    store.put("b/2", b"22")
    assert list(listing) == [ObjectInfo("b/2", 2)]


def test_list_skips_entries_that_are_not_objects(store: FileStore) -> None:
    store.put("k", b"v")
    os.mkdir(os.path.join(store.root, "empty-dir"))
    if hasattr(os, "mkfifo"):
        os.mkfifo(os.path.join(store.root, "fifo"))
    assert list(store.list()) == [ObjectInfo("k", 1)]


# --- error mapping -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "cls", "hint"),
    [
        (errno.EACCES, StoreError, "readable and writable"),
        (errno.ENOSPC, StoreError, "free space"),
        (errno.EIO, StoreError, "I/O error"),
        (errno.EROFS, StoreError, "read-only"),
        (errno.EAGAIN, TransientStoreError, "temporary"),
        (errno.EINTR, TransientStoreError, "temporary"),
    ],
)
def test_os_errors_are_mapped(
    store: FileStore, monkeypatch: pytest.MonkeyPatch, code: int, cls: type, hint: str
) -> None:
    store.put("k", b"v")

    def failing_open(*args: object, **kwargs: object) -> object:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(file_tier, "open", failing_open, raising=False)
    monkeypatch.setattr(file_tier, "_open_fd", failing_open)  # ranged reads use os.open
    for call in (lambda: store.get("k"), lambda: store.get_range("k", 0, 1),
                 lambda: store.put("k", b"w")):
        with pytest.raises(cls, match=hint) as info:
            call()
        assert type(info.value) is cls
        assert store.root in str(info.value)
        assert isinstance(info.value.__cause__, OSError)
    monkeypatch.undo()
    assert store.get("k") == b"v"


# --- listing against a model -------------------------------------------------------------------

_segment = st.text(alphabet="ab0-.~_", min_size=1, max_size=3).filter(
    lambda s: s not in (".", "..")
)
_key = st.lists(_segment, min_size=1, max_size=3).map("/".join).filter(
    lambda k: not k.startswith(".tmp")
)
_probe = st.text(alphabet="ab0-./~_", max_size=6)


def _no_dir_conflicts(keys: set[str]) -> bool:
    return not any(other.startswith(key + "/") for key in keys for other in keys)


@settings(max_examples=150, deadline=None)
@given(
    keys=st.sets(_key, max_size=25).filter(_no_dir_conflicts),
    prefix=_probe,
    start_after=st.none() | _probe,
)
def test_list_matches_a_sorted_model(keys: set[str], prefix: str, start_after: str | None) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = FileStore(root)
        for key in keys:
            store.put(key, key.encode())
        expected = [
            ObjectInfo(k, len(k.encode()))
            for k in sorted(keys)
            if k.startswith(prefix) and (start_after is None or k > start_after)
        ]
        assert list(store.list(prefix, start_after)) == expected


# --- no secret in any message ------------------------------------------------------------------

#: A password or token that must never appear in any message, repr or chained exception.
SENTINEL = "hunter2-SENTINEL-pw"


def test_no_secret_from_a_url_query_reaches_a_message(tmp_path, capsys) -> None:
    """Whatever a URL's query holds (this tier takes no options; another tier's may hold a key)
    is never echoed: not by the tier, not by silt.open, not by the CLI."""
    import silt
    from silt.cli import main

    for url in (f"file://{tmp_path}?token={SENTINEL}", f"file://{tmp_path}/x?password={SENTINEL}",
                f"file://relative/x?token={SENTINEL}", f"s3://x?token={SENTINEL}"):
        for attempt in (lambda url=url: FileStore.from_url(url), lambda url=url: silt.open(url)):
            with pytest.raises(SiltError) as info:
                attempt()
            for text in exception_texts(info.value):
                assert SENTINEL not in text, text
    capsys.readouterr()
    for argv in (["ls", f"file://{tmp_path}/missing?token={SENTINEL}"],
                 ["verify", f"file://{tmp_path}?token={SENTINEL}"]):
        assert main(argv) != 0
        out, err = capsys.readouterr()
        assert SENTINEL not in out + err and "Traceback" not in out + err
    with silt.open(f"file://{tmp_path}/db") as db:
        db.put(b"k", b"v")
        db.commit()
    assert main(["ls", f"file://{tmp_path}/db?token={SENTINEL}"]) != 0
    assert main(["get", f"file://{tmp_path}/db", "nokey"]) == 1
    out, err = capsys.readouterr()
    assert SENTINEL not in out + err
