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

import pytest
import silt
from silt.errors import NotFoundError
from silt.tiers import fdcache
from silt.tiers import file as file_tier
from silt.tiers.fdcache import FdCache
from silt.tiers.file import FileStore

pytestmark = pytest.mark.skipif(not hasattr(os, "pread"), reason="descriptors are cached on POSIX")


@pytest.fixture
def fds(monkeypatch: pytest.MonkeyPatch) -> FdCache:
    """A fresh process cache of 4 descriptors, so the tests see only their own."""
    cache = FdCache(4)
    monkeypatch.setattr(file_tier, "FDS", cache)
    yield cache
    cache.clear()


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
    # it: the next cache miss must say it is gone, as without the cache.
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
    assert all(entry.users == 0 for entry in cache._fds.values())
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
