"""SSTs of format version 1 (flat bloom filters), as the silt before format 2 wrote them, for
tests of what still reads them."""

from __future__ import annotations

import json
from dataclasses import replace

import sstparts
from silt.sst import bloom as bloom_mod


def as_format_1(raw: bytes, keys: list[bytes], bits_per_key: int) -> bytes:
    """The format 1 SST the previous writer made of the entries of the format 2 SST ``raw``
    (``keys`` are all its keys): the flat filter, and format 1 in properties and footer."""
    parts = sstparts.split(raw)
    props = json.loads(parts.props)
    props["format_version"] = 1
    return sstparts.join(replace(
        parts, fmt=1,
        bloom=bloom_mod.build_bloom_py(keys, bits_per_key) if bits_per_key else b"",
        props=json.dumps(props, sort_keys=True).encode(),
    ))
