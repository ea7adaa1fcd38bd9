"""silt-tier-gcs: the ``gs://`` tier for silt, on google-cloud-storage.

Install it next to silt-core and open a URL::

    import silt

    db = silt.open("gs://my-bucket/jobs/clicks")                        # GCS, ADC credentials
    db = silt.open("gs://state/x?endpoint=http://127.0.0.1:4443")       # an emulator

``gcs://`` is an alias of ``gs://``. Options and their environment fallbacks are listed in
:mod:`silt_gcs.config`; the mapping of the store contract onto GCS requests in
:mod:`silt_gcs.store`.
"""

from __future__ import annotations

from typing import Any

from .config import GcsOptions, parse_url

__version__ = "0.1.0"

__all__ = ["GcsOptions", "GcsStore", "__version__", "parse_url"]


def __getattr__(name: str) -> Any:
    # The store (and google-cloud-storage) load on first use, not when silt loads the plugin.
    if name == "GcsStore":
        from .store import GcsStore

        return GcsStore
    raise AttributeError(f"module 'silt_gcs' has no attribute {name!r}")
