"""Lazy registration: a plugin names its implementation as ``"module:attribute"`` and silt
imports it when it is first used, so loading plugins imports no SDK.

Plugins here are real distributions (a module plus a ``*.dist-info`` folder on ``sys.path``,
found by ``importlib.metadata``), and the SDK check runs the installed first-party tiers in a
fresh interpreter.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from silt.errors import InvalidArgumentError, InvalidTypeError, NoTierError, SiltError
from silt.plugins import build_registry, open_store, reset_registry, takes_storage_options
from silt.registry import LazyRef, Registry, resolve
from silt.tiers.memory import MemoryStore

SDKS = ("boto3", "botocore", "google.cloud.storage", "azure.storage.blob")


class Site:
    """A directory on ``sys.path`` holding modules and distributions written by a test."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def module(self, name: str, source: str) -> None:
        (self.root / f"{name}.py").write_text(textwrap.dedent(source))
        self.modules.append(name)
        importlib.invalidate_caches()

    def plugin(self, dist: str, entry: str, module: str, source: str) -> None:
        self.module(module, source)
        info = self.root / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[silt]\n{entry} = {module}\n")
        importlib.invalidate_caches()


@pytest.fixture
def site(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    s = Site(root)
    yield s
    for module in s.modules:
        sys.modules.pop(module, None)
    reset_registry()


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def test_a_tier_registered_by_name_is_imported_when_its_url_is_opened(site: Site) -> None:
    store_module = _unique("silt_lazy_store")
    plugin_module = _unique("silt_lazy_plugin")
    site.module(store_module, """
        from silt.tiers.memory import MemoryStore

        class LazyStore(MemoryStore):
            @classmethod
            def from_url(cls, url, options=None, storage_options=None):
                name = url.split("://", 1)[1]
                store = cls(f"lazy-{name}")
                store.seen = (dict(options or {}), dict(storage_options or {}))
                return store
    """)
    site.plugin("silt-lazy-tier", "lazy", plugin_module, f"""
        import silt

        @silt.hookimpl
        def silt_register(registry):
            registry.add_tier("lazy", "{store_module}:LazyStore.from_url")
            registry.add_tier("lazy2", "{store_module}:LazyStore.from_url")
    """)
    registry = build_registry(autoload=True)
    assert plugin_module in sys.modules
    assert store_module not in sys.modules  # registering imported nothing of the tier
    assert registry.tiers["lazy"] == registry.tiers["lazy2"]  # one name, two schemes
    assert registry.plugins["lazy"].provides == ["tier lazy", "tier lazy2"]
    assert repr(registry.tiers["lazy"]) == f"LazyRef('{store_module}:LazyStore.from_url')"
    name = uuid.uuid4().hex
    try:
        store = open_store(f"lazy://{name}?a=1", registry, storage_options={"key": "v"})
        assert store_module in sys.modules
        assert type(store).__name__ == "LazyStore"
        assert store.seen == ({"a": "1"}, {"key": "v"})
        store.put("k", b"v")
        assert open_store(f"lazy2://{name}", registry).get("k") == b"v"
    finally:
        MemoryStore.drop(f"lazy-{name}")


def test_a_lazy_tier_without_storage_options_refuses_them(site: Site) -> None:
    store_module = _unique("silt_lazy_plain")
    site.module(store_module, """
        from silt.tiers.memory import MemoryStore

        def open_plain(url, options):
            return MemoryStore("plain-" + url.split("://", 1)[1])
    """)
    registry = Registry()
    registry.add_tier("plain", f"{store_module}:open_plain")
    assert store_module not in sys.modules
    assert not takes_storage_options(registry.tiers["plain"])  # imports it to tell
    assert store_module in sys.modules
    with pytest.raises(InvalidArgumentError, match="takes no storage_options"):
        open_store("plain://x", registry, storage_options={"token": "secret"})


def test_every_kind_takes_a_lazy_name(site: Site) -> None:
    module = _unique("silt_lazy_kinds")
    site.module(module, """
        def cache(store, options):
            store.cached_with = dict(options)
            return store

        def policy(*args, **kwargs):
            return ("policy", args, kwargs)

        def inspector(store, url, version, values):
            return {"kind": "lazy", "fields": {"url": url}}
    """)
    registry = Registry()
    registry.add_tier("memory", "silt.tiers.memory:MemoryStore.from_url")
    registry.add_cache("lazycache", f"{module}:cache")
    registry.add_compaction_policy("lazypolicy", f"{module}:policy")
    registry.add_root_inspector("lazy.json", f"{module}:inspector")
    assert module not in sys.modules
    name = uuid.uuid4().hex
    try:
        store = open_store(f"memory://{name}?cache=lazycache&cache_size=3", registry)
        assert store.cached_with == {"cache_size": "3"}
        assert registry.compaction_policies["lazypolicy"](1, x=2) == ("policy", (1,), {"x": 2})
        assert registry.root_inspectors["lazy.json"](store, "u", None, 0)["fields"] == {"url": "u"}
    finally:
        MemoryStore.drop(name)


_ASCII_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_SPEC = re.compile(rf"{_ASCII_NAME}(\.{_ASCII_NAME})*:{_ASCII_NAME}(\.{_ASCII_NAME})*")


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(alphabet="ab_9.:-/ ", max_size=14), st.from_regex(_SPEC, fullmatch=True)))
def test_a_lazy_name_is_checked_when_it_is_registered(spec: str) -> None:
    """Any string: a well-formed ``module:attribute`` is accepted without an import, anything
    else is refused at registration with a message saying the expected shape."""
    registry = Registry()
    if _SPEC.fullmatch(spec):
        registry.add_tier("t", spec)
        assert isinstance(registry.tiers["t"], LazyRef) and registry.tiers["t"].spec == spec
    else:
        with pytest.raises(InvalidArgumentError, match=re.escape("'package.module:attribute'")):
            registry.add_tier("t", spec)
        assert "t" not in registry.tiers


