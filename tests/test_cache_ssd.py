"""silt-cache-ssd: the local-disk read-through cache, alone, under the engine, and under stress.

* the store conformance suite with the cache in front of ``file://`` and ``memory://`` (and once
  with every key cacheable, so the suite exercises the cached read path and invalidation);
* the engine end to end through ``silt.open("...?cache=ssd&...")`` against a dict model;
* several real processes reading through one cache directory, with concurrent evictions;
* SIGKILL in the middle of writing an entry; damaged entry files; size limit and disk reserve;
  warm after restart (a second process reads everything without one SST request to the tier).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import silt
import silt.plugins
import silt_ssd
from silt.errors import InvalidArgumentError, NotFoundError
from silt.plugins import build_registry, open_store
from silt.testing import FaultyStore, StoreConformance
from silt.tiers.file import FileStore
from silt.tiers.memory import MemoryStore
from silt_ssd import SsdCache, cachedir, entry, parse_size
from silt_ssd.plugin import silt_register

PYTHONPATH = os.pathsep.join(
    str(Path(m.__file__).resolve().parent.parent) for m in (silt, silt_ssd)
)
MiB = 1024 * 1024
#: Tiny blocks and no in-memory block cache: every block read goes through the SSD cache.
#: (deltas uploaded as SSTs, never inline: the SSD cache holds blocks of SST objects)
SMALL = silt.Settings(memtable_bytes=32 * 1024, block_bytes=1024, block_cache_bytes=0,
                      inline_delta_bytes=0)


def entry_files(cache_dir: Path) -> list[Path]:
    return sorted(p for p in (cache_dir / "silt-ssd-v1" / "objects").rglob("*") if p.is_file())


def disk_bytes(cache_dir: Path) -> int:
    """Bytes of every file under the cache directory (entries, temp files, the ledger)."""
    return sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file())


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def run_child(script: str, *args: str, timeout: float = 60, preexec_fn=None) -> dict:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "SILT_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=preexec_fn,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cache_of(db: silt.DB) -> SsdCache:
    """The SsdCache under a DB's store (the engine may wrap its store, e.g. to meter requests)."""
    store = db.store
    while not isinstance(store, SsdCache):
        store = store.inner  # type: ignore[attr-defined]
    return store


@pytest.fixture
def ssd_registry(monkeypatch: pytest.MonkeyPatch) -> silt.plugins.Registry:
    """The process-wide registry with the built-ins and silt-cache-ssd (as if installed)."""
    registry = build_registry(autoload=False)
    silt_register(registry=registry)
    monkeypatch.setattr(silt.plugins, "_registry", registry)
    return registry


# --- conformance ---------------------------------------------------------------------------------


class TestSsdOverFile(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SsdCache]:
        store = SsdCache(FileStore(tmp_path / "root"), tmp_path / "cache", size_limit=64 * MiB)
        yield store
        store.close()


class TestSsdOverMemory(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SsdCache]:
        store = SsdCache(MemoryStore(), tmp_path / "cache", size_limit=64 * MiB)
        yield store
        store.close()


class TestSsdCachingEveryKey(StoreConformance):
    """Every key cacheable: the suite's reads, overwrites and deletes go through the cache."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SsdCache]:
        store = SsdCache(MemoryStore(), tmp_path / "cache", size_limit=64 * MiB,
                         cacheable=lambda key: isinstance(key, str) and bool(key))
        yield store
        store.close()

    def test_reads_are_served_from_disk(self, store: SsdCache) -> None:
        store.put("r", b"0123456789")
        for _ in range(2):
            assert store.get_range("r", 2, 3) == b"234"
            assert store.get_range("r", 8, 5) == b"89"
            assert store.get_range("r", 20, 5) == b""
            assert store.get("r") == b"0123456789"
        stats = store.stats()
        assert (stats["misses"], stats["hits"]) == (4, 4)
        assert stats["bytes_served"] == 3 + 2 + 0 + 10


# --- options and the plugin ----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("4096", 4096), ("20GB", 20 * 10**9), ("512MiB", 512 * MiB), ("1.5G", 3 * 2**29),
    ("10kb", 10_000), ("2 TiB", 2 * 2**40), ("7b", 7), ("64K", 65536),
])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(("options", "message"), [
    ({"cache_size": "1GB"}, "needs cache_dir"),
    ({"cache_dir": "DIR", "cache_size": "lots"}, "cache_size='lots' is not a size"),
    ({"cache_dir": "DIR", "cache_size": "0"}, "cache_size must be positive"),
    ({"cache_dir": "DIR", "cache_size": "5 PB"}, "is not a size"),
    ({"cache_dir": "DIR", "cache_reserve": "150%"}, "not a percentage"),
    ({"cache_dir": "DIR", "cache_reserve": "-1GB"}, "cache_reserve='-1GB' is not a size"),
    ({"cache_dir": "DIR", "cache_write_through": "maybe"}, "not a boolean"),
    ({"cache_dir": "DIR", "cache_sise": "1GB"}, r"unknown option\(s\) \['cache_sise'\]"),
])
def test_bad_options_are_clear_errors(tmp_path: Path, options: dict, message: str) -> None:
    options = {k: v.replace("DIR", str(tmp_path)) for k, v in options.items()}
    with pytest.raises(InvalidArgumentError, match=message):
        SsdCache.from_options(MemoryStore(), options)


def test_unusable_cache_dir_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"x")
    with pytest.raises(InvalidArgumentError, match="cannot be used"):
        SsdCache(MemoryStore(), tmp_path / "a-file", size_limit=MiB)


# --- the cache never makes a read fail: unusable and junk cache directories -----------------------


def _junk(kind: str, cache_dir: Path) -> None:
    """Put ``kind`` of junk where the cache's own files go."""
    top = cache_dir / "silt-ssd-v1"
    if kind == "cache_dir is a file":
        cache_dir.write_bytes(b"junk")
    elif kind == "silt-ssd-v1 is a file":
        cache_dir.mkdir()
        top.write_bytes(b"junk")
    elif kind == "state is a directory":
        (top / "state").mkdir(parents=True)
    elif kind == "objects is a file":
        top.mkdir(parents=True)
        (top / "objects").write_bytes(b"junk")
    elif kind == "tmp is a file":
        (top / "objects").mkdir(parents=True)
        (top / "tmp").write_bytes(b"junk")
    elif kind == "state cannot be written":
        (top / "objects").mkdir(parents=True)
        (top / "tmp").mkdir()
        (top / "state").symlink_to("/dev/full")  # every write: ENOSPC
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["cache_dir is a file", "silt-ssd-v1 is a file",
                                  "state is a directory", "objects is a file", "tmp is a file",
                                  "state cannot be written"])
