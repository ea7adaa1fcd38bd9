"""Which DBs hold shard ``i`` of a root at version ``v``: the shard itself when it has a version
``<= v``, else (a shard of a rescaled layout before its first batch) the shards of the
previous layouts that cover its key groups; and :func:`migrate`, which starts such a shard
from them by reference.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import silt
from silt.errors import ReferenceConflict

from . import _layout
from ._names import META_MAX_EVENT_TIME, META_NEXT_TIMER, META_WATERMARK
from ._root import OperatorSpec

log = logging.getLogger("silt_spark")


def newer_base(db: silt.DB, known: list[int]) -> list[int]:
    """The versions in ``known`` newer than ``db``'s base."""
    return [v for v in known if db.version is None or v > db.version]


# -- rescaling ------------------------------------------------------------------------------------
#: Meta entries combined across old shards by a rescale: the minimum is the safe choice (a
#: watermark never runs ahead of any of its keys; a timer lower bound stays a lower bound).
MIN_COMBINED_META = (META_WATERMARK, META_MAX_EVENT_TIME, META_NEXT_TIMER)


def manifest_records(db: silt.DB, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, Any]]:
    """``(key, record)`` of a DB opened at a committed version, in ``[start, end)``, newest
    record per key (tombstones ``None``, expiring values ``(value, expire_at_ms)``).

    ``DB.scan`` drops expiry times, and a copy or an inspection must keep TTLs.
    """
    return db.committed_records(start, end)


def previous_sources(
    spec: OperatorSpec, layout_index: int, first: int, last: int, at_most: int,
    out: list[tuple[silt.DB, int, int]],
) -> None:
    """Open, for key groups ``[first, last]``, the shards of layout ``layout_index`` that have a
    version ``<= at_most``; ranges whose shard has none come from the layout before it. Opened
    read-only (``silt.open(read_only=True)``: no GC markers read; a rescale only references
    them)."""
    gen, n = spec.layouts[layout_index]
    for j in _layout.overlapping_shards(first, last, n, spec.key_groups):
        f, la = _layout.shard_range(j, n, spec.key_groups)
        lo, hi = max(f, first), min(la, last)
        url = _layout.shard_url(spec.root, j, n, spec.key_groups, gen)
        db = silt.open(url, at_most=at_most, settings=spec.silt_settings(),
                       storage_options=spec.storage_options, read_only=True)
        if db.version is not None:
            out.append((db, lo, hi))
            continue
        db.close()
        if layout_index > 0:
            previous_sources(spec, layout_index - 1, lo, hi, at_most, out)


def migrate(
    spec: OperatorSpec, db: silt.DB, first: int, last: int, at_most: int
) -> tuple[dict[str, str], int, int]:
    """Start an empty shard of a rescaled layout from the state of its key groups as of version
    ``at_most`` of the previous layout's shards (recursively where those have no version yet).
    Returns the combined meta, the number of entries copied and of SSTs referenced.

    The state is taken **by reference** (:meth:`silt.DB.reference`; docs/spark.md, "Rescaling"): the
    shard's first manifest lists the old shards' SSTs clipped to its key groups, so nothing is
    downloaded or rewritten (at most two blocks are read where a key-group boundary cuts an SST)
    and a rescale takes the same time whatever the state size. The old shards are never
    modified, except for a ``refs/`` marker that tells their GC they are referenced. A range
    the core cannot reference (:class:`silt.errors.ReferenceConflict`, possible after repeated
    rescales when a compaction rewrote the middle of a shared SST) is copied instead.
    """
    import time

    index = [g for g, _ in spec.layouts].index(spec.generation)
    if index == 0:
        return {}, 0, 0
    t0 = time.perf_counter()
    sources: list[tuple[silt.DB, int, int]] = []
    try:
        previous_sources(spec, index - 1, first, last, at_most, sources)
        meta: dict[str, str] = {}
        for src, _, _ in sources:
            for k in MIN_COMBINED_META:
                v = src.meta.get(k)
                if v:
                    meta[k] = str(min(int(v), int(meta.get(k, v))))
        referenced = 0
        to_copy: list[tuple[silt.DB, int, int]] = []
        for src, lo, hi in sources:
            try:
                referenced += db.reference(src, *_layout.kg_bounds(lo, hi))
            except ReferenceConflict as exc:
                log.warning("silt_spark rescale: copying key groups %d..%d of %s (%s)",
                            lo, hi, src.url, exc)
                to_copy.append((src, lo, hi))
        written = 0
        put = db.put
        now = int(time.time() * 1000)
        for src, lo, hi in to_copy:
            start, end = _layout.kg_bounds(lo, hi)
            for key, rec in manifest_records(src, start, end):
                if rec.__class__ is bytes:
                    put(key, rec)
                elif rec is not None and rec[1] > now:
                    put(key, rec[0], ttl=(rec[1] - now) / 1000.0)
                else:
                    continue
                written += 1
        meta["spark.rescaled_from"] = ",".join(
            f"{src.url.rstrip('/').rsplit('/', 1)[-1]}@{src.version}" for src, _, _ in sources
        )
        meta["spark.rescale_referenced_ssts"] = str(referenced)
        meta["spark.rescale_copied_entries"] = str(written)
    finally:
        for src, _, _ in sources:
            src.close()
    log.info(
        "silt_spark rescale: key groups %d..%d of %s from %d old shard(s): %d SSTs referenced, "
        "%d entries copied, in %.3fs", first, last, db.url, len(sources), referenced, written,
        time.perf_counter() - t0,
    )
    return meta, written, referenced


def shard_sources(spec: OperatorSpec, shard: int, version: int) -> list[tuple[Any, int, int]]:
    """``(db, first kg, last kg)`` of the DBs holding shard ``shard``'s key groups at
    ``<= version``: the shard itself when it has such a version, else the previous layouts'
    shards that cover them (none when no layout has one), opened read-only. The caller closes
    them."""
    import silt

    first, last = _layout.shard_range(shard, spec.num_shards, spec.key_groups)
    db = silt.open(spec.shard_url(shard), at_most=version, settings=spec.silt_settings(),
                   storage_options=spec.storage_options, read_only=True)
    if db.version is not None:
        return [(db, first, last)]
    db.close()
    out: list[tuple[Any, int, int]] = []
    index = [g for g, _ in spec.layouts].index(spec.generation)
    if index > 0:
        previous_sources(spec, index - 1, first, last, version, out)
    return out


def root_versions(spec: OperatorSpec) -> list[int]:
    """The versions committed by any shard of any layout of the root, ascending (one LIST per
    shard; withdrawn versions and versions removed by GC are not listed)."""
    import silt

    found: set[int] = set()
    for generation, num_shards in spec.layouts or ((spec.generation, spec.num_shards),):
        for shard in range(num_shards):
            found.update(silt.versions(_layout.shard_url(
                spec.root, shard, num_shards, spec.key_groups, generation),
                storage_options=spec.storage_options))
    return sorted(found)
