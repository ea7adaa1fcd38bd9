"""A cold open on a remote store in two round trips, with the GC markers and the SST tails its
first reads need.

What :func:`silt.open` asks of a remote store (``ObjectStore.local`` false) when no
``version`` is given, in three threads that run at once (:func:`open_latest`):

* **the version**: the LIST of ``manifest/``; then the manifest of the latest live version
  ``<= at_most`` with its fate record, at once (:func:`silt.reopen.latest_at_most`);
* **the GC markers**: the LIST of the newest GC epoch; then the LIST of ``gc/``
  (:func:`silt.markers.read_markers`), so the handle's first commit is a warm one. Not for a
  read-only open (:mod:`silt.readonly`: no commit to prepare), and not on an
  empty root (the versions' LIST found none: a new root has no markers to speak of, and its
  first commit lists the versions after its PUT anyway, with ``gc/`` beside them): the open
  stays 1 round trip there, and the first commit lists ``gc/`` after its PUT as before, but
  not the epoch again (``Opened.epoch``: listed before that listing, which is all
  :func:`silt.markers.read_markers` needs of it);
* **the guess** (only with ``at_most``, as a stream processor opens: batch ``b`` opens
  ``at_most=b - 1``, which its previous batch committed): the GET of ``manifest/<at_most>``
  at once with the LIST; once it has the manifest, the tails (index, bloom filter) of the SSTs
  it lists, at once with the fate record and the LIST of ``gc/``: :data:`MAX_TAILS` SSTs and
  :data:`MAX_TAIL_BYTES` at most, newest first (L0, then each level in order), so the
  first reads need no round trip for them. When the listing shows that ``at_most`` is the
  version to open, the version thread takes the guessed manifest's bytes instead of reading
  them again, and reads its fate record only.

Why taking the guess is safe: a manifest's object is created once and never rewritten (a
withdrawn version keeps its bytes; its fate record says it is withdrawn), so bytes read before
the listing are the bytes the listing showed; the fate record is still read after the listing
showed the manifest (:func:`silt.versions.read_manifest`). The tails are a prefetch, never a
decision: an SST's object is immutable too, a tail is checked as any tail is when decoded
(:class:`silt.sst.tail.SstTail`), and one that cannot be read (a withdrawn version's SST that GC
collected, a transient failure) is simply not preloaded: the reads load it as before.

Cost: the guess adds no request when it is right (the manifest is read once, earlier) and one
GET of a missing object when it is wrong; the tails are the requests the first reads would
have made. Round trips: 2, where the open and the first reads took 2 + 1 before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from . import paths
from .errors import SiltError
from .gather import Gather
from .manifest import Manifest
from .markers import GcMarkers, newest_epoch, read_markers
from .sst.builder import SstInfo
from .store import ObjectStore, retrying
from .versions import judged, list_versions, manifest_bytes, read_fate, read_manifest

log = logging.getLogger(__name__)

#: At most this many SSTs' tails are prefetched by a cold open (the first ones in read order).
MAX_TAILS = 64

#: At most this many bytes of tails are prefetched by a cold open.
MAX_TAIL_BYTES = 32 * 1024 * 1024


@dataclass
class Opened:
    """What a cold open found: the manifest (``None``: no version ``<= at_most``), the live
    versions listed, the GC markers (``None`` on an empty root), and the prefetched tails by
    SST id (``(tail bytes, where they start)``)."""

    manifest: Manifest | None
    listed: list[int]
    markers: GcMarkers | None
    #: The newest GC epoch listed (when the markers were not read: an empty root).
    epoch: int | None = None
    tails: dict[str, tuple[bytes, int]] = field(default_factory=dict)


def tails_to_prefetch(manifest: Manifest) -> list[SstInfo]:
    """The SSTs of ``manifest`` whose tails a cold open prefetches: its own uploaded SSTs (not
    inline entries, not references to a sibling's), in read order (L0, then each level), up
    to :data:`MAX_TAILS` of them and :data:`MAX_TAIL_BYTES`."""
    out: list[SstInfo] = []
    total = 0
    for info in (*manifest.l0, *(s for run in manifest.levels for s in run)):
        if info.inline or info.db or not 0 <= info.tail_offset < info.size:
            continue
        size = info.size - info.tail_offset
        if len(out) == MAX_TAILS or total + size > MAX_TAIL_BYTES:
            break
        out.append(info)
        total += size
    return out


def _tail(store: ObjectStore, info: SstInfo) -> tuple[str, bytes, int] | None:
    """The tail bytes of ``info`` (one ranged GET from its ``tail_offset``), or ``None`` when
    they cannot be read (a prefetch: the reads load it then)."""
    try:
        data = retrying(lambda: store.get_range(
            paths.sst_key(info.id), info.tail_offset, info.size - info.tail_offset))
    except SiltError as exc:
        log.debug("tail of SST %s not prefetched: %s", info.id, exc)
        return None
    data = bytes(data)
    if len(data) != info.size - info.tail_offset:
        return None
    return info.id, data, info.tail_offset


class _Guess:
    """The guessed manifest of ``at_most``: its bytes once the GET answered (``None``: no such
    object, or the GET failed), and the tails of its SSTs."""

    def __init__(self) -> None:
        self.answered = threading.Event()
        self.data: bytes | None = None
        self.tails: dict[str, tuple[bytes, int]] = {}

    def run(self, store: ObjectStore, at_most: int, gather: Gather) -> None:
        try:
            self.data = manifest_bytes(store, at_most)
        except SiltError as exc:  # the version thread reads it itself
            log.debug("manifest %d not guessed: %s", at_most, exc)
        finally:
            self.answered.set()
        if self.data is None:
            return
        try:
            manifest = Manifest.decode(self.data, paths.manifest_key(at_most))
        except SiltError:
            return  # the version thread judges the same bytes, and says why
        infos = tails_to_prefetch(manifest)
        for got in gather([partial(_tail, store, info) for info in infos]):
            if got is not None:
                self.tails[got[0]] = (got[1], got[2])


def open_latest(store: ObjectStore, at_most: int | None, gather: Gather, *,
                markers: bool = True) -> Opened:
    """The cold open of the module docstring on the remote store ``store``, its requests run
    at once through ``gather``; raises what :func:`silt.reopen.latest_at_most` raises. Without
    ``markers`` (a read-only open: :mod:`silt.readonly`) the GC markers are not read: the
    version and the guess only, ``Opened.markers`` and ``Opened.epoch`` ``None``."""
    guess = _Guess()
    listing: list[list[int]] = []
    answered = threading.Event()  # the versions' LIST answered (or failed)

    def version() -> tuple[Manifest | None, list[int]]:
        try:
            listed = list_versions(store).versions
            listing.append(listed)
        finally:
            answered.set()
        found = listed if at_most is None else [v for v in listed if v <= at_most]
        if not found:
            return None, listed
        if found[-1] == at_most:
            guess.answered.wait()
            if guess.data is not None:  # seen: the listing showed it, its fate record now
                return judged(at_most, guess.data, read_fate(store, at_most)), listed
        return read_manifest(store, found[-1], listed=gather), listed

    def gc_markers() -> GcMarkers | int:
        epoch = newest_epoch(store)  # first: markers written before it are in gc/'s listing
        answered.wait()
        if not listing or not listing[0]:
            return epoch  # an empty root (or a failed LIST, which the open raises)
        return read_markers(store, epoch=epoch)

    calls: list[Callable[[], Any]] = [version]
    if markers:
        calls.append(gc_markers)
    if at_most is not None:
        calls.append(partial(guess.run, store, at_most, gather))
    answers = gather(calls)
    manifest, listed = answers[0]
    found = answers[1] if markers else None
    tails = guess.tails if manifest is not None and manifest.version == at_most else {}
    if isinstance(found, int):
        return Opened(manifest, listed, None, found)
    return Opened(manifest, listed, found, None, tails)
