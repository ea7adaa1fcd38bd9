"""One shard's part of a micro-batch, inside a Spark task (DESIGN.md section 10).

The task for batch ``b`` of shard ``i``:

1. lists the shard's manifests (only those after the cached handle's version when warm) and
   picks the latest version ``<= b - 1`` as its base;
2. refuses a shard whose latest manifest was written by another streaming query (unless the
   operator was built with ``reset=True``, which deletes that shard's objects first), and a shard
   that already has versions newer than ``b`` (the checkpoint is older than the state);
3. processes its rows against the base, and commits version ``b`` with the query id in the
   manifest's meta. A shard that changed nothing commits nothing.

If version ``b`` already exists (a retried task, or a batch Spark re-executes after a restart),
the task recomputes from ``b - 1`` and emits its output again, but the committed version stands:
nothing is written. The same happens when a concurrent attempt wins the commit
(``CommitConflict``). Output therefore equals the first attempt's as long as the processing is
deterministic given the base state and the batch's rows.

Open shard handles are cached per Python worker process between batches (warm block cache); a
handle leaves the cache while a task uses it and goes back only when the task succeeded without
leaving uncommitted writes, so a failed attempt's writes can never leak into a later batch.

Simplifications: the cache is a per-process LRU of :data:`MAX_CACHED_SHARDS` handles; ``reset``
only clears shards as tasks reach them (a shard that never receives data keeps its old objects).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import silt
from silt import paths
from silt.clock import Clock
from silt.plugins import open_store
from silt.store import retrying

from . import _layout
from .errors import ForeignStateError, LayoutMismatchError, NotStreamingError, StateAheadError

log = logging.getLogger("silt_spark")

#: Open shard handles kept per Python worker process between micro-batches.
MAX_CACHED_SHARDS = 16
#: Name of the operator descriptor under the operator root.
DESCRIPTOR = "silt-spark.json"
DESCRIPTOR_FORMAT = 1

META_QUERY_ID = "spark.query_id"
META_BATCH_ID = "spark.batch_id"

#: shard URL -> (query id, handle). A handle is reused only by the query that cached it.
#: Test hooks, read on the driver when an operator is built: batch ids whose first task attempt
#: fails right after committing its state, and a folder where each injected failure leaves a
#: file (see tests/test_spark_operator.py).
TEST_FAIL_AFTER_COMMIT: list[int] = []
TEST_MARKER_DIR: str | None = None

_CACHE: OrderedDict[str, tuple[str, silt.DB]] = OrderedDict()


@dataclass(frozen=True)
class OperatorSpec:
    """Everything a task needs to find and use its shard: options only, no open clients."""

    kind: str
    root: str
    num_shards: int
    key_groups: int = _layout.DEFAULT_KEY_GROUPS
    reset: bool = False
    settings: dict[str, Any] | None = None
    #: Test hook: batch ids whose first task attempt fails right after committing its state.
    fail_after_commit: tuple[int, ...] = field(default=())
    test_marker_dir: str | None = None

    def silt_settings(self) -> silt.Settings:
        return silt.Settings.from_dict(self.settings) if self.settings else silt.Settings()


def ensure_descriptor(spec: OperatorSpec) -> None:
    """Create the operator root's descriptor, or check that it matches ``spec`` (driver side).

    The descriptor pins the operator kind, the key-group count and the shard count, so a
    restart with different settings fails at once instead of silently reading empty shards.
    """
    want = {
        "format": DESCRIPTOR_FORMAT,
        "operator": spec.kind,
        "key_groups": spec.key_groups,
        "num_shards": spec.num_shards,
    }
    store = open_store(spec.root)
    try:
        data = json.dumps(want, sort_keys=True).encode()
        if retrying(lambda: store.put_if_absent(DESCRIPTOR, data)):
            return
        have = json.loads(retrying(lambda: store.get(DESCRIPTOR)))
    finally:
        store.close()
    if have.get("operator") != spec.kind:
        raise LayoutMismatchError(
            f"the state root {spec.root!r} holds state of a {have.get('operator')!r} operator, "
            f"not {spec.kind!r}; use another state_url"
        )
    if have.get("key_groups") != spec.key_groups:
        raise LayoutMismatchError(
            f"the state root {spec.root!r} was created with key_groups={have.get('key_groups')}; "
            f"key_groups is fixed per root, got {spec.key_groups}"
        )
    if have.get("num_shards") != spec.num_shards:
        raise LayoutMismatchError(
            f"the state root {spec.root!r} was created with num_shards={have.get('num_shards')}; "
            f"changing the shard count (rescaling) is not supported yet, got {spec.num_shards}"
        )


class ShardTask:
    """The open shard of one task: ``db`` at the base version, plus the batch's identity.

    Operators read and write ``db`` directly and set :attr:`changed` when they wrote anything.
    """

    def __init__(
        self, spec: OperatorSpec, shard: int, batch_id: int, query_id: str, attempt: int
    ) -> None:
        self.spec = spec
        self.shard = shard
        self.batch_id = batch_id
        self.query_id = query_id
        self.attempt = attempt
        self.first_kg, self.last_kg = _layout.shard_range(shard, spec.num_shards, spec.key_groups)
        self.url = _layout.shard_url(spec.root, shard, spec.num_shards, spec.key_groups)
        self.changed = False
        #: True when version ``batch_id`` already exists: recompute and emit, never commit.
        self.replay = False
        self.committed = False
        self.db: silt.DB = self._open()

    # -- opening ------------------------------------------------------------------------------
    def _open(self) -> silt.DB:
        b = self.batch_id
        db = None
        cached = _CACHE.pop(self.url, None)
        if cached is not None:
            version = cached[1].version
            if cached[0] == self.query_id and (version is None or version < b):
                db = cached[1]
            else:
                # Another query's handle, or one at/after this batch (a re-run): the base is
                # older than the handle, so list everything from a fresh open.
                cached[1].close()
        store = db.store if db is not None else open_store(self.url)
        try:
            after = (
                paths.manifest_key(db.version) if db is not None and db.version is not None
                else None
            )
            known = _list_versions(store, after)
            if db is not None and db.version is not None:
                known.append(db.version)
            known.sort()
            if known:
                latest = known[-1]
                meta = (
                    db.meta if db is not None and db.version == latest
                    else silt.read_manifest(store, latest).meta
                )
                owner = meta.get(META_QUERY_ID)
                if owner is not None and owner != self.query_id:
                    if not self.spec.reset:
                        raise ForeignStateError(
                            f"the state at {self.url!r} belongs to streaming query {owner}, not "
                            f"to this query ({self.query_id}); use a new state_url, restart the "
                            "original query from its checkpoint, or pass reset=True to discard "
                            "that state"
                        )
                    log.warning("reset: discarding %s (state of query %s)", self.url, owner)
                    if db is not None:
                        db.close()
                        db = None
                        store = open_store(self.url)
                    keys = [info.key for info in retrying(lambda: list(store.list("")))]
                    retrying(lambda: store.delete_many(keys))
                    known = []
            newer = [v for v in known if v > b]
            if newer:
                raise StateAheadError(
                    f"the state at {self.url!r} already has version {newer[-1]}, newer than "
                    f"micro-batch {b}: the query's checkpoint is older than its state. Restore "
                    "the matching checkpoint or start with a new state_url"
                )
            self.replay = b in known
            older = [v for v in known if v < b]
            base = older[-1] if older else None
            if db is not None and db.version == base:
                return db
            if db is not None:
                db.close()
                db = None
                store = open_store(self.url)
            manifest = silt.read_manifest(store, base) if base is not None else None
            # Workaround until the core offers silt.open(url, at_most=v) (an empty view of a
            # root whose only versions are >= b is needed when batch 0 is replayed).
            return silt.DB(
                store, url=self.url, settings=self.spec.silt_settings(), clock=Clock(),
                manifest=manifest, owns_store=True,
            )
        except BaseException:
            if db is not None:
                db.close()
            else:
                store.close()
            raise

    # -- finishing ----------------------------------------------------------------------------
    def finish(self) -> None:
        """Commit version ``batch_id`` if anything changed (and it is not a replay)."""
        if not self.changed or self.replay:
            return
        meta = {
            META_QUERY_ID: self.query_id,
            META_BATCH_ID: str(self.batch_id),
            "spark.operator": self.spec.kind,
            "spark.key_groups": str(self.spec.key_groups),
            "spark.first_key_group": str(self.first_kg),
            "spark.last_key_group": str(self.last_kg),
        }
        try:
            self.db.commit(self.batch_id, meta=meta)
            self.committed = True
        except silt.CommitConflict:
            # Another attempt of this task committed first; its version stands.
            log.info("%s: version %d was committed by another attempt", self.url, self.batch_id)
            self.replay = True
        if self.batch_id in self.spec.fail_after_commit and self.attempt == 0:
            if self.spec.test_marker_dir:
                import os

                name = f"failed-{self.batch_id}-{self.shard}"
                open(os.path.join(self.spec.test_marker_dir, name), "w").close()
            raise RuntimeError(
                f"injected failure after committing batch {self.batch_id} (test hook)"
            )

    def release(self, ok: bool) -> None:
        """Return the handle to the worker's cache, or close it (failure, pending writes)."""
        db = self.db
        if ok and not (self.changed and not self.committed):
            _CACHE[self.url] = (self.query_id, db)
            while len(_CACHE) > MAX_CACHED_SHARDS:
                _CACHE.popitem(last=False)[1][1].close()
        else:
            db.close()


