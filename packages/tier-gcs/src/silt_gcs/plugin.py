"""The ``silt`` entry point of silt-tier-gcs: registers the ``gs://`` scheme (and ``gcs://``)."""

from __future__ import annotations

import silt
from silt.plugins import Registry
from silt.store import ObjectStore

from .config import SCHEMES


def open_gcs(
    url: str, options: dict[str, str] | None = None,
    storage_options: dict[str, str] | None = None,
) -> ObjectStore:
    """``GcsStore.from_url``, importing google-cloud-storage only when a ``gs://`` URL is
    opened. ``storage_options`` (credentials included) are listed in its ``config`` module."""
    from .store import GcsStore

    return GcsStore.from_url(url, options, storage_options)


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Register ``gs://`` and its alias ``gcs://`` (both open a ``GcsStore``). Registering
    imports no SDK (docs/plugins.md)."""
    for scheme in SCHEMES:
        registry.add_tier(scheme, open_gcs)
