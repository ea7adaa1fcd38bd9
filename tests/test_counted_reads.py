"""A direct reader's reads, metered (silt.metrics.CountedReads): both twins count the same
requests and bytes by purpose (failed reads too, with 0 bytes, and re-raise); and compiled, a
block-cache miss of a get or a local multi_get makes no Python call for the metering (before,
one ``counted`` frame per miss) nor, warm, any per SST (the compiled multi_get pass reads the
block cache itself and calls the fetcher only for what it missed)."""

from __future__ import annotations

import os
import random
import threading
from collections import defaultdict

import pytest
import silt
from pycalls import python_calls
from silt import metrics as metrics_mod

try:
    from silt import _speedups as C
except ImportError as exc:  # pragma: no cover - depends on the build
    if os.environ.get("SILT_REQUIRE_EXTENSIONS", "") not in ("", "0"):
        raise ImportError(f"SILT_REQUIRE_EXTENSIONS=1, no silt._speedups: {exc}") from exc
    C = None

TWINS = [metrics_mod.CountedReads_py] + ([C.CountedReads] if C is not None else [])


@pytest.mark.parametrize("cls", TWINS, ids=lambda c: c.__module__)
def test_both_twins_count_reads_by_purpose(cls) -> None:
    data = bytes(range(256)) * 4
    requests: dict = defaultdict(lambda: [0, 0])
    local = threading.local()
    m = metrics_mod.Metrics()
    m.requests, m._local = requests, local  # the same counters as a DB's

    def inner(start: int, length: int) -> bytes:
        if start < 0:
            raise OSError("bad offset")
        return data[start:start + length]

    read = cls(inner, requests, local)
    assert read(10, 20) == data[10:30]
    with m.purpose("compaction"):
        assert read(1000, 100) == data[1000:1024]  # short at the end
    with pytest.raises(OSError, match="bad offset"):
        read(-1, 5)
    assert dict(requests) == {("read", "RANGE_GET"): [2, 20],
                              ("compaction", "RANGE_GET"): [1, 24]}


@pytest.mark.skipif(C is None or not metrics_mod.COMPILED, reason="the compiled twin's claim")
def test_compiled_misses_make_no_python_call_to_meter(tmp_path) -> None:
    url = tmp_path.as_uri()
    settings = silt.Settings(memtable_bytes=1 << 16, block_bytes=256, block_cache_bytes=1 << 20,
                             compaction="none")
    rnd = random.Random(5)
    keys = [rnd.randbytes(12) for _ in range(6000)]
    with silt.open(url, settings=settings) as db:
        for k in keys:
            db.put(k, k * 3)
        db.commit()
    with silt.open(url, settings=settings) as db:
        db.get(keys[0])  # tails loaded: not what is counted
        before = db.stats()["requests_by_kind"]["RANGE_GET"]
        sample = rnd.sample(keys, 400)
        calls = python_calls(lambda: [db.get(k) for k in sample])
        reads = db.stats()["requests_by_kind"]["RANGE_GET"] - before
        assert reads > 100  # cold: most gets read a block
        metered = sum(n for (f, _), n in calls.items() if f == "metrics.py")
        assert metered == 0, calls
        batch = rnd.sample(keys, 1500)
        before = db.stats()["requests_by_kind"]["RANGE_GET"]
        calls = python_calls(lambda: db.multi_get(batch))
        assert db.stats()["requests_by_kind"]["RANGE_GET"] - before > 100
        assert sum(n for (f, _), n in calls.items() if f == "metrics.py") == 0, calls
        # warm, the pass asks the fetcher for nothing
        calls = python_calls(lambda: db.multi_get(batch))
        assert sum(n for (f, _), n in calls.items() if f == "fetch.py") == 0, calls
        assert db.multi_get(batch) == [k * 3 for k in batch]
