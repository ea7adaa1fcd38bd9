"""How far each store's cheapest point reads are from the per-call floor, measured in the same
run (``core_bench.py``'s main section): a get of a key outside every SST's key range against an
empty compiled call (``id``) over the same keys, and a warm get against a dict hit. A share of
1.0 would be a get that costs no more than the call that reaches it; the rest is the store's
own work per call (argument checks, the memtable, the range check or the block's search)."""

from __future__ import annotations

import statistics

#: (read row, floor row, what the share says)
PAIRS = (
    ("outside_gets", "floor_call", "gets outside every SST / an empty compiled call"),
    ("warm_gets", "floor_dict_hit", "warm gets / a dict hit"),
)


def floor_shares(main: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """``{read row: {store: median of the row / median of its floor in that store's runs}}``
    for the rows and stores that have both."""
    out: dict[str, dict[str, float]] = {}
    for row, floor, _ in PAIRS:
        rates, floors = main.get(row, {}), main.get(floor, {})
        for store, values in rates.items():
            if floors.get(store):
                out.setdefault(row, {})[store] = (
                    statistics.median(values) / statistics.median(floors[store]))
    return out


def print_floor_shares(main: dict[str, dict[str, list[float]]], labels: dict[str, str]) -> dict:
    """Print :func:`floor_shares` as one line per pair; returns them (for the JSON summary)."""
    shares = floor_shares(main)
    for row, _, what in PAIRS:
        if row in shares:
            cells = ", ".join(f"{labels.get(s, s)} {v:.0%}" for s, v in shares[row].items())
            print(f"distance to the floor, {what}: {cells}")
    return shares