def test_an_unusable_cache_dir_turns_the_cache_off_with_one_warning(
    tmp_path: Path, ssd_registry, kind: str
) -> None:
    """silt.open with ``?cache=ssd`` on a cache_dir it cannot use reads (and writes) straight from
    the tier, and says so exactly once, instead of failing."""
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    model = fill_root(root, n=300)
    _junk(kind, cache_dir)
    url = f"{root.as_uri()}?cache=ssd&cache_dir={cache_dir}&cache_reserve=0"
    with pytest.warns(silt_ssd.CacheDisabledWarning) as record:
        db = silt.open(url, settings=SMALL)
    with db:
        assert len(record) == 1, [str(w.message) for w in record]
        assert "cannot be used" in str(record[0].message)
        assert dict(db.scan()) == model
        assert db.multi_get(sorted(model)[:50]) == [model[k] for k in sorted(model)[:50]]
        db.put(b"new", b"value")
        db.commit()
        assert db.get(b"new") == b"value"
        store = db.store
        while hasattr(store, "inner"):
            assert not isinstance(store, SsdCache)
            store = store.inner


def _without_file_permission_override() -> None:
    """In a child about to exec: as root, drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
    bounding set, so the exec'd program is bound by file permissions like any other user."""
    if os.geteuid() != 0:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


READ_ONLY_CHILD = """
    import json, sys, warnings
    import silt, silt.plugins
    import silt_ssd
    from silt_ssd.plugin import silt_register

    registry = silt.plugins.build_registry(autoload=False)
    silt_register(registry=registry)
    silt.plugins._registry = registry
    root, cache_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        open(cache_dir + "/probe", "wb")
        writable = True
    except OSError:
        writable = False
    settings = silt.Settings(memtable_bytes=32 * 1024, block_bytes=1024, block_cache_bytes=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = silt.open(f"file://{root}?cache=ssd&cache_dir={cache_dir}/c&cache_reserve=0",
                       settings=settings)
    with db:
        keys = [b"key%06d" % i for i in range(n)]
        values = [db.get(k) for k in keys]
        scanned = len(dict(db.scan()))
    print(json.dumps({
        "writable": writable,
        "ok": values == [b"value-%d-" % i + bytes(i % 50) for i in range(n)] and scanned == n,
        "warnings": [[type(w.message).__name__, str(w.message)] for w in caught],
    }))
"""


@pytest.mark.parametrize("warm", [True, False], ids=["warm cache", "no cache yet"])
def test_a_read_only_cache_dir_turns_the_cache_off_with_one_warning(
    tmp_path: Path, ssd_registry, warm: bool
) -> None:
    """A cache directory this process may not write (a warm cache left by another user or
    mounted read-only, or a read-only place for a new one) never makes a read fail."""
    root, parent = tmp_path / "root", tmp_path / "ro"
    model = fill_root(root, n=300)
    parent.mkdir()
    if warm:
        url = f"{root.as_uri()}?cache=ssd&cache_dir={parent / 'c'}&cache_reserve=0"
        with silt.open(url, settings=SMALL) as db:
            assert dict(db.scan()) == model
            assert cache_of(db).stats()["admitted"] > 0
    paths = [parent, *parent.rglob("*")]
    try:
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        got = run_child(READ_ONLY_CHILD, str(root), str(parent), str(len(model)),
                        preexec_fn=_without_file_permission_override)
    finally:
        for path in paths:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert got["writable"] is False  # the directory really is read-only for the reader
    assert got["ok"]
    assert len(got["warnings"]) == 1, got["warnings"]
    assert got["warnings"][0][0] == "CacheDisabledWarning"


