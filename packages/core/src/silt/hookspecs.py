"""The plugin contract: every hook silt calls, in one module.

Plugins are modules or objects with functions marked ``@silt.hookimpl`` and are found through the
``silt`` entry-point group::

    [project.entry-points.silt]
    s3 = "silt_s3.plugin"

silt chooses implementations by name (a URL scheme, a cache name, a policy name), never by
broadcasting one call to every plugin: each plugin *registers* what it provides once, through
:func:`silt_register`, into a :class:`silt.registry.Registry` (also importable as
``silt.plugins.Registry``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .registry import Registry

PROJECT_NAME = "silt"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def silt_register(registry: Registry) -> None:
    """Register the tiers, caches, compaction policies and root inspectors this plugin
    provides.

    Called once per plugin when silt first needs its registry (not ``firstresult``; return value
    ignored). Use ``registry.add_tier(scheme, factory)``, ``registry.add_cache(name, factory)``,
    ``registry.add_compaction_policy(name, factory)`` and ``registry.add_root_inspector(marker,
    inspector)`` (``silt inspect`` of a root holding the object ``marker``: see
    :func:`silt.plugins.describe_root`). Each takes the implementation, or a
    ``"package.module:attribute"`` string that silt imports when it is first used (so
    registering a tier imports none of its SDK; a malformed string is refused here). A tier
    ``factory(url, options)`` receives the URL without its query string and the query options as
    a ``dict[str, str]`` and returns a :class:`silt.store.ObjectStore`. A tier that accepts
    settings given in code (credentials included: ``silt.open(url, storage_options={...})``)
    takes them through a keyword ``storage_options`` (a ``dict[str, str]``, passed only when not
    empty): it refuses unknown names with ``InvalidArgumentError`` listing the accepted ones,
    and never shows a value in a message or ``repr``. Registering a name another plugin already
    registered is an error that names both plugins.

    :param registry: the registry to fill.
    """
