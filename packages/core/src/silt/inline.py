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

:class:`DeltaFreezer` applies these rules to the delta of a commit (:meth:`silt.DB.commit`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import replace

from . import paths
from .clock import Clock
from .errors import NotFoundError
from .manifest import Manifest
from .memtable import Memtable
from .merge import merge_newest_first
from .metrics import Metrics
from .rangedel import RangeTombstones
from .settings import Settings
from .sst.builder import SstInfo, build_sst
from .sst.reader import SstReader
from .view import Part, ReadView


class InlineBytes:
    """A read-only, store-shaped view of one inline SST's bytes (what an ``SstReader`` reads
    from). Thread-safe (immutable)."""

    coalesce_reads = True
    #: Its bytes are in memory: reads are planned as a local store's (no pool, no gaps).
    local = True

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


class DeltaFreezer:
    """Freezes the delta of each commit of one DB by the rules above, and remembers the base's
    inline entries folded into a part not committed yet (:attr:`folded`, until the commit
    lands). The DB's writer lock serializes it.

    Args:
        add_inline: keeps the bytes of new inline entries (``SiblingStores.add_inline``).
        reader: opens the reader of an SST entry (the DB's readers).
        upload: uploads a part now, in the calling thread (``Flusher.upload``).
        give_back_memtable: releases the active memtable's budget reservation once an empty
            one replaced it (``MemtableAllowance.give_back_memtable``).
    """

    def __init__(self, settings: Settings, clock: Clock, metrics: Metrics,
                 add_inline: Callable[[dict[str, bytes]], None],
                 reader: Callable[[SstInfo], SstReader], upload: Callable[[Part], None],
                 give_back_memtable: Callable[[], None]) -> None:
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._add_inline = add_inline
        self._reader = reader
        self._upload = upload
        self._give_back_memtable = give_back_memtable
        #: Base inline entries folded into a part not committed yet.
        self.folded: set[str] = set()

    def landed(self) -> None:
        """The commit that held the folded entries' part landed."""
        self.folded = set()

    def freeze_delta(self, view: ReadView, base_l0: tuple[SstInfo, ...], seq: int,
                     freeze: Callable[[ReadView], ReadView]) -> ReadView:
        """``view`` with the delta of a commit frozen: a small one kept inline, or the inline
        deltas (the base's and pending ones) folded with it into one uploaded SST, or frozen as
        usual (``freeze``: the view with its memtable handed to the uploader). ``seq`` is the
        DB's range-delete counter."""
        settings = self._settings
        base_inline = [s for s in base_l0 if s.inline and s.id not in self.folded]
        pending = [p for p in view.parts if p.info is not None and p.info.inline]
        if len(pending) < len(view.parts):  # part of the delta is uploaded already
            view = freeze(view)
            if base_inline or pending:
                view = self._fold(view, None, pending, base_inline, seq)
            return view
        enabled = min(settings.inline_delta_bytes, settings.inline_max_bytes)
        mem = view.mem
        if not mem.data:
            return view
        if enabled and mem.approx_bytes <= 4 * enabled:
            now = self._clock.now_ms()
            data, info = build(mem, seq, settings, now)
            total = len(data) + sum(s.size for s in base_inline) + sum(
                p.info.size for p in pending)  # type: ignore[union-attr]
            if (len(data) <= settings.inline_delta_bytes and total <= settings.inline_max_bytes
                    and len(base_inline) + len(pending) < settings.inline_max_entries):
                self._add_inline({info.id: data})
                part = Part(mem, seq)
                part.info = info
                part.reader = self._reader(info)
                done: Future[None] = Future()
                done.set_result(None)
                part.future = done
                part.memtable = None
                view = view.but(mem=Memtable(), parts=(*view.parts, part))
                self._give_back_memtable()
                self._metrics.add("inline_deltas")
                return view
        if not base_inline and not pending:
            return freeze(view)
        return self._fold(view, mem, pending, base_inline, seq)

    def _fold(self, view: ReadView, mem: Memtable | None, pending: list[Part],
              base_inline: list[SstInfo], seq: int) -> ReadView:
        """``view`` with one SST uploaded merging the active memtable ``mem`` (``None``: not
        part of it), the pending inline parts and the base's inline entries (all the newest
        sources below ``mem``), which it replaces; it becomes the oldest pending part."""
        readers = [p.reader for p in reversed(pending)] + [self._reader(s) for s in base_inline]
        merged = fold(mem, readers, view.tombs)  # type: ignore[arg-type]
        parts = tuple(p for p in view.parts if p not in pending)
        if merged.data:
            part = Part(merged, seq)
            self._upload(part)
            parts = (part, *parts)
        self.folded |= {s.id for s in base_inline}
        view = view.but(mem=Memtable() if mem is not None else view.mem, parts=parts)
        if mem is not None:
            self._give_back_memtable()
        self._metrics.add("inline_folds")
        return view
