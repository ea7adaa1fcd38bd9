"""The ``silt`` entry point of silt-tier-s3: registers the ``s3://`` scheme."""

from __future__ import annotations

import silt
from silt.plugins import Registry

from .store import S3Store


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Register the ``s3://`` tier (``registry.add_tier("s3", S3Store.from_url)``)."""
    registry.add_tier("s3", S3Store.from_url)
