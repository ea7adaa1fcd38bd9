"""The ``file://`` tier's block reads (:mod:`silt.tiers.blockread`): one ``pread`` through the
process's cached descriptor, in both twins. A read returns the object's own bytes (short at its
end, so damage is a short read: tests/test_mapped_damage.py), maps nothing, makes no ``fstat``
and no Python call of the tier's per block (compiled: none at all), sees a delete made in this
process at once, and a failed read drops the descriptor and reopens the path on the next read.
"""

from __future__ import annotations

import os
import pathlib
import random
import sys
import threading
from collections import Counter

import pytest
import silt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from silt.errors import NotFoundError, StoreError
from silt.sst import reader as reader_mod
from silt.tiers import blockread, fdcache
from silt.tiers import file as file_tier
from silt.tiers.fdcache import FdCache
from silt.tiers.file import FileStore

try:
    from silt import _speedups as C
except ImportError:  # pragma: no cover - the pure-Python run of an unbuilt checkout
    C = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(fdcache.MAX_OPEN <= 0, reason="descriptors are cached (POSIX)")

TWINS = ["pure"] + (["compiled"] if C is not None else [])


def twin_of(name: str) -> type:
    return blockread.CachedReads_py if name == "pure" else C.CachedReads


def reader(store: FileStore, key: str, twin: str):
    """``store``'s direct reader of ``key`` built on the given twin (the same cache, identity
    and slow path as the one the store selected)."""
    read = store.direct_reader(key)
    assert isinstance(read, blockread.CachedReads)
    return twin_of(twin)(read.cache, read.ident, read.slow)


def mapped(path: pathlib.Path) -> int:
    """How many maps of ``path`` this process has (Linux /proc/self/maps; 0 elsewhere)."""
    if not os.path.exists("/proc/self/maps"):
        return 0
    target = str(path.resolve())
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.rstrip().endswith(target))


def profiled(fn) -> tuple[Counter, Counter]:
    """Python-level calls ``(file, function)`` and calls of built-in functions (by name) made
    while ``fn()`` runs."""
    calls: Counter = Counter()
    builtins: Counter = Counter()

    def prof(frame, event, arg) -> None:
        if event == "call":
            calls[(pathlib.Path(frame.f_code.co_filename).name, frame.f_code.co_name)] += 1
        elif event == "c_call":
            builtins[getattr(arg, "__name__", repr(arg))] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls, builtins


def test_the_selected_twin_is_the_stores() -> None:
    want = C.CachedReads if blockread.COMPILED else blockread.CachedReads_py
    assert blockread.CachedReads is want


@pytest.mark.parametrize("twin", TWINS)
def test_block_reads_are_the_objects_own_bytes_and_map_nothing(
    fds: FdCache, tmp_path: pathlib.Path, twin: str
) -> None:
    store = FileStore(tmp_path)
    data = os.urandom(50_000)
    store.put("sst/a", data)
    read = reader(store, "sst/a", twin)
    assert read(0, 10) == data[:10]  # opens and checks the descriptor (the slow path)
    hits = fds.hits
    ranges = [(5, 100), (40_000, 9_000), (49_990, 100), (60_000, 10), (0, 0), (49_999, 1)]
    got = [read(start, length) for start, length in ranges]
    assert all(type(g) is bytes for g in got)
    assert got == [data[s:s + n] for s, n in ranges]
    assert fds.hits == hits + len(ranges)  # every one a lenient hit of the cached descriptor
    assert mapped(tmp_path / "sst" / "a") == 0
    assert [e.users for e in fds.entries.values()] == [0]


