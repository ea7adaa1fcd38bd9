"""Plugin discovery and the registry of tiers, caches and compaction policies.

One path for everything: core's built-ins (``DEFAULT_PLUGINS``) and installed plugins (the ``silt``
entry-point group) are registered with the same pluggy manager and fill the same
:class:`Registry` through ``silt_register``. Names are looked up in the registry; a name that no
installed plugin provides but that a first-party package would is reported with an install hint.

Set ``SILT_DISABLE_PLUGIN_AUTOLOAD=1`` to load only the built-ins (tests use this so that whatever
happens to be installed cannot change their outcome).

What a plugin registers is a callable or a ``"module:attribute"`` string imported when first
used (:mod:`silt.registry`): loading the first-party plugins imports no SDK, and opening an
``s3://`` URL imports boto3 alone, not google-cloud-storage or azure-storage-blob.

Installed plugins are loaded only when a name is asked for that no built-in provides (a tier
such as ``s3://``, a cache, a compaction policy) or when the whole registry is listed (``silt
plugins``): a third-party plugin may still import heavy modules when it loads (the SDKs once
took ~0.3-0.4 s of every fresh process that opened a ``file://`` root). So an installed plugin
that registers a built-in's name again is reported when the full registry is built, not by an
open that only needs the built-ins.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

import pluggy

from . import hookspecs
from .errors import InvalidArgumentError, InvalidTypeError, NoTierError
from .registry import (
    CacheFactory,
    LazyRef,
    PluginInfo,
    Registry,
    RootInspector,
    TierFactory,
    resolve,
)
from .store import ObjectStore
from .tierkit.urls import split_url

__all__ = [
    "DEFAULT_PLUGINS",
    "KNOWN_CACHES",
    "KNOWN_TIERS",
    "CacheFactory",
    "LazyRef",
    "PluginInfo",
    "Registry",
    "RootInspector",
    "TierFactory",
    "build_registry",
    "builtin_registry",
    "check_storage_options",
    "describe_root",
    "get_registry",
    "install_hint",
    "open_store",
    "registry_for",
    "reset_registry",
    "takes_storage_options",
]

#: Built-in plugins, registered exactly like entry-point plugins (entry name -> module).
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("file", "silt.tiers.file"),
    ("memory", "silt.tiers.memory"),
    ("leveled", "silt.compaction.leveled"),
    ("tiered", "silt.compaction.tiered"),
    ("ttl", "silt.compaction.ttl"),
)

#: First-party names that live in their own distributions: what to install for each.
KNOWN_TIERS: dict[str, str] = {
    "s3": "silt-tier-s3",
    "gs": "silt-tier-gcs",
    "gcs": "silt-tier-gcs",
    "az": "silt-tier-azure",
    "azure": "silt-tier-azure",
}
KNOWN_CACHES: dict[str, str] = {"ssd": "silt-cache-ssd"}


def install_hint(distribution: str) -> str:
    """How to install first-party ``distribution`` (``"silt-tier-s3"``): the name it will have
    on PyPI, and what works before it is published (its folder of a silt checkout, or the wheel
    that ``nox -s build`` writes into ``dist/``)."""
    folder = distribution.removeprefix("silt-")
    wheel = distribution.replace("-", "_")
    return (f"pip install {distribution} (before it is on PyPI: pip install "
            f"./packages/{folder} from a silt checkout, or dist/{wheel}-*.whl after "
            "nox -s build)")


def _distribution_of(plugin: object, pm: pluggy.PluginManager) -> tuple[str | None, str | None]:
    for p, dist in pm.list_plugin_distinfo():
        if p is plugin:
            return dist.metadata["name"], dist.version
    return None, None


def build_registry(*, autoload: bool | None = None) -> Registry:
    """Build a fresh registry from the built-ins and (unless disabled) installed plugins."""
    if autoload is None:
        autoload = os.environ.get("SILT_DISABLE_PLUGIN_AUTOLOAD", "") in ("", "0")
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name, module in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(module), name=name)
    if autoload:
        pm.load_setuptools_entrypoints(hookspecs.PROJECT_NAME)
    pm.check_pending()
    registry = Registry()
    # The version of the code that runs (not of whatever silt-core metadata is installed), and
    # no importlib.metadata import (~25 ms) for a registry of the built-ins alone. Read from the
    # package this module belongs to (imported before any of its modules), not imported from
    # it: the package imports the whole engine, which stands on this module.
    core_version = sys.modules[__package__].__version__

    for impl in pm.hook.silt_register.get_hookimpls():
        dist, ver = _distribution_of(impl.plugin, pm)
        if dist is None and impl.plugin_name in dict(DEFAULT_PLUGINS):
            dist, ver = "silt-core", core_version
        info = PluginInfo(impl.plugin_name, dist, ver)
        registry.plugins[impl.plugin_name] = info
        registry._current = info
        try:
            impl.function(registry=registry)
        finally:
            registry._current = None
    return registry


_registry: Registry | None = None
_builtins: Registry | None = None
_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, built on first use."""
    global _registry
    if _registry is None:
        with _lock:
            if _registry is None:
                _registry = build_registry()
    return _registry


def builtin_registry() -> Registry:
    """The process-wide registry of the built-ins alone (no installed plugin imported)."""
    global _builtins
    if _builtins is None:
        with _lock:
            if _builtins is None:
                _builtins = build_registry(autoload=False)
    return _builtins


