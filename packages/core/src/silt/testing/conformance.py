"""The conformance suite: what every :class:`~silt.store.ObjectStore` tier must do.

A tier's tests subclass :class:`StoreConformance` and provide one fixture, ``store``, returning a
fresh, empty store (and cleaning it up afterwards if needed)::

    import pytest
    from silt.testing import StoreConformance

    class TestFileStore(StoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            return FileStore(tmp_path)

The class name has no ``Test`` prefix, so pytest collects it only through subclasses. Every test
checks behaviour that S3, GCS and Azure Blob can all provide; tier-specific behaviour (URL
parsing, crash safety of local files, emulator quirks) belongs in the tier's own tests.

Class attributes tune the heavier tests for slow backends (emulators, real clouds); keep the
defaults unless a backend cannot run them in reasonable time:

* ``large_object_size``: bytes in the large-object round trip (default 5 MiB).
* ``many_keys``: keys in the paging test (default 1,500: more than one S3 LIST page).
* ``threads``: worker threads in the concurrency tests (default 8).
* ``race_threads``, ``race_processes``: contenders in the create-only races, as threads and as
  processes (defaults 16 and 4; a store declared ``shared_across = "process"`` races in
  threads only).
* ``race_rounds``: rounds of each race, each on a fresh key (default ``None``: 40 on a local
  store, ``ObjectStore.local``, 8 on a remote one, where every round is a request per
  contender).

Failures show the values: ``silt.testing`` registers this module for pytest's assertion
rewriting, so a wrong ``get_range`` fails with ``assert b'0123456789' == b'0123'`` and a lost
race lists each round whose contenders all won.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from ..errors import InvalidArgumentError, NotFoundError, SiltError, StoreError
from ..store import ObjectInfo, ObjectStore
from .races import outcome, race_in_processes, race_in_threads

SST_KEY = "sst/01J9Z8Q4V6T3M2K1H0G5F4E3D2.sst"


def manifest(version: int) -> str:
    """The engine's manifest key for ``version`` (kept local: the suite tests the store alone)."""
    return f"manifest/{version:020d}"


def _payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _run_threads(count: int, target: Callable[[int], object]) -> list[object]:
    """Run ``target(i)`` for ``i in range(count)`` on ``count`` threads started together."""
    barrier = threading.Barrier(count)

    def run(i: int) -> object:
        barrier.wait(timeout=30)
        return target(i)

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