def test_junk_inside_the_cache_dir_is_tolerated(tmp_path: Path, ssd_registry) -> None:
    """Stray files and folders where entries go, a garbled ledger and an entry's name taken by a
    folder: the cache keeps working (no warning), and every read is right."""
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    model = fill_root(root, n=300)
    url = f"{root.as_uri()}?cache=ssd&cache_dir={cache_dir}&cache_reserve=0"
    with silt.open(url, settings=SMALL) as db:
        assert dict(db.scan()) == model
    entries = entry_files(cache_dir)
    assert entries
    top = cache_dir / "silt-ssd-v1"
    (top / "state").write_bytes(os.urandom(40))
    (top / "objects" / "zz").write_bytes(b"a file where a folder goes")
    (top / "objects" / "yy" / "not-an-object" / "deeper").mkdir(parents=True)
    (top / "tmp" / "a-folder").mkdir()
    (top / "tmp" / "stray.tmp").write_bytes(b"x")
    (top / "junk.txt").write_bytes(b"x")
    for taken in entries[::2]:
        taken.unlink()
        taken.mkdir()  # an entry's name taken by a folder
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all: the cache is on
        with silt.open(url, settings=SMALL) as db:
            for _ in range(2):
                assert dict(db.scan()) == model
                assert [db.get(k) for k in sorted(model)[::7]] == [
                    model[k] for k in sorted(model)[::7]]
            stats = cache_of(db).stats()
    assert stats["hits"] > 0 and stats["errors"] > 0


def test_registers_cache_and_parses_url_options(
    tmp_path: Path, ssd_registry: silt.plugins.Registry
) -> None:
    assert ssd_registry.owner("cache", "ssd") == "<direct>"
    url = (f"{(tmp_path / 'root').as_uri()}?cache=ssd&cache_dir={tmp_path / 'c'}"
           "&cache_size=512MiB&cache_reserve=10%25&cache_write_through=true")
    store = open_store(url)
    assert isinstance(store, SsdCache) and isinstance(store.inner, FileStore)
    assert store.url == (tmp_path / "root").as_uri()
    assert (store.size_limit, store.reserve.fraction, store.write_through) == (512 * MiB, 0.1, True)
    store.close()


def test_entry_point_is_declared() -> None:
    import tomllib

    pyproject = Path(__file__).resolve().parents[1] / "packages" / "cache-ssd" / "pyproject.toml"
    meta = tomllib.loads(pyproject.read_text())
    assert meta["project"]["entry-points"]["silt"] == {"ssd": "silt_ssd.plugin"}
    assert meta["project"]["dependencies"] == ["silt-core>=0.1"]


# --- what is cached ------------------------------------------------------------------------------


def test_only_sst_reads_are_cached_and_listings_never(tmp_path: Path) -> None:
    inner = FaultyStore(MemoryStore())
    store = SsdCache(inner, tmp_path / "c", size_limit=MiB)
    store.put("manifest/00000000000000000001", b"m1")
    store.put("sst/A.sst", b"sst bytes")
    for _ in range(3):
        assert store.get("manifest/00000000000000000001") == b"m1"
        assert store.get_range("sst/A.sst", 0, 3) == b"sst"
        assert [i.key for i in store.list("manifest/")] == ["manifest/00000000000000000001"]
    store.put("manifest/00000000000000000002", b"m2")
    assert len(list(store.list("manifest/"))) == 2
    assert inner.calls["get"] == 3 and inner.calls["get_range"] == 1
    assert inner.calls["list"] == 4
    assert store.stats()["bypassed"] == 3


