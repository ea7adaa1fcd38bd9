"""silt-cache-ssd: a read-through cache of SST byte ranges on local disk, in front of any tier.

Enable it with URL options (``open_store`` hands every ``cache_*`` option to it)::

    import silt

    db = silt.open("s3://bucket/state?cache=ssd&cache_dir=/mnt/nvme/silt&cache_size=20GB"
                   "&cache_reserve=5GB")

or wrap a store yourself, ``cache = SsdCache(store, "/mnt/nvme/silt", size_limit=20 * 10**9)``, and
read its counters with ``cache.stats()`` (hits, misses, bytes served, evictions, bytes used).
How it works and what it guarantees: :mod:`silt_ssd.cache`; the options: :mod:`silt_ssd.options`.
"""

from __future__ import annotations

from .cache import CacheDisabledWarning, SsdCache, UnusableCacheDir
from .options import CacheOptions, Reserve, parse_size
from .ssts import is_sst_key, sst_read_ranges

__version__ = "0.1.0"

__all__ = [
    "CacheDisabledWarning",
    "CacheOptions",
    "Reserve",
    "SsdCache",
    "UnusableCacheDir",
    "__version__",
    "is_sst_key",
    "parse_size",
    "sst_read_ranges",
]
