"""One botocore data loader per process, shared by every store this tier opens.

Building an S3 client reads and decodes botocore's service model and endpoint rules (several
MB of JSON): about 0.25 s of CPU each time, which botocore caches per *session*. silt opens a
store per root it touches: a query's build on the driver opens its root several times, and each
Spark task opening a shard on a fresh worker opens one. With a new boto3 session per store, each
of those paid the decoding again (measured: four opens in a restarted query's build, 1.07 s of
its 1.46 s on S3). Sessions made here share one :class:`botocore.loaders.Loader`, whose cache
holds the decoded models, so only a process's first client pays it; each session keeps its own
credentials, profile and region. The models are read-only to botocore (its own session shares
them between all its clients in the same way).

A ``boto3.Session`` given in code (``S3Store(session=...)``) is used as it is.
"""

from __future__ import annotations

import threading
from typing import Any

import botocore.loaders
import botocore.session

_lock = threading.Lock()
_loader: botocore.loaders.Loader | None = None


def shared_loader() -> botocore.loaders.Loader:
    """The process's botocore data loader (made on first use)."""
    global _loader
    with _lock:
        if _loader is None:
            _loader = botocore.loaders.create_loader()
        return _loader


def session(profile: str | None) -> botocore.session.Session:
    """A new botocore session (the standard credential and config chain, ``profile`` if
    given) that loads service models through :func:`shared_loader`."""
    made = botocore.session.Session(profile=profile)
    made.register_component("data_loader", shared_loader())
    return made


def region(made: Any) -> str | None:
    """The region a session's configuration names (environment, profile), if any."""
    return made.get_config_variable("region")
