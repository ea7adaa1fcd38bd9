"""The descriptor cache's two twins (:mod:`silt.tiers.fdcache`): the compiled ``FdCache`` keeps
its state in C, so that a block read's borrow and release are C calls, and must answer, count
and evict exactly as the pure one, step for step, over random operations on real descriptors;
a descriptor a caller holds is never closed under it, in either.
"""

from __future__ import annotations

import os
import pathlib
import random
import threading

import pytest
from silt.tiers import blockread, fdcache
from silt.tiers.file import FileStore
from test_fd_cache import open_fds_under

try:
    from silt import _speedups as C
except ImportError:  # pragma: no cover - the pure-Python run of an unbuilt checkout
    C = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.skipif(C is None, reason="the compiled twin is built"),
    pytest.mark.skipif(fdcache.MAX_OPEN <= 0, reason="descriptors are cached (POSIX)"),
]

FILES = 7
#: The random steps and how often each is taken (most of them reads, so the cache fills, evicts
#: and lends; a delete through this process, another process's, a sweep now and then).
OPS = ("adopt", "borrow", "lend", "release", "discard", "invalidate", "unlink", "sweep",
       "where", "recheck")
WEIGHTS = (6, 6, 14, 10, 1, 1, 1, 1, 0.3, 1)


def test_the_selected_cache_is_the_compiled_one_where_built() -> None:
    from silt._ext import load

    compiled = load() is not None
    assert fdcache.COMPILED is compiled
    assert fdcache.FdCache is (C.FdCache if compiled else fdcache.FdCache_py)
    assert type(fdcache.FDS) is fdcache.FdCache
    cache = C.FdCache(3)
    assert not hasattr(cache, "lock") and type(cache.entries) is dict  # state in C, no lock
    assert (cache.capacity, cache.hits, cache.misses, cache.reads, cache.epoch) == (3, 0, 0, 0, 0)


def order_of_use(cache: object) -> list[object]:
    """The cache's identities, least recently used first (the compiled one by ``used``)."""
    if type(cache) is C.FdCache:
        return [i for i, _ in sorted(cache.entries.items(), key=lambda kv: kv[1].used)]
    return list(cache.entries)  # type: ignore[attr-defined]


def state(cache: object, held: list[object]) -> tuple:
    """Everything the twins must agree on: counts, the cached identities in order of use with
    each one's users and dropped mark, and the same of every entry a caller holds."""
    entries = cache.entries  # type: ignore[attr-defined]
    return (cache.hits, cache.misses, cache.reads, cache.epoch, len(cache),  # type: ignore
            [(i, entries[i].users, entries[i].dropped) for i in order_of_use(cache)],
            [(e.users, e.dropped) for e in held])  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(6))
