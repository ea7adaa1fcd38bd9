"""The ``silt`` entry point of silt-tier-gcs: registers the ``gs://`` scheme (and ``gcs://``)."""

from __future__ import annotations

import silt
from silt.plugins import Registry

from .config import SCHEMES
from .store import GcsStore


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Register ``gs://`` and its alias ``gcs://`` (both open a :class:`GcsStore`)."""
    for scheme in SCHEMES:
        registry.add_tier(scheme, GcsStore.from_url)
