"""Checking that an SST object is the one metadata describes.

A manifest or a compaction record says of each SST: its size, where its tail starts, its entry
and tombstone counts and its key range (:class:`~silt.sst.builder.SstInfo`). :func:`check_sst`
reads the object and raises :class:`~silt.errors.CorruptionError` when it disagrees: used by
``silt verify`` (every block) and by a writer before it adopts a compaction's outputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import CorruptionError
from ..store import ObjectStore, retrying
from .builder import SstInfo
from .reader import SstReader


def check_properties(info: SstInfo, props: dict[str, Any], name: str) -> None:
    """The SST's own properties must agree with what the metadata records about it."""
    if not isinstance(props, dict):
        raise CorruptionError(name, None, "the properties block is not a JSON object")
    expected = {
        "entries": info.entries,
        "tombstones": info.tombstones,
    }
    if info.clipped:
        # A clipped reference: its bounds lie inside the object's own.
        low, high = props.get("smallest", ""), props.get("largest", "")
        if not (isinstance(low, str) and isinstance(high, str)
                and low <= info.smallest.hex() and info.largest.hex() <= high):
            raise CorruptionError(
                name, None, f"the reference's key range {info.smallest.hex()}.."
                f"{info.largest.hex()} is not inside the object's {low}..{high}"
            )
    else:
        expected["smallest"] = info.smallest.hex()
        expected["largest"] = info.largest.hex()
    for field, want in expected.items():
        if props.get(field) != want:
            raise CorruptionError(
                name, None, f"properties say {field}={props.get(field)!r} but the metadata "
                f"records {want!r}"
            )


def check_sst(store: ObjectStore, key: str, info: SstInfo, *, blocks: bool,
              name: str | None = None, reader: SstReader | None = None) -> tuple[int, int]:
    """Check the SST object ``key`` in ``store`` against ``info``; return its entry and block
    counts.

    Always: the tail (footer, filter, properties, index: one ranged GET from
    ``info.tail_offset`` to ``info.size``) must decode with valid checksums, the object must be
    ``info.size`` bytes long (one more one-byte ranged GET), and its properties must match
    ``info`` (entries, tombstones, key range). With ``blocks``, every data block is also read
    and checked (bypassing any cache). Raises :class:`CorruptionError` (naming ``name``,
    default ``key``), or the store's ``NotFoundError`` when the object is missing. ``reader``:
    an unused reader of ``key`` with ``info`` (not clipped) to load the tail into, so that
    whoever reads the SST next finds it loaded (without: a reader of its own, no cache).
    """
    name = name or key
    if reader is None:
        reader = SstReader(store, key, replace(info, clipped=False), None)
    elif reader.name != key or reader.info != info or info.clipped:
        raise ValueError("the reader is not one of this SST, unclipped")
    try:
        entries = reader.verify() if blocks else info.entries
        props, count = reader.properties, reader.num_blocks
        if retrying(lambda: store.get_range(key, info.size, 1)):
            raise CorruptionError(name, info.size, f"object is longer than the {info.size} "
                                  "bytes recorded")
    except CorruptionError as exc:
        if exc.object_name == name:
            raise
        raise CorruptionError(name, exc.offset, exc.detail) from None
    check_properties(info, props, name)
    return entries, count
