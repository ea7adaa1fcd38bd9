"""Blocks of the SSTs a process uploads go into its block cache when the store is remote
(``ObjectStore.local`` false), so reads of fresh state make no request; on local stores they
do not (a read there costs microseconds, the prefill would cost CPU on every flush)."""

from __future__ import annotations

import pytest
import silt
from silt.tiers.memory import MemoryStore


class RemoteMemory(MemoryStore):
    """A memory store that says it is remote (as S3, GCS or Azure do)."""

    local = False


def reads_after_commit(store: silt.ObjectStore) -> tuple[int, list[bytes | None]]:
    settings = silt.Settings(inline_delta_bytes=0, block_bytes=1024,
                             block_cache_bytes=8 << 20)
    with silt.open("memory://prefill", store=store, settings=settings) as db:
        keys = [b"k%05d" % i for i in range(3000)]
        db.put_many(keys, [b"v" * 50] * len(keys))
        db.commit()
        before = db.stats()["requests"].get("read", {}).get("RANGE_GET", {}).get("count", 0)
        got = [*db.multi_get(keys[::7]), db.get(keys[5])]
        after = db.stats()["requests"].get("read", {}).get("RANGE_GET", {}).get("count", 0)
    return after - before, got


@pytest.mark.parametrize("remote", [True, False])
def test_fresh_state_is_read_from_the_cache_on_remote_stores(remote: bool) -> None:
    store = RemoteMemory(None) if remote else MemoryStore(None)
    reads, got = reads_after_commit(store)
    assert got == [b"v" * 50] * len(got)
    if remote:
        assert reads == 0  # every block was put into the cache by the upload
    else:
        assert reads > 0  # read back from the (local) store


def test_wrappers_tell_the_truth_about_locality() -> None:
    from silt.metrics import MeteredStore, Metrics
    from silt.testing import FaultyStore

    for inner, want in ((MemoryStore(None), True), (RemoteMemory(None), False)):
        assert MeteredStore(inner, Metrics()).local is want
        assert FaultyStore(inner).local is want
