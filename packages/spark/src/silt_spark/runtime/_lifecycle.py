"""The life of an operator's state root: which queries it serves, and dropping it on purpose.

A Spark checkpoint and a silt state root belong together: the checkpoint says which micro-batch
comes next, the root holds the state as of the batch before. If the root is lost (a deleted
folder, a wrong URL) while the checkpoint is kept, the query would silently start counting from
zero at batch ``N``. So the root records, per streaming query, the batch at which it started to
serve it (``origin``), and a task refuses to run batch ``b > 0`` of a query the root has no origin
for: :class:`~silt_spark.errors.StateLostError` says what happened, how to restore and how to
start over. Objects (create-only, empty)::

    <operator root>/lifecycle/origin.<query id>.<first batch:020d>
    <operator root>/lifecycle/dropped      # written by drop_state: "empty on purpose"

A task writes its query's origin when it runs batch 0, when the root was dropped on purpose
(:func:`drop_state`), when the operator was built with ``take_over=True``, or for roots created
before origins existed (their descriptor has no ``lifecycle`` field: nothing to check against).
Each Python worker remembers the roots and queries it has checked, so the check costs one LIST
per root, query and worker process, not per batch. On a remote root a task makes that LIST on a
thread (:func:`start_origin_check`) while it opens its shard, and waits for the answer before
it uses what it opened or emits a row: a fresh worker's first task pays one round trip fewer,
and nothing is read into the batch, written or emitted before the check passed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from silt.errors import InvalidArgumentError
from silt.plugins import open_store
from silt.store import retrying
from silt.tierkit import public_url

from ..errors import ForeignStateError, NotAnOperatorRootError, SparkStateError, StateLostError
from . import _layout

T = TypeVar("T")

PREFIX = "lifecycle/"
DROPPED = PREFIX + "dropped"
#: Descriptor field of roots whose tasks check origins (see the module docstring).
DESCRIPTOR_FIELD = "lifecycle"
DESCRIPTOR_VERSION = 1
#: Shards :func:`preflight` reads at once.
PREFLIGHT_THREADS = 16

_CHECKED: set[tuple[str, str, str]] = set()
_LOCK = threading.Lock()


def origin_key(query_id: str, batch: int) -> str:
    return f"{PREFIX}origin.{query_id or '_'}.{batch:020d}"


def check_origin(
    root: str, incarnation: str, query_id: str, batch: int, *, checked_root: bool,
    take_over: bool, counts: dict[str, int] | None = None,
    storage_options: dict[str, str] | None = None,
) -> None:
    """Make sure ``root`` serves ``query_id`` from a batch ``<= batch``, recording it if it may.

    ``incarnation``: the descriptor's id (a dropped and re-created root has another, so what
    this process remembers of the old one does not apply). ``checked_root``: the descriptor
    has :data:`DESCRIPTOR_FIELD` (roots from before have no origins, and are not checked).
    Raises :class:`StateLostError` for batch ``b > 0`` of a query the root never served unless
    it was dropped on purpose or ``take_over`` is set. ``counts`` (request kind -> count) is
    incremented per request made.
    """
    with _LOCK:
        if (root, incarnation, query_id) in _CHECKED:
            return
    store = open_store(root, storage_options=storage_options)
    try:
        names = {info.key for info in retrying(lambda: list(store.list(PREFIX)))}
        if counts is not None:
            counts["LIST"] = counts.get("LIST", 0) + 1
        mine = origin_key(query_id, 0)[:-20]
        first = min((int(n[len(mine):]) for n in names if n.startswith(mine)), default=None)
        if first is None or first > batch:
            if batch > 0 and checked_root and not take_over and DROPPED not in names:
                raise StateLostError(lost_message(root, query_id, batch))
            key = origin_key(query_id, batch)
            retrying(lambda: store.put_if_absent(key, b""))
            if counts is not None:
                counts["PUT"] = counts.get("PUT", 0) + 1
    finally:
        store.close()
    with _LOCK:
        _CHECKED.add((root, incarnation, query_id))


#: Schemes whose origin check runs in the task's thread (a local listing: no round trip to hide).
LOCAL_SCHEMES = ("file", "memory")


def _checked() -> None:
    """The wait of a check already done."""


def start_origin_check(
    root: str, incarnation: str, query_id: str, batch: int, *, checked_root: bool,
    take_over: bool, counts: dict[str, int] | None = None,
    storage_options: dict[str, str] | None = None,
) -> Callable[[], None]:
    """:func:`check_origin`, begun now; returns the function that waits for it and raises
    what it raised (call it before using the shard or emitting output; again is free).

    Runs in the caller's thread, done on return, for a root this process checked already, a
    ``file://`` or ``memory://`` root and ``take_over`` (which writes the origin before the
    shard's objects are deleted); otherwise on a daemon thread, so its LIST overlaps the
    shard's open (the first store of a fresh worker waits for the same S3 client either way:
    :mod:`silt_s3.sdk` builds one per configuration). ``counts`` is complete once the wait
    returned."""
    with _LOCK:
        if (root, incarnation, query_id) in _CHECKED:
            return _checked
    args = (root, incarnation, query_id, batch)
    kwargs: dict[str, Any] = dict(checked_root=checked_root, take_over=take_over,
                                  counts=counts, storage_options=storage_options)
    if take_over or root.split("://", 1)[0].lower() in LOCAL_SCHEMES:
        check_origin(*args, **kwargs)
        return _checked
    failed: list[BaseException] = []

    def run() -> None:
        try:
            check_origin(*args, **kwargs)
        except BaseException as exc:  # raised by the wait, in the task's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="silt-origin-check", daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            raise failed[0]

    return wait


def checked_open(open_shard: Callable[[], Any], wait: Callable[[], None]) -> Any:
    """``open_shard()``'s DB once the origin check (``wait``, :func:`start_origin_check`)
    passed: the check's error wins over the open's (a lost root explains a failed open), and a
    DB opened on a root whose check failed is closed."""
    try:
        db = open_shard()
    except BaseException:
        wait()
        raise
    try:
        wait()
    except BaseException:
        db.close()
        raise
    return db


def checked_first(wait: Callable[[], None], rows: Iterator[T]) -> Iterator[T]:
    """``rows`` (a task's output), each once the origin check (``wait``) passed, and the
    check's end awaited when they end, even if none came; the check's error wins over one
    ``rows`` raised."""
    try:
        for row in rows:
            wait()
            yield row
    except BaseException:
        wait()
        raise
    wait()


def lost_message(root: str, query_id: str, batch: int) -> str:
    """What :class:`StateLostError` says: what happened, how to restore, how to start over."""
    return (
        f"the state root {public_url(root)!r} has no state of streaming query {query_id}, but "
        f"the query's checkpoint is at micro-batch {batch}: the state was deleted or moved (or "
        "state_url changed) while the checkpoint was kept, and going on would silently start "
        "from empty state. Restore the state root (e.g. from a backup or its old location) and "
        "restart; or, to start this operator over with empty state on purpose, run `python -m "
        f"silt_spark drop-state {public_url(root)}` (silt_spark.drop_state) and restart; or start "
        "the query with a new checkpoint"
    )


def foreign_message(url: str, owner: str, query_id: str) -> str:
    """What :class:`ForeignStateError` says about the shard (or root) at ``url``."""
    return (
        f"the state at {public_url(url)!r} belongs to streaming query {owner}, not to this "
        f"query ({query_id}): two queries cannot share a state_url. Use a new state_url, "
        "restart the original query from its checkpoint, or pass take_over=True to discard "
        "that state"
    )


def preflight(spec: Any, query_id: str, batch: int) -> SparkStateError | None:
    """The mistake a query starting at micro-batch ``batch`` would make on ``spec``'s root, or
    ``None``; reads only (on the driver, when the query starts: see _guard.py).

    :class:`StateLostError` as :func:`check_origin` would raise it; :class:`ForeignStateError`
    when a shard's latest version (of any layout of the root) was committed by another query,
    as the shard's task would find. ``take_over`` roots are never refused. Costs one LIST of
    ``lifecycle/`` plus one LIST per shard of every layout and, per shard with versions, the
    latest manifest's GETs (:data:`PREFLIGHT_THREADS` shards at once).
    """
    import silt

    from ._names import META_QUERY_ID

    if spec.take_over:
        return None
    store = open_store(spec.root, storage_options=spec.storage_options)
    try:
        names = {info.key for info in retrying(lambda: list(store.list(PREFIX)))}
    finally:
        store.close()
    mine = origin_key(query_id, 0)[:-20]
    first = min((int(n[len(mine):]) for n in names if n.startswith(mine)), default=None)
    if (first is None or first > batch) and batch > 0 and spec.records_origin \
            and DROPPED not in names:
        return StateLostError(lost_message(spec.root, query_id, batch))
    urls = [_layout.shard_url(spec.root, shard, num_shards, spec.key_groups, generation)
            for generation, num_shards in reversed(spec.layouts or ((0, spec.num_shards),))
            for shard in range(num_shards)]

    def owner(url: str) -> str | None:
        have = silt.versions(url, storage_options=spec.storage_options)
        if not have:
            return None
        shard_store = open_store(url, storage_options=spec.storage_options)
        try:
            return silt.read_manifest(shard_store, have[-1]).meta.get(META_QUERY_ID)
        finally:
            shard_store.close()

    from concurrent.futures import ThreadPoolExecutor

    # (the shards' requests at once: a query start waits for them)
    with ThreadPoolExecutor(max_workers=min(PREFLIGHT_THREADS, len(urls))) as pool:
        for url, who in zip(urls, pool.map(owner, urls)):
            if who is not None and who != query_id:
                return ForeignStateError(foreign_message(url, who, query_id))
    return None


def forget_checked() -> None:
    """Forget which roots this process has checked (after :func:`drop_state`, and tests)."""
    with _LOCK:
        _CHECKED.clear()


def drop_state(
    url: str, *, dry_run: bool = False, storage_options: dict[str, str] | None = None
) -> int:
    """Delete every object of the operator state root ``url`` and mark it as empty on purpose.

    Stop the streaming query first. The next run of the query (from its checkpoint, at any
    micro-batch) then starts this operator with empty state, instead of failing with
    :class:`~silt_spark.errors.StateLostError`. Also the way to add a new operator to a query
    that already has a checkpoint: drop its (empty) ``state_url`` once. Returns the number of
    objects deleted (or that would be, with ``dry_run``). ``storage_options``: object-store
    options for the root (credentials included), as for the operator builders; the active
    Spark session's ``spark.silt.storage.*`` conf, if any, sets them too.

    Raises :class:`~silt_spark.errors.NotAnOperatorRootError` when ``url`` holds objects but no
    silt_spark descriptor (nothing is deleted).

    Examples
    --------
    >>> import silt_spark
    >>> silt_spark.drop_state("s3://bucket/state/sessions")  # doctest: +SKIP
    1234
    """
    from ._handles import drop_cached_handles
    from ._names import DESCRIPTOR

    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgumentError(
            f"url must be a store URL such as 'file:///data/state/op1', got {public_url(url)!r}")
    from . import _storage

    store = open_store(url, storage_options=_storage.resolve(
        storage_options, _storage.active_session()))
    try:
        keys = [info.key for info in retrying(lambda: list(store.list("")))]
        if DESCRIPTOR not in keys and any(not k.startswith(PREFIX) for k in keys):
            raise NotAnOperatorRootError(
                f"{public_url(url)!r} holds {len(keys)} object(s) but no {DESCRIPTOR}: it is not "
                "the state "
                "root of a silt_spark operator, so drop_state leaves it alone"
            )
        if dry_run:
            return len(keys)
        doomed = [k for k in keys if k != DROPPED]
        # The descriptor goes last: an interrupted drop can be run again.
        doomed.sort(key=lambda k: k == DESCRIPTOR)
        delete_keys(store, doomed)
        retrying(lambda: store.put_if_absent(DROPPED, b""))
    finally:
        store.close()
    drop_cached_handles()
    forget_checked()
    return len(doomed)


def delete_keys(store: Any, keys: list[str]) -> None:
    """Delete ``keys`` from ``store``, in order, 1,000 per request."""
    for i in range(0, len(keys), 1000):
        chunk = keys[i:i + 1000]
        retrying(lambda chunk=chunk: store.delete_many(chunk))


def delete_all(url: str, storage_options: dict[str, str] | None = None) -> None:
    """Delete every object under ``url`` (a shard taken over from another query)."""
    store = open_store(url, storage_options=storage_options)
    try:
        delete_keys(store, [info.key for info in retrying(lambda: list(store.list("")))])
    finally:
        store.close()
