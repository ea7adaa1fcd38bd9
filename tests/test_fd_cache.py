"""The ``file://`` tier's cache of open descriptors (:mod:`silt.tiers.fdcache`).

Ranged reads keep their descriptor open between calls; these tests hold that to the promises of
an uncached read: bounded, closed on close, a deleted or replaced object is reported as such
(in this process or by another), no read ever lands on another file's descriptor, and a forked
child starts clean.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest
import silt
from silt.errors import NotFoundError
from silt.tiers import fdcache
from silt.tiers import file as file_tier
from silt.tiers.fdcache import FdCache
from silt.tiers.file import FileStore

pytestmark = pytest.mark.skipif(not hasattr(os, "pread"), reason="descriptors are cached on POSIX")


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ranged reads open, in order."""
    seen: list[str] = []
    real = file_tier._open_fd

    def counting(path: str) -> int:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(file_tier, "_open_fd", counting)
    return seen


def open_fds_under(root: str) -> list[str]:
    """This process's descriptors of files under ``root`` (Linux /proc)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(root + os.sep):
            out.append(target)
    return out


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


def test_repeated_reads_open_the_file_once(
    fds: FdCache, opens: list[str], tmp_path: pathlib.Path
) -> None:
    store = FileStore(tmp_path)
    store.put("sst/a", b"0123456789")
    for i in range(5):
        assert store.get_range("sst/a", i, 3) == b"0123456789"[i:i + 3]
    assert len(opens) == 1
    assert fds.hits == 4


@needs_proc
def test_the_cache_is_bounded_and_closes_what_it_evicts(
    fds: FdCache, opens: list[str], tmp_path: pathlib.Path
) -> None:
    store = FileStore(tmp_path)
    for i in range(10):
        store.put(f"sst/{i}", bytes([i]) * 8)
    for _ in range(2):
        for i in range(10):
            assert store.get_range(f"sst/{i}", 0, 8) == bytes([i]) * 8
    assert len(fds) == 4
    assert len(open_fds_under(store.root)) == 4  # the evicted six were closed
    assert len(opens) == 20  # a cycle wider than the cache reopens every time, correctly


@needs_proc
def test_store_close_and_db_close_close_the_descriptors(
    fds: FdCache, tmp_path: pathlib.Path
) -> None:
    store = FileStore(tmp_path / "a")
    other = FileStore(tmp_path / "b")
    store.put("k", b"v")
    other.put("k", b"w")
    assert store.get_range("k", 0, 1) == b"v" and other.get_range("k", 0, 1) == b"w"
    store.close()
    assert open_fds_under(store.root) == []
    assert len(open_fds_under(other.root)) == 1  # another root's stay
    assert store.get_range("k", 0, 1) == b"v"  # a closed store reads again by reopening

    url = (tmp_path / "db").as_uri()
    # (the delta uploaded as an SST, not inline: its file is what the descriptors hold)
    with silt.open(url, settings=silt.Settings(inline_delta_bytes=0)) as db:
        for i in range(200):
            db.put(b"%05d" % i, b"x" * 100)
        db.commit()
    with silt.open(url) as db:
        assert db.get(b"00007") == b"x" * 100
        assert open_fds_under(str(tmp_path / "db"))
    assert open_fds_under(str(tmp_path / "db")) == []


def test_an_object_deleted_by_another_store_or_process_is_reported_gone(
    fds: FdCache, tmp_path: pathlib.Path
) -> None:
    store = FileStore(tmp_path)
    store.put("sst/a", b"abc")
    store.put("sst/b", b"def")
    assert store.get_range("sst/a", 0, 3) == b"abc"
    assert store.get_range("sst/b", 0, 3) == b"def"
    FileStore(tmp_path).delete_many(["sst/a"])  # another store object: this one is not told
    os.unlink(tmp_path / "sst" / "b")  # another process (GC elsewhere)
    for key in ("sst/a", "sst/b"):
        with pytest.raises(NotFoundError, match="does not exist"):
            store.get_range(key, 0, 3)
    assert len(fds) == 0


def test_an_object_replaced_elsewhere_is_read_anew(fds: FdCache, tmp_path: pathlib.Path) -> None:
    store = FileStore(tmp_path)
    store.put("k", b"old")
    assert store.get_range("k", 0, 3) == b"old"
    FileStore(tmp_path).put("k", b"new")  # renamed over the cached file
    assert store.get_range("k", 0, 3) == b"new"
    store.put("k", b"3rd")
    assert store.get_range("k", 0, 3) == b"3rd"


@needs_proc
def test_a_sweep_closes_descriptors_of_files_deleted_elsewhere(
    fds: FdCache, tmp_path: pathlib.Path
) -> None:
    # A kept descriptor holds a deleted file's space: a sweep gives it back although nobody
    # reads that object again.
    store = FileStore(tmp_path)
    store.put("sst/a", b"abc")
    store.put("sst/b", b"def")
    store.get_range("sst/a", 0, 1)
    store.get_range("sst/b", 0, 1)
    os.unlink(tmp_path / "sst" / "a")
    assert fds.sweep(force=True) == 1
    assert open_fds_under(store.root) == [str(tmp_path / "sst" / "b")]
    assert fds.sweep() == 0  # at most once per SWEEP_SECONDS unless forced


def test_a_collected_sst_is_reported_by_a_reader_at_an_old_version(
    fds: FdCache, tmp_path: pathlib.Path
) -> None:
    # The reader's SST was read (its descriptor cached) before another process's GC removed
    # it: a cache miss after fdcache.RECHECK_SECONDS must say it is gone, as without the cache
    # (sooner, the direct read may still return the deleted SST's own bytes).
    url = (tmp_path / "db").as_uri()
    settings = silt.Settings(block_cache_bytes=0, compaction="none")
    with silt.open(url, settings=settings) as db:
        for i in range(2000):
            db.put(b"%06d" % i, b"v" * 64)
        db.commit()
    with silt.open(url, settings=settings) as reader:
        assert reader.get(b"000001") == b"v" * 64
        for path in (tmp_path / "db" / "sst").rglob("*"):
            if path.is_file():
                path.unlink()
        time.sleep(fdcache.RECHECK_SECONDS * 1.5)
        with pytest.raises(NotFoundError, match=r"is gone.*Garbage collection removes"):
            reader.get(b"001999")


def test_a_direct_reader_reads_like_get_range(
    fds: FdCache, opens: list[str], tmp_path: pathlib.Path
) -> None:
    store = FileStore(tmp_path)
    data = bytes(range(256)) * 40
    store.put("sst/a", data)
    read = store.direct_reader("sst/a")
    assert read is not None
    for start, length in ((0, 10), (100, 5000), (10_000, 500), (len(data), 4), (0, 0)):
        assert read(start, length) == store.get_range("sst/a", start, length)
    assert len(opens) == 1  # both share the process's descriptor
    with pytest.raises(NotFoundError, match="does not exist"):
        store.direct_reader("sst/missing")(0, 1)  # type: ignore[misc]


def test_a_direct_read_of_an_object_deleted_in_this_process_fails_at_once(
    fds: FdCache, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lenient checks trust a descriptor for RECHECK_SECONDS: far longer than this test, so only
    # the invalidation by the delete can make these reads fail.
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    store = FileStore(tmp_path / "db")
    for key in ("sst/a", "sst/b", "sst/c"):
        store.put(key, b"abc")
    reads = {key: store.direct_reader(key) for key in ("sst/a", "sst/b", "sst/c")}
    for read in reads.values():
        assert read(0, 3) == b"abc"  # type: ignore[misc]
        assert read(0, 3) == b"abc"  # type: ignore[misc]  # a lenient hit
    store.delete_many(["sst/a"])  # the same store
    FileStore(tmp_path / "db").delete_many(["sst/b"])  # another store object, same root
    FileStore(tmp_path).delete_many(["db/sst/c"])  # the same file under another identity
    for key, read in reads.items():
        with pytest.raises(NotFoundError, match="does not exist"):
            read(0, 3)  # type: ignore[misc]
        with pytest.raises(NotFoundError, match="does not exist"):
            store.get_range(key, 0, 3)


def reader_of_abc(tmp_path: pathlib.Path) -> tuple[FileStore, Callable[[int, int], bytes]]:
    """A file store holding ``sst/a`` = ``b"abc"`` and its direct reader."""
    store = FileStore(tmp_path)
    store.put("sst/a", b"abc")
    read = store.direct_reader("sst/a")
    assert read is not None
    return store, read


def test_a_direct_read_racing_with_an_in_process_delete_is_not_trusted_after_it(
    fds: FdCache, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    store, read = reader_of_abc(tmp_path)
    real_unlink = os.unlink

    def unlink_after_a_racing_read(path: str) -> None:
        # another thread reads just before the name goes: it reopens and checks the file
        assert read(0, 3) == b"abc" and read(0, 3) == b"abc"
        real_unlink(path)

    monkeypatch.setattr(file_tier.os, "unlink", unlink_after_a_racing_read)
    store.delete_many(["sst/a"])
    monkeypatch.setattr(file_tier.os, "unlink", real_unlink)
    with pytest.raises(NotFoundError):
        read(0, 3)


def test_a_direct_read_rechecks_a_file_deleted_elsewhere_within_recheck_seconds(
    fds: FdCache, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, read = reader_of_abc(tmp_path)
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    assert read(0, 3) == b"abc"  # opens and caches the descriptor
    assert read(0, 3) == b"abc"  # checked (a new descriptor is never trusted unchecked)
    checks = []
    real_fstat = os.fstat
    monkeypatch.setattr(fdcache.os, "fstat", lambda fd: checks.append(fd) or real_fstat(fd))
    assert read(0, 3) == b"abc" and checks == []  # trusted: no fstat
    os.unlink(tmp_path / "sst" / "a")  # another process (GC elsewhere)
    assert read(0, 3) == b"abc"  # the deleted, immutable object's own bytes, until a recheck
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 0.0)  # the bound has passed
    with pytest.raises(NotFoundError):
        read(0, 3)
    assert checks and len(fds) == 0


def test_get_range_checks_exactly_after_lenient_reads(
    fds: FdCache, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    store, read = reader_of_abc(tmp_path)
    assert read(0, 3) == b"abc" and read(0, 3) == b"abc"
    os.unlink(tmp_path / "sst" / "a")  # another process
    with pytest.raises(NotFoundError):
        store.get_range("sst/a", 0, 3)  # what all_exist and friends rely on
    with pytest.raises(NotFoundError):
        store.get_range("sst/a", 0, 0)


def test_a_new_descriptor_is_checked_by_its_first_lenient_borrow(tmp_path: pathlib.Path) -> None:
    cache = FdCache(4)
    (tmp_path / "f").write_bytes(b"x")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    cache.release(cache.adopt("f", fd))
    os.unlink(tmp_path / "f")  # between the caller's open and its first read
    assert cache.borrow("f", exact=False) is None
    assert len(cache) == 0


def test_stores_without_a_fast_path_have_no_direct_reader(tmp_path: pathlib.Path) -> None:
    from silt.metrics import MeteredStore, Metrics
    from silt.tiers.memory import MemoryStore

    memory = MemoryStore("memory://direct-reader-test")
    assert memory.direct_reader("k") is None
    assert MeteredStore(memory, Metrics()).direct_reader("k") is None


def test_a_subclass_that_overrides_get_range_has_no_direct_reader(tmp_path: pathlib.Path) -> None:
    class Counting(FileStore):
        def get_range(self, key: str, start: int, length: int) -> bytes:
            return super().get_range(key, start, length)

    assert Counting(tmp_path).direct_reader("sst/a") is None
    assert FileStore(tmp_path).direct_reader("sst/a") is not None


def test_metered_direct_reads_are_counted(fds: FdCache, tmp_path: pathlib.Path) -> None:
    from silt.metrics import MeteredStore, Metrics

    metrics = Metrics()
    store = MeteredStore(FileStore(tmp_path), metrics)
    store.put("sst/a", b"abcdef")
    read = store.direct_reader("sst/a")
    assert read is not None and read(1, 3) == b"bcd" and read(4, 9) == b"ef"
    store.delete_many(["sst/a"])
    with pytest.raises(NotFoundError):
        read(0, 1)
    assert metrics.requests[("read", "RANGE_GET")] == [3, 5]  # the failed read is billed too


def test_opening_a_db_asks_for_no_direct_reader_until_an_sst_is_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = (tmp_path / "db").as_uri()
    settings = silt.Settings(block_cache_bytes=0, compaction="none", inline_delta_bytes=0)
    with silt.open(url, settings=settings) as db:
        for n in range(3):  # three SSTs
            db.put(b"k%d" % n, b"v")
            db.commit()
    asked: list[str] = []
    real = FileStore.direct_reader

    def spying(self: FileStore, key: str):  # type: ignore[no-untyped-def]
        asked.append(key)
        return real(self, key)

    monkeypatch.setattr(FileStore, "direct_reader", spying)
    with silt.open(url, settings=settings) as reader:
        assert asked == []  # opening cost stays per manifest, not per SST read path
        assert reader.get(b"k1") == b"v"
        assert reader.get(b"k1") == b"v"
        assert 1 <= len(asked) <= 3 and len(set(asked)) == len(asked)  # once per SST


def test_db_reads_through_the_direct_reader_and_sees_in_process_gc(
    fds: FdCache, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    url = (tmp_path / "db").as_uri()
    settings = silt.Settings(block_cache_bytes=0, compaction="none")
    with silt.open(url, settings=settings) as db:
        for i in range(2000):
            db.put(b"%06d" % i, b"v" * 64)
        db.commit()
    calls = []
    real = FileStore.direct_reader

    def spying(self: FileStore, key: str):  # type: ignore[no-untyped-def]
        read = real(self, key)
        return lambda start, length: calls.append(key) or read(start, length)

    monkeypatch.setattr(FileStore, "direct_reader", spying)
    with silt.open(url, settings=settings) as reader:
        assert reader.get(b"000001") == b"v" * 64
        assert reader.multi_get([b"000002", b"001500"]) == [b"v" * 64] * 2
        assert calls and all(key.startswith("sst/") for key in calls)
        ssts = [info.key for info in FileStore(tmp_path / "db").list("sst/")]
        FileStore(tmp_path).delete_many([f"db/{key}" for key in ssts])  # GC in this process
        with pytest.raises(NotFoundError, match=r"is gone.*Garbage collection removes"):
            reader.get(b"001999")


def test_concurrent_reads_with_evictions_never_read_another_file(tmp_path: pathlib.Path,
                                                                  monkeypatch) -> None:
    # One descriptor for eight files and eight threads: every eviction closes a descriptor
    # another thread may be reading through; the use count must keep it open until then.
    cache = FdCache(1)
    monkeypatch.setattr(file_tier, "FDS", cache)
    store = FileStore(tmp_path)
    for i in range(8):
        store.put(f"o/{i}", bytes([i]) * 4096)
    errors: list[str] = []

    def reader(i: int) -> None:
        for n in range(300):
            j = (i + n) % 8
            got = store.get_range(f"o/{j}", n % 4000, 64)
            if got != bytes([j]) * 64:
                errors.append(f"o/{j}: {got[:4]!r}")
                return

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache) <= 1
    assert all(entry.users == 0 for entry in cache.entries.values())
    cache.clear()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_with_an_empty_cache(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(f"""
        import os, sys
        from silt.tiers import fdcache
        from silt.tiers.file import FileStore
        store = FileStore({str(tmp_path)!r})
        store.put("k", b"parent")
        assert store.get_range("k", 0, 6) == b"parent"
        assert len(fdcache.FDS) == 1
        pid = os.fork()
        if pid == 0:
            ok = len(fdcache.FDS) == 0 and store.get_range("k", 0, 6) == b"parent"
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "child saw the parent's descriptors"
        assert len(fdcache.FDS) == 1 and store.get_range("k", 0, 6) == b"parent"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=os.environ.copy(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_caching_off_still_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    cache = FdCache(0)
    monkeypatch.setattr(file_tier, "FDS", cache)
    store = FileStore(tmp_path)
    store.put("k", b"abc")
    assert store.get_range("k", 1, 2) == b"bc"
    assert len(cache) == 0


def test_default_bound_leaves_most_descriptors_to_the_process() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert 1 <= fdcache.MAX_OPEN <= 128
    if soft != resource.RLIM_INFINITY:
        assert fdcache.MAX_OPEN <= max(1, soft // 8)


def test_fd_twins_hold_the_same_fields() -> None:
    """``Fd`` is the compiled twin where built (its fields in C for the compiled block reads),
    else the pure one: both start alike, take the same writes, and the cache makes ``Fd``."""
    from silt._ext import load

    compiled = load()
    assert fdcache.COMPILED is (compiled is not None)
    assert fdcache.Fd is (compiled.Fd if compiled is not None else fdcache.Fd_py)
    for cls in {fdcache.Fd, fdcache.Fd_py}:
        e = cls(7)
        assert (e.fd, e.users, e.dropped, e.checked, e.epoch) == (7, 1, False, float("-inf"), -1)
        e = cls(9, 1.5, 3)
        assert (e.checked, e.epoch) == (1.5, 3)
        e.users += 2
        e.dropped = True
        e.checked = 2.25
        e.epoch = 4
        assert (e.fd, e.users, e.dropped, e.checked, e.epoch) == (9, 3, True, 2.25, 4)
    cache = FdCache(2)
    r, w = os.pipe()
    try:
        entry = cache.adopt("x", r)
        assert type(entry) is fdcache.Fd and entry.users == 1
        cache.release(entry)
        assert entry.users == 0 and not entry.dropped
    finally:
        cache.clear()
        os.close(w)
