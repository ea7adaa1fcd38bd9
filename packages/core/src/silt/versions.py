"""Which versions a DB has: one listing of ``manifest/`` and the fate records found beside them.

A version is committed when ``manifest/<v>`` exists (docs/architecture.md, invariant 2). A
version can later be **withdrawn** by its own writer (a stalled commit whose SSTs garbage
collection may have collected, a zombie below the GC horizon, a rollback detected after the
fact): the writer then creates ``manifest/<v>.fate`` saying ``withdrawn`` and leaves the
manifest in place, so that no writer can ever create version ``v`` again (invariant 8: a number
names one state forever). A withdrawn version reads as its parent: it is skipped by every
listing here, opening it by number is an error, and a writer whose base is its parent moves
past it.

The same object name, created by a checkpoint instead, says ``settled``: the version is pinned
and its writer may no longer withdraw it. Both are created with ``put_if_absent``, so exactly one
of the two can exist (see :meth:`silt.DB.checkpoint` and ``DB._post_commit``).

Fate record, WARNING: on-disk format (docs/format.md)::

    magic "SILTFAT1" (8 bytes) | crc32 u32 of the JSON body | JSON {"fate", "reason", "token"}
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import paths
from .checksum import crc32
from .errors import CorruptionError, NotFoundError, VersionNotFoundError
from .manifest import Manifest
from .store import ObjectStore, retrying

WITHDRAWN = "withdrawn"
SETTLED = "settled"
FATE_MAGIC = b"SILTFAT1"
_FATES = frozenset({WITHDRAWN, SETTLED})
_HEAD = struct.Struct("<8sI")
#: A fate record is a few hundred bytes; anything much larger is not one.
_MAX_FATE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Fate:
    """What became of a version after its manifest was created. ``token`` is the commit token
    of the manifest it judges: a fate record never speaks for another manifest of the same
    number (one re-created after a rollback reads as withdrawn)."""

    version: int
    fate: str  # WITHDRAWN or SETTLED
    reason: str
    token: str

    @property
    def withdrawn(self) -> bool:
        return self.fate == WITHDRAWN

    def withdraws(self, manifest: Manifest) -> bool:
        """Whether ``manifest`` (of this version) is withdrawn by this record."""
        return self.withdrawn or self.token != manifest.token

    def encode(self) -> bytes:
        body = json.dumps(
            {"fate": self.fate, "reason": self.reason, "token": self.token},
            sort_keys=True, separators=(",", ":"), ensure_ascii=True,
        ).encode()
        return FATE_MAGIC + struct.pack("<I", crc32(body)) + body

    @classmethod
    def decode(cls, data: bytes, object_name: str, version: int) -> Fate:
        """Parse and check a fate record; :class:`CorruptionError` naming the object if bad."""
        if len(data) < _HEAD.size or len(data) > _MAX_FATE_BYTES:
            raise CorruptionError(object_name, 0, f"fate record of {len(data)} bytes")
        magic, crc = _HEAD.unpack_from(data, 0)
        if magic != FATE_MAGIC:
            raise CorruptionError(object_name, 0, "bad magic: not a silt fate record")
        body = bytes(memoryview(data)[_HEAD.size:])
        if crc32(body) != crc:
            raise CorruptionError(object_name, _HEAD.size, "fate record checksum mismatch")
        try:
            d = json.loads(body)
            fate, reason, token = d["fate"], d["reason"], d["token"]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise CorruptionError(object_name, _HEAD.size,
                                  f"malformed fate record ({exc})") from None
        if fate not in _FATES or not isinstance(reason, str) or not isinstance(token, str):
            raise CorruptionError(object_name, _HEAD.size, "malformed fate record fields")
        return cls(version, fate, reason, token)


@dataclass(frozen=True)
class VersionListing:
    """One listing of a DB's ``manifest/`` folder.

    ``versions``: committed and not withdrawn, ascending. ``withdrawn``: versions whose manifest
    exists but whose writer withdrew them. ``fates``: every fate record found (withdrawn and
    settled), by version. ``orphan_fates``: fate records whose manifest is gone (GC deletes a
    withdrawn manifest before its fate record).
    """

    versions: list[int]
    withdrawn: list[int]
    fates: dict[int, Fate]
    orphan_fates: list[int]


def list_versions(store: ObjectStore, db: str = "") -> VersionListing:
    """List the versions of the DB at prefix ``db`` of ``store`` (one LIST, plus one GET per fate
    record found: fate records are rare)."""
    manifests: set[int] = set()
    fate_names: dict[int, str] = {}
    base = db + paths.MANIFEST_PREFIX
    for info in retrying(lambda: list(store.list(base))):
        rest = info.key[len(db):]
        v = paths.parse_manifest_key(rest)
        if v is not None:
            manifests.add(v)
            continue
        v = paths.parse_fate_key(rest)
        if v is not None:
            fate_names[v] = info.key
    fates: dict[int, Fate] = {}
    for v, name in fate_names.items():
        try:
            fates[v] = Fate.decode(retrying(lambda name=name: store.get(name)), name, v)
        except NotFoundError:
            continue  # deleted by GC while we listed
    gone = {v for v, f in fates.items() if f.withdrawn}
    for v, f in fates.items():
        if not f.withdrawn and v in manifests:
            # Settled: but for this very manifest? (another one of the same number is a reuse)
            name = db + paths.manifest_key(v)
            try:
                m = Manifest.decode(retrying(lambda name=name: store.get(name)), name)
            except NotFoundError:
                continue
            if f.withdraws(m):
                gone.add(v)
    withdrawn = sorted(v for v in gone if v in manifests)
    return VersionListing(
        versions=sorted(manifests - gone),
        withdrawn=withdrawn,
        fates=fates,
        orphan_fates=sorted(v for v in fates if v not in manifests),
    )


def live_versions(store: ObjectStore, db: str = "") -> list[int]:
    """The committed, not withdrawn versions of the DB at prefix ``db``, ascending (what the
    public :func:`silt.versions` answers for a URL)."""
    return list_versions(store, db).versions


def read_fate(store: ObjectStore, version: int, db: str = "") -> Fate | None:
    """The fate record of ``version``, or ``None`` when it has none (one GET)."""
    name = db + paths.fate_key(version)
    try:
        return Fate.decode(retrying(lambda: store.get(name)), name, version)
    except NotFoundError:
        return None


def read_manifest(store: ObjectStore, version: int, db: str = "", *,
                  listed: Callable[[Sequence[Callable[[], Any]]], list[Any]] | None = None
                  ) -> Manifest:
    """Read and check the manifest of ``version`` (two GETs: the manifest and its fate record).

    Raises :class:`VersionNotFoundError` when there is none or its writer withdrew it.

    The fate record is read after the manifest was seen (a withdrawal is created after its
    manifest, so a record missing then was missing while the manifest existed). ``listed``: a
    listing made just before showed the manifest, which is then seen already, and the two
    GETs go out at once through ``listed`` (a gather: runs independent calls, returns their
    results in order): one round trip instead of two.
    """
    if listed is None:
        data = manifest_bytes(store, version, db)
        fate = None if data is None else read_fate(store, version, db)
    else:
        data, fate = listed([lambda: manifest_bytes(store, version, db),
                             lambda: read_fate(store, version, db)])
    return judged(version, data, fate, db)


def manifest_bytes(store: ObjectStore, version: int, db: str = "") -> bytes | None:
    """The stored manifest of ``version`` (one GET), ``None`` when there is none."""
    name = db + paths.manifest_key(version)
    try:
        return retrying(lambda: store.get(name))
    except NotFoundError:
        return None


def judged(version: int, data: bytes | None, fate: Fate | None, db: str = "") -> Manifest:
    """The manifest of ``version`` from its stored bytes ``data`` (``None``: missing) and its
    fate record ``fate``, read after the manifest was seen, as :func:`read_manifest` judges
    them: :class:`VersionNotFoundError` when missing or withdrawn."""
    if data is None:
        raise VersionNotFoundError(f"version {version} does not exist")
    manifest = Manifest.decode(data, db + paths.manifest_key(version))
    if fate is not None and fate.withdraws(manifest):
        why = fate.reason if fate.withdrawn else (
            "its number was committed before by another commit that a checkpoint pinned: the "
            "root was rolled back")
        raise VersionNotFoundError(
            f"version {version} was withdrawn by its writer ({why}); it reads as version "
            f"{manifest.parent} and its number is never used again"
        )
    return manifest
