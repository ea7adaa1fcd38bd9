"""Opening a database: :func:`open` finds the version to open (the latest, exactly one, or the
latest not greater than a number) and hands the DB its manifest; :func:`versions` lists them.
Re-exported as ``silt.open`` and ``silt.versions``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from . import errors
from .budget import MemoryBudget
from .clock import Clock
from .coldopen import open_latest
from .commit import check_version
from .db import DB
from .gather import Gather, at_once, serially
from .gc import read_checkpoints
from .handoff import Refused, decode
from .manifest import Manifest
from .markers import GcMarkers, read_markers
from .metrics import MeteredStore, Metrics
from .plugins import open_store
from .readonly import ReadOnlyDB
from .reopen import check_at_most, latest_at_most
from .settings import Settings
from .store import ObjectStore
from .tierkit import public_url
from .versions import judged, live_versions, manifest_bytes, read_fate


def _read_retained(store: ObjectStore, version: int, gather: Gather) -> Manifest:
    """The manifest of ``version``, refused when withdrawn or not retained
    (:func:`_check_retained`): its GET; then, once it was seen, its fate record and the
    listing of ``gc/`` at once (2 round trips; the GC epoch is not needed: only the horizon
    and the pins are)."""
    data = manifest_bytes(store, version)
    fate, markers = (None, None) if data is None else gather(
        [partial(read_fate, store, version), partial(read_markers, store, epoch=0)])
    manifest = judged(version, data, fate)
    assert markers is not None
    _check_retained(store, manifest, markers)
    return manifest


def _check_retained(store: ObjectStore, manifest: Manifest, markers: GcMarkers) -> None:
    """Refuse a version below the GC horizon that no checkpoint pins: GC has collected it or
    may be collecting it (a manifest there may also be a zombie writer's, about to be
    withdrawn). ``markers``: listed after the manifest was seen."""
    v = manifest.version
    if v >= markers.horizon or (v, manifest.token) in markers.pins:
        return
    if v in read_checkpoints(store).values():
        return  # pinned before pin markers existed
    raise errors.VersionNotFoundError(
        f"version {v} was removed by garbage collection (its horizon is {markers.horizon}: "
        "versions below it are kept only while a checkpoint pins them); pin a version you "
        "will read later with DB.checkpoint(name)"
    )


def _at_once_counted(metrics: Metrics, calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """:func:`silt.gather.at_once`, each call's requests counted under the purpose ``open``
    (a thread of its own has no purpose set)."""

    def counted(call: Callable[[], Any]) -> Any:
        with metrics.purpose("open"):
            return call()

    return at_once([partial(counted, call) for call in calls])


def _check_settings(settings: Settings | None, budget: MemoryBudget | None) -> Settings:
    """``settings`` (default ``Settings()``) once checked with ``budget``, as :func:`open`
    checks them."""
    if settings is None:
        settings = Settings()
    elif not isinstance(settings, Settings):
        raise errors.InvalidTypeError(
            f"settings must be a silt.Settings, got {type(settings).__name__}"
        )
    if budget is not None:
        if not isinstance(budget, MemoryBudget):
            raise errors.InvalidTypeError(
                f"budget must be a silt.MemoryBudget, got {type(budget).__name__}"
            )
        if settings.block_cache_bytes is not None:
            raise errors.InvalidArgumentError(
                "pass either budget= (a cache shared under a memory budget) or "
                "Settings.block_cache_bytes (a private cache), not both"
            )
    if settings.value_rewriter is not None:
        # Import and build it now: a name that cannot load fails the open, not a later merge.
        from .compaction import rewrite

        rewrite.load(settings.value_rewriter, settings.value_rewriter_config)
    return settings


def _store(url: str, store: ObjectStore | None,
           storage_options: Mapping[str, str] | None) -> ObjectStore:
    """``store``, or the store of ``url`` opened with ``storage_options``."""
    if store is None:
        return open_store(url, storage_options=storage_options)
    if storage_options:
        raise errors.InvalidArgumentError(
            "pass either store= or storage_options= (options for opening url), not both"
        )
    return store


def versions(url: str, *, storage_options: Mapping[str, str] | None = None) -> list[int]:
    """The committed versions under ``url``, ascending (empty for a new root; withdrawn versions
    are not listed). ``storage_options`` as for :func:`open`."""
    store = open_store(url, storage_options=storage_options)
    try:
        return live_versions(store)
    finally:
        store.close()


def open(
    url: str,
    *,
    version: int | None = None,
    at_most: int | None = None,
    settings: Settings | None = None,
    clock: Clock | None = None,
    store: ObjectStore | None = None,
    budget: MemoryBudget | None = None,
    storage_options: Mapping[str, str] | None = None,
    read_only: bool = False,
) -> DB:
    """Open the database at ``url``: the latest committed version, or exactly ``version``.

    With ``at_most``, open the latest version not greater than it, or an empty database when
    there is none (a stream processor recomputing batch ``b`` opens ``at_most=b - 1`` and commits
    ``b``). ``version`` and ``at_most`` exclude each other.

    ``url`` is ``file:///path``, ``memory://name`` or any scheme an installed tier registers.
    A root with no versions opens empty. Commits from a DB opened at an old version create newer
    versions (``CommitConflict`` if the version already exists). ``clock`` and ``store`` are
    injectable components for tests and simulations (``store`` replaces opening ``url``).
    ``storage_options`` (option name -> str) go to the tier with the URL's query options:
    settings given in code, credentials included, which the URL never carries (each tier
    documents the names it accepts; see :func:`silt.plugins.open_store`).

    Requests: on a remote store (``ObjectStore.local`` false) with ``version`` not given, the
    LIST of the versions, then the manifest with its fate record; beside them, the GC markers
    (the LIST of the newest GC epoch, then the LIST of ``gc/``): 2 round trips, 5 requests
    (on an empty root 1 round trip, 2 LISTs: no markers to read yet). With ``at_most``, the
    manifest of ``at_most`` is read at once with the LIST, and the tails of its SSTs at once
    with its fate record (:mod:`silt.coldopen`): still 2 round trips, and the first reads need
    no round trip for the tails. A handle that
    knows the markers commits as a warm one does (the manifest PUT, then one GET of the next
    GC epoch), proves the latest version with GETs, and finds its writer grace announced when
    the listing shows it (:mod:`silt.graces`): its first commit that uploads an SST costs the
    upload, the PUT and the GET, 3 round trips, where a handle that learns the markers at its
    first commit pays 5 (the grace marker before the upload, and the listings after the PUT).
    A local store reads the markers at the first
    commit instead (its requests cost microseconds; a read-only handle then makes none).

    ``read_only=True``: a handle that reads and never writes (:mod:`silt.readonly`): every
    write, commit, checkpoint or GC from it raises :class:`~silt.errors.ReadOnlyError`, and
    its open on a remote store does not read the GC markers it would never use (2 LISTs
    fewer: the LIST of the versions, then the manifest and its fate record).

    Memory: the DB shares the process's block cache and charges its memtables to the process's
    memory budget (:func:`silt.set_memory_budget`), or to ``budget`` (a
    :class:`silt.MemoryBudget` shared by the DBs opened with it); ``Settings.block_cache_bytes``
    gives it a private cache instead (see :mod:`silt.budget`).
    """
    settings = _check_settings(settings, budget)
    if not isinstance(read_only, bool):
        raise errors.InvalidTypeError(
            f"read_only must be a bool, got {type(read_only).__name__}")
    if version is not None:
        check_version(version)
    if at_most is not None:
        if version is not None:
            raise errors.InvalidArgumentError("pass either version= or at_most=, not both")
        check_at_most(at_most)
    owns_store = store is None
    store = _store(url, store, storage_options)
    # Opening's requests count as the handle's own (purpose "open"): silt.cost records them
    # in its first commit.
    metrics = Metrics()
    counted = MeteredStore(store, metrics)
    gather = serially if store.local else partial(_at_once_counted, metrics)
    try:
        manifest: Manifest | None = None
        listed: list[int] | None = None
        markers: GcMarkers | None = None
        epoch: int | None = None
        tails: dict[str, tuple[bytes, int]] = {}
        with metrics.purpose("open"):
            if version is None and store.local:
                manifest, listed = latest_at_most(counted, at_most, gather=gather)
            elif version is None:  # silt.coldopen: 2 round trips, markers and tails too
                opened = open_latest(counted, at_most, gather, markers=not read_only)
                manifest, listed, markers = opened.manifest, opened.listed, opened.markers
                epoch, tails = opened.epoch, opened.tails
            else:
                try:
                    manifest = _read_retained(counted, version, gather)
                except errors.VersionNotFoundError as exc:
                    found = live_versions(counted)
                    known = (
                        f"committed versions are {found[0]}..{found[-1]} ({len(found)} in all)"
                        if found else "the root has no committed versions"
                    )
                    what = str(exc) if "does not exist" not in str(exc) else "does not exist"
                    h = read_markers(counted).horizon
                    if version < h and "withdrawn" not in what:
                        what = (f"was removed by garbage collection (its horizon is {h}: "
                                "versions below it are kept only while a checkpoint pins them); "
                                "pin a version you will read later with DB.checkpoint(name)")
                    raise errors.VersionNotFoundError(
                        f"version {version} of {public_url(url)!r} "
                        f"{what.removeprefix(f'version {version} ')} ({known}); open without "
                        "version= for the latest"
                    ) from None
        return (ReadOnlyDB if read_only else DB)(
            store, url=url, settings=settings, clock=clock or Clock(), manifest=manifest,
            owns_store=owns_store, metrics=metrics, budget=budget, listed=listed,
            markers=markers, epoch=epoch, tails=tails,
        )
    except BaseException:
        if owns_store:
            store.close()
        raise


def resume(
    url: str,
    handoff: bytes,
    version: int,
    *,
    scope: str = "",
    settings: Settings | None = None,
    clock: Clock | None = None,
    store: ObjectStore | None = None,
    budget: MemoryBudget | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DB | None:
    """Open the database at ``url`` at exactly ``version`` from ``handoff``, the record
    :meth:`silt.DB.handoff` wrote in another process of this machine after committing that
    version, with no request: a handle as warm as that process's (its GC markers known, the
    version checked as a base), whose commits run the same requests and checks as that
    handle's would (:mod:`silt.handoff` proves it as safe). ``None``, nothing opened, when the
    record is not an intact one of exactly this URL, ``scope`` and version: then open with
    :func:`open` (a stale, torn or foreign record is never trusted). The other arguments are
    :func:`open`'s; the store is opened (no request) only once the record verified."""
    check_version(version)
    if not isinstance(scope, str):
        raise errors.InvalidTypeError(f"scope must be a str, got {type(scope).__name__}")
    settings = _check_settings(settings, budget)
    try:
        handed = decode(handoff, url, scope, version)
    except Refused:
        return None
    owns_store = store is None
    store = _store(url, store, storage_options)
    try:
        db = DB(store, url=url, settings=settings, clock=clock or Clock(),
                manifest=handed.manifest, owns_store=owns_store, budget=budget)
    except BaseException:
        if owns_store:
            store.close()
        raise
    db._rooms.following.install(handed)
    return db
