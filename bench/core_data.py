"""The data bench/core_bench.py loads and reads: random 16-byte keys in random order, random
100-byte values, keys outside the stored range, and the batch size of writes and
``multi_get``. Every store gets the same items for the same seed."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

KEY_BYTES = 16
VALUE_BYTES = 100
BATCH = 1000  # write batch size and multi_get batch size
COLD_FIRST = 10_000  # cold gets: also report the first this many separately


def _random_items(n: int, width: int, seed: str) -> list[bytes]:
    """``n`` random items of ``width`` bytes, drawn in chunks (``randbytes`` of more than
    256 MiB overflows)."""
    rng = random.Random(seed)
    out: list[bytes] = []
    chunk = 1 << 20
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        buf = rng.randbytes(width * m)
        out += [buf[i:i + width] for i in range(0, width * m, width)]
    return out


def gen_keys(n: int, seed: str) -> list[bytes]:
    """``n`` random 16-byte keys (distinct with overwhelming probability), in random order."""
    return _random_items(n, KEY_BYTES, seed)


def gen_values(n: int, seed: str) -> list[bytes]:
    return _random_items(n, VALUE_BYTES, seed)


def outside_keys(keys: Sequence[bytes], n: int) -> list[bytes]:
    """About ``n`` random keys outside ``[min(keys), max(keys)]``, half below and half above
    (for a get that every SST's key range rules out)."""
    lo, hi = min(keys), max(keys)
    out = [(b"\x00" * 4 if i % 2 else b"\xff" * 4) + k[4:]
           for i, k in enumerate(gen_keys(n, "outside"))]
    return [k for k in out if k < lo or k > hi]


def batches(seq: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i:i + size]
