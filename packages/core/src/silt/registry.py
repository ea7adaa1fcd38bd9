"""The registry plugins fill: name -> implementation tables for tiers, caches, compaction
policies and root inspectors.

An implementation is registered as a callable, or lazily as a ``"module:attribute"`` string
(fsspec's ``known_implementations`` style: ``"silt_s3.store:S3Store.from_url"``). A string is
checked when it is registered and imported only when it is first called, so registering a tier
imports nothing of its SDK: boto3 loads when an ``s3://`` URL is opened, not when silt loads its
plugins. Discovery (which plugins fill a registry) is in :mod:`silt.plugins`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgumentError, InvalidTypeError, NoTierError, SiltError
from .store import ObjectStore

TierFactory = Callable[[str, dict[str, str]], ObjectStore]
CacheFactory = Callable[[ObjectStore, dict[str, str]], ObjectStore]
#: ``inspector(store, url, version, values) -> dict``: see :meth:`Registry.add_root_inspector`.
RootInspector = Callable[[ObjectStore, str, "int | None", int], dict[str, Any]]


def _is_dotted(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


class LazyRef:
    """A registered implementation named by ``"module:attribute"`` (``attribute`` may be
    dotted: ``"silt_s3.store:S3Store.from_url"``), imported on first use.

    Calling it calls the target with the same arguments; :meth:`resolve` returns the target.
    Two references to the same string are equal (a scheme and its alias compare equal). Thread
    safety: any thread may resolve it; Python's import lock makes the import happen once.
    """

    __slots__ = ("_target", "kind", "name", "owner", "spec")

    def __init__(self, spec: str, *, kind: str, name: str, owner: str) -> None:
        module, sep, attribute = spec.partition(":")
        if not (sep and _is_dotted(module) and _is_dotted(attribute)):
            raise InvalidArgumentError(
                f"plugin {owner!r} registered {kind} {name!r} as {spec!r}: a lazy reference is "
                "'package.module:attribute' (such as 'silt_mystore.store:MyStore.from_url'), "
                "or pass the callable itself"
            )
        self.spec = spec
        self.kind = kind
        self.name = name
        self.owner = owner
        self._target: Callable[..., Any] | None = None

    def resolve(self) -> Callable[..., Any]:
        """The implementation, importing its module on the first call. Raises
        :class:`~silt.errors.NoTierError` (a tier or a cache) or
        :class:`~silt.errors.SiltError` naming the plugin when the module does not import
        (its SDK is not installed, say) or has no such attribute."""
        target = self._target
        if target is not None:
            return target
        module_name, _, attribute = self.spec.partition(":")
        error = NoTierError if self.kind in ("tier", "cache") else SiltError
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise error(
                f"{self.kind} {self.name!r} of plugin {self.owner!r} could not be loaded: "
                f"importing {module_name!r} failed ({type(exc).__name__}: {exc}); install what "
                "it needs, or reinstall the plugin"
            ) from exc
        for part in attribute.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise error(
                    f"{self.kind} {self.name!r} of plugin {self.owner!r} names {self.spec!r}, "
                    f"but {module_name!r} has no {attribute!r}; the plugin registers a name "
                    "its code does not define (report it to the plugin's authors)"
                ) from None
        if not callable(obj):
            raise error(
                f"{self.kind} {self.name!r} of plugin {self.owner!r} names {self.spec!r}, "
                f"which is a {type(obj).__name__}, not a callable"
            )
        self._target = obj
        return obj

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LazyRef) and other.spec == self.spec

    def __hash__(self) -> int:
        return hash(self.spec)

    def __repr__(self) -> str:
        return f"LazyRef({self.spec!r})"


def resolve(obj: Callable[..., Any]) -> Callable[..., Any]:
    """``obj`` itself, or what it names when it is a :class:`LazyRef` (imported now)."""
    return obj.resolve() if isinstance(obj, LazyRef) else obj


@dataclass
class PluginInfo:
    """What one plugin is and what it registered (shown by ``silt plugins``)."""

    name: str
    distribution: str | None
    version: str | None
    provides: list[str] = field(default_factory=list)


class Registry:
    """Name -> implementation tables filled by plugins. Read-mostly; safe to share.

    Registration happens once, while the registry is built; lookups afterwards take no lock.
    Every ``add_*`` method takes the implementation itself or a ``"module:attribute"`` string,
    stored as a :class:`LazyRef` (callable like the target, imported on first call).
    """

    def __init__(self) -> None:
        self.tiers: dict[str, TierFactory] = {}
        self.caches: dict[str, CacheFactory] = {}
        self.compaction_policies: dict[str, Callable[..., Any]] = {}
        self.root_inspectors: dict[str, RootInspector] = {}
        self.plugins: dict[str, PluginInfo] = {}
        self._owners: dict[tuple[str, str], str] = {}
        self._current: PluginInfo | None = None

    def _add(self, kind: str, table: dict[str, Any], name: str, obj: Any) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a {kind} name must be a non-empty str, got {name!r}")
        owner = self._current.name if self._current else "<direct>"
        if isinstance(obj, str):
            obj = LazyRef(obj, kind=kind, name=name, owner=owner)
        elif not callable(obj):
            raise InvalidTypeError(
                f"plugin {owner!r} registered {kind} {name!r} as a {type(obj).__name__}: pass "
                "a callable, or a 'package.module:attribute' string to import on first use"
            )
        if name in table:
            raise SiltError(
                f"{kind} {name!r} is registered twice: by plugin {self._owners[kind, name]!r} "
                f"and by plugin {owner!r}; uninstall one of them"
            )
        table[name] = obj
        self._owners[kind, name] = owner
        if self._current is not None:
            self._current.provides.append(f"{kind} {name}")

    def add_tier(self, scheme: str, factory: TierFactory | str) -> None:
        """Provide the URL scheme ``scheme`` (lower case, without ``://``)."""
        self._add("tier", self.tiers, scheme.lower() if isinstance(scheme, str) else scheme,
                  factory)

    def add_cache(self, name: str, factory: CacheFactory | str) -> None:
        """Provide the cache tier ``name``; ``factory(store, options)`` wraps ``store``."""
        self._add("cache", self.caches, name, factory)

    def add_compaction_policy(self, name: str, factory: Callable[..., Any] | str) -> None:
        """Provide the compaction policy ``name``."""
        self._add("compaction_policy", self.compaction_policies, name, factory)

    def add_root_inspector(self, marker: str, inspector: RootInspector | str) -> None:
        """Describe the roots an application built on silt writes: a root that holds the
        object ``marker`` (a key right under the root, as ``silt-spark.json``) is shown by
        ``silt inspect`` with what ``inspector(store, url, version, values)`` returns (see
        :func:`silt.plugins.describe_root`)."""
        self._add("root_inspector", self.root_inspectors, marker, inspector)

    def owner(self, kind: str, name: str) -> str | None:
        """The plugin that registered ``name`` of ``kind`` ("tier", "cache", ...)."""
        return self._owners.get((kind, name))
