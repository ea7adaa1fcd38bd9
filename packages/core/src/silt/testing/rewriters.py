"""Value rewriters for tests and examples (see :mod:`silt.compaction.rewrite`).

``prefixed(config)`` rewrites values that start with ``config``'s ``"old"`` bytes to start with
its ``"new"`` bytes (both latin-1 text in the JSON config), the shape of a codec's version tag
being brought up to date: it keeps every other value.
"""

from __future__ import annotations

import json
from collections.abc import Callable


def prefixed(config: str) -> Callable[[bytes, bytes], bytes | None]:
    """The rewriter replacing the ``old`` prefix with ``new`` (see the module docstring)."""
    spec = json.loads(config)
    old, new = spec["old"].encode("latin-1"), spec["new"].encode("latin-1")

    def rewrite(key: bytes, value: bytes) -> bytes | None:
        if value.startswith(old):
            return new + value[len(old):]
        return None

    return rewrite


def not_a_factory(config: str) -> int:
    """A factory that returns no function (the open must refuse it)."""
    return len(config)
