"""Open shard handles cached per Python worker process between micro-batches (warm block cache).

A handle leaves the cache while a task uses it and goes back only when the task succeeded
without leaving uncommitted writes (:meth:`silt_spark.runtime._shard.ShardTask.release`), so a
failed attempt's writes can never leak into a later batch. The cache is a per-process LRU of
:data:`MAX_CACHED_SHARDS` handles.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import silt

#: Open shard handles kept per Python worker process between micro-batches.
MAX_CACHED_SHARDS = 16


@dataclass
class Cached:
    """A cached shard handle of this worker process."""

    #: ``query id/root incarnation``: a handle is reused only by the query that cached it, on
    #: the same incarnation of the root (not after drop_state re-created it).
    owner: str
    db: silt.DB
    #: The last micro-batch through which ``db``'s version is known to be the shard's latest
    #: (``None``: not known). See :meth:`ShardTask.base_meta` for how idle shards use it.
    current_through: int | None


#: shard URL -> its cached handle.
CACHE: OrderedDict[str, Cached] = OrderedDict()


def drop_cached_handles() -> None:
    """Close every cached shard handle of this process (tests, worker shutdown)."""
    while CACHE:
        CACHE.popitem()[1].db.close()