def test_a_range_inside_a_cached_range_is_cut_from_it(tmp_path: Path) -> None:
    """The engine reads a run of adjacent blocks with one request, then single blocks of it:
    each is served from the run's entry (the smallest entry holding it), with no request; a
    range only partly inside is fetched; adjacent entries are joined; a whole-object entry
    holds every range; a damaged holding entry is dropped and the range fetched again, never
    returned."""
    inner = FaultyStore(MemoryStore())
    store = SsdCache(inner, tmp_path / "c", size_limit=MiB)
    assert store.coalesce_reads
    data = payload(3, 5000)
    store.put("sst/A.sst", data)
    store.put("sst/B.sst", data)
    assert store.get_range("sst/A.sst", 1000, 2000) == data[1000:3000]  # the run: fetched
    assert store.get_range("sst/A.sst", 1000, 500) == data[1000:1500]  # a block of it
    assert store.get_range("sst/A.sst", 2900, 100) == data[2900:3000]
    assert store.get_range("sst/A.sst", 1200, 300) == data[1200:1500]
    assert inner.calls["get_range"] == 1
    assert store.stats()["hits"] == 3
    assert store.get_range("sst/A.sst", 2900, 200) == data[2900:3100]  # only partly inside
    assert inner.calls["get_range"] == 2
    # the smallest holding entry serves: damage it, and the read refetches, never returns it
    small = tmp_path / "c" / "silt-ssd-v1" / "objects"
    target = next(p for p in small.rglob("2900+200"))
    raw = bytearray(target.read_bytes())
    raw[-1] ^= 0xFF
    target.write_bytes(bytes(raw))
    assert store.get_range("sst/A.sst", 2950, 100) == data[2950:3050]
    assert not target.exists() and store.stats()["dropped_damaged"] == 1
    assert inner.calls["get_range"] == 3
    # adjacent entries are joined into a range they cover together (write-through admits
    # single blocks; the engine then reads runs of them)
    store.put("sst/C.sst", data)
    for at in (0, 500, 1000):
        assert store.get_range("sst/C.sst", at, 500) == data[at:at + 500]
    calls = inner.calls["get_range"]
    assert store.get_range("sst/C.sst", 200, 1200) == data[200:1400]
    assert store.get_range("sst/C.sst", 0, 1500) == data[:1500]
    assert inner.calls["get_range"] == calls
    assert store.get_range("sst/C.sst", 1000, 600) == data[1000:1600]  # a gap: fetched
    assert inner.calls["get_range"] == calls + 1
    # a whole object's entry holds every range, past the end included
    assert store.get("sst/B.sst") == data
    assert store.get_range("sst/B.sst", 4900, 500) == data[4900:]
    assert store.get_range("sst/B.sst", 6000, 10) == b""
    assert inner.calls["get_range"] == calls + 1 and inner.calls["get"] == 1


def test_not_found_is_never_cached_and_deletes_invalidate(tmp_path: Path) -> None:
    store = SsdCache(MemoryStore(), tmp_path / "c", size_limit=MiB)
    with pytest.raises(NotFoundError):
        store.get_range("sst/A.sst", 0, 4)
    store.put_if_absent("sst/A.sst", b"first")
    assert store.get_range("sst/A.sst", 0, 4) == b"firs"
    assert store.get_range("sst/A.sst", 0, 4) == b"firs"  # a hit
    store.delete_many(["sst/A.sst"])
    assert entry_files(tmp_path / "c") == []
    with pytest.raises(NotFoundError):
        store.get_range("sst/A.sst", 0, 4)
    store.put("sst/A.sst", b"second")  # never done by silt (objects are immutable), but safe
    assert store.get_range("sst/A.sst", 0, 4) == b"seco"
    assert store.stats()["used_bytes"] == sum(p.stat().st_size for p in entry_files(tmp_path / "c"))


# --- the engine end to end -----------------------------------------------------------------------


def model_check(db: silt.DB, model: dict[bytes, bytes], rng: random.Random) -> None:
    keys = sorted(model)
    probe = rng.sample(keys, min(200, len(keys))) + [b"absent-" + bytes([i]) for i in range(5)]
    for key in probe[:60]:
        assert db.get(key) == model.get(key)
    assert db.multi_get(probe) == [model.get(k) for k in probe]
    assert list(db.scan()) == sorted(model.items())
    lo, hi = sorted(rng.sample(keys, 2))
    assert list(db.scan(lo, hi)) == [(k, model[k]) for k in keys if lo <= k < hi]


@pytest.mark.parametrize("tier", ["file", "memory"])
def test_engine_through_the_cache_matches_a_model(
    tier: str, tmp_path: Path, ssd_registry: silt.plugins.Registry
) -> None:
    base = (tmp_path / "root").as_uri() if tier == "file" else f"memory://ssd-{os.getpid()}"
    url = f"{base}?cache=ssd&cache_dir={tmp_path / 'cache'}&cache_size=4MiB&cache_reserve=0"
    rng = random.Random(6)
    model: dict[bytes, bytes] = {}
    try:
        for round_ in range(4):
            with silt.open(url, settings=SMALL) as db:
                assert isinstance(cache_of(db).inner, FileStore if tier == "file" else MemoryStore)
                for _ in range(1500):
                    key = b"k%05d" % rng.randrange(3000)
                    if rng.random() < 0.1:
                        db.delete(key)
                        model.pop(key, None)
                    else:
                        value = b"v%d-" % round_ + rng.randbytes(rng.randrange(1, 40))
                        db.put(key, value)
                        model[key] = value
                assert db.commit() == round_ + 1
                model_check(db, model, rng)
                assert cache_of(db).stats()["misses"] > 0
            with silt.open(url, settings=SMALL) as db:  # reopen: reads come from SSTs
                model_check(db, model, rng)
                model_check(db, model, rng)
                stats = cache_of(db).stats()
                assert stats["hits"] > 0 and stats["errors"] == 0
                assert stats["used_bytes"] <= 4 * MiB
    finally:
        if tier == "memory":
            MemoryStore.drop(f"ssd-{os.getpid()}")


