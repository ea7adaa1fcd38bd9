"""A warm handle's state, handed to another process on the same machine: the record
:meth:`silt.DB.handoff` writes and :func:`silt.resume` / :meth:`silt.DB.take_handoff` install,
with no request to the store.

What makes a handle warm is what its commit protocol knows (:mod:`silt.commit`): its base
manifest, the GC markers its last commit read (:mod:`silt.markers`) and that the base's checks
passed. A stream processor runs a shard's batch ``b - 1`` in one worker process and batch
``b`` often in another process of the same machine, which held an older handle or none; it
would pay a catch-up (:meth:`silt.DB.catch_up`, 3 round trips) to learn what the first
process knows. The first process, once its commit of ``v`` returned, leaves this record (a
local file, written by the caller with an atomic rename); the second one installs it when it
asks for exactly version ``v``, and its handle is then in the protocol state the first one's
handle is in: version ``v`` as its base (lineage ``v``, next number ``v.next_version``), the
same markers, ``v`` checked as a base. A commit from it runs the same requests and the same
checks as the first handle's commit would.

Why installing it is exactly as safe as committing from the first process's handle. The
record is written only by the handle that committed ``v`` (:attr:`Committer.confirmed
<silt.commit.Committer.confirmed>`: its create-only PUT landed and its checks after it passed),
that holds no uncommitted write, unresolved commit, pending withdrawal or fence. From then on:

* **Withdrawals.** A fate record withdrawing ``v`` is created only (a) by ``v``'s writer while
  it resolves ``v``'s commit (:mod:`silt.postcheck`), which is over before the record is
  written, or (b) by a writer whose base is ``v``, after it created its own manifest on top of
  ``v`` (:meth:`~silt.postcheck.PostChecks._check_base`); every commit on top of ``v`` creates
  ``manifest/<v.next_version>`` first (its version, or the reservation of the numbers it
  skips). A checkpoint's ``settled`` record withdraws nothing.
* **Newer versions, zombies, replays.** Any version after ``v`` implies
  ``manifest/<v.next_version>`` exists, so a commit from the installed handle fails its
  create-only PUT (:class:`~silt.errors.CommitConflict`; a name held by a withdrawn version
  says ``withdrawn``), exactly as the first handle's would: case (b) above is caught the same
  way. A record left by a writer whose version another writer has since built on, or written
  late by a zombie after a newer one, names a version whose next name is taken: the commit
  conflicts, and a caller that asks for the latest version never takes it (below).
* **GC.** The markers are a true past reading (epoch ``n`` and what ``gc/`` held then); the
  commit refreshes them after its PUT with one GET of epoch ``n + 1`` and lists ``gc/`` when
  it exists, then checks the horizon (a zombie is fenced), pins (a rollback) and the age of its
  new SSTs, as any warm commit does. GC deletes a manifest only below its horizon or withdrawn:
  collected successors of ``v`` put the horizon above ``v`` and fence the commit; the first
  handle, kept in its process's cache as long, meets the same outcome.
* **The base's SSTs.** ``v`` checked as a base (:attr:`Committer.base_checked
  <silt.commit.Committer.base_checked>`) skips :meth:`~silt.postcheck.PostChecks._check_base`
  as the first handle does for its own confirmed version: its writer's checks after its PUT
  covered its SSTs. Checkpoints are stricter here: :meth:`silt.DB.checkpoint` of ``v`` from the
  installed handle settles it, as from any handle that did not commit it.

* **The writer grace.** The record carries the first handle's own grace (``grace``, ms)
  only when that handle knows its marker ``gc/grace/<grace>`` exists: it created it before its
  first upload, or a listing of ``gc/`` showed it (:class:`silt.graces.Announcer`). A handle
  whose ``Settings.gc_grace_seconds`` is that grace takes it as announced and uploads without
  creating the marker again, as the first handle does for the rest of its life (its
  announcer is done); another grace is announced before the first upload as by any writer.
  Safe however old the record: GC never deletes a grace marker, only
  :func:`silt.graces.lower_grace` does, which may run only once every writer that uses the
  grace stopped, and a process that may take the record (the same shard of the same query)
  is such a writer, as is the first handle kept in its process's cache. The grace is no check
  a commit makes: it decides only whether a create-only PUT that would find its object there
  is sent, and the commit's checks (the epoch GET, the horizon, pins, passes, the age of its
  new SSTs) run from the markers exactly as above, so a stale record skips none of them.

* **Following later.** The GETs of :mod:`silt.reopen` from the installed handle rest on two
  facts about a handle: its version's manifest existed before any of its requests (the writer
  created it before it left the record), and its markers were read before them (by the writer,
  before the record). Both hold, so :meth:`silt.DB.catch_up` from it proves what it proves
  from the first handle.

What the record cannot prove, the caller scopes: that the root named is the one whose ``v`` the
record describes. A root deleted and created again (or restored from an older copy) can hold
another manifest under the same number; a handle cached in the first process has the same
exposure, which is why a caller keys both on what identifies that incarnation of the root
(``scope``, compared on install; a rollback is still detected at commit through the pins).

A record is never trusted blindly: :func:`decode` refuses (the caller then takes the remote
path) anything that is not a whole, intact record for this URL, scope and version: its
magic and CRC-32, the digest of the URL, the scope, the version asked for, a manifest that
decodes (its own checksum) with that number and no reservation, and markers whose horizon is
not above it. A stale record (another version) is refused, never moved to. What a
process with write access to the directory could forge with a valid checksum is out of scope,
as that process could change the code that runs too: keep the directory private to the user.

Record, WARNING: on-disk format (docs/format.md)::

    magic "SILTHOF1" (8 bytes) | crc32 u32 of everything after it | header length u32
    | JSON header {"url", "scope", "version", "markers"[, "grace"]} | manifest bytes
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

from .checksum import crc32
from .errors import CorruptionError
from .manifest import Manifest
from .markers import GcMarkers

MAGIC = b"SILTHOF1"
_HEAD = struct.Struct("<8sII")
#: A record larger than this is not one (a manifest is kilobytes to a few MiB).
MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Handed:
    """A verified record: the base manifest and the GC markers its writer knew."""

    manifest: Manifest
    markers: GcMarkers
    #: The writer grace (ms) whose marker the writer knew to exist (``None``: none known;
    #: a record written before the field existed has none).
    grace: int | None = None


def url_digest(url: str) -> str:
    """The SHA-256 of ``url`` as the record names it (the URL's query may hold a secret)."""
    return hashlib.sha256(url.encode()).hexdigest()


def encode(url: str, scope: str, manifest: Manifest, markers: GcMarkers,
           grace: int | None = None) -> bytes:
    """The record of a handle at ``manifest`` that knows ``markers``, for ``url`` and ``scope``;
    ``grace``: its writer grace (ms) when it knows that grace's marker exists (module
    docstring, "The writer grace")."""
    fields: dict[str, Any] = {} if grace is None else {"grace": grace}
    header = json.dumps({
        **fields,
        "url": url_digest(url), "scope": scope, "version": manifest.version,
        "markers": {"horizon": markers.horizon, "epoch": markers.epoch,
                    "passes": sorted([c, d] for c, d in markers.passes.items()),
                    "pins": sorted([v, t] for v, t in markers.pins),
                    "horizons": sorted(markers.horizons)},
    }, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    body = struct.pack("<I", len(header)) + header + manifest.encode()
    return MAGIC + struct.pack("<I", crc32(body)) + body


class Refused(Exception):
    """Why a record is not installed (the caller takes the remote path)."""


def decode(data: Any, url: str, scope: str, version: int) -> Handed:
    """The verified record ``data`` of version ``version`` of ``url`` in ``scope``;
    :class:`Refused` saying why not (module docstring)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise Refused(f"a handoff record is bytes, got {type(data).__name__}")
    data = bytes(data)
    if not _HEAD.size <= len(data) <= MAX_BYTES:
        raise Refused(f"not a handoff record ({len(data)} bytes)")
    magic, crc, size = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise Refused("not a handoff record (bad magic)")
    if crc32(memoryview(data)[12:]) != crc:
        raise Refused("handoff record checksum mismatch (torn or damaged)")
    start = _HEAD.size
    try:
        head = json.loads(data[start:start + size])
        m = head["markers"]
        markers = GcMarkers(
            horizon=_int(m["horizon"]), epoch=_int(m["epoch"]),
            passes={_int(c): bool(d) for c, d in m["passes"]},
            pins=tuple((_int(v), str(t)) for v, t in m["pins"]),
            horizons=tuple(_int(h) for h in m["horizons"]))
        named = (head["url"], head["scope"], head["version"])
        grace = head.get("grace")
        grace = None if grace is None else _int(grace)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise Refused(f"malformed handoff record ({exc})") from None
    if named[0] != url_digest(url):
        raise Refused("the handoff record names another root")
    if named[1] != scope:
        raise Refused("the handoff record belongs to another scope")
    if named[2] != version:
        raise Refused(f"the handoff record is of version {named[2]}, not {version}")
    try:
        manifest = Manifest.decode(data[start + size:], f"handoff of version {version}")
    except CorruptionError as exc:
        raise Refused(f"the handoff record's manifest is damaged ({exc})") from None
    if manifest.version != version or manifest.skip_to is not None:
        raise Refused("the handoff record's manifest is not the version it names")
    if markers.horizon > version:
        raise Refused("the handoff record's version is below its GC horizon")
    return Handed(manifest, markers, grace)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a non-negative int, got {value!r}")
    return value
