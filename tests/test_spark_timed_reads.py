"""What finding due timers, expired entries and closed windows costs on an object store
(``runtime._keys.timed_due``: the processor's and the batch processor's timers, dedup's expiry
index, closed windows), in round trips, with no Spark and no clock.

A shard's time index is filled in several commits (one L0 SST each) on ``memory://`` behind a
:class:`silt.testing.LatencyStore`; a fresh handle then reads what is due. Asserted: the due
entries of every key group come with one ``multi_scan`` (the tails, then the blocks: 2 round
trips on a cold handle, none on a warm one, where a scan per key group took a round trip per
SST each and every batch, since scans keep no block in the cache), and the answer is a plain
scan's: every entry at or before the limit, in key order, and the smallest time after it.
"""

from __future__ import annotations

import uuid

import pytest
import silt
from silt.plugins import open_store
from silt.testing import LatencyStore
from silt_spark.runtime import _keys

DELAY = 0.12
KGS = 16
SETTINGS = silt.Settings(compaction="none", inline_delta_bytes=0, read_parallelism=64)
LONGER = "more round trips than expected"

pytestmark = pytest.mark.flaky(reruns=2, only_rerun=[LONGER])


def _fill(url: str, future_only_sst: bool) -> None:
    """5 commits of timer entries in every key group, times 1000*c + 5*t; with
    ``future_only_sst`` a last commit holding only times far past every limit below."""
    with silt.open(url, settings=SETTINGS) as db:
        for c in range(5):
            for kg in range(KGS):
                for t in range(200):
                    db.put(_keys.timed_key(kg, _keys.TIMER_TAG, 1000 * c + 5 * t,
                                           b"key%d" % t), b"v%d" % c)
            db.commit()
        if future_only_sst:
            for kg in range(0, KGS, 3):
                db.put(_keys.timed_key(kg, _keys.TIMER_TAG, 9_000 + kg, b"late"), b"")
            db.commit()


def _plain(db: silt.DB, limit: int) -> tuple[list[tuple[bytes, bytes]], int | None]:
    """The answer by a scan of each key group's whole index."""
    due, after = [], []
    for kg in range(KGS):
        for k, v in db.scan(*_keys.tag_range(kg, _keys.TIMER_TAG)):
            (due if _keys.key_time(k) <= limit else after).append((k, v))
    return due, min((_keys.key_time(k) for k, _ in after), default=None)


def _longer(op: object, expected: int) -> None:
    if op.round_trips > expected:
        raise AssertionError(f"{LONGER}: {op.round_trips}, expected {expected}: {op}")
    assert op.round_trips == expected, op


@pytest.mark.parametrize(("limit", "future_only_sst"), [
    (2_500, False), (2_502, True), (-1, False), (4_995, False), ((1 << 63) - 1, True)])
def test_due_entries_of_every_key_group_in_one_wave(limit: int, future_only_sst: bool) -> None:
    url = f"memory://timed-{uuid.uuid4().hex}"
    _fill(url, future_only_sst)
    store = LatencyStore(open_store(url), DELAY)
    db = silt.open(url, store=store, settings=SETTINGS)
    plain = silt.open(url)
    try:
        want = _plain(plain, limit)
        with store.operation() as cold:
            got = _keys.timed_due(db, 0, KGS - 1, _keys.TIMER_TAG, limit)
        assert got == want
        # the tails, then the blocks (the future-only commit's one block too: its keys span
        # the ranges of the key groups between its first and last); the scans for the next
        # time then find their blocks in the cache
        _longer(cold, 2)
        with store.operation() as warm:  # the next batch: every block in the cache
            assert _keys.timed_due(db, 0, KGS - 1, _keys.TIMER_TAG, limit) == want
        assert warm.round_trips == 0, warm
        entries, nxt = _keys.due_entries(db, 0, KGS - 1, _keys.TIMER_TAG, limit)
        assert nxt == want[1]
        assert entries == [(_keys.key_time(k), int.from_bytes(k[:2], "big"), k)
                           for k, _ in want[0]]
    finally:
        db.close()
        plain.close()
