"""The ``silt`` entry point of silt-tier-azure: registers the ``az://`` and ``azure://`` schemes."""

from __future__ import annotations

import silt
from silt.plugins import Registry
from silt.store import ObjectStore


def open_azure(
    url: str, options: dict[str, str] | None = None,
    storage_options: dict[str, str] | None = None,
) -> ObjectStore:
    """``AzureStore.from_url``, importing azure-storage-blob only when an ``az://`` URL is
    opened. ``storage_options`` (credentials included) are listed in its ``config`` module."""
    from .store import AzureStore

    return AzureStore.from_url(url, options, storage_options)


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Register ``az://`` (and its alias ``azure://``). Registering imports no SDK
    (docs/plugins.md)."""
    registry.add_tier("az", open_azure)
    registry.add_tier("azure", open_azure)