def _list_versions(store: Any, start_after: str | None) -> list[int]:
    def listing() -> list[int]:
        out = []
        for info in store.list(paths.MANIFEST_PREFIX, start_after=start_after):
            v = paths.parse_manifest_key(info.key)
            if v is not None:
                out.append(v)
        return out

    return retrying(listing)


def run_shard(
    spec: OperatorSpec,
    batches: Iterator[Any],
    process: Callable[[ShardTask, Iterator[Any]], Iterator[Any]],
) -> Iterator[Any]:
    """The body of the operator's ``mapInArrow`` function: open, process, commit, release."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if batch_id is None:
        raise NotStreamingError(
            "silt_spark operators run on streaming DataFrames only (spark.readStream ...): the "
            "state version is the micro-batch id"
        )
    query_id = ctx.getLocalProperty("sql.streaming.queryId") or ""
    shard = ctx.partitionId()
    if shard >= spec.num_shards:
        raise RuntimeError(
            f"task for partition {shard} but the operator has {spec.num_shards} shards; adaptive "
            "query execution must stay off for silt_spark operators"
        )
    task = ShardTask(spec, shard, int(batch_id), query_id, ctx.attemptNumber())
    ok = False
    try:
        yield from process(task, batches)
        task.finish()
        ok = True
    finally:
        task.release(ok)


def check_key_groups(task: ShardTask, kg_array: Any) -> None:
    """Fail loudly if a row reached a shard that does not own its key group."""
    import pyarrow.compute as pc

    if len(kg_array) == 0:
        return
    mm = pc.min_max(kg_array)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if lo < task.first_kg or hi > task.last_kg:
        raise RuntimeError(
            f"shard {task.shard} owns key groups {task.first_kg}..{task.last_kg} but received "
            f"rows of key groups {lo}..{hi}: the input was not partitioned by silt_spark's "
            "partition column"
        )


def drop_cached_handles() -> None:
    """Close every cached shard handle of this process (tests, worker shutdown)."""
    while _CACHE:
        _CACHE.popitem()[1][1].close()
