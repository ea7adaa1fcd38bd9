"""The ``silt`` entry point of silt-tier-s3: registers the ``s3://`` scheme."""

from __future__ import annotations

import silt
from silt.plugins import Registry
from silt.store import ObjectStore


def open_s3(
    url: str, options: dict[str, str] | None = None,
    storage_options: dict[str, str] | None = None,
) -> ObjectStore:
    """``S3Store.from_url``, importing boto3 only when an ``s3://`` URL is opened.
    ``storage_options`` (credentials included) are listed in :mod:`silt_s3.config`."""
    from .store import S3Store

    return S3Store.from_url(url, options, storage_options)


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Register the ``s3://`` tier. Registering imports no SDK (docs/plugins.md): every process
    that loads silt's plugins pays for the tiers it opens only."""
    registry.add_tier("s3", open_s3)
