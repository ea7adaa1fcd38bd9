"""``silt.testing.FaultyStore``: schedules, lost responses, corruption, stalls and counters."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from silt.errors import (
    InvalidArgumentError,
    NotFoundError,
    StoreError,
    TransientStoreError,
)
from silt.store import ObjectStore, retrying
from silt.testing import Call, FaultyStore, StoreConformance
from silt.tiers.memory import MemoryStore


class TestFaultyStoreWithoutFaults(StoreConformance):
    """With nothing scheduled, the wrapper is a faithful store."""

    @pytest.fixture
    def store(self) -> ObjectStore:
        return FaultyStore(MemoryStore())


@pytest.fixture
def inner() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def faulty(inner: MemoryStore) -> FaultyStore:
    return FaultyStore(inner)


def test_fail_next_fails_then_recovers(faulty: FaultyStore, inner: MemoryStore) -> None:
    faulty.fail_next("put", n=2)
    for _ in range(2):
        with pytest.raises(TransientStoreError, match=r"injected fault.*put 'k'"):
            faulty.put("k", b"v")
        with pytest.raises(NotFoundError):
            inner.get("k")  # nothing reached the store
    faulty.put("k", b"v")
    assert inner.get("k") == b"v"
    assert faulty.calls["put"] == 3
    assert faulty.pending_faults == 0


def test_fail_next_only_affects_its_operation(faulty: FaultyStore) -> None:
    faulty.fail_next("get")
    faulty.put("k", b"v")
    assert faulty.put_if_absent("k2", b"v") is True
    with pytest.raises(TransientStoreError):
        faulty.get("k")
    assert faulty.get("k") == b"v"


def test_error_class_or_instance(faulty: FaultyStore) -> None:
    faulty.fail_next("put", error=StoreError)
    with pytest.raises(StoreError) as info:
        faulty.put("k", b"v")
    assert type(info.value) is StoreError
    boom = RuntimeError("exactly this")
    faulty.fail_next("get", error=boom)
    with pytest.raises(RuntimeError) as raised:
        faulty.get("k")
    assert raised.value is boom


def test_wildcard_op(faulty: FaultyStore) -> None:
    faulty.fail_next("*", n=2)
    with pytest.raises(TransientStoreError):
        faulty.put("a", b"1")
    with pytest.raises(TransientStoreError):
        list(faulty.list())
    faulty.put("a", b"1")


def test_fail_matching_by_key(faulty: FaultyStore) -> None:
    faulty.put("sst/a.sst", b"a")
    faulty.put("manifest/00000000000000000001", b"m")
    faulty.fail_matching("get", lambda k: k.startswith("sst/"), times=None)
    for _ in range(3):
        with pytest.raises(TransientStoreError):
            faulty.get("sst/a.sst")
    assert faulty.get("manifest/00000000000000000001") == b"m"
    faulty.clear_faults()
    assert faulty.get("sst/a.sst") == b"a"


def test_fail_matching_times(faulty: FaultyStore) -> None:
    faulty.put("k", b"v")
    faulty.fail_matching("get_range", lambda k: k == "k", error=StoreError, times=2)
    with pytest.raises(StoreError):
        faulty.get_range("k", 0, 1)
    with pytest.raises(StoreError):
        faulty.get_range("k", 0, 1)
    assert faulty.get_range("k", 0, 1) == b"v"


def test_rules_fire_in_order_one_per_request(faulty: FaultyStore) -> None:
    faulty.fail_next("put", error=ValueError)
    faulty.fail_next("put", error=KeyError)
    with pytest.raises(ValueError):
        faulty.put("k", b"v")
    with pytest.raises(KeyError):
        faulty.put("k", b"v")
    faulty.put("k", b"v")


def test_lose_response_applies_the_write(faulty: FaultyStore, inner: MemoryStore) -> None:
    key = "manifest/00000000000000000005"
    faulty.lose_response_next("put_if_absent")
    with pytest.raises(TransientStoreError, match="response lost"):
        faulty.put_if_absent(key, b"token-A")
    assert inner.get(key) == b"token-A"  # the first attempt did create it
    # The retry sees a conflict although this writer won: the ambiguous commit (docs/safety.md).
    assert faulty.put_if_absent(key, b"token-A") is False
    assert faulty.bytes_written == 2 * len(b"token-A")


def test_lose_response_with_retrying(faulty: FaultyStore, inner: MemoryStore) -> None:
    faulty.lose_response_next("put", n=2)
    retrying(lambda: faulty.put("k", b"v"), sleep=lambda s: None)
    assert faulty.calls["put"] == 3
    assert inner.get("k") == b"v"


def test_lose_response_of_delete_and_predicate(faulty: FaultyStore, inner: MemoryStore) -> None:
    for key in ("a", "b", "c"):
        inner.put(key, b"v")
    faulty.lose_response_next("delete_many", predicate=lambda k: k == "z")
    faulty.delete_many(["a"])  # does not match: no fault
    with pytest.raises(TransientStoreError):
        faulty.delete_many(["b", "z"])
    assert [i.key for i in inner.list()] == ["c"]


def test_corrupt_reads(faulty: FaultyStore, inner: MemoryStore) -> None:
    data = bytes(range(100))
    faulty.put("sst/a.sst", data)
    faulty.put("manifest/1", data)
    faulty.corrupt_reads(lambda k: k.endswith(".sst"))
    damaged = faulty.get("sst/a.sst")
    assert damaged != data and len(damaged) == len(data)
    assert sum(x != y for x, y in zip(damaged, data)) == 1
    assert faulty.get_range("sst/a.sst", 10, 10) != data[10:20]
    assert faulty.get("manifest/1") == data
    assert inner.get("sst/a.sst") == data  # stored bytes untouched


def test_corrupt_reads_custom_and_times(faulty: FaultyStore) -> None:
    faulty.put("k", b"abcdef")
    faulty.corrupt_reads(corrupt=lambda b: b[:-1], times=1)
    assert faulty.get("k") == b"abcde"
    assert faulty.get("k") == b"abcdef"


def test_on_call_can_stall_a_request(faulty: FaultyStore, inner: MemoryStore) -> None:
    release = threading.Event()
    reached = threading.Event()
    seen: list[tuple[str, str]] = []

    def stall(op: str, key: str) -> None:
        seen.append((op, key))
        reached.set()
        assert release.wait(timeout=10)

    faulty.on_call("put_if_absent", stall, predicate=lambda k: k.startswith("manifest/"), times=1)
    writer = threading.Thread(
        target=faulty.put_if_absent, args=("manifest/00000000000000000009", b"zombie")
    )
    writer.start()
    assert reached.wait(timeout=10)
    # While the zombie is stalled, another writer commits the same version.
    assert faulty.put_if_absent("manifest/00000000000000000009", b"live") is True
    release.set()
    writer.join(timeout=10)
    assert inner.get("manifest/00000000000000000009") == b"live"
    assert seen == [("put_if_absent", "manifest/00000000000000000009")]


def test_on_call_can_raise(faulty: FaultyStore, inner: MemoryStore) -> None:
    def refuse(op: str, key: str) -> None:
        raise OSError("crash point")

    faulty.on_call("put", refuse)
    with pytest.raises(OSError, match="crash point"):
        faulty.put("k", b"v")
    with pytest.raises(NotFoundError):
        inner.get("k")


def test_counters_and_log(faulty: FaultyStore) -> None:
    faulty.put("a", b"123")
    faulty.put_if_absent("b", b"45")
    faulty.get("a")
    faulty.get_range("a", 1, 10)
    list(faulty.list("a"))
    faulty.delete_many(["a", "b"])
    faulty.fail_next("get")
    with pytest.raises(TransientStoreError):
        faulty.get("a")
    assert faulty.calls == Counter(
        {"put": 1, "put_if_absent": 1, "get": 2, "get_range": 1, "list": 1, "delete_many": 1}
    )
    assert faulty.bytes_written == 5
    assert faulty.bytes_read == 3 + 2
    assert faulty.log == [
        Call("put", "a"),
        Call("put_if_absent", "b"),
        Call("get", "a"),
        Call("get_range", "a"),
        Call("list", "a"),
        Call("delete_many", "a"),
        Call("delete_many", "b"),
        Call("get", "a"),
    ]
    faulty.reset_counters()
    assert faulty.calls == Counter()
    assert (faulty.bytes_read, faulty.bytes_written, faulty.log) == (0, 0, [])


def test_list_fault_fires_when_iteration_starts(faulty: FaultyStore) -> None:
    faulty.put("k", b"v")
    faulty.fail_next("list")
    listing = faulty.list()  # nothing happens yet, as with a real tier's lazy pages
    with pytest.raises(TransientStoreError):
        next(listing)
    assert [i.key for i in faulty.list()] == ["k"]


def test_bad_schedules_are_rejected(faulty: FaultyStore) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown store operation 'gett'"):
        faulty.fail_next("gett")
    with pytest.raises(InvalidArgumentError):
        faulty.fail_next("get", n=0)
    with pytest.raises(InvalidArgumentError):
        faulty.lose_response_next("put", n=-1)
    with pytest.raises(InvalidArgumentError):
        FaultyStore("memory://x")  # type: ignore[arg-type]


def test_wraps_url_and_close(inner: MemoryStore) -> None:
    closed: list[bool] = []
    inner.close = lambda: closed.append(True)  # type: ignore[method-assign]
    faulty = FaultyStore(inner)
    assert faulty.url == inner.url
    assert "FaultyStore(MemoryStore(" in repr(faulty)
    faulty.close()
    assert closed == [True]


def test_thread_safe_counting(faulty: FaultyStore) -> None:
    faulty.fail_matching("put", lambda k: k.endswith("7"), times=None)

    def work(t: int) -> int:
        failures = 0
        for i in range(200):
            try:
                faulty.put(f"t{t}/{i}", b"x")
            except TransientStoreError:
                failures += 1
        return failures

    results: list[int] = []
    threads = [threading.Thread(target=lambda t=t: results.append(work(t))) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert faulty.calls["put"] == 1600
    assert sum(results) == 8 * 20
    assert faulty.bytes_written == 1600 - 160