class StoreConformance:
    """The tests every tier passes. Subclass with a ``store`` fixture (see the module docstring)."""

    large_object_size: int = 5 * 1024 * 1024
    many_keys: int = 1500
    threads: int = 8
    race_threads: int = 16
    race_processes: int = 4
    race_rounds: int | None = None

    @pytest.fixture
    def store(self) -> ObjectStore:
        """A fresh, empty store. Subclasses must override this fixture."""
        raise NotImplementedError(
            "subclass StoreConformance and define a 'store' fixture returning a fresh, empty store"
        )

    def rounds(self, store: ObjectStore) -> int:
        """Rounds of each create-only race (``race_rounds``, or by ``store.local``)."""
        if self.race_rounds is not None:
            return self.race_rounds
        return 40 if store.local else 8

    @staticmethod
    def keys_of(store: ObjectStore, prefix: str = "", start_after: str | None = None) -> list[str]:
        return [info.key for info in store.list(prefix, start_after)]

    # --- put / get -----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "data",
        [b"", b"x", bytes(range(256)) * 4, b"\x00\xff\r\n\x1a" * 3],
        ids=["empty", "one-byte", "all-byte-values", "control-bytes"],
    )
    def test_put_get_round_trip(self, store: ObjectStore, data: bytes) -> None:
        store.put("obj", data)
        got = store.get("obj")
        assert isinstance(got, bytes)
        assert got == data

    def test_large_object_round_trip(self, store: ObjectStore) -> None:
        data = _payload(1, self.large_object_size)
        store.put(SST_KEY, data)
        assert store.get(SST_KEY) == data
        mid = self.large_object_size // 2
        assert store.get_range(SST_KEY, mid, 70_000) == data[mid : mid + 70_000]
        assert store.get_range(SST_KEY, self.large_object_size - 10, 100) == data[-10:]

    def test_get_missing_raises_not_found(self, store: ObjectStore) -> None:
        with pytest.raises(NotFoundError) as info:
            store.get("sst/missing.sst")
        assert isinstance(info.value, FileNotFoundError)
        assert isinstance(info.value, SiltError)
        assert isinstance(info.value, StoreError)
        assert "sst/missing.sst" in str(info.value)

    def test_get_under_missing_directory_raises_not_found(self, store: ObjectStore) -> None:
        store.put("a/b", b"1")
        with pytest.raises(NotFoundError):
            store.get("nowhere/at/all")
        with pytest.raises(NotFoundError):
            store.get("a/b/c")
        with pytest.raises(NotFoundError):
            store.get("a")

    def test_put_overwrites(self, store: ObjectStore) -> None:
        store.put("k", b"first version, longer")
        store.put("k", b"second")
        assert store.get("k") == b"second"
        assert list(store.list()) == [ObjectInfo("k", 6)]

    # --- get_range -----------------------------------------------------------------------------

    def test_get_range_inside(self, store: ObjectStore) -> None:
        store.put("r", b"0123456789")
        assert store.get_range("r", 0, 4) == b"0123"
        assert store.get_range("r", 3, 4) == b"3456"
        assert store.get_range("r", 0, 10) == b"0123456789"

    def test_get_range_short_at_end(self, store: ObjectStore) -> None:
        store.put("r", b"0123456789")
        assert store.get_range("r", 7, 100) == b"789"
        assert store.get_range("r", 9, 1) == b"9"

    def test_get_range_past_end_is_empty(self, store: ObjectStore) -> None:
        store.put("r", b"0123456789")
        assert store.get_range("r", 10, 5) == b""
        assert store.get_range("r", 1000, 5) == b""

    def test_get_range_zero_length(self, store: ObjectStore) -> None:
        store.put("r", b"0123456789")
        assert store.get_range("r", 3, 0) == b""
        assert store.get_range("r", 0, 0) == b""

    def test_get_range_of_empty_object(self, store: ObjectStore) -> None:
        store.put("e", b"")
        assert store.get_range("e", 0, 10) == b""

    def test_get_range_missing_raises_not_found(self, store: ObjectStore) -> None:
        with pytest.raises(NotFoundError):
            store.get_range("missing", 0, 10)
        with pytest.raises(NotFoundError):
            store.get_range("missing", 0, 0)

    # --- put_if_absent -------------------------------------------------------------------------

    def test_put_if_absent_creates_once(self, store: ObjectStore) -> None:
        key = manifest(1)
        assert store.put_if_absent(key, b"winner") is True
        assert store.put_if_absent(key, b"loser") is False
        assert store.get(key) == b"winner"
        assert list(store.list()) == [ObjectInfo(key, 6)]

    def test_put_if_absent_empty_object(self, store: ObjectStore) -> None:
        assert store.put_if_absent("empty", b"") is True
        assert store.put_if_absent("empty", b"more") is False
        assert store.get("empty") == b""

    def test_put_if_absent_after_put_and_after_delete(self, store: ObjectStore) -> None:
        store.put("k", b"put")
        assert store.put_if_absent("k", b"again") is False
        assert store.get("k") == b"put"
        store.delete_many(["k"])
        assert store.put_if_absent("k", b"recreated") is True
        assert store.get("k") == b"recreated"

    def test_put_if_absent_race_has_one_winner(self, store: ObjectStore) -> None:
        """Contending threads released together by a barrier, a fresh key each round: exactly
        one ``True`` per round, and the key holds the winner's bytes. (A check-then-write
        ``put_if_absent`` whose gap spans a request loses nearly every round.)"""
        keys = [manifest(1000 + r) for r in range(self.rounds(store))]
        results = race_in_threads(store, keys, self.race_threads)
        wrong_rounds = outcome(store, keys, results)
        assert wrong_rounds == [], "\n".join(wrong_rounds)

    def test_put_if_absent_race_between_processes(self, store: ObjectStore) -> None:
        """The same race between processes (the store pickled to each, or inherited through
        fork): a lock held inside one process does not make ``put_if_absent`` atomic. A store
        declared ``shared_across = "process"`` (objects live in one process) is not raced so."""
        assert store.shared_across in ("hosts", "host", "process"), (
            f"{type(store).__name__}.shared_across must be 'hosts', 'host' or 'process'")
        if store.shared_across == "process":
            return
        keys = [manifest(2000 + r) for r in range(self.rounds(store))]
        results = race_in_processes(store, keys, self.race_processes)
        wrong_rounds = outcome(store, keys, results)
        assert wrong_rounds == [], "\n".join(wrong_rounds)

    def test_put_if_absent_race_on_many_keys(self, store: ObjectStore) -> None:
        keys = [manifest(v) for v in range(1, 11)]

        def writer(i: int) -> list[bool]:
            return [store.put_if_absent(k, f"{i}".encode()) for k in keys]

        results = _run_threads(self.threads, writer)
        for column, key in enumerate(keys):
            winners = [i for i, row in enumerate(results) if row[column]]  # type: ignore[index]
            stored = store.get(key)
            assert len(winners) == 1, (key, winners, stored)
            assert stored == f"{winners[0]}".encode(), (key, winners, stored)

    # --- list ----------------------------------------------------------------------------------

    def test_list_empty_store(self, store: ObjectStore) -> None:
        assert list(store.list()) == []
        assert list(store.list("manifest/")) == []
        assert list(store.list("", start_after="a")) == []

    def test_list_is_lexicographic_across_directories(self, store: ObjectStore) -> None:
        keys = [
            "b/x/y",
            "a0",
            "manifest/00000000000000000010",
            "a/c",
            "manifest/00000000000000000001",
            "a/b",
            "a-",
            "b/x0",
            "manifest0",
            "Z",
            "a/b0/c",
            "sst/01AAAAAAAAAAAAAAAAAAAAAAAA.sst",
        ]
        for i, key in enumerate(keys):
            store.put(key, b"x" * i)
        listed = list(store.list())
        assert [info.key for info in listed] == sorted(keys)
        assert {info.key: info.size for info in listed} == {k: i for i, k in enumerate(keys)}

    def test_list_with_prefix(self, store: ObjectStore) -> None:
        keys = ["a/b", "a/c", "a0", "ab", "b/x/y", manifest(1), manifest(2), manifest(10)]
        for key in keys:
            store.put(key, b"v")
        assert self.keys_of(store, "a") == ["a/b", "a/c", "a0", "ab"]
        assert self.keys_of(store, "a/") == ["a/b", "a/c"]
        assert self.keys_of(store, "a/b") == ["a/b"]
        assert self.keys_of(store, "b/") == ["b/x/y"]
        assert self.keys_of(store, "b/x") == ["b/x/y"]
        assert self.keys_of(store, "manifest/") == [manifest(1), manifest(2), manifest(10)]
        assert self.keys_of(store, "manifest/0000000000000000000") == [manifest(1), manifest(2)]
        assert self.keys_of(store, "manifest/00000000000000000010") == [manifest(10)]
        assert self.keys_of(store, "c") == []
        assert self.keys_of(store, "a/b/") == []
        assert self.keys_of(store, "zzz/") == []

    def test_list_start_after(self, store: ObjectStore) -> None:
        keys = ["a/b", "a/c", "a0", "b/x/y", manifest(1), manifest(2), manifest(3)]
        for key in keys:
            store.put(key, b"v")
        assert self.keys_of(store, start_after="a/b") == sorted(keys)[1:]
        assert self.keys_of(store, start_after="a/bb") == sorted(keys)[1:]
        assert self.keys_of(store, start_after="a0") == ["b/x/y", *keys[4:]]
        assert self.keys_of(store, start_after="") == sorted(keys)
        assert self.keys_of(store, start_after="zzz") == []
        assert self.keys_of(store, "manifest/", start_after=manifest(1)) == keys[5:]
        assert self.keys_of(store, "manifest/", start_after=manifest(3)) == []
        assert self.keys_of(store, "manifest/", start_after="a") == keys[4:]
        assert self.keys_of(store, "a", start_after="manifest/") == []

    def test_list_many_keys_pages(self, store: ObjectStore) -> None:
        keys = [f"sst/{i:06d}.sst" for i in range(self.many_keys)]
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            list(pool.map(lambda k: store.put(k, k.encode()), keys))
        store.put("other", b"not under the prefix")
        listed = list(store.list("sst/"))
        assert [info.key for info in listed] == keys
        assert all(info.size == len(info.key) for info in listed)
        assert len(list(store.list())) == self.many_keys + 1
        # Page through with start_after like a caller resuming a listing.
        resumed: list[str] = []
        cursor: str | None = None
        while True:
            page = []
            for info in store.list("sst/", start_after=cursor):
                page.append(info.key)
                if len(page) == 400:
                    break
            if not page:
                break
            resumed.extend(page)
            cursor = page[-1]
        assert resumed == keys

    def test_list_sizes(self, store: ObjectStore) -> None:
        sizes = {"s/0": 0, "s/1": 1, "s/big": 100_000}
        for key, size in sizes.items():
            store.put(key, b"z" * size)
        assert list(store.list("s/")) == [ObjectInfo(k, sizes[k]) for k in sorted(sizes)]
        info = next(iter(store.list("s/big")))
        assert isinstance(info, ObjectInfo)
        assert (info.key, info.size) == ("s/big", 100_000)

    def test_list_engine_layout(self, store: ObjectStore) -> None:
        keys = [
            manifest(3),
            "sst/01J9Z8Q4V6T3M2K1H0G5F4E3D2.sst",
            "sst/01J9Z8Q4V6T3M2K1H0G5F4E3D3.sst",
            "compaction/01J9Z8Q4V6T3M2K1H0G5F4E3D4",
            "kg-0-127/manifest/00000000000000000001",
            "kg-0-127/sst/01J9Z8Q4V6T3M2K1H0G5F4E3D5.sst",
            "kg-128-255/manifest/00000000000000000001",
        ]
        for key in keys:
            assert store.put_if_absent(key, key.encode()) is True
        assert self.keys_of(store) == sorted(keys)
        assert self.keys_of(store, "kg-0-127/") == sorted(keys[4:6])
        assert self.keys_of(store, "sst/") == keys[1:3]
        for key in keys:
            assert store.get(key) == key.encode()

    # --- delete_many ---------------------------------------------------------------------------

    def test_delete_many(self, store: ObjectStore) -> None:
        for key in ["a/1", "a/2", "b", "c/d/e"]:
            store.put(key, b"v")
        store.delete_many(["a/1", "c/d/e", "never-existed", "x/y/z"])
        assert self.keys_of(store) == ["a/2", "b"]
        with pytest.raises(NotFoundError):
            store.get("a/1")
        with pytest.raises(NotFoundError):
            store.get("c/d/e")

    def test_delete_many_empty_and_generator(self, store: ObjectStore) -> None:
        store.put("k1", b"1")
        store.put("k2", b"2")
        store.delete_many([])
        assert self.keys_of(store) == ["k1", "k2"]
        store.delete_many(k for k in ["k1", "k2"])
        assert self.keys_of(store) == []

    def test_delete_many_missing_only(self, store: ObjectStore) -> None:
        store.delete_many(["nope", "sst/nope.sst"])
        store.delete_many(["nope"])  # twice is fine too
        assert list(store.list()) == []

    def test_delete_many_large_batch(self, store: ObjectStore) -> None:
        keys = [f"sst/{i:04d}.sst" for i in range(1200)]
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            list(pool.map(lambda k: store.put(k, b"."), keys))
        store.delete_many(keys[:1100])
        assert self.keys_of(store) == keys[1100:]

    # --- keys ----------------------------------------------------------------------------------

    def test_nested_keys(self, store: ObjectStore) -> None:
        deep = "a/b/c/d/e/f/g/h"
        store.put(deep, b"deep")
        store.put("a/b/other", b"sibling")
        assert store.get(deep) == b"deep"
        assert self.keys_of(store) == ["a/b/c/d/e/f/g/h", "a/b/other"]
        assert self.keys_of(store, "a/b/c/") == [deep]

    def test_engine_keys(self, store: ObjectStore) -> None:
        for version in (0, 1, 2, 10**19):
            assert store.put_if_absent(manifest(version), str(version).encode()) is True
        store.put(SST_KEY, b"sst bytes")
        assert store.get(manifest(10**19)) == str(10**19).encode()
        assert store.get(SST_KEY) == b"sst bytes"
        assert self.keys_of(store, "manifest/") == [manifest(v) for v in (0, 1, 2, 10**19)]

    def test_key_characters(self, store: ObjectStore) -> None:
        keys = ["with-dash_and.dots", "UPPER/lower", "digits/0123456789", "tilde~plus+eq=at@"]
        for key in keys:
            store.put(key, key.encode())
        for key in keys:
            assert store.get(key) == key.encode()
        assert self.keys_of(store) == sorted(keys)

    def test_empty_key_rejected(self, store: ObjectStore) -> None:
        with pytest.raises(InvalidArgumentError):
            store.put("", b"x")
        with pytest.raises(InvalidArgumentError):
            store.put_if_absent("", b"x")
        with pytest.raises(InvalidArgumentError):
            store.get("")
        with pytest.raises(InvalidArgumentError):
            store.get_range("", 0, 1)
        assert list(store.list()) == []

    # --- concurrency ---------------------------------------------------------------------------

    def test_concurrent_puts_and_gets(self, store: ObjectStore) -> None:
        rounds = 20

        def worker(i: int) -> None:
            for r in range(rounds):
                key = f"t{i}/obj{r:03d}"
                data = _payload(i * 1000 + r, 1000 + r)
                store.put(key, data)
                assert store.get(key) == data
                assert store.get_range(key, 10, 20) == data[10:30]
                store.put("shared", data)  # readers must see one whole version
                shared = store.get("shared")
                assert len(shared) >= 1000 and shared in expected_shared

        expected_shared = {
            _payload(i * 1000 + r, 1000 + r) for i in range(self.threads) for r in range(rounds)
        }
        _run_threads(self.threads, worker)
        listed = self.keys_of(store)
        assert len(listed) == self.threads * rounds + 1
        assert listed == sorted(listed)
        for i in range(self.threads):
            assert self.keys_of(store, f"t{i}/") == [f"t{i}/obj{r:03d}" for r in range(rounds)]

    def test_list_while_writing(self, store: ObjectStore) -> None:
        for i in range(50):
            store.put(f"old/{i:03d}", b"o")
        stop = threading.Event()

        def writer() -> None:
            n = 0
            while not stop.is_set():
                store.put(f"new/{n:05d}", b"n")
                n += 1

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            for _ in range(5):
                listed = self.keys_of(store)
                assert listed == sorted(listed)
                assert [k for k in listed if k.startswith("old/")] == [
                    f"old/{i:03d}" for i in range(50)
                ]
        finally:
            stop.set()
            thread.join()