@pytest.mark.parametrize("obj", [3, None, b"mod:attr", ["mod:attr"], object()])
def test_a_registered_implementation_must_be_callable_or_a_name(obj: object) -> None:
    registry = Registry()
    with pytest.raises(InvalidTypeError, match="pass a callable"):
        registry.add_tier("t", obj)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="compaction_policy 'p'"):
        registry.add_compaction_policy("p", obj)  # type: ignore[arg-type]


def test_a_lazy_name_that_does_not_load_names_the_plugin(site: Site) -> None:
    module = _unique("silt_lazy_broken")
    missing_sdk = _unique("no_such_sdk")
    site.module(module, f"""
        VALUE = 3

        def factory(url, options):
            import {missing_sdk}
    """)
    site.module(module + "_needs_sdk", f"import {missing_sdk}\n")
    plugin_module = _unique("silt_lazy_broken_plugin")
    site.plugin("silt-broken-tier", "broken", plugin_module, f"""
        import silt

        @silt.hookimpl
        def silt_register(registry):
            registry.add_tier("nosdk", "{module}_needs_sdk:Store")
            registry.add_tier("noattr", "{module}:Missing.from_url")
            registry.add_tier("notcallable", "{module}:VALUE")
            registry.add_compaction_policy("nopolicy", "{module}_gone:pick")
    """)
    registry = build_registry(autoload=True)
    with pytest.raises(NoTierError, match=(
            rf"tier 'nosdk' of plugin 'broken' could not be loaded: importing "
            rf"'{module}_needs_sdk' failed \(ModuleNotFoundError: .*{missing_sdk}")):
        open_store("nosdk://x", registry)
    with pytest.raises(NoTierError, match=rf"'{module}' has no 'Missing.from_url'"):
        open_store("noattr://x", registry)
    with pytest.raises(NoTierError, match="which is a int, not a callable"):
        open_store("notcallable://x", registry)
    with pytest.raises(SiltError, match="compaction_policy 'nopolicy' of plugin 'broken'") as e:
        resolve(registry.compaction_policies["nopolicy"])
    assert not isinstance(e.value, NoTierError)


def test_loading_plugins_imports_no_sdk_and_opening_a_url_imports_only_its_own() -> None:
    """In a fresh interpreter with the first-party tiers installed: ``import silt`` and plugin
    discovery import no SDK; opening an ``s3://`` URL imports botocore (the S3 tier builds its
    clients with it; boto3 only for a session given in code) and none of the others."""
    code = textwrap.dedent(f"""
        import sys
        import silt
        from silt.plugins import get_registry, open_store
        registry = get_registry()
        print(sorted(registry.tiers))
        print([m for m in {SDKS!r} if m in sys.modules])
        store = open_store("s3://bucket/prefix?endpoint_url=http://127.0.0.1:9&region=us-east-1")
        print(type(store).__name__)
        print([m for m in {SDKS!r} if m in sys.modules])
    """)
    env = {k: v for k, v in os.environ.items() if k != "SILT_DISABLE_PLUGIN_AUTOLOAD"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=300).stdout.splitlines()
    assert {"s3", "gs", "gcs", "az", "azure"} <= set(eval(out[0])), out
    assert out[1] == "[]", out
    assert out[2] == "S3Store", out
    assert eval(out[3]) == ["botocore"], out