def fill_root(root: Path, n: int = 3000) -> dict[bytes, bytes]:
    model = {b"key%06d" % i: b"value-%d-" % i + bytes(i % 50) for i in range(n)}
    with silt.open(root.as_uri(), settings=SMALL) as db:
        for key, value in model.items():
            db.put(key, value)
        db.commit()
    return model


WARM_CHILD = """
    import json, sys
    import silt
    from silt.testing import FaultyStore
    from silt.tiers.file import FileStore
    from silt_ssd import SsdCache

    root, cache_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    inner = FaultyStore(FileStore(root))
    store = SsdCache(inner, cache_dir, size_limit=64 << 20)
    settings = silt.Settings(memtable_bytes=32 * 1024, block_bytes=1024, block_cache_bytes=0)
    with silt.open("file://" + root, store=store, settings=settings) as db:
        keys = [b"key%06d" % i for i in range(n)]
        ok = all(db.get(k) == b"value-%d-" % i + bytes(i % 50) for i, k in enumerate(keys))
        ok = ok and db.multi_get(keys) == [db.get(k) for k in keys]
        ok = ok and [k for k, _ in db.scan()] == keys
    sst_reads = sum(1 for c in inner.log if c.key.startswith("sst/"))
    print(json.dumps({"ok": ok, "sst_reads": sst_reads, "stats": store.stats()}))
"""


def test_warm_after_restart_needs_no_sst_request(tmp_path: Path) -> None:
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    model = fill_root(root)
    first = run_child(WARM_CHILD, str(root), str(cache_dir), str(len(model)))
    assert first["ok"] and first["sst_reads"] > 0 and first["stats"]["hits"] > 0
    second = run_child(WARM_CHILD, str(root), str(cache_dir), str(len(model)))
    assert second["ok"]
    assert second["sst_reads"] == 0, second
    assert second["stats"]["misses"] == 0 and second["stats"]["hits"] > 0


def test_write_through_admits_fresh_ssts(tmp_path: Path, ssd_registry) -> None:
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    url = f"{root.as_uri()}?cache=ssd&cache_dir={cache_dir}&cache_write_through=1&cache_reserve=0"
    with silt.open(url, settings=SMALL) as db:
        for i in range(3000):
            db.put(b"key%06d" % i, b"value-%d-" % i + bytes(i % 50))
        db.commit()
        stats = cache_of(db).stats()
        assert stats["write_through"] > 0 and stats["misses"] == 0
    # A new process on this machine reads everything without asking the tier for SST bytes.
    warm = run_child(WARM_CHILD, str(root), str(cache_dir), "3000")
    assert warm["ok"] and warm["sst_reads"] == 0 and warm["stats"]["misses"] == 0


def test_write_through_is_on_by_default_in_front_of_a_remote_tier_only(tmp_path: Path) -> None:
    """A remote tier's SSTs are cached as this process uploads them unless the option says
    no; a local tier's are not unless it says yes."""

    class Remote(MemoryStore):
        local = False

    def cache(inner: MemoryStore, **options: str) -> SsdCache:
        store = SsdCache.from_options(inner, {"cache_dir": str(tmp_path / "c"),
                                              "cache_reserve": "0", **options})
        assert isinstance(store, SsdCache)
        return store

    local = MemoryStore(None)
    assert local.local
    assert cache(Remote(None)).write_through
    assert not cache(local).write_through
    assert not cache(Remote(None), cache_write_through="false").write_through
    assert cache(local, cache_write_through="true").write_through
    assert SsdCache(Remote(None), tmp_path / "d", size_limit=1 << 20).write_through
    assert not SsdCache(Remote(None), tmp_path / "d", size_limit=1 << 20,
                        write_through=False).write_through
    # What it does: an SST uploaded through the default cache on a remote tier is cached.
    inner = Remote(None)
    with silt.open("memory://wt-default", store=cache(inner), settings=SMALL) as db:
        for i in range(2000):
            db.put(b"key%06d" % i, b"value-%d" % i)
        db.commit()
        stats = cache_of(db).stats()
    assert stats["write_through"] > 0


def test_sst_read_ranges_are_what_the_engine_reads(tmp_path: Path) -> None:
    from silt.sst.builder import build_sst

    keys = [b"k%04d" % i for i in range(500)]
    data, info = build_sst("X", keys, [b"v" * 20] * 500, SMALL, created_ms=0)
    ranges = silt_ssd.sst_read_ranges(data)
    assert ranges[0] == (info.tail_offset, len(data) - info.tail_offset)
    assert len(ranges) > 5
    assert sum(n for _, n in ranges) == len(data)  # tail plus blocks cover the object
    assert silt_ssd.sst_read_ranges(b"not an sst" * 20) == []


