"""silt.testing.LatencyStore itself: every request kind is delayed and counted, requests issued
at once are one round trip whatever their number and kind, requests issued one after the other
are a chain, and the store reads as remote. Bad arguments are refused with a clear error."""

from __future__ import annotations

import random
import threading

import pytest
from silt.errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from silt.testing import LatencyStore
from silt.tiers.memory import MemoryStore

DELAY = 0.12


def _request(store: LatencyStore, kind: str, n: int) -> None:
    """One request of ``kind`` on a key of its own (``n``)."""
    key = f"k/{n:04d}"
    if kind == "get":
        store.get("k/seed")
    elif kind == "get_range":
        store.get_range("k/seed", 1, 2)
    elif kind == "put":
        store.put(key, b"x")
    elif kind == "put_if_absent":
        store.put_if_absent(key, b"x")
    elif kind == "delete_many":
        store.delete_many([key])
    else:
        assert [i.key for i in store.list("k/seed")] == ["k/seed"]


def _at_once(store: LatencyStore, kinds: list[str], first: int) -> None:
    """Issue the requests at once (a thread each, started together) and wait for all."""
    go = threading.Barrier(len(kinds))

    def run(i: int, kind: str) -> None:
        go.wait()
        _request(store, kind, first + i)

    threads = [threading.Thread(target=run, args=(i, k)) for i, k in enumerate(kinds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_waves_of_requests_issued_at_once_count_one_round_trip_each() -> None:
    """Random waves (1-5 requests of random kinds, issued at once; waves one after the other):
    the round trips are the number of waves, the requests are counted by kind."""
    rng = random.Random(27)
    inner = MemoryStore()
    inner.put("k/seed", b"seed")
    store = LatencyStore(inner, DELAY)
    kinds = ("get", "get_range", "put", "put_if_absent", "delete_many", "list")
    n = 0
    for _case in range(4):
        waves = [[rng.choice(kinds) for _ in range(rng.randint(1, 5))]
                 for _ in range(rng.randint(1, 3))]
        with store.operation() as op:
            for wave in waves:
                _at_once(store, wave, n)
                n += len(wave)
        assert op.round_trips == len(waves), (waves, op)
        expected: dict[str, int] = {}
        for wave in waves:
            for k in wave:
                expected[k] = expected.get(k, 0) + 1
        assert dict(op.requests) == expected
        assert op.total == sum(map(len, waves))
        assert [sorted(k for k, _ in w) for w in op.waves()] == [sorted(w) for w in waves]


def test_failed_requests_count_and_requests_outside_an_operation_do_not() -> None:
    inner = MemoryStore()
    store = LatencyStore(inner, DELAY)
    store.put("a", b"1")  # outside any operation: counted in counts only
    with store.operation() as op:
        with pytest.raises(NotFoundError):
            store.get("missing")
        assert store.get("a") == b"1"
    assert (op.round_trips, dict(op.requests)) == (2, {"get": 2})
    assert store.counts == {"put": 1, "get": 2}
    with store.operation() as empty:
        pass
    assert (empty.round_trips, empty.total) == (0, 0)


def test_it_reads_as_remote_and_forwards_the_rest() -> None:
    inner = MemoryStore()
    assert inner.local
    store = LatencyStore(inner, 0)
    assert not store.local and store.url == inner.url
    assert store.shared_across == inner.shared_across
    assert store.direct_reader("a") is None  # block reads are counted get_range requests
    assert store.remove_stale_temporaries("", 0) == 0
    assert store.stats() == inner.stats()


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan"), "0.1", True])
def test_a_bad_delay_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="delay must be a finite number"):
        LatencyStore(MemoryStore(), bad)  # type: ignore[arg-type]


def test_it_wraps_only_a_store_and_operations_do_not_nest() -> None:
    with pytest.raises(InvalidTypeError, match="open_store"):
        LatencyStore("memory://x")  # type: ignore[arg-type]
    store = LatencyStore(MemoryStore(), 0)
    with store.operation():
        with pytest.raises(InvalidArgumentError, match="do not nest"):
            with store.operation():
                pass
    with store.operation() as op:  # usable again after the refusal
        store.put("a", b"1")
    assert op.requests == {"put": 1}


def test_stores_on_one_timeline_are_timed_as_one_operation() -> None:
    """``timeline=``: requests of several stores are recorded in the operations of one; a
    request of one store after another's completed follows it in the chain, requests of both
    at once are one round trip; each store keeps its own counts."""
    main = LatencyStore(MemoryStore(), DELAY)
    other = LatencyStore(MemoryStore(), DELAY, timeline=main)
    for s in (main, other):
        s.put("k/seed", b"seed")
    with other.operation() as op:  # either store's operation() opens the shared one
        main.get("k/seed")
        other.get("k/seed")
        go = threading.Barrier(2)

        def at_once(store: LatencyStore) -> None:
            go.wait()
            store.get_range("k/seed", 0, 1)

        threads = [threading.Thread(target=at_once, args=(s,)) for s in (main, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert (op.round_trips, op.total) == (3, 4), op
    assert main.counts == {"put": 1, "get": 1, "get_range": 1}
    assert other.counts == {"put": 1, "get": 1, "get_range": 1}
    with pytest.raises(InvalidTypeError, match="timeline is another LatencyStore"):
        LatencyStore(MemoryStore(), 0, timeline=MemoryStore())  # type: ignore[arg-type]
