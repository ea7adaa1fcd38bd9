"""A tier for tests: ``slow://<scheme>/<rest>`` is the store of ``<scheme>://<rest>`` behind a
:class:`silt.testing.LatencyStore` whose requests are recorded on :data:`TIMELINE`.

A stream processor's task opens stores itself, from URLs (its operator's root for the origin
check, its shard for the state), so a test cannot hand it a store to time. Under this scheme
every store it opens is remote (``local`` false: independent requests go out at once) and
adds :data:`DELAY` to each request, and ``TIMELINE.operation()`` times the requests of all of
them as one operation (sequential round trips across stores). Register it with
``plugins.DEFAULT_PLUGINS`` (``("slow", "slowtier")``), as tests register a tier package.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import silt
from silt.plugins import open_store
from silt.testing import LatencyStore
from silt.tiers.memory import MemoryStore

#: Seconds each request waits: long against a thread's start-up on a loaded machine.
DELAY = 0.12

#: The operations every ``slow://`` store records its requests in.
TIMELINE = LatencyStore(MemoryStore(), 0.0)


def open_slow(url: str, options: dict[str, str], **kwargs: Any) -> LatencyStore:
    """The store of ``url`` (``slow://<scheme>/<rest>``) behind the latency."""
    scheme, _, rest = url[len("slow://"):].partition("/")
    query = urlencode(options)
    inner = open_store(f"{scheme}://{rest}" + (f"?{query}" if query else ""), **kwargs)
    return LatencyStore(inner, DELAY, timeline=TIMELINE)


@silt.hookimpl
def silt_register(registry: Any) -> None:
    registry.add_tier("slow", open_slow)