# --- damage, crashes, several processes ----------------------------------------------------------


def filled_cache(tmp_path: Path, count: int = 20, size: int = 5000, **kwargs) -> tuple:
    inner = FaultyStore(MemoryStore())
    for i in range(count):
        inner.put(f"sst/{i:03d}.sst", payload(i, size))
    store = SsdCache(inner, tmp_path / "cache", size_limit=kwargs.pop("size_limit", 8 * MiB),
                     **kwargs)
    for i in range(count):
        assert store.get_range(f"sst/{i:03d}.sst", 100, 3000) == payload(i, size)[100:3100]
    return store, inner


@pytest.mark.parametrize("damage", ["flip-data", "flip-header", "truncate", "empty", "garbage"])
def test_damaged_entries_are_dropped_and_refetched(tmp_path: Path, damage: str) -> None:
    store, inner = filled_cache(tmp_path)
    files = entry_files(tmp_path / "cache")
    assert len(files) == 20
    for path in files:
        raw = bytearray(path.read_bytes())
        if damage == "flip-data":
            raw[-1500] ^= 0x40
        elif damage == "flip-header":
            raw[20] ^= 0x01
        elif damage == "truncate":
            raw = raw[:-1]
        elif damage == "empty":
            raw = bytearray()
        else:
            raw = bytearray(os.urandom(len(raw)))
        path.write_bytes(bytes(raw))
    inner.reset_counters()
    for i in range(20):
        assert store.get_range(f"sst/{i:03d}.sst", 100, 3000) == payload(i, 5000)[100:3100]
    assert inner.calls["get_range"] == 20  # every damaged entry was refetched
    assert store.stats()["dropped_damaged"] == 20
    for i in range(20):  # and replaced by a good entry
        assert store.get_range(f"sst/{i:03d}.sst", 100, 3000) == payload(i, 5000)[100:3100]
    assert inner.calls["get_range"] == 20
    actual = sum(p.stat().st_size for p in entry_files(tmp_path / "cache"))
    # A file shortened behind the cache's back leaves the ledger over-counting (never under)
    # until the next eviction pass recounts.
    assert store.stats()["used_bytes"] >= actual
    assert store.stats()["used_bytes"] == actual or damage in ("truncate", "empty")


def test_engine_survives_a_damaged_cache(tmp_path: Path) -> None:
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    model = fill_root(root, 2000)
    store = SsdCache(FileStore(root), cache_dir, size_limit=16 * MiB)
    with silt.open(root.as_uri(), store=store, settings=SMALL) as db:
        assert list(db.scan()) == sorted(model.items())
    for n, path in enumerate(entry_files(cache_dir)):
        raw = bytearray(path.read_bytes())
        raw[(n * 7919) % len(raw)] ^= 0xFF
        path.write_bytes(bytes(raw))
    damaged = len(entry_files(cache_dir))
    store = SsdCache(FileStore(root), cache_dir, size_limit=16 * MiB)
    with silt.open(root.as_uri(), store=store, settings=SMALL) as db:
        # the same reads as the first pass meet every damaged entry: each is dropped, refetched
        assert list(db.scan()) == sorted(model.items())
        assert store.stats()["dropped_damaged"] == damaged
        rng = random.Random(1)
        model_check(db, model, rng)
        assert store.stats()["dropped_damaged"] == damaged  # the refetched entries are sound


CRASH_CHILD = """
    import json, os, random, sys, time
    import silt_ssd.admission as admission
    from silt.tiers.file import FileStore
    from silt_ssd import SsdCache

    root, cache_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "stall":  # write half of the entry, tell the parent, and wait to be killed
        def half_then_stall(fd, chunks):
            data = b"".join(chunks)
            os.write(fd, data[: len(data) // 2])
            open(os.path.join(root, "STALLED"), "w").close()
            time.sleep(60)
        admission._write_all = half_then_stall
    store = SsdCache(FileStore(root), cache_dir, size_limit=int(sys.argv[4]))
    rng = random.Random(os.getpid())
    names = sorted(os.listdir(os.path.join(root, "sst")))
    print("ready", flush=True)
    while True:
        name = "sst/" + rng.choice(names)
        start = rng.randrange(0, 200_000, 4096)
        store.get_range(name, start, 65536)
"""


def make_objects(root: Path, count: int, size: int) -> None:
    (root / "sst").mkdir(parents=True)
    for i in range(count):
        (root / "sst" / f"{i:03d}.sst").write_bytes(payload(i, size))