def test_the_twins_step_alike(tmp_path: pathlib.Path, seed: int,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(seed)
    monkeypatch.setattr(fdcache, "SWEEP_EVERY", rnd.choice([2, 5, 1024]))
    monkeypatch.setattr(fdcache, "SWEEP_SECONDS", 0.0)
    paths = [tmp_path / f"f{i}" for i in range(FILES)]
    for i, p in enumerate(paths):
        p.write_bytes(b"%d" % i)
    pure, comp = fdcache.FdCache_py(3), C.FdCache(3)
    held: dict[str, list[object]] = {"pure": [], "comp": []}  # borrowed, not yet released
    caches = {"pure": pure, "comp": comp}

    def both(method: str, *args: object, **kwargs: object) -> tuple[object, object]:
        """The same call on each twin; both results."""
        return (getattr(pure, method)(*args, **kwargs),
                getattr(comp, method)(*args, **kwargs))

    for _ in range(600):
        op = rnd.choices(OPS, WEIGHTS)[0]
        i = rnd.randrange(FILES)
        ident = ("root", f"f{i}")
        if op == "adopt" and paths[i].exists():
            for name, cache in caches.items():
                held[name].append(cache.adopt(ident, os.open(paths[i], os.O_RDONLY)))
        elif op in ("borrow", "lend"):
            got = both("borrow", ident, rnd.random() < 0.5) if op == "borrow" else both(
                "lend", ident)
            assert (got[0] is None) == (got[1] is None), (op, ident)
            if got[0] is not None:
                held["pure"].append(got[0])
                held["comp"].append(got[1])
                assert os.pread(got[1].fd, 8, 0) == b"%d" % i  # its own file's descriptor
        elif op == "release" and held["pure"]:
            k = rnd.randrange(len(held["pure"]))
            for name, cache in caches.items():
                cache.release(held[name].pop(k))
        elif op == "discard":
            both("discard", ident)
        elif op == "invalidate":
            both("invalidate", ident)
        elif op == "unlink":
            if paths[i].exists():
                paths[i].unlink()  # deleted by another process
            else:
                paths[i].write_bytes(b"%d" % i)  # a new object under the name
        elif op == "sweep":
            a, b = both("sweep", force=True)
            assert a == b
        elif op == "where":
            parity = rnd.randrange(2)

            def belongs(ident: tuple[str, str], parity: int = parity) -> bool:
                return int(ident[1][1:]) % 2 == parity

            both("discard_where", belongs)
        elif op == "recheck":
            monkeypatch.setattr(fdcache, "RECHECK_SECONDS", rnd.choice([0.0, 3600.0]))
        assert state(pure, held["pure"]) == state(comp, held["comp"]), op
        for entry in held["comp"]:  # a held descriptor is never closed under its holder
            os.fstat(entry.fd)  # type: ignore[attr-defined]
    for name, cache in caches.items():
        while held[name]:
            cache.release(held[name].pop())
        cache.clear()
    if os.path.isdir("/proc/self/fd"):
        assert open_fds_under(str(tmp_path)) == []  # every descriptor closed


@pytest.mark.parametrize("cache_twin", ["pure", "compiled"])
@pytest.mark.parametrize("reader_twin", ["pure", "compiled"])
def test_either_reader_works_over_either_cache(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, cache_twin: str, reader_twin: str
) -> None:
    """The reader inlines the pure cache's borrow and calls ``lend`` on any other; the compiled
    reader borrows from the compiled cache with C calls and calls ``lend`` on any other."""
    from silt.tiers import file as file_tier

    cache = fdcache.FdCache_py(2) if cache_twin == "pure" else C.FdCache(2)
    monkeypatch.setattr(file_tier, "FDS", cache)
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    store = FileStore(tmp_path)
    data = os.urandom(20_000)
    store.put("sst/a", data)
    plain = store.direct_reader("sst/a")
    assert plain is not None
    cls = blockread.CachedReads_py if reader_twin == "pure" else C.CachedReads
    read = cls(cache, plain.ident, plain.slow)  # type: ignore[attr-defined]
    assert read(0, 10) == data[:10] and read(5, 10) == data[5:15]  # opened, then checked
    hits = cache.hits
    for start in range(0, 20_000, 997):
        assert read(start, 4096) == data[start:start + 4096]
    assert cache.hits == hits + len(range(0, 20_000, 997))  # every one a lenient hit
    assert [e.users for e in cache.entries.values()] == [0]
    store.delete_many(["sst/a"])
    with pytest.raises(Exception, match="does not exist"):
        read(0, 1)
    assert len(cache) == 0
    cache.clear()


def test_a_read_holding_a_descriptor_the_compiled_cache_evicts_closes_it_on_release(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Evicted (capacity 1) while lent: still open until the last release, then closed."""
    monkeypatch.setattr(fdcache, "RECHECK_SECONDS", 3600.0)
    cache = C.FdCache(1)
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(name.encode() * 10)
    first = cache.adopt("a", os.open(tmp_path / "a", os.O_RDONLY))
    cache.release(first)
    assert cache.lend("a") is None  # a new descriptor is checked by its first borrow
    assert cache.borrow("a") is first  # checked now
    lent = cache.lend("a")
    assert lent is first and first.users == 2
    cache.release(cache.adopt("b", os.open(tmp_path / "b", os.O_RDONLY)))  # evicts "a"
    assert first.dropped and list(cache.entries) == ["b"]
    assert os.pread(first.fd, 3, 0) == b"aaa"  # still open for its two holders
    cache.release(first)
    assert os.pread(first.fd, 3, 0) == b"aaa"
    cache.release(first)
    assert first.users == 0
    with pytest.raises(OSError):
        os.fstat(first.fd)  # closed by the last release
    cache.clear()


@pytest.mark.parametrize("cache_twin", ["pure", "compiled"])
def test_reads_racing_with_deletes_sweeps_and_store_closes_read_only_their_own_file(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, cache_twin: str
) -> None:
    """Six threads read blocks of four files through the selected reader while another
    replaces objects, sweeps, invalidates and closes the store over and over: each read is of
    its own file (or reports it gone), and at the end no descriptor is in use or left open."""
    from silt.errors import NotFoundError
    from silt.tiers import file as file_tier

    cache = fdcache.FdCache_py(2) if cache_twin == "pure" else C.FdCache(2)
    monkeypatch.setattr(file_tier, "FDS", cache)
    monkeypatch.setattr(fdcache, "SWEEP_EVERY", 7)
    monkeypatch.setattr(fdcache, "SWEEP_SECONDS", 0.0)
    store = FileStore(tmp_path)
    for i in range(4):
        store.put(f"o/{i}", bytes([i]) * 4096)
    reads = [store.direct_reader(f"o/{i}") for i in range(4)]
    errors: list[str] = []
    done = threading.Event()

    def read_loop(t: int) -> None:
        for n in range(300):
            j = (t + n // 5) % 4
            try:
                got = reads[j](n % 4000, 64)  # type: ignore[misc]
            except NotFoundError:
                continue  # between a replacement's delete and its put
            if got != bytes([j]) * 64:
                errors.append(f"o/{j}: {got[:4]!r}")
                return

    def churn() -> None:
        n = 0
        while not done.is_set():
            j = n % 4
            store.put(f"o/{j}", bytes([j]) * 4096)  # replaced: invalidates every lenient check
            if n % 3 == 0:
                cache.sweep(force=True)
            if n % 5 == 0:
                store.close()  # drops every descriptor of the root (discard_where)
            n += 1

    threads = [threading.Thread(target=read_loop, args=(t,)) for t in range(6)]
    churner = threading.Thread(target=churn)
    churner.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    churner.join()
    assert errors == []
    assert cache.hits > 0  # some reads took the lenient path while the churn ran
    assert all(e.users == 0 for e in cache.entries.values())
    cache.clear()
    if os.path.isdir("/proc/self/fd"):
        assert open_fds_under(str(tmp_path)) == []
