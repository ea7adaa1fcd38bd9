"""What the cache knows of the engine's SSTs: which keys they are, which ranges reads take."""

from __future__ import annotations

import struct

from silt.errors import CorruptionError


def is_sst_key(key: str) -> bool:
    """The default cacheable-key predicate: the engine's SST objects (``[.../]sst/<id>.sst``)."""
    return isinstance(key, str) and key.endswith(".sst") and (
        key.startswith("sst/") or "/sst/" in key
    )


def sst_read_ranges(data: bytes) -> list[tuple[int, int]]:
    """The ``(start, length)`` ranges the engine reads from the SST ``data``: tail, then blocks.

    Empty when ``data`` is not a readable SST (write-through then admits nothing). The layout
    knowledge lives in core (:func:`silt.sst.reader.read_ranges`).
    """
    from silt.sst.reader import read_ranges

    try:
        return read_ranges(data, "write-through")
    except (CorruptionError, ValueError, struct.error):
        return []


__all__ = ["is_sst_key", "sst_read_ranges"]
