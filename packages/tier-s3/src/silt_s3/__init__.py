"""silt-tier-s3: the ``s3://`` tier for silt, on boto3 (AWS S3 and any S3-compatible store).

Install it next to silt-core and open a URL::

    import silt

    db = silt.open("s3://my-bucket/jobs/clicks")                      # AWS, standard credentials
    db = silt.open("s3://state/x?endpoint_url=http://127.0.0.1:9000")  # MinIO & co.

Options and their environment fallbacks are listed in :mod:`silt_s3.config`; the mapping of the
store contract onto S3 requests in :mod:`silt_s3.store`.
"""

from __future__ import annotations

from typing import Any

from .config import S3Options, parse_url

__version__ = "0.1.0"

__all__ = ["S3Options", "S3Store", "__version__", "parse_url"]


def __getattr__(name: str) -> Any:
    # The store (and boto3) load on first use, not when silt loads the plugin.
    if name == "S3Store":
        from .store import S3Store

        return S3Store
    raise AttributeError(f"module 'silt_s3' has no attribute {name!r}")