def registry_for(kind: str, name: str) -> Registry:
    """The registry to look ``name`` of ``kind`` (``"tier"``, ``"compaction_policy"``) up in:
    the built-ins when one of them provides it, so no installed plugin (and no SDK) is imported
    for it; else the full :func:`get_registry`."""
    builtins = builtin_registry()
    if builtins.owner(kind, name) is not None:
        return builtins
    return get_registry()


def reset_registry() -> None:
    """Forget the process-wide registries so the next use rebuilds them (for tests)."""
    global _registry, _builtins
    with _lock:
        _registry = None
        _builtins = None


def describe_root(
    store: ObjectStore, url: str, version: int | None = None, values: int = 0,
    registry: Registry | None = None,
) -> dict[str, Any] | None:
    """What a plugin's root inspector says of the root ``store`` opened at ``url``, or ``None``
    when no registered marker object is there (one HEAD-like read per registered marker).

    The inspector gets the root's store (not to be closed), its URL, the micro-batch or
    version to describe (``None``: the latest) and how many decoded values to include; it
    returns a JSON-able dict: ``kind`` (a title), ``fields`` (label -> scalar, shown one per
    line), ``tables`` (a list of ``{"title", "columns", "rows"}``). silt adds ``inspector``,
    the plugin's name. Errors it raises propagate (a ``SiltError`` names what is wrong).
    """
    from .errors import NotFoundError

    if registry is None:
        registry = get_registry()
    for marker in sorted(registry.root_inspectors):
        try:
            store.get_range(marker, 0, 0)
        except NotFoundError:
            continue
        described = dict(registry.root_inspectors[marker](store, url, version, values))
        described["inspector"] = registry.owner("root_inspector", marker)
        return described
    return None


def check_storage_options(storage_options: object) -> dict[str, str]:
    """``storage_options`` as a ``dict[str, str]`` (``None``: empty), or an error naming the
    offending option (never a value: values may be secrets)."""
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping):
        raise InvalidTypeError(
            "storage_options must be a dict of option name -> str value, got "
            f"{type(storage_options).__name__}"
        )
    out: dict[str, str] = {}
    for name, value in storage_options.items():
        if not isinstance(name, str) or not name:
            raise InvalidTypeError(
                f"storage_options names must be non-empty str, got {type(name).__name__}"
            )
        if not isinstance(value, str):
            raise InvalidTypeError(
                f"storage option {name!r} must be a str, got {type(value).__name__} (the "
                "value is not shown: it may be a secret)"
            )
        out[name] = value
    return out


def takes_storage_options(factory: TierFactory) -> bool:
    """Whether a tier factory accepts the ``storage_options`` keyword (see
    :func:`silt.hookspecs.silt_register`). A lazily registered factory is imported to tell."""
    try:
        params = inspect.signature(resolve(factory)).parameters
    except (TypeError, ValueError):
        return False
    return "storage_options" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )


def open_store(
    url: str, registry: Registry | None = None, *,
    storage_options: Mapping[str, str] | None = None,
) -> ObjectStore:
    """Open the object store for ``url`` through the tier that registered its scheme.

    Query options go to the tier, except ``cache=<name>`` and ``cache_*`` options, which choose a
    cache plugin that wraps the tier. ``storage_options`` (option name -> str) go to the tier
    too, through its factory's ``storage_options`` keyword: settings given in code rather than
    in the URL, credentials included (each tier documents the names it accepts; an option given
    both ways takes the ``storage_options`` value). A tier that takes none refuses them with
    ``InvalidArgumentError``. Raises ``NoTierError`` with an install hint when no installed
    plugin provides the scheme or cache, or naming the plugin when the tier it registered
    lazily does not import (its SDK missing, say). Only the chosen tier's (and cache's) module
    is imported: no other plugin's SDK.
    """
    storage = check_storage_options(storage_options)
    scheme, _location, options = split_url(url)
    if registry is None:
        registry = get_registry() if "cache" in options else registry_for("tier", scheme)
    factory = registry.tiers.get(scheme)
    if factory is None:
        hint = KNOWN_TIERS.get(scheme)
        if hint:
            raise NoTierError(f"no tier installed for '{scheme}://' - {install_hint(hint)}")
        known = ", ".join(f"'{s}://'" for s in sorted(registry.tiers)) or "none"
        raise NoTierError(
            f"no tier installed for '{scheme}://' (installed: {known}); install a plugin that "
            "provides it, or check the URL for typos"
        )
    cache_name = options.pop("cache", None)
    cache_options = {k: options.pop(k) for k in [k for k in options if k.startswith("cache_")]}
    base_url = url.split("?", 1)[0]
    if storage:
        if not takes_storage_options(factory):
            raise InvalidArgumentError(
                f"the '{scheme}://' tier takes no storage_options (got "
                f"{', '.join(sorted(storage))}); pass settings in the URL's query instead"
            )
        store = resolve(factory)(base_url, options, storage_options=storage)
    else:
        store = resolve(factory)(base_url, options)
    if cache_name:
        cache_factory = registry.caches.get(cache_name)
        if cache_factory is None:
            hint = KNOWN_CACHES.get(cache_name)
            if hint:
                raise NoTierError(
                    f"no cache installed named {cache_name!r} - {install_hint(hint)}")
            raise NoTierError(
                f"no cache installed named {cache_name!r} (installed: "
                f"{', '.join(sorted(registry.caches)) or 'none'})"
            )
        store = resolve(cache_factory)(store, cache_options)
    elif cache_options:
        raise InvalidArgumentError(
            f"cache options {sorted(cache_options)} given without 'cache=<name>' in {base_url!r}"
        )
    return store