@pytest.mark.parametrize("twin", TWINS)
def test_a_block_read_makes_no_fstat_and_no_python_call_of_the_tier(
    fds: FdCache, tmp_path: pathlib.Path, twin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cause of slow cold reads: a block read was a Python closure that borrowed the
    descriptor (a frame), checked the file's size with ``fstat`` and copied out of a map (a
    frame) and released it (a frame), about 7 us a block. Now it is one ``pread``: pure, one
    frame (``CachedReads.__call__``) and no ``fstat``; compiled over the compiled cache, no
    Python call at all (the cache's borrow and release are C calls)."""
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)  # no check falls due here
    store = FileStore(tmp_path)
    data = os.urandom(100_000)
    store.put("sst/a", data)
    read = reader(store, "sst/a", twin)
    read(0, 1)  # opens the descriptor
    read(0, 1)  # its first lenient borrow checks it (fstat)
    rnd = random.Random(7)
    for _ in range(50):  # inside the object (a read past its end is a second, empty pread)
        start, length = rnd.randrange(91_000), rnd.randrange(1, 9_000)
        out: list[bytes] = []
        calls, builtins = profiled(lambda out=out, start=start, length=length:
                                   out.append(read(start, length)))
        assert out == [data[start:start + length]]
        ours = set(calls) - {("test_file_block_reads.py", "<lambda>")}
        assert "fstat" not in builtins, builtins
        if twin == "compiled" and type(fds) is C.FdCache:  # the borrow and release in C
            assert ours == set() and set(builtins) <= {"append", "setprofile"}, (calls, builtins)
        elif twin == "compiled":  # over the pure cache (a pure run): its lend and release
            assert ours == {("fdcache.py", "lend"), ("fdcache.py", "release")}, calls
        else:
            assert ours == {("blockread.py", "__call__")}, calls
            assert builtins["pread"] == 1, builtins


