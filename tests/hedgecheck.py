"""The hedged-read check every network tier runs (tests/test_tier_*.py), against its real
emulator behind the fault proxy (tests/faultproxy.py)."""

from __future__ import annotations

import random

from faultproxy import FaultProxy
from silt.metrics import MeteredStore, Metrics
from silt.store import ObjectStore


def check_a_slow_read_is_hedged_and_billed_twice(store: ObjectStore, proxy: FaultProxy) -> None:
    """A ranged GET held back 5 s by the proxy: the store (opened with ``hedge_after_ms=300``
    through ``proxy``) sends a second request, which answers first with the same bytes;
    metering bills both requests. A whole-object GET is hedged the same way."""
    data = random.Random(11).randbytes(50_000)
    store.put("sst/h.sst", data)
    metrics = Metrics()
    metered = MeteredStore(store, metrics)
    proxy.fault("delay", match=b"GET /", seconds=5, times=1)
    assert metered.get_range("sst/h.sst", 100, 5000) == data[100:5100]
    assert proxy.counts["delay"] == 1
    stats = store.stats()["hedging"]
    assert (stats["hedged"], stats["hedge_wins"]) == (1, 1), stats
    ranged = sum(c for (_, op), (c, _) in metrics.requests.items() if op == "RANGE_GET")
    assert ranged == 2
    proxy.fault("delay", match=b"GET /", seconds=5, times=1)
    assert metered.get("sst/h.sst") == data
    stats = store.stats()["hedging"]
    assert (stats["hedged"], stats["hedge_wins"]) == (2, 2), stats
    whole = sum(c for (_, op), (c, _) in metrics.requests.items() if op == "GET")
    assert whole == 2
