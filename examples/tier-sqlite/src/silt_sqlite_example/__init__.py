"""An example silt tier rooted at a path: ``sqlite:///var/state.db/prefix`` keeps objects as
rows of a SQLite database file (stdlib ``sqlite3``; the store is in :mod:`.store`).

A complete, real tier written to be copied by authors of tiers rooted at a file or a
directory (docs/plugins.md): the URL is split by :func:`silt.tierkit.parse_path_url`,
create-only writes are one ``INSERT ... ON CONFLICT DO NOTHING``, and waiting for another
writer's lock is SQLite's ``busy_timeout``. Objects are shared by the processes of one host
(``SqliteStore.shared_across == "host"``): never point writers on two hosts at one file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import silt
from silt.plugins import Registry

if TYPE_CHECKING:
    from .store import SqliteStore

__version__ = "0.1.0"


def open_sqlite(url: str, options: dict[str, str] | None = None,
                storage_options: dict[str, str] | None = None) -> SqliteStore:
    """The tier factory: ``url`` without its query, ``options`` the query, ``storage_options``
    the options given in code (``silt.open(url, storage_options=...)``). Without that keyword
    silt would refuse every storage option for this scheme."""
    from .store import SqliteStore  # the store module loads when a sqlite:// URL is opened

    return SqliteStore.from_url(url, options, storage_options)


@silt.hookimpl
def silt_register(registry: Registry) -> None:
    """Provide the ``sqlite://`` scheme."""
    registry.add_tier("sqlite", open_sqlite)


__all__ = ["open_sqlite", "silt_register"]