def test_a_cold_get_makes_no_call_into_the_file_tier(fds: FdCache, tmp_path: pathlib.Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A get that misses the block cache reads its block with no Python frame of the
    ``file://`` tier or of the descriptor cache (either twin), and compiled with none besides
    ``DB.get``'s own."""
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    s = silt.Settings(block_bytes=512, block_cache_bytes=4096, compaction="none")
    keys = [b"k%06d" % i for i in range(5_000)]
    with silt.open(tmp_path.as_uri(), settings=s) as db:
        db.put_many(keys, [k[::-1] for k in keys])
        db.commit()
    with silt.open(tmp_path.as_uri(), settings=s) as db:
        assert db.get(keys[0]) == keys[0][::-1]  # the tail, the descriptor and its check
        rnd = random.Random(5)
        for key in rnd.sample(keys, 40):
            out: list = []
            calls, builtins = profiled(lambda key=key, out=out: out.append(db.get(key)))
            assert out == [key[::-1]]
            files = {f for f, _ in calls}
            assert not files & {"file.py", "fdcache.py", "fileio.py"}, calls
            assert "fstat" not in builtins, builtins
            if reader_mod.COMPILED and blockread.COMPILED:
                ours = set(calls) - {("db.py", "get"), ("test_file_block_reads.py", "<lambda>")}
                assert {f for f, _ in ours} <= {"reader.py", "metrics.py"}, calls


@pytest.mark.parametrize("twin", TWINS)
def test_a_file_that_shrank_reads_short(fds: FdCache, tmp_path: pathlib.Path, twin: str) -> None:
    store = FileStore(tmp_path)
    data = os.urandom(30_000)
    store.put("sst/a", data)
    read = reader(store, "sst/a", twin)
    assert read(20_000, 5_000) == data[20_000:25_000]
    os.truncate(tmp_path / "sst" / "a", 22_000)  # damage from outside silt
    assert read(20_000, 5_000) == data[20_000:22_000]
    assert read(25_000, 100) == b""
    os.truncate(tmp_path / "sst" / "a", 0)
    assert read(0, 100) == b""


@pytest.mark.parametrize("twin", TWINS)
def test_a_delete_in_this_process_is_seen_at_once(fds: FdCache, tmp_path: pathlib.Path,
                                                  twin: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    store, other = FileStore(tmp_path), FileStore(tmp_path)
    store.put("sst/a", b"x" * 10_000)
    read = reader(store, "sst/a", twin)
    assert read(0, 4) == b"xxxx"
    other.delete_many(["sst/a"])
    with pytest.raises(NotFoundError):
        read(0, 4)
    assert len(fds) == 0


@pytest.mark.parametrize("twin", TWINS)
def test_a_failed_read_drops_the_descriptor_and_the_next_read_reopens(
    fds: FdCache, tmp_path: pathlib.Path, twin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read through a descriptor that fails (a stale handle on a network file system; here
    the descriptor made write-only) is reported as a store error, the descriptor
    is dropped, and the next read opens the path again."""
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    store = FileStore(tmp_path)
    data = os.urandom(5_000)
    store.put("sst/a", data)
    read = reader(store, "sst/a", twin)
    assert read(0, 100) == data[:100]
    (entry,) = fds.entries.values()
    other = os.open(tmp_path / "other", os.O_WRONLY | os.O_CREAT)
    try:
        os.dup2(other, entry.fd)  # the same number, now write-only: a read fails (EBADF)
    finally:
        os.close(other)
    with pytest.raises(StoreError, match="read object 'sst/a'") as caught:
        read(0, 100)
    assert not isinstance(caught.value, NotFoundError)
    assert entry.dropped and len(fds) == 0
    assert read(100, 200) == data[100:300]  # reopened
    (fresh,) = fds.entries.values()
    assert fresh is not entry and fresh.users == 0


@pytest.mark.parametrize("twin", TWINS)
def test_a_descriptor_dropped_during_a_read_is_closed_by_its_release(
    fds: FdCache, tmp_path: pathlib.Path, twin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Evicted while a read uses it (the cache's sweep runs inside the read): the read still
    completes, and its release closes the descriptor."""
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    monkeypatch.setattr(fdcache, "SWEEP_EVERY", 1)  # every read sweeps
    monkeypatch.setattr(fdcache, "SWEEP_SECONDS", 0.0)
    store = FileStore(tmp_path)
    store.put("sst/a", b"y" * 4_000)
    read = reader(store, "sst/a", twin)
    assert read(0, 3) == b"yyy"  # opens the descriptor
    assert read(0, 3) == b"yyy"  # checks it
    (entry,) = fds.entries.values()
    os.unlink(tmp_path / "sst" / "a")  # deleted by "another process": the sweep drops it
    assert read(10, 3) == b"yyy"  # this read's own bytes, read through the borrowed descriptor
    assert entry.dropped and entry.users == 0 and len(fds) == 0
    with pytest.raises(OSError):
        os.fstat(entry.fd)  # closed by the release


@pytest.mark.skipif(C is None, reason="the compiled twin is built")
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(0, 20_000),
       ranges=st.lists(st.tuples(st.integers(-3, 25_000), st.integers(-3, 12_000)),
                       min_size=1, max_size=12))
def test_the_twins_read_alike(tmp_path_factory: pytest.TempPathFactory, size: int,
                              ranges: list[tuple[int, int]]) -> None:
    root = tmp_path_factory.mktemp("twins")
    cache = FdCache(4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(file_tier, "FDS", cache)  # the slow path's cache too
        store = FileStore(root)
        data = random.Random(size).randbytes(size)
        store.put("sst/a", data)
        read = store.direct_reader("sst/a")
    assert read is not None and read.cache is cache
    pure, comp = (twin_of(t)(cache, read.ident, read.slow) for t in ("pure", "compiled"))

    def outcome(fn, start: int, length: int) -> object:
        try:
            return fn(start, length)
        except Exception as exc:  # the twins must fail alike
            return type(exc)

    try:
        for start, length in ranges:
            a, b = outcome(pure, start, length), outcome(comp, start, length)
            assert a == b, (start, length)
            if start >= 0 and length >= 0:
                assert a == data[start:start + length]
    finally:
        store.close()
        cache.clear()


@pytest.mark.parametrize("twin", TWINS)
def test_concurrent_block_reads_with_evictions_never_read_another_file(
    tmp_path: pathlib.Path, twin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One descriptor for eight files and eight threads reading blocks: every eviction closes a
    descriptor another thread may be reading through (without the GIL, compiled); the use
    count must keep it open until that read's release."""
    cache = FdCache(1)
    monkeypatch.setattr(file_tier, "FDS", cache)
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    store = FileStore(tmp_path)
    for i in range(8):
        store.put(f"o/{i}", bytes([i]) * 4096)
    reads = [reader(store, f"o/{i}", twin) for i in range(8)]
    errors: list[str] = []

    def run(i: int) -> None:
        for n in range(400):
            j = (i + n // 3) % 8  # a few reads in a row of each file: some through the fast path
            got = reads[j](n % 4000, 64)
            if got != bytes([j]) * 64:
                errors.append(f"o/{j}: {got[:4]!r}")
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache) <= 1
    assert all(entry.users == 0 for entry in cache.entries.values())
    assert cache.hits > 0
    cache.clear()
