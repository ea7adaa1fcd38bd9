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

from .config import GcsOptions, parse_url
from .store import GcsStore, __version__

__all__ = ["GcsOptions", "GcsStore", "__version__", "parse_url"]
