"""How ``silt`` opens the root a command names, refusing roots that cannot be what was meant.

A ``file://`` root that does not exist is an error (opening it would create it, and a mistyped
path would look like an empty root); so is a ``memory://`` root that holds nothing in this
process. ``get``, ``scan`` and ``checkpoint`` need one DB, and say how to name one when given a
root of several.
"""

from __future__ import annotations

import os

from .. import open as open_db
from ..db import DB
from ..errors import InvalidArgumentError, VersionNotFoundError
from ..manifest import Manifest
from ..plugins import open_store
from ..roots import child_dbs
from ..store import ObjectStore
from ..tierkit import public_url
from ..tierkit.urls import split_url
from ..tiers.file import FileStore
from ..versions import live_versions, read_manifest
from .show import name_list


def check_file_root(url: str) -> None:
    """Refuse a ``file://`` root that does not exist (opening it would create it). The file
    tier reads the URL (and refuses one that names no absolute path); it creates nothing
    until a write."""
    if split_url(url)[0] != "file":
        return
    store = open_store(url.split("?", 1)[0])  # the tier alone: a cache= option changes nothing
    try:
        path = store.root if isinstance(store, FileStore) else None
    finally:
        store.close()
    if path is not None and not os.path.isdir(path):
        raise InvalidArgumentError(
            f"{public_url(url)!r} does not exist: there is no directory {path!r}; check the path "
            "(silt's commands only read and never create a root)"
        )


def check_memory_root(url: str, store: ObjectStore | None = None) -> None:
    """Refuse a ``memory://`` root that holds nothing in this process: such roots live only in
    the process that wrote them, so ``silt`` run as its own command can never see one (it
    would report an empty root and succeed, hiding the mistake)."""
    if split_url(url)[0] != "memory":
        return
    probe = store if store is not None else open_store(url)
    try:
        empty = next(iter(probe.list("")), None) is None
    finally:
        if store is None:
            probe.close()
    if empty:
        raise InvalidArgumentError(
            f"{public_url(url)!r} holds nothing in this process: a memory:// root lives only "
            "in the process that wrote it, and the silt command runs in its own; give a "
            "file:// or object-store root"
        )


def open_root(url: str) -> ObjectStore:
    """The store of ``url``, after the checks above; the caller closes it."""
    check_file_root(url)
    store = open_store(url)
    try:
        check_memory_root(url, store)
    except BaseException:
        store.close()
        raise
    return store


def open_one_db(url: str, version: int | None, *,
                read_only: bool = False) -> tuple[ObjectStore, DB]:
    """The store and DB at ``url`` (at ``version``, default the latest), opened ``read_only``
    for a command that never writes (``get``, ``scan``: no GC markers read at open); the
    caller closes both. A root of several DBs is refused with an example URL of one of them."""
    store = open_root(url)
    try:
        db = open_db(url, version=version, store=store, read_only=read_only)
    except BaseException:
        store.close()
        raise
    if db.version is None:
        db.close()
        try:
            dbs = child_dbs(store)
        finally:
            store.close()
        if dbs:
            base, _, query = url.partition("?")
            example = public_url(f"{base.rstrip('/')}/{dbs[0].rstrip('/')}"
                                 + (f"?{query}" if query else ""))
            raise InvalidArgumentError(
                f"{public_url(url)!r} is a root of {len(dbs)} DBs (such as a silt_spark "
                f"operator's shards: {name_list(dbs)}), not one DB; get and scan read one DB: "
                f"give its URL, e.g. {example!r} (silt ls lists them all)")
        raise VersionNotFoundError(f"{public_url(url)!r} has no committed versions")
    return store, db


def resolve_version(store: ObjectStore, url: str, version: int | None) -> int:
    """``version``, or the latest committed one when it is ``None``."""
    if version is not None:
        return version
    found = live_versions(store)
    if not found:
        raise VersionNotFoundError(f"{public_url(url)!r} has no committed versions")
    return found[-1]


def manifest_of(store: ObjectStore, url: str, version: int) -> Manifest:
    """Version ``version``'s manifest, or an error that says how to list the versions."""
    try:
        return read_manifest(store, version)
    except VersionNotFoundError:
        raise VersionNotFoundError(
            f"version {version} of {public_url(url)!r} does not exist; "
            f"'silt ls {public_url(url)}' lists the versions"
        ) from None


__all__ = ["check_file_root", "check_memory_root", "manifest_of", "open_one_db", "open_root",
           "resolve_version"]
