"""``DB.newer_versions`` on a warm handle: two GETs of missing objects instead of a LIST, and the
same answer as a listing whatever other writers and GC did meanwhile.

A stream processor asks it before every task of a cached shard handle, so its cost is paid per
micro-batch; its answer decides whether the handle's state is the batch's base, so a wrong
"nothing newer" would compute a batch from stale state.
"""

from __future__ import annotations

import time

import pytest
import roundtrips
import silt
from silt.gc import collect_garbage
from silt.metrics import KINDS


def _requests(db: silt.DB) -> dict[str, int]:
    """Without the leftovers search's requests: a thread's, at a moment a loaded machine moves
    (``roundtrips.foreground_requests``)."""
    return roundtrips.foreground_requests(db)


def _delta(db: silt.DB, before: dict[str, int]) -> dict[str, int]:
    now = _requests(db)
    return {k: now[k] - before[k] for k in KINDS if now[k] != before[k]}


def _commit(db: silt.DB, key: bytes, version: int | None = None) -> int:
    db.put(key, b"v")
    return db.commit(version)


@pytest.fixture(params=["file", "memory"])
def url(request, tmp_path):
    if request.param == "file":
        yield (tmp_path / "db").as_uri()
    else:
        from silt.tiers.memory import MemoryStore

        name = f"newer-{time.monotonic_ns()}"
        yield f"memory://{name}"
        MemoryStore.drop(name)


def test_a_warm_handle_that_nobody_passed_pays_two_gets(url: str) -> None:
    with silt.open(url) as db:
        _commit(db, b"a")
        _commit(db, b"b")
        before = _requests(db)
        assert db.newer_versions() == []
        assert _delta(db, before) in ({"GET": 2}, {"GET": 1, "RANGE_GET": 1})
    with silt.open(url) as cold:  # never committed: no GC markers known, so it lists
        before = _requests(cold)
        assert cold.newer_versions() == []
        assert _delta(cold, before).get("LIST") == 1


@pytest.mark.parametrize("skip", [False, True])
def test_another_writer_passing_the_handle_is_seen(url: str, skip: bool) -> None:
    with silt.open(url) as a:
        _commit(a, b"a")
        _commit(a, b"b")
        with silt.open(url) as b:
            # A commit that skips numbers reserves the next one first: still seen.
            target = 7 if skip else None
            _commit(b, b"x", target)
        # (the reservation, version 3 with the base's state, is a version too)
        assert a.newer_versions() == ([3, 7] if skip else [3])
        with pytest.raises(silt.CommitConflict):
            _commit(a, b"late")


def test_a_successor_gc_deleted_is_seen_through_the_epoch(url: str) -> None:
    """Another writer commits many versions and GC deletes the manifests after the handle's
    version: the missing successor alone would say "nothing newer", the GC epoch says
    otherwise and the handle lists."""
    with silt.open(url) as a:
        _commit(a, b"a")
        with silt.open(url) as b:
            for i in range(8):
                _commit(b, b"k%d" % i)
        grace = silt.Settings().gc_grace_seconds
        later = silt.ManualClock(int(time.time() * 1000) + int(grace * 1000) + 1000)
        report = collect_garbage(a.store, retain_versions=2, grace_seconds=grace, clock=later)
        assert report.deleted_manifests  # the handle's successor (version 2) is among them
        assert silt.versions(url) == [8, 9]
        assert a.newer_versions() == [8, 9]


def test_a_withdrawn_successor_does_not_count(url: str) -> None:
    """A version whose writer withdrew it exists as a manifest: the GET finds it, the listing
    that follows leaves it out."""
    from silt import paths
    from silt.plugins import open_store
    from silt.versions import WITHDRAWN, Fate

    with silt.open(url) as a:
        _commit(a, b"a")
        with silt.open(url) as b:
            _commit(b, b"x")
            token = b.manifest.token
        store = open_store(url)
        try:
            store.put_if_absent(paths.fate_key(2), Fate(2, WITHDRAWN, "test", token).encode())
        finally:
            store.close()
        assert silt.versions(url) == [1]
        assert a.newer_versions() == []
