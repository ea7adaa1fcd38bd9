"""The plugin module silt loads through the ``silt`` entry point: registers ``cache=ssd``."""

from __future__ import annotations

import silt
from silt.plugins import Registry

from .cache import SsdCache


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Provide the cache ``ssd``: ``?cache=ssd&cache_dir=...`` wraps any tier in an SsdCache."""
    registry.add_cache("ssd", SsdCache.from_options)


__all__ = ["silt_register"]
