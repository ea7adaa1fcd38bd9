"""Roots of several DBs: an operator's root holds one DB per shard (``kg-0-63/``, ``kg-64-127/``)
and no manifest of its own.

:func:`list_dbs` finds the DBs under a root from one listing, :func:`db_url` names one of them
as a URL of its own (same tier options), and :func:`inspect_root` summarises each DB's latest
version. ``silt ls``, ``silt inspect`` and ``silt verify`` (:func:`silt.verify`) use them to
understand such a root. Everything here only reads.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from . import paths
from .compaction.record import read_records
from .errors import NotFoundError
from .gc import read_checkpoints
from .manifest import Manifest
from .markers import read_markers
from .store import ObjectStore, retrying
from .versions import list_versions


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
    """The DBs of an operator root (prefixes, as :func:`list_dbs`): a root with no DB of its own
    and **several** DBs under it. ``[]`` for a DB, an empty root, or a folder holding just one
    DB (that is the parent of a DB, not a root of shards: ``silt verify`` and ``silt ls`` say
    it has no committed versions, so a URL missing its last segment is not mistaken for it)."""
    if has_own_db(store):
        return []
    dbs = [db for db in list_dbs(store) if db]
    return dbs if len(dbs) >= 2 else []


def db_url(url: str, db: str) -> str:
    """The URL of the DB at prefix ``db`` (``"kg-0-63/"``) under the root ``url``, with the
    root's tier options: ``s3://b/op?x=1`` and ``kg-0-63/`` give ``s3://b/op/kg-0-63?x=1``."""
    base, sep, query = url.partition("?")
    segments = "/".join(quote(s, safe="") for s in db.strip("/").split("/"))
    return f"{base.rstrip('/')}/{segments}{sep}{query}"


def compaction_state(m: Manifest) -> dict[str, Any]:
    """L0 count, bytes per level and the SSTs a point read may probe, for one manifest."""
    return {
        "l0_ssts": len(m.l0),
        "l0_bytes": sum(s.size for s in m.l0),
        "level_bytes": [sum(s.size for s in run) for run in m.levels],
        "read_amplification": len(m.l0) + sum(1 for run in m.levels if run),
    }


def inspect_root(store: ObjectStore, dbs: list[str]) -> list[dict[str, Any]]:
    """One summary per DB in ``dbs`` (prefixes) with a committed version: ``db`` (its name),
    ``version`` (the latest), ``versions`` (how many), :func:`compaction_state`, ``bytes``,
    ``pending_compactions``, ``checkpoints`` and ``gc_horizon``."""
    rows = []
    for db in dbs:
        found = list_versions(store, db).versions
        if not found:
            continue
        name = db + paths.manifest_key(found[-1])
        try:
            m = Manifest.decode(retrying(lambda name=name: store.get(name)), name)  # type: ignore[misc]
        except NotFoundError:
            continue
        rows.append({
            "db": db.rstrip("/"), "version": m.version, "versions": len(found),
            **compaction_state(m),
            "bytes": sum(s.size for s in m.all_ssts()),
            "pending_compactions": len(read_records(store, db)),
            "checkpoints": read_checkpoints(store, db),
            "gc_horizon": read_markers(store, db).horizon,
        })
    return rows