def check_cache_dir(root: Path, cache_dir: Path, limit: int) -> SsdCache:
    """Every published entry is whole and right; reading everything back returns true bytes."""
    store = SsdCache(FileStore(root), cache_dir, size_limit=limit)
    for path in entry_files(cache_dir):
        start, length = (int(x) for x in path.name.split("+"))
        raw = path.read_bytes()
        ident_len = entry.HEADER.unpack_from(raw, 0)[-1]
        key = raw[entry.HEADER_SIZE:entry.HEADER_SIZE + ident_len].decode().split("\0")[1]
        data = entry.decode(raw, entry.identity(store.url, key), start, length)  # never damaged
        assert data == (root / key).read_bytes()[start:start + length]
    return store


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_mid_write_leaves_no_entry(tmp_path: Path, monkeypatch) -> None:
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    make_objects(root, 4, 300_000)
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CRASH_CHILD), str(root), str(cache_dir), "stall",
         str(64 * MiB)], env=env, stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (root / "STALLED").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    (root / "STALLED").unlink()
    assert entry_files(cache_dir) == []
    tmp_files = list((cache_dir / "silt-ssd-v1" / "tmp").iterdir())
    assert len(tmp_files) == 1 and tmp_files[0].stat().st_size > 0  # the torn half, unpublished
    store = check_cache_dir(root, cache_dir, 64 * MiB)
    for i in range(4):
        assert store.get_range(f"sst/{i:03d}.sst", 4096, 65536) == payload(i, 300_000)[4096:69632]
    assert store.stats()["dropped_damaged"] == 0
    monkeypatch.setattr(cachedir, "STALE_TMP_SECONDS", -1.0)  # as if it were old
    SsdCache(FileStore(root), cache_dir, size_limit=64 * MiB).close()
    assert list((cache_dir / "silt-ssd-v1" / "tmp").iterdir()) == []


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_at_random_points_never_leaves_a_bad_entry(tmp_path: Path) -> None:
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    make_objects(root, 6, 300_000)
    limit = 1 * MiB  # small: the readers also evict while they are killed
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    rng = random.Random(7)
    for _ in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CRASH_CHILD), str(root), str(cache_dir), "run",
             str(limit)], env=env, stdout=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.05, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    store = check_cache_dir(root, cache_dir, limit)
    actual = sum(p.stat().st_size for p in entry_files(cache_dir))
    used = store.stats()["used_bytes"]
    assert actual <= used <= actual + 5 * (65536 + 200)  # a crash may only over-count
    assert actual <= limit


CONCURRENT_CHILD = """
    import json, os, random, sys
    from silt.tiers.file import FileStore
    from silt_ssd import SsdCache

    root, cache_dir, seed, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = SsdCache(FileStore(root), cache_dir, size_limit=limit, touch_interval=0)
    objects = {n: open(os.path.join(root, "sst", n), "rb").read()
               for n in sorted(os.listdir(os.path.join(root, "sst")))}
    rng = random.Random(seed)
    bad = 0
    print("ready", flush=True)
    sys.stdin.readline()  # start together with the other readers
    for _ in range(1500):
        name = rng.choice(sorted(objects))
        start, length = rng.randrange(0, 20) * 1000, rng.choice([1000, 4000])
        if store.get_range("sst/" + name, start, length) != objects[name][start:start + length]:
            bad += 1
    print(json.dumps({"bad": bad, "stats": store.stats()}))
"""


def test_several_processes_share_one_cache_dir(tmp_path: Path) -> None:
    root, cache_dir = tmp_path / "root", tmp_path / "cache"
    make_objects(root, 8, 60_000)
    # less than the ~184 KB of object bytes the readers touch (8 objects x 23 KB; a range inside a
    # cached one is cut from it, so that, not the ~800 KB of distinct ranges, is what they admit
    # at least): evictions run while others read
    limit = 96 * 1024
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CONCURRENT_CHILD), str(root), str(cache_dir),
             str(seed), str(limit)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for seed in range(3)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["bad"] for r in results] == [0, 0, 0]
    assert all(r["stats"]["dropped_damaged"] == 0 and r["stats"]["errors"] == 0 for r in results)
    assert sum(r["stats"]["hits"] for r in results) > 0
    assert sum(r["stats"]["evictions"] for r in results) > 0
    store = check_cache_dir(root, cache_dir, limit)
    actual = sum(p.stat().st_size for p in entry_files(cache_dir))
    assert store.stats()["used_bytes"] == actual <= limit
    assert list((cache_dir / "silt-ssd-v1" / "tmp").iterdir()) == []


# --- limits --------------------------------------------------------------------------------------


class Clock:
    """A nanosecond clock that ticks once per reading (deterministic recency)."""

    def __init__(self) -> None:
        self.now = 10**18

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def test_size_limit_holds_after_every_admission_and_eviction_is_lru(tmp_path: Path) -> None:
    inner = FaultyStore(MemoryStore())
    for i in range(200):
        inner.put(f"sst/{i:03d}.sst", payload(i, 2000))
    limit = 40_000  # room for ~19 entries of 2 KB
    store = SsdCache(inner, tmp_path / "c", size_limit=limit, touch_interval=0, clock=Clock())
    hot = [f"sst/{i:03d}.sst" for i in range(5)]
    for name in hot:
        store.get(name)
    for i in range(5, 200):
        assert store.get(f"sst/{i:03d}.sst") == payload(i, 2000)
        for name in hot:  # hot entries are read between every cold one
            assert store.get(name) == payload(int(name[4:7]), 2000)
        on_disk = sum(p.stat().st_size for p in entry_files(tmp_path / "c"))
        assert on_disk <= limit
        assert store.stats()["used_bytes"] == on_disk
    stats = store.stats()
    assert stats["evictions"] > 150
    # Hot entries were never evicted: only their first read missed.
    assert [c.key for c in inner.log if c.op == "get"].count(hot[0]) == 1
    assert stats["misses"] == 200 and stats["hits"] == 5 * 195


