"""Sibling DBs, and manifests that reference their SSTs (rescaling without moving state).

DBs whose roots share a parent folder are **siblings**: the shards of a Spark operator,
``<root>/kg-0-63/`` and ``<root>/kg-64-127/``. A manifest may list a sibling's SST as part of
its own state, **clipped** to a key range (:class:`~silt.sst.builder.SstInfo` ``db`` and
``clip_*``). :meth:`silt.DB.reference` builds such entries from a sibling's committed version,
so a new DB starts with the state of a key range without reading or writing that state; a
compaction later rewrites the referenced SSTs into the DB's own.

Clipping costs no read-path checks: a clipped entry's ``smallest``/``largest`` are the first and
last keys of the object inside the clip range (found by reading at most two blocks at each
boundary when the reference is made), so the range checks every lookup already does keep keys
outside the range out; scans and compactions clamp their iteration to those bounds
(:class:`~silt.sst.reader.SstReader`).

Safety (nothing committed is ever lost):

* Before a writer commits its first manifest that references DB ``o``'s objects, it creates
  ``o/refs/<its name>`` (:func:`mark_referrers`). GC of a root that does not contain that
  referrer keeps every SST of ``o`` (it cannot see the references); GC of a common parent reads
  the referrers' manifests like the others' (:mod:`silt.gc`).
* A source's inline SSTs (:mod:`silt.inline`) are no objects: a reference copies their bytes
  into its own manifest (clipped as any entry), so they need no protection.
* After the commit, the writer reads each source's GC horizon: if GC passed the source version
  the references were taken from (it may have dropped that version and objects only it used),
  the commit is withdrawn (:class:`~silt.errors.FencedError`). GC writes every horizon marker
  before it re-lists manifests, so a commit that saw no marker is seen by the re-listing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from urllib.parse import quote

from . import paths
from .errors import InvalidArgumentError, ReferenceConflict
from .inline import reader as inline_reader
from .manifest import Manifest
from .rangedel import EMPTY, RangeTombstones
from .sst.builder import SstInfo
from .sst.reader import SstReader
from .store import ObjectStore, retrying
from .tierkit import check_name, decode_path, public_url


# -- naming -----------------------------------------------------------------------------------
# A sibling's name is its folder name, decoded: the manifest stores it so, sibling_url encodes it
# into a URL, and the tier decodes it back once. Every name passes the one name rule all tiers
# share (silt.tierkit.check_name) where it enters: from a URL here, from a manifest when it is
# parsed (SstInfo.from_json), so a stored name can never lead a store outside the parent folder.
def split_parent(url: str) -> tuple[str, str, str]:
    """``(parent, name, query)`` of a DB URL: ``s3://b/root/kg-0-63?x=1`` gives
    ``("s3://b/root", "kg-0-63", "?x=1")``; ``name`` is decoded and checked. Raises
    :class:`~silt.errors.InvalidArgumentError` when the URL has no parent folder or its last
    segment is not a plain name."""
    base, sep, query = url.partition("?")
    base = base.rstrip("/")
    location = base.partition("://")[2]
    if "/" not in location.strip("/"):
        raise InvalidArgumentError(
            f"{public_url(url)!r} has no parent folder, so it has no siblings: references work "
            "between DBs in one folder, such as 'file:///state/op/a' and 'file:///state/op/b'"
        )
    parent, name = base.rsplit("/", 1)
    return parent, check_name(decode_path(name, what="a DB folder name")), sep + query


def sibling_url(url: str, name: str) -> str:
    """The URL of the sibling ``name`` (a decoded folder name) of the DB at ``url`` (same tier
    options). ``name`` must pass :func:`silt.tierkit.check_name`."""
    check_name(name, what="a sibling DB folder name")
    parent, _, query = split_parent(url)
    return f"{parent}/{quote(name, safe='')}{query}"


def sibling_name(url: str, other: str) -> str:
    """The (decoded) folder name of ``other`` if it is a sibling of ``url``; raises otherwise."""
    parent, _, query = split_parent(url)
    oparent, oname, oquery = split_parent(other)
    if (parent, query) != (oparent, oquery):
        raise InvalidArgumentError(
            f"{public_url(other)!r} is not a sibling of {public_url(url)!r}: a DB can reference "
            "the SSTs of DBs in the same parent folder, opened with the same tier options"
        )
    return oname


# -- stores -----------------------------------------------------------------------------------
class SiblingStores:
    """Stores of the siblings a DB's manifests reference, opened lazily and shared.

    ``open_url`` opens a store for a URL (default :func:`silt.plugins.open_store`); ``wrap``
    wraps each (the DB's request metrics). Thread-safe; :meth:`close` closes what it opened.
    """

    def __init__(
        self,
        url: str,
        own: ObjectStore,
        *,
        wrap: Callable[[ObjectStore], ObjectStore] | None = None,
        open_url: Callable[[str], ObjectStore] | None = None,
    ) -> None:
        self.url = url
        self.own = own
        self._wrap = wrap
        self._open_url = open_url
        self._stores: dict[str, tuple[ObjectStore, ObjectStore]] = {}
        self._lock = threading.Lock()
        #: The bytes of the inline SSTs the DB's versions list (and pending inline deltas),
        #: by id, with the name of the manifest they came from (for messages).
        self.inline: dict[str, tuple[bytes, str | None]] = {}

    def add_inline(self, items: dict[str, bytes], manifest_name: str | None = None) -> None:
        """Know the bytes of inline SSTs (a manifest's, or a delta not committed yet)."""
        for sst_id, data in items.items():
            self.inline.setdefault(sst_id, (data, manifest_name))

    def retain_inline(self, ids: set[str]) -> None:
        """Forget the inline bytes whose id is not in ``ids``."""
        for sst_id in [i for i in list(self.inline) if i not in ids]:
            del self.inline[sst_id]

    def inline_bytes(self, ids: Sequence[str]) -> dict[str, bytes]:
        """The bytes of the inline SSTs ``ids`` (a manifest's ``inline`` map)."""
        return {i: self.inline[i][0] for i in ids}

    def store_for(self, info: SstInfo) -> ObjectStore:
        """The store holding ``info``'s object."""
        return self.own if not info.db else self.named(info.db)

    def named(self, name: str) -> ObjectStore:
        got = self._stores.get(name)
        if got is not None:
            return got[1]
        with self._lock:
            got = self._stores.get(name)
            if got is None:
                opener = self._open_url
                if opener is None:
                    from .plugins import open_store as opener
                raw = opener(sibling_url(self.url, name))
                got = (raw, self._wrap(raw) if self._wrap is not None else raw)
                self._stores[name] = got
            return got[1]

    def reader(self, info: SstInfo, cache: object = None) -> SstReader:
        """An :class:`SstReader` of ``info`` in whichever DB holds it (or over its bytes, for
        an inline SST)."""
        if info.inline:
            data, where = self.inline[info.id]
            return inline_reader(info, data, cache, where)
        return SstReader(self.store_for(info), paths.sst_key(info.id), info, cache)  # type: ignore[arg-type]

    def close(self) -> None:
        with self._lock:
            stores, self._stores = self._stores, {}
        for raw, _ in stores.values():
            raw.close()


# -- clipping ---------------------------------------------------------------------------------
def _intersect(
    a: tuple[bytes | None, bytes | None], b: tuple[bytes | None, bytes | None]
) -> tuple[bytes | None, bytes | None]:
    lo = a[0] if b[0] is None else b[0] if a[0] is None else max(a[0], b[0])
    hi = a[1] if b[1] is None else b[1] if a[1] is None else min(a[1], b[1])
    return lo, hi


def clip(info: SstInfo, owner: str, start: bytes | None, end: bytes | None,
         stores: SiblingStores) -> SstInfo | None:
    """``info`` (an entry of sibling ``owner``'s manifest) as a reference clipped to
    ``[start, end)``, or ``None`` when it holds no key there. Reads at most two blocks at each
    boundary the range cuts through the object."""
    own_range = (info.clip_start, info.clip_end) if info.clipped else (None, None)
    lo, hi = _intersect(own_range, (start, end))
    if (lo is not None and info.largest < lo) or (hi is not None and info.smallest >= hi):
        return None
    if lo is not None and hi is not None and lo >= hi:
        return None
    # An inline SST's bytes are copied into the referencing manifest: it stays this DB's own.
    ref = info if info.inline else replace(info, db=info.db or owner)
    reader: SstReader | None = None
    smallest, largest = info.smallest, info.largest
    if lo is not None and smallest < lo:
        reader = stores.reader(ref)
        first = next(iter(reader.iter_range(lo, hi)), None)
        if first is None:
            return None
        smallest = first[0]
    if hi is not None and largest >= hi:
        reader = reader or stores.reader(ref)
        largest = _last_key_below(reader, lo, hi)
        if largest is None or largest < smallest:
            return None
    return replace(ref, smallest=smallest, largest=largest, clipped=True,
                   clip_start=lo, clip_end=hi)


def _last_key_below(reader: SstReader, lo: bytes | None, hi: bytes) -> bytes | None:
    """The greatest key in ``[lo, hi)`` of the SST (the block that may hold ``hi``, then the one
    before it)."""
    i = reader.block_index_for(hi)
    for j in (i, i - 1):
        if j < 0:
            break
        items = list(reader.block(j, fill_cache=False).items_from(lo, hi))
        if items:
            return items[-1][0]
    return None


def clip_manifest(manifest: Manifest, owner: str, start: bytes | None, end: bytes | None,
                  stores: SiblingStores) -> tuple[list[SstInfo], list[list[SstInfo]]]:
    """Sibling ``owner``'s version ``manifest`` clipped to ``[start, end)``: L0 (newest first)
    and the levels, keeping only entries with keys in the range."""
    l0 = [c for c in (clip(s, owner, start, end, stores) for s in manifest.l0) if c is not None]
    levels = [
        [c for c in (clip(s, owner, start, end, stores) for s in run) if c is not None]
        for run in manifest.levels
    ]
    while levels and not levels[-1]:
        levels.pop()
    return l0, levels


# -- combining references to several sources -------------------------------------------------
def _unify(a: SstInfo, b: SstInfo, stores: SiblingStores | None = None) -> SstInfo:
    """One entry for two references to the same object whose clip ranges touch, or leave a
    gap in which the object holds no record at all (not even a tombstone), so that covering
    the gap changes no read (checked by reading at most the blocks of the gap)."""
    first, second = (a, b) if a.smallest <= b.smallest else (b, a)
    touching = first.clip_end is not None and first.clip_end == second.clip_start
    if not touching and not _empty_gap(first, second, stores):
        raise ReferenceConflict(
            f"SST {a.id} of {a.db!r} would be referenced twice with clip ranges that do not "
            "touch (a source compacted part of it away): these ranges cannot be referenced "
            "together; copy them instead"
        )
    return replace(first, largest=second.largest, clip_end=second.clip_end)


def _empty_gap(first: SstInfo, second: SstInfo, stores: SiblingStores | None) -> bool:
    """Whether the object holds no record between ``first``'s clip range and ``second``'s."""
    lo, hi = first.clip_end, second.clip_start
    if stores is None or lo is None or hi is None or lo >= hi:
        return False
    whole = replace(first, clipped=False, clip_start=None, clip_end=None)
    reader = stores.reader(whole)
    return next(iter(reader.iter_range(lo, hi)), None) is None


def _merge_run(run: list[SstInfo], stores: SiblingStores | None = None) -> list[SstInfo]:
    run = sorted(run, key=lambda s: s.smallest)
    out: list[SstInfo] = []
    for s in run:
        if out and out[-1].id == s.id and out[-1].db == s.db:
            out[-1] = _unify(out[-1], s, stores)
            continue
        if out and out[-1].largest >= s.smallest:
            raise ReferenceConflict(
                f"referenced SSTs {out[-1].id} and {s.id} overlap in one level: the referenced "
                "ranges overlap; reference disjoint key ranges"
            )
        out.append(s)
    return out


def _merge_l0(lists: Sequence[list[SstInfo]],
              stores: SiblingStores | None = None) -> list[SstInfo]:
    """Interleave newest-first L0 lists of disjoint key ranges into one, keeping each list's
    order and listing an object two lists share once (its clip ranges must touch)."""
    key = lambda s: (s.db, s.id)  # noqa: E731
    merged: dict[tuple[str, str], SstInfo] = {}
    after: dict[tuple[str, str], set[tuple[str, str]]] = {}
    order: list[tuple[str, str]] = []
    for lst in lists:
        prev = None
        for s in lst:
            k = key(s)
            if k in merged:
                merged[k] = _unify(merged[k], s, stores)
            else:
                merged[k] = s
                after[k] = set()
                order.append(k)
            if prev is not None:
                after[k].add(prev)
            prev = k
    out: list[SstInfo] = []
    placed: set[tuple[str, str]] = set()
    pending = list(order)
    while pending:
        for i, k in enumerate(pending):
            if after[k] <= placed:
                out.append(merged[k])
                placed.add(k)
                del pending[i]
                break
        else:
            raise ReferenceConflict(
                "the referenced sources order their shared L0 SSTs differently; copy instead"
            )
    return out


def combine(
    parts: Sequence[tuple[list[SstInfo], list[list[SstInfo]]]],
    stores: SiblingStores | None = None,
) -> tuple[tuple[SstInfo, ...], tuple[tuple[SstInfo, ...], ...]]:
    """One DB's L0 and levels from references to disjoint key ranges of several sources
    (``stores``: to check that a gap between two references to one object holds nothing)."""
    l0 = _merge_l0([p[0] for p in parts], stores)
    # Inline entries first (they must head L0): each list already has them at its head, and
    # entries of different lists hold disjoint key ranges, so their order is free.
    l0 = sorted(l0, key=lambda s: not s.inline)
    depth = max((len(p[1]) for p in parts), default=0)
    levels = [_merge_run([s for p in parts if i < len(p[1]) for s in p[1][i]], stores)
              for i in range(depth)]
    return tuple(l0), tuple(tuple(run) for run in levels)


def mark_referrers(stores: SiblingStores, infos: Sequence[SstInfo], referrer: str) -> None:
    """Create ``<owner>/refs/<referrer>`` in every DB whose objects ``infos`` reference."""
    for owner in sorted({s.db for s in infos if s.db}):
        store = stores.named(owner)
        retrying(lambda store=store: store.put_if_absent(paths.refs_key(referrer), b"{}"))


# -- taking references ----------------------------------------------------------------------------
class Reference:
    """One :meth:`silt.DB.reference` call not committed yet: keys ``[start, end)`` of sibling
    ``source`` at ``version``, as clipped L0 and level entries, with the source's range-delete
    counter ``seq`` and its range tombstones clipped to the range (:mod:`silt.rangedel`)."""

    __slots__ = ("source", "version", "start", "end", "l0", "levels", "seq", "tombs")

    def __init__(self, source: str, version: int, start: bytes | None, end: bytes | None,
                 l0: list[SstInfo], levels: list[list[SstInfo]], seq: int = 0,
                 tombs: RangeTombstones = EMPTY) -> None:
        # (the bytes of inline entries are in the referencing DB's SiblingStores.inline)
        self.source = source
        self.version = version
        self.start = start
        self.end = end
        self.l0 = l0
        self.levels = levels
        self.seq = seq
        self.tombs = tombs


Base = tuple[tuple[SstInfo, ...], tuple[tuple[SstInfo, ...], ...]]


def take_reference(url: str, source_url: str, manifest: Manifest | None, start: bytes | None,
                   end: bytes | None, taken: list[Reference],
                   stores: SiblingStores) -> tuple[Reference, Base] | None:
    """A reference by the DB at ``url`` to keys ``[start, end)`` of the sibling at
    ``source_url`` whose committed version is ``manifest`` (None: nothing to take), and the
    state (L0, levels) of all references ``taken`` so far plus this one.

    Raises :class:`ReferenceConflict` when the range overlaps one already taken or a sibling
    SST would be listed twice with clip ranges that do not touch.
    """
    name = sibling_name(url, source_url)
    if name == split_parent(url)[1]:
        raise InvalidArgumentError("a DB cannot reference itself")
    for r in taken:
        if (r.end is None or start is None or start < r.end) and (
            end is None or r.start is None or r.start < end
        ):
            raise ReferenceConflict(
                f"range [{start!r}, {end!r}) overlaps the range [{r.start!r}, "
                f"{r.end!r}) already referenced from {r.source!r}"
            )
    if manifest is None:
        return None
    stores.add_inline(manifest.inline, f"{name}/{paths.manifest_key(manifest.version)}")
    l0, levels = clip_manifest(manifest, name, start, end, stores)
    # The entries keep the source's sequence numbers; its tombstones come along, clipped.
    ref = Reference(name, manifest.version, start, end, l0, levels, manifest.seq,
                    manifest.range_tombstones.clip(start, end))
    base = combine([(r.l0, r.levels) for r in [*taken, ref]], stores)
    seen: set[tuple[str, str]] = set()
    for s in (*base[0], *(s for run in base[1] for s in run)):
        if (s.db, s.id) in seen:
            raise ReferenceConflict(
                f"SST {s.id} of {s.db!r} would be listed twice (in L0 and a level); "
                "copy this range instead"
            )
        seen.add((s.db, s.id))
    return ref, base
