"""silt: disaggregated LSM state storage for stream processing, on object storage.

Quick start::

    import silt

    db = silt.open("file:///tmp/state")
    db.put(b"user:1", b"42")
    version = db.commit()          # durable: a manifest now names this version
    db.close()

    with silt.open("file:///tmp/state", version=version) as db:
        assert db.get(b"user:1") == b"42"
"""

from __future__ import annotations

from . import errors, paths
from ._ext import speedups
from .budget import MemoryBudget, set_memory_budget
from .budget import process_budget as memory_budget
from .clock import Clock, ManualClock
from .db import DB
from .errors import CommitConflict, SiltError
from .hookspecs import hookimpl
from .manifest import Manifest
from .opening import open, versions  # the function: the module is reached by from-imports
from .plugins import open_store
from .settings import Settings
from .store import ObjectInfo, ObjectStore
from .verify import VerifyReport, verify
from .versions import live_versions as _list_versions  # noqa: F401  (tests list a store's)
from .versions import read_manifest
from .writebatch import WriteBatch

__version__ = "0.1.0"


__all__ = [
    "DB",
    "paths",
    "open_store",
    "Clock",
    "CommitConflict",
    "Manifest",
    "MemoryBudget",
    "ManualClock",
    "ObjectInfo",
    "ObjectStore",
    "Settings",
    "SiltError",
    "VerifyReport",
    "WriteBatch",
    "errors",
    "hookimpl",
    "memory_budget",
    "open",
    "read_manifest",
    "set_memory_budget",
    "speedups",
    "verify",
    "versions",
]
