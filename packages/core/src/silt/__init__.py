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

import sys as _sys
import types as _types
from typing import TYPE_CHECKING

from . import errors, paths
from .errors import CommitConflict, SiltError

if TYPE_CHECKING:  # the names below are imported on first use (PEP 562)
    from ._ext import speedups
    from .budget import MemoryBudget, set_memory_budget
    from .budget import process_budget as memory_budget
    from .clock import Clock, ManualClock
    from .db import DB
    from .hookspecs import hookimpl
    from .manifest import Manifest
    from .opening import open, resume, versions
    from .plugins import open_store
    from .settings import Settings
    from .store import ObjectInfo, ObjectStore
    from .verify import VerifyReport, verify
    from .versions import read_manifest
    from .writebatch import WriteBatch

#: Public name -> (module, attribute): imported when first used, so that ``import silt.errors``
#: or a module that needs one name does not load the whole engine (a Spark task's worker
#: process imports only what the task runs).
_LAZY = {
    "speedups": ("._ext", "speedups"),
    "MemoryBudget": (".budget", "MemoryBudget"),
    "set_memory_budget": (".budget", "set_memory_budget"),
    "memory_budget": (".budget", "process_budget"),
    "Clock": (".clock", "Clock"),
    "ManualClock": (".clock", "ManualClock"),
    "DB": (".db", "DB"),
    "hookimpl": (".hookspecs", "hookimpl"),
    "Manifest": (".manifest", "Manifest"),
    "open": (".opening", "open"),
    "versions": (".opening", "versions"),
    "resume": (".opening", "resume"),
    "open_store": (".plugins", "open_store"),
    "Settings": (".settings", "Settings"),
    "ObjectInfo": (".store", "ObjectInfo"),
    "ObjectStore": (".store", "ObjectStore"),
    "VerifyReport": (".verify", "VerifyReport"),
    "verify": (".verify", "verify"),
    "read_manifest": (".versions", "read_manifest"),
    "_list_versions": (".versions", "live_versions"),  # for tests and tools
    "WriteBatch": (".writebatch", "WriteBatch"),
}


def __getattr__(name: str) -> object:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'silt' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module, __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


#: Public functions named like a submodule of this package: importing ``silt.verify`` (the
#: module) must not replace ``silt.verify`` (the function), as it would when the import system
#: binds a submodule to its parent's attribute.
_SHADOWED = frozenset({"verify", "versions"})


class _Package(_types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        if name in _SHADOWED and isinstance(value, _types.ModuleType):
            return  # the submodule stays reachable as sys.modules["silt.<name>"]
        super().__setattr__(name, value)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        # Pickled by name, as pickle libraries treat modules (cloudpickle, which ships a Spark
        # processor's globals to the workers, knows only the exact module type): unpickling
        # imports the installed package.
        import importlib

        return importlib.import_module, (self.__name__,)


_sys.modules[__name__].__class__ = _Package


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
    "resume",
    "set_memory_budget",
    "speedups",
    "verify",
    "versions",
]
