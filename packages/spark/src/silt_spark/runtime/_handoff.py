"""Handing a shard's warm handle from one Python worker process to another of the same
executor (docs/architecture.md, "A Spark micro-batch").

Spark often runs a shard's batch ``b - 1`` in one Python worker and batch ``b`` in another
worker of the same executor, which holds an older handle of the shard or none: its catch-up
costs 3 round trips (:meth:`silt.DB.catch_up`), a cold open 2 and a LIST. So a task whose
commit of version ``b - 1`` landed leaves the handle's warm state (:meth:`silt.DB.handoff`:
the manifest, the GC markers it read, the version checked) in a file of the executor's
local directory, one per shard and query incarnation; the task of batch ``b`` in another
worker installs it (:meth:`silt.DB.take_handoff` on its older handle, keeping its readers and
cached blocks, or :func:`silt.resume`) and runs with no request before its commit, as the
first worker's handle would. :mod:`silt.handoff` proves that a commit from there is exactly
as safe as one from the first worker's handle: a newer version (another attempt of the batch,
state ahead of the checkpoint) makes the commit's create-only PUT fail as it does there, and
the task then replays or refuses exactly as on that handle.

Only a file naming exactly version ``b - 1`` of this shard, this query and this incarnation
of the root (the scope a cached handle is reused in) is taken, owned by this user in a folder
only this user may write; a missing, older, torn or foreign file is refused without a request
and the task takes the remote path. Files are
written to a temporary name and renamed over the last one (a reader sees a whole file or the
previous one), in a directory private to the user (mode 0700) under Spark's per-application
working directory of the executor (``SparkFiles.getRootDirectory()`` in a worker; Spark
deletes it with the application), so a file never outlives the application's executors.
Outside a Spark worker there is no such directory and nothing is handed off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from typing import Any

import silt
from silt.handoff import MAX_BYTES

log = logging.getLogger("silt_spark")

#: The folder under the executor's working directory of the application.
FOLDER = "silt-handoff"

#: A directory to use instead of Spark's (tests, which run tasks without Spark); ``None``:
#: Spark's, when running in a Python worker.
override: str | None = None


def directory() -> str | None:
    """The directory of this executor's handoff files, ``None`` outside a Spark worker."""
    if override is not None:
        return override
    try:
        from pyspark.core.files import SparkFiles
    except ImportError:  # pragma: no cover - older PySpark layouts
        return None
    root = getattr(SparkFiles, "_root_directory", None)
    if not getattr(SparkFiles, "_is_running_on_worker", False) or not root:
        return None
    return os.path.join(root, FOLDER)


def path(url: str, scope: str) -> str | None:
    """The file of the shard at ``url`` in ``scope`` (digests: a URL may carry a secret)."""
    folder = directory()
    if folder is None:
        return None
    name = hashlib.sha256(f"{scope}\0{url}".encode()).hexdigest()[:40]
    return os.path.join(folder, name + ".handoff")


def leave(url: str, scope: str, db: silt.DB) -> bool:
    """Leave ``db``'s warm state for the next worker of this executor (after its commit
    landed); whether a file was written. Best effort: a failure to write is logged, the
    next task then takes the remote path."""
    where = path(url, scope)
    if where is None:
        return False
    record = db.handoff(scope)
    if record is None:
        return False
    folder = os.path.dirname(where)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(record)
            os.replace(tmp, where)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log.debug("could not leave the handle of %s for the next worker: %s", url, exc)
        return False
    return True


def take(task: Any, db: silt.DB | None) -> silt.DB | None:
    """The handle of ``task``'s shard (a :class:`~silt_spark.runtime._shard.ShardTask` of
    batch ``b``) at exactly version ``b - 1`` from this executor's file, with no request:
    ``db`` (an older, settled handle of this worker) moved there, or a handle resumed with
    the task's settings (:func:`silt.resume`); ``None`` when there is no file or it is
    refused (then ``db`` is unchanged)."""
    version = task.batch_id - 1
    where = path(task.url, task.cache_owner) if version >= 0 else None
    if where is None:
        return None
    try:
        with open(where, "rb") as f:
            if not _private(f.fileno(), os.path.dirname(where)):
                return None
            data = f.read(MAX_BYTES + 1)
    except OSError:
        return None  # no file (the usual case when this worker ran the last batch)
    if db is not None:
        return db if db.take_handoff(data, version, task.cache_owner) else None
    return silt.resume(task.url, data, version, scope=task.cache_owner,
                       settings=task.spec.silt_settings(),
                       storage_options=task.spec.storage_options)


def _private(fd: int, folder: str) -> bool:
    """Whether the open file ``fd`` and its ``folder`` belong to this user and no one else may
    write them (another user's file is never taken, whatever it holds)."""
    uid = os.getuid()
    for st in (os.fstat(fd), os.stat(folder)):
        if st.st_uid != uid or st.st_mode & 0o022:
            log.debug("a handoff file or folder another user may write is not taken: %s",
                      folder)
            return False
    return True
