"""The ``silt`` entry point of silt-tier-azure: registers the ``az://`` and ``azure://`` schemes."""

from __future__ import annotations

import silt
from silt.plugins import Registry

from .store import AzureStore


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Register ``az://`` (and its alias ``azure://``) with ``AzureStore.from_url``."""
    registry.add_tier("az", AzureStore.from_url)
    registry.add_tier("azure", AzureStore.from_url)
