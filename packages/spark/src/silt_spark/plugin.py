"""The ``silt`` entry point of silt-spark: lets the core CLI describe operator roots.

``silt inspect <operator root>`` finds the root's descriptor (``silt-spark.json``) and shows
what :func:`silt_spark.inspect._describe.describe` returns; the core never imports silt_spark
itself.
"""

from __future__ import annotations

from typing import Any

import silt
from silt.plugins import Registry
from silt.store import ObjectStore

from .runtime._names import DESCRIPTOR  # the object every operator root holds


def inspect_operator_root(
    store: ObjectStore, url: str, version: int | None, values: int
) -> dict[str, Any]:
    """The operator root, for ``silt inspect`` (see :mod:`silt_spark.inspect._describe`)."""
    from .inspect._describe import describe

    return describe(store, url, version, values)


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Register the operator-root inspector."""
    registry.add_root_inspector(DESCRIPTOR, inspect_operator_root)
