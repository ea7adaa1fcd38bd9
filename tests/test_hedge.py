"""Hedged reads (silt.tierkit.hedge), without a network: the timing is driven by events, so
each case is deterministic. The tiers' own suites run the same against their emulators behind
the fault proxy (tests/hedgecheck.py)."""

from __future__ import annotations

import threading

import pytest
from silt.errors import InvalidArgumentError, TransientStoreError
from silt.tierkit import hedge
from silt.tierkit.hedge import Hedger


class Attempts:
    """A read whose attempts block until the test releases them, one event per attempt."""

    def __init__(self, n: int, results: list[object]) -> None:
        self.go = [threading.Event() for _ in range(n)]
        self.started = [threading.Event() for _ in range(n)]
        self.results = results
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> bytes:
        with self.lock:
            i = self.calls
            self.calls += 1
        self.started[i].set()
        self.go[i].wait(10)
        r = self.results[i]
        if isinstance(r, BaseException):
            raise r
        return r  # type: ignore[return-value]


def test_a_read_answered_in_time_is_not_hedged() -> None:
    h = Hedger(after_ms=5_000, quantile=0)
    read = Attempts(1, [b"a"])
    read.go[0].set()
    assert h.run(read) == b"a"
    assert read.calls == 1 and h.stats() == {"reads": 1, "hedged": 0, "hedge_wins": 0}
    assert h.take_extra() == 0
    h.close()


def test_a_slow_read_sends_a_second_request_and_the_first_answer_wins() -> None:
    h = Hedger(after_ms=20, quantile=0)
    read = Attempts(2, [b"slow", b"fast"])
    read.go[1].set()  # the second answers at once; the first is held until released
    assert h.run(read) == b"fast"
    assert read.calls == 2
    assert h.stats() == {"reads": 1, "hedged": 1, "hedge_wins": 1}
    assert h.take_extra() == 1 and h.take_extra() == 0  # counted once, on the caller's thread
    read.go[0].set()
    h.close()


def test_the_first_attempt_may_still_win_after_the_hedge() -> None:
    h = Hedger(after_ms=20, quantile=0)
    read = Attempts(2, [b"first", b"second"])

    def release_first() -> None:
        read.started[1].wait(10)
        read.go[0].set()

    threading.Thread(target=release_first).start()
    assert h.run(read) == b"first"
    assert h.stats() == {"reads": 1, "hedged": 1, "hedge_wins": 0}
    read.go[1].set()
    h.close()


def test_a_failed_attempt_waits_for_the_other_and_both_failing_raise_the_first_error() -> None:
    h = Hedger(after_ms=20, quantile=0)
    read = Attempts(2, [TransientStoreError("first broke"), b"second"])

    def release() -> None:
        read.started[1].wait(10)
        read.go[0].set()  # the first fails while the second runs
        read.go[1].set()

    threading.Thread(target=release).start()
    assert h.run(read) == b"second"
    both = Attempts(2, [TransientStoreError("first broke"), TransientStoreError("second broke")])

    def release_both() -> None:
        both.started[1].wait(10)
        both.go[1].set()
        both.go[0].set()

    threading.Thread(target=release_both).start()
    with pytest.raises(TransientStoreError, match="first broke"):
        h.run(both)
    h.close()


def test_an_error_before_the_delay_is_raised_without_a_hedge() -> None:
    h = Hedger(after_ms=5_000, quantile=0)
    read = Attempts(1, [TransientStoreError("gone")])
    read.go[0].set()
    with pytest.raises(TransientStoreError, match="gone"):
        h.run(read)
    assert read.calls == 1 and h.stats()["hedged"] == 0
    h.close()


def test_the_quantile_waits_for_samples_then_hedges_after_it() -> None:
    h = Hedger(after_ms=0, quantile=0.9)
    assert h.delay() is None  # no samples yet: no hedging
    with h._lock:
        h._latencies.extend([0.001 * i for i in range(1, 101)])  # 1..100 ms
    assert h.delay() == pytest.approx(0.091)
    floor = Hedger(after_ms=500, quantile=0.9)
    with floor._lock:
        floor._latencies.extend([0.001] * 100)
    assert floor.delay() == pytest.approx(0.5)  # never sooner than hedge_after_ms


def test_the_budget_caps_the_share_of_hedged_reads() -> None:
    h = Hedger(after_ms=10, quantile=0)
    with h._lock:
        h.reads, h.hedged = 1000, 1000 * hedge.BUDGET + hedge.BURST
    assert h.delay() is None
    with h._lock:
        h.hedged -= 1
    assert h.delay() == pytest.approx(0.01)


@pytest.mark.parametrize("after, quantile, words", [
    (-1, 0, "hedge_after_ms must be in 0..600000"),
    (float("nan"), 0, "hedge_after_ms must be in"),
    (0, 1.0, r"hedge_quantile must be in \[0, 1\)"),
    (0, -0.5, "hedge_quantile must be in"),
])
def test_bad_options_are_refused_naming_them(after: float, quantile: float, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        Hedger(after, quantile)


def test_options_turn_hedging_on_only_when_asked() -> None:
    from silt.tierkit import NetworkOptions

    assert Hedger.from_options(NetworkOptions()) is None
    assert Hedger.from_options(NetworkOptions(hedge_after_ms=50)) is not None
    assert Hedger.from_options(NetworkOptions(hedge_quantile=0.95)) is not None
    with pytest.raises(InvalidArgumentError, match="hedge_quantile"):
        NetworkOptions(hedge_quantile=2)
