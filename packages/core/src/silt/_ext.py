"""Selecting the compiled hot path (``silt._speedups``) or its pure-Python twins, at import.

``SILT_NO_EXTENSIONS=1`` forces pure Python (and wins when both are set).
``SILT_REQUIRE_EXTENSIONS=1`` turns a missing or broken build into an ``ImportError`` (CI sets it
so that it never silently tests pure Python twice). Each accelerated module calls
:func:`accelerate` once, at the end of its body, and says in ``COMPILED`` what it uses;
:func:`silt.speedups` collects them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from types import ModuleType
from typing import Any

#: The modules with a compiled twin (each has a ``COMPILED`` flag).
ACCELERATED = (
    "silt.sst.bloom",
    "silt.sst.block",
    "silt.sst.builder",
    "silt.sst.reader",
    "silt.sst.tail",
    "silt.sst.probe",
    "silt.merge",
    "silt.memtable",
    "silt.cache",
    "silt.tiers.blockread",
    "silt.tiers.fdcache",
    "silt.metrics",
)


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def load() -> ModuleType | None:
    """The compiled module, or ``None`` when pure Python is to be used."""
    if _flag("SILT_NO_EXTENSIONS"):
        return None
    try:
        from . import _speedups
    except ImportError as exc:
        if _flag("SILT_REQUIRE_EXTENSIONS"):
            raise ImportError(
                f"SILT_REQUIRE_EXTENSIONS=1 is set but silt's compiled hot path (silt._speedups) "
                f"cannot be imported: {exc}. Reinstall silt-core where a C compiler and the "
                "Python headers are available (pip install ./packages/core; build warnings say "
                "why compiling failed), or unset SILT_REQUIRE_EXTENSIONS to use pure Python."
            ) from exc
        return None
    return _speedups


def accelerate(namespace: dict[str, Any], names: Iterable[str]) -> bool:
    """Swap the compiled twins of ``names`` into a module's ``namespace`` (its ``globals()``).

    Every name first keeps its pure-Python definition as ``<name>_py`` (tests compare both
    implementations whichever is selected); then, when :func:`load` gives the compiled module,
    ``<name>`` is replaced by the compiled object of the same name. Returns whether the names
    were swapped: the module's ``COMPILED`` flag.
    """
    names = tuple(names)
    for name in names:
        namespace[f"{name}_py"] = namespace[name]
    compiled = load()
    if compiled is None:
        return False
    for name in names:
        namespace[name] = getattr(compiled, name)
    return True


def speedups() -> dict[str, bool]:
    """Which hot-path modules run compiled code: ``{module name: compiled?}``."""
    return {name: bool(importlib.import_module(name).COMPILED) for name in ACCELERATED}
