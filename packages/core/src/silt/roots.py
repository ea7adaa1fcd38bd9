"""Roots of DBs: an operator's root holds one DB per shard (``kg-0-63/``, ``kg-64-127/``) and
no manifest of its own.

:func:`child_dbs` decides what a URL names (a DB, a root of DBs, or nothing) by one rule,
:func:`list_dbs` finds the DBs under a root from one listing, :func:`db_url` names one of them
as a URL of its own (same tier options), :func:`version_rows` summarises a DB's versions and
:func:`inspect_root` each DB's latest (or a given) version. ``silt ls``, ``silt inspect`` and
``silt verify`` (:func:`silt.verify`) use them alike. Everything here only reads.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from . import paths
from .compaction.record import read_records
from .cost import recorded_requests, user_meta
from .errors import CorruptionError, VersionNotFoundError
from .gc import read_checkpoints
from .manifest import Manifest
from .markers import read_markers
from .store import ObjectStore, retrying
from .versions import list_versions, read_manifest


def list_dbs(store: ObjectStore) -> list[str]:
    """Key prefixes of every DB under the root, sorted (``""`` for the root's own DB, else e.g.
    ``"kg-0-63/"``): a DB is a prefix with an object under its ``manifest/``. One LIST."""
    found = set()
    for info in retrying(lambda: list(store.list(""))):
        db, rest = paths.split_db(info.key)
        if rest.startswith(paths.MANIFEST_PREFIX):
            found.add(db)
    return sorted(found)


def has_own_db(store: ObjectStore) -> bool:
    """Whether the root itself holds a DB (any object under ``manifest/``). One LIST."""
    return bool(retrying(lambda: list(store.list(paths.MANIFEST_PREFIX))))


def child_dbs(store: ObjectStore) -> list[str]:
    """The DBs under a root of DBs (prefixes, as :func:`list_dbs`): a folder with no DB of its
    own and at least one DB under it, at any depth (an operator's shards, ``kg-0-63/``; a Spark
    operator with one shard has exactly one). ``[]`` for a DB and for a folder with no DB.

    ``silt ls``, ``silt inspect`` and ``silt verify`` all take this one rule, so they agree on
    what a URL names: a DB, a root of DBs (each shown under its name), or nothing."""
    if has_own_db(store):
        return []
    return [db for db in list_dbs(store) if db]


def version_rows(store: ObjectStore, db: str = "") -> list[dict[str, Any]]:
    """One summary per committed version of the DB at prefix ``db``, oldest first: ``version``,
    ``parent``, ``created_ms``, ``ssts``, ``bytes``, ``meta`` (the writer's, without silt's own
    entries), ``requests`` (what the writer paid for since its previous commit, by kind:
    :mod:`silt.cost`; ``{}`` when not recorded) and ``db``, its name, when ``db`` is given. A
    manifest that does not decode gives ``{"version", "object", "error"}`` instead, and the
    listing goes on; a version collected between the listing and its read is
    left out. What ``silt ls`` prints."""
    rows: list[dict[str, Any]] = []
    named = {"db": db.rstrip("/")} if db else {}
    for version in list_versions(store, db).versions:
        try:
            m = read_manifest(store, version, db)
        except CorruptionError as exc:
            rows.append({**named, "version": version, "error": str(exc),
                         "object": db + paths.manifest_key(version)})
            continue
        except VersionNotFoundError:
            continue
        ssts = list(m.all_ssts())
        rows.append({**named, "version": version, "parent": m.parent,
                     "created_ms": m.created_ms, "ssts": len(ssts),
                     "bytes": sum(s.size for s in ssts),
                     "inline_bytes": sum(s.size for s in ssts if s.inline),
                     "meta": user_meta(m.meta),
                     "requests": recorded_requests(m.meta)})
    return rows


def db_url(url: str, db: str) -> str:
    """The URL of the DB at prefix ``db`` (``"kg-0-63/"``) under the root ``url``, with the
    root's tier options: ``s3://b/op?x=1`` and ``kg-0-63/`` give ``s3://b/op/kg-0-63?x=1``."""
    base, sep, query = url.partition("?")
    segments = "/".join(quote(s, safe="") for s in db.strip("/").split("/"))
    return f"{base.rstrip('/')}/{segments}{sep}{query}"


def compaction_state(m: Manifest) -> dict[str, Any]:
    """L0 count, bytes per level, the SSTs a point read may probe, and the inline SSTs the
    manifest carries (count and bytes, silt.inline), for one manifest."""
    inline = m.inline_entries
    return {
        "inline_ssts": len(inline),
        "inline_bytes": sum(s.size for s in inline),
        "l0_ssts": len(m.l0),
        "l0_bytes": sum(s.size for s in m.l0),
        "level_bytes": [sum(s.size for s in run) for run in m.levels],
        "read_amplification": len(m.l0) + sum(1 for run in m.levels if run),
    }


def inspect_root(store: ObjectStore, dbs: list[str],
                 version: int | None = None) -> list[dict[str, Any]]:
    """One summary per DB in ``dbs`` (prefixes) with a committed version: ``db`` (its name),
    ``version`` (the latest, or ``version`` when given: a DB without it is left out),
    ``versions`` (how many), :func:`compaction_state`, ``bytes``, ``requests`` (recorded by that
    version's writer, :func:`silt.cost.recorded_requests`), ``pending_compactions``,
    ``checkpoints`` and ``gc_horizon``. A manifest that does not decode raises
    :class:`~silt.errors.CorruptionError`."""
    rows = []
    for db in dbs:
        found = list_versions(store, db).versions
        if not found or (version is not None and version not in found):
            continue
        try:
            m = read_manifest(store, found[-1] if version is None else version, db)
        except VersionNotFoundError:
            continue  # collected since the listing
        rows.append({
            "db": db.rstrip("/"), "version": m.version, "versions": len(found),
            **compaction_state(m),
            "bytes": sum(s.size for s in m.all_ssts()),
            "requests": recorded_requests(m.meta),
            "pending_compactions": len(read_records(store, db)),
            "checkpoints": read_checkpoints(store, db),
            "gc_horizon": read_markers(store, db).horizon,
        })
    return rows