def test_entry_larger_than_the_cache_is_not_cached(tmp_path: Path) -> None:
    store = SsdCache(MemoryStore(), tmp_path / "c", size_limit=1000)
    store.put("sst/big.sst", b"x" * 5000)
    assert store.get("sst/big.sst") == b"x" * 5000
    assert store.get_range("sst/big.sst", 10, 100) == b"x" * 100
    assert entry_files(tmp_path / "c") != [] and store.stats()["rejected"] == 1


class FakeDisk:
    """A file system of ``capacity`` bytes holding the cache directory plus ``other`` bytes.

    Free space is computed from what is really on disk under the cache directory (entries, temp
    files being written, the ledger), so the cache cannot cheat its way around the reserve.
    """

    def __init__(self, cache_dir: Path, capacity: int) -> None:
        self.cache_dir, self.capacity, self.other = cache_dir, capacity, 0

    def __call__(self, path: str) -> SimpleNamespace:
        free = self.capacity - self.other - disk_bytes(self.cache_dir)
        return SimpleNamespace(total=self.capacity, used=self.capacity - free, free=free)


def test_disk_reserve_is_honoured_together_with_the_size_limit(tmp_path: Path) -> None:
    inner = MemoryStore()
    for i in range(120):
        inner.put(f"sst/{i:03d}.sst", payload(i, 3000))
    disk = FakeDisk(tmp_path / "c", capacity=1_000_000)
    store = SsdCache(inner, tmp_path / "c", size_limit=200_000, reserve=100_000, disk_usage=disk,
                     clock=Clock())

    def read_all(lo: int, hi: int, reserve_possible: bool = True) -> None:
        for i in range(lo, hi):
            assert store.get(f"sst/{i:03d}.sst") == payload(i, 3000)
            assert disk(str(tmp_path)).free >= 100_000 or not reserve_possible
            assert sum(p.stat().st_size for p in entry_files(tmp_path / "c")) <= 200_000

    read_all(0, 40)  # ~122 KB cached, both limits comfortable
    assert store.stats()["evictions"] == 0
    disk.other = 800_000  # something else fills the disk: ~78 KB free, below the reserve
    read_all(40, 80)  # every admission first evicts until the reserve is free again
    assert store.stats()["evictions"] > 20
    assert disk(str(tmp_path)).free >= 100_000
    disk.other = 900_000  # not even an empty cache leaves the reserve free: admit nothing
    before = store.stats()["rejected"]
    read_all(80, 90, reserve_possible=False)
    assert store.stats()["rejected"] - before == 10
    assert entry_files(tmp_path / "c") == []
    disk.other = 0
    read_all(90, 120)  # size limit alone again
    assert store.stats()["entries"] == len(entry_files(tmp_path / "c")) == 30


# --- in front of S3 (moto) ---------------------------------------------------------------------


def test_engine_through_the_cache_on_moto_s3(
    tmp_path: Path, s3_url: str, ssd_registry: silt.plugins.Registry
) -> None:
    """The cache in front of silt-tier-s3 on a moto server: model check, then warm reads.

    The suite installs silt-tier-s3 beside the cache (noxfile.py); without it this test fails.
    """
    from silt_s3.plugin import silt_register as register_s3

    register_s3(registry=ssd_registry)
    url = f"{s3_url}&cache=ssd&cache_dir={tmp_path / 'cache'}&cache_size=8MiB&cache_reserve=0"
    rng = random.Random(3)
    model = {b"k%05d" % i: rng.randbytes(rng.randrange(1, 60)) for i in range(2500)}
    with silt.open(url, settings=SMALL) as db:
        for key, value in model.items():
            db.put(key, value)
        db.commit()
    with silt.open(url, settings=SMALL) as db:
        model_check(db, model, rng)
        cold = cache_of(db).stats()
    with silt.open(url, settings=SMALL) as db:
        inner = FaultyStore(cache_of(db).inner)
        cache_of(db).inner = inner  # count what still reaches S3
        model_check(db, model, rng)
        warm = cache_of(db).stats()
    assert cold["hits"] + cold["misses"] > 0 and cold["errors"] == 0
    assert warm["hits"] > 0 and warm["errors"] == 0
    assert inner.calls["get_range"] == warm["misses"]  # only misses reach S3
