"""Gets that miss the block cache read through the store's direct reader
(:meth:`silt.store.ObjectStore.direct_reader`). The compiled twin does the whole miss in one call
(``_read_missed``); these tests hold both twins to the same contract: a transient failure of a
direct read is retried through ``get_range``, a missing object is reported as a gone SST, any
other error is raised as it is, the block read lands in the cache, and a store without a direct
reader is read through ``get_range``. The suite runs once per twin.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import silt
from silt.errors import NotFoundError, RetriesExhaustedError, StoreError, TransientStoreError
from silt.tiers.memory import MemoryStore

# No inline deltas: the SSTs are real objects read through the store.
SETTINGS = silt.Settings(block_bytes=256, bloom_bits_per_key=10, inline_delta_bytes=0)
KEYS = [b"k%05d" % i for i in range(400)]


class DirectStore(MemoryStore):
    """A memory store with a direct reader that records its reads and raises what ``fail``
    holds (one error per read, front first) before reading."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: list[BaseException] = []
        self.direct_reads = 0
        self.range_reads = 0
        self.offer_direct = True

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if key.startswith("sst/"):
            self.range_reads += 1
        return super().get_range(key, start, length)

    def direct_reader(self, key: str) -> Callable[[int, int], bytes] | None:
        if not self.offer_direct:
            return None

        def read(start: int, length: int) -> bytes:
            self.direct_reads += 1
            if self.fail:
                raise self.fail.pop(0)
            return MemoryStore.get_range(self, key, start, length)

        return read


@pytest.fixture
def loaded() -> tuple[silt.DB, DirectStore]:
    store = DirectStore()
    db = silt.open("memory://unused", settings=SETTINGS, store=store)
    for k in KEYS:
        db.put(k, k[::-1])
    db.commit()
    db.close()
    db = silt.open("memory://unused", settings=SETTINGS, store=store)
    assert db.get(KEYS[0]) == KEYS[0][::-1]  # loads the SST's tail (and the first block)
    store.direct_reads = store.range_reads = 0
    yield db, store
    db.close()


def test_a_miss_reads_one_block_directly_and_caches_it(loaded) -> None:
    db, store = loaded
    assert db.get(KEYS[107]) == KEYS[107][::-1]
    assert (store.direct_reads, store.range_reads) == (1, 0)
    assert db.get(KEYS[107]) == KEYS[107][::-1]  # the same block, from the cache
    assert db.get(KEYS[108]) == KEYS[108][::-1]
    assert (store.direct_reads, store.range_reads) == (1, 0)
    assert db.get(KEYS[-1]) == KEYS[-1][::-1]  # another block
    assert store.direct_reads == 2


def test_a_transient_failure_of_a_direct_read_is_retried_through_get_range(loaded) -> None:
    db, store = loaded
    store.fail = [TransientStoreError("connection reset")]
    assert db.get(KEYS[100]) == KEYS[100][::-1]
    assert (store.direct_reads, store.range_reads) == (1, 1)
    assert db.get(KEYS[100]) == KEYS[100][::-1]  # cached after the retried read
    assert (store.direct_reads, store.range_reads) == (1, 1)


def test_exhausted_retries_and_permanent_errors_are_raised_as_they_are(loaded) -> None:
    db, store = loaded
    store.fail = [RetriesExhaustedError("gave up")]
    with pytest.raises(RetriesExhaustedError, match="gave up"):
        db.get(KEYS[200])
    store.fail = [StoreError("access denied")]
    with pytest.raises(StoreError, match="access denied"):
        db.get(KEYS[200])
    assert store.range_reads == 0  # neither was retried
    assert db.get(KEYS[200]) == KEYS[200][::-1]  # and nothing bad was cached


def test_a_missing_object_is_reported_as_a_gone_sst(loaded) -> None:
    db, store = loaded
    store.fail = [NotFoundError("no such object")]
    with pytest.raises(NotFoundError, match="is gone"):
        db.get(KEYS[300])


def test_a_short_direct_read_is_corruption_not_a_wrong_answer(loaded) -> None:
    db, store = loaded

    real = store.direct_reader

    def short_reader(key: str) -> Callable[[int, int], bytes] | None:
        read = real(key)
        assert read is not None
        return lambda start, length: read(start, length)[:-1]

    store.direct_reader = short_reader  # type: ignore[method-assign]
    db.close()
    db2 = silt.open("memory://unused", settings=SETTINGS, store=store)
    try:
        with pytest.raises(silt.errors.CorruptionError):
            db2.get(KEYS[5])
    finally:
        db2.close()


def test_without_a_direct_reader_blocks_are_read_through_get_range() -> None:
    store = DirectStore()
    store.offer_direct = False
    with silt.open("memory://unused", settings=SETTINGS, store=store) as db:
        for k in KEYS:
            db.put(k, k)
        db.commit()
    with silt.open("memory://unused", settings=SETTINGS, store=store) as db:
        assert db.get(KEYS[0]) == KEYS[0]  # loads the tail
        store.range_reads = 0
        assert [db.get(k) for k in KEYS[200:203]] == KEYS[200:203]
        assert (store.direct_reads, store.range_reads) == (0, 1)
