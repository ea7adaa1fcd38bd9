"""Inline deltas: small commits carry their SST inside the manifest (one PUT, not two).

A commit whose delta is small (``Settings.inline_delta_bytes``) builds it as an ordinary SST
image in memory (same builder, same blocks and checksums) but does not upload it: the manifest
lists it as an **inline** entry (:attr:`SstInfo.inline <silt.sst.builder.SstInfo>`) and carries
its bytes (manifest format 5, :mod:`silt.manifest`). Every manifest is self-contained: the next
commit copies the inline entries it keeps forward.

Rules (docs/format.md, "Inline SSTs"):

* Inline entries are always the newest entries of L0 (the head of the list).
* A commit folds them (:func:`fold`): when its delta is not small, or keeping it inline would
  pass ``Settings.inline_max_bytes`` or ``Settings.inline_max_entries``, it uploads **one** SST
  that merges every inline entry with its delta (range tombstones applied as reads apply them),
  which replaces them. When the delta was already partly uploaded (a memtable that filled during
  the batch), the inline entries are folded alone into one SST below the uploaded ones.
* Compaction never sees inline entries (:func:`without_inline`: its policies pick from the real
  SSTs only), and adopting a result keeps them at the head of L0.
* An inline entry is not an object: GC never expects nor deletes one, the commit checks never
  look for one in the store; ``silt verify`` checks its bytes in full.

Reads of an inline entry use an ordinary :class:`~silt.sst.reader.SstReader` over the bytes
(:class:`InlineBytes`): no request, and the block cache keyed by the SST id as for any SST.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from . import paths
from .errors import NotFoundError
from .manifest import Manifest
from .memtable import Memtable
from .merge import merge_newest_first
from .rangedel import RangeTombstones
from .settings import Settings
from .sst.builder import SstInfo, build_sst
from .sst.reader import SstReader


class InlineBytes:
    """A read-only, store-shaped view of one inline SST's bytes (what an ``SstReader`` reads
    from). Thread-safe (immutable)."""

    coalesce_reads = True

    def __init__(self, name: str, data: bytes) -> None:
        self.name = name
        self.data = data

    def get(self, key: str) -> bytes:
        self._check(key)
        return self.data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self._check(key)
        return self.data[start:start + length]

    def _check(self, key: str) -> None:
        if key != self.name:
            raise NotFoundError(f"{key!r} is not the inline SST {self.name!r}")


def object_name(sst_id: str, manifest_name: str | None = None) -> str:
    """How messages name an inline SST: by the manifest that carries it when known."""
    where = manifest_name if manifest_name is not None else "its manifest"
    return f"inline SST {sst_id} in {where}"


def reader(info: SstInfo, data: bytes, cache: object = None,
           manifest_name: str | None = None) -> SstReader:
    """An :class:`SstReader` of the inline entry ``info`` over its bytes ``data`` (no request
    ever). Corruption it finds names ``manifest_name`` (the manifest carrying the bytes)."""
    name = object_name(info.id, manifest_name)
    return SstReader(InlineBytes(name, data), name, info, cache)  # type: ignore[arg-type]


def build(mem: Memtable, seq: int, settings: Settings, now_ms: int) -> tuple[bytes, SstInfo]:
    """The SST image of ``mem`` (non-empty) as an inline entry with range-delete number
    ``seq``: its bytes and its entry. Nothing is uploaded."""
    keys, records = mem.sorted_items()
    data, info = build_sst(paths.new_id(now_ms), keys, records, settings, created_ms=now_ms)
    return data, replace(info, seq=seq, inline=True)


def fold(mem: Memtable | None, inline: list[SstReader], tombs: RangeTombstones) -> Memtable:
    """One memtable holding ``mem`` (the newest, never covered by a range tombstone) over the
    inline entries ``inline`` (newest first): newest record per key, tombstones kept (they may
    hide older SSTs' records), and each inline entry's records that a range tombstone newer
    than it deletes turned into point tombstones. Its SST is valid at the DB's current
    range-delete number: every tombstone up to it is applied."""
    sources: list[Iterator[tuple[bytes, object]]] = []
    if mem is not None and mem.data:
        sources.append(iter(zip(*mem.sorted_items())))
    for r in inline:
        it = r.iter_range(None, None)
        if tombs and tombs.covers_any(r.info):  # type: ignore[arg-type]
            it = tombs.mask(it, r.info.seq, False)  # type: ignore[union-attr]
        sources.append(it)
    out = Memtable()
    for key, record in merge_newest_first(sources):
        out.put(key, record)
    return out


def without_inline(manifest: Manifest) -> Manifest:
    """``manifest`` as compaction policies see it: without its inline entries."""
    n = len(manifest.inline_entries)
    return replace(manifest, l0=manifest.l0[n:], inline={}) if n else manifest
