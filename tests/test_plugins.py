"""The plugin contract: built-ins, entry-point discovery, load-time checks, hints, docs.

Entry-point plugins here are real distributions: a module plus a ``*.dist-info`` folder written
into a temporary directory that is put on ``sys.path``, found by ``importlib.metadata`` exactly
as an installed package would be.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pathlib
import sys
import textwrap
import uuid
from collections.abc import Iterator
from types import ModuleType

import pluggy
import pytest
import silt
from silt import hookspecs
from silt.cli import main
from silt.errors import InvalidArgumentError, NoTierError, SiltError
from silt.plugins import (
    DEFAULT_PLUGINS,
    KNOWN_CACHES,
    KNOWN_TIERS,
    Registry,
    build_registry,
    get_registry,
    open_store,
    reset_registry,
)
from silt.testing import StoreConformance
from silt.tiers.memory import MemoryStore

REPO = pathlib.Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "packages" / "_template"

FAKE_TIER = '''
import silt
from silt.tiers.memory import MemoryStore


@silt.hookimpl
def silt_register(registry):
    registry.add_tier("fake", lambda url, options: MemoryStore("fake-" + url.split("://")[1]))
'''


class Distributions:
    """Writes installable-looking distributions into one directory on ``sys.path``."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add(self, dist: str, version: str, module: str, source: str,
            entry: str | None = None) -> None:
        (self.root / f"{module}.py").write_text(textwrap.dedent(source))
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        )
        (info / "entry_points.txt").write_text(f"[silt]\n{entry or module} = {module}\n")
        self.modules.append(module)
        importlib.invalidate_caches()


@pytest.fixture
def dists(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Distributions]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    d = Distributions(root)
    yield d
    for module in d.modules:
        sys.modules.pop(module, None)
    reset_registry()  # the next user rebuilds it with the test session's settings


# --- built-ins -----------------------------------------------------------------------------------


def test_builtins_register_through_default_plugins() -> None:
    registry = build_registry(autoload=False)
    assert list(registry.plugins) == [name for name, _module in DEFAULT_PLUGINS]
    assert {"file", "memory"} <= set(registry.tiers)
    for name, module in DEFAULT_PLUGINS:
        # Built-ins are plain plugin modules with a @silt.hookimpl, like any third party's.
        assert hasattr(importlib.import_module(module).silt_register, "silt_impl")
        info = registry.plugins[name]
        assert info.distribution == "silt-core"
        assert info.provides, f"built-in plugin {name!r} registered nothing"
        for entry in info.provides:
            kind, thing = entry.split(" ", 1)
            assert registry.owner(kind, thing) == name
    assert registry.plugins["memory"].provides == ["tier memory"]
    assert silt.plugins.get_registry().plugins["file"].provides == ["tier file"]


def test_session_registry_loads_only_builtins() -> None:
    # conftest.py sets SILT_DISABLE_PLUGIN_AUTOLOAD=1 (datasette's guard).
    assert set(get_registry().plugins) == {name for name, _ in DEFAULT_PLUGINS}


# --- entry-point plugins -------------------------------------------------------------------------


def test_entry_point_plugin_is_discovered(dists: Distributions) -> None:
    dists.add("silt-fake-tier", "0.1", "silt_fake_tier", FAKE_TIER, entry="fake")
    registry = build_registry(autoload=True)
    assert "fake" in registry.tiers
    info = registry.plugins["fake"]
    assert (info.distribution, info.version, info.provides) == ("silt-fake-tier", "0.1",
                                                                 ["tier fake"])
    assert registry.owner("tier", "fake") == "fake"
    assert {"file", "memory"} <= set(registry.tiers)
    assert "fake" not in build_registry(autoload=False).tiers


def test_autoload_follows_the_environment(
    dists: Distributions, monkeypatch: pytest.MonkeyPatch
) -> None:
    dists.add("silt-fake-tier", "0.1", "silt_fake_tier", FAKE_TIER, entry="fake")
    monkeypatch.setenv("SILT_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert "fake" not in build_registry().tiers
    monkeypatch.setenv("SILT_DISABLE_PLUGIN_AUTOLOAD", "0")
    assert "fake" in build_registry().tiers


def test_silt_open_through_an_entry_point_tier(
    dists: Distributions, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dists.add("silt-fake-tier", "0.1", "silt_fake_tier", FAKE_TIER, entry="fake")
    name = uuid.uuid4().hex
    url = f"fake://{name}"
    with pytest.raises(NoTierError, match="'fake://'"):
        silt.open(url)  # the session registry has only the built-ins
    monkeypatch.setenv("SILT_DISABLE_PLUGIN_AUTOLOAD", "0")
    reset_registry()
    try:
        with silt.open(url) as db:
            db.put(b"k", b"v")
            assert db.commit() == 1
        assert silt.versions(url) == [1]
        with silt.open(url) as db:
            assert db.get(b"k") == b"v"
        assert main(["plugins"]) == 0
        out = capsys.readouterr().out
        assert any(line.split()[:4] == ["fake", "silt-fake-tier", "0.1", "tier"]
                   for line in out.splitlines())
    finally:
        MemoryStore.drop(f"fake-{name}")


def test_opening_a_builtin_tier_imports_no_installed_plugin(
    dists: Distributions, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # An installed plugin's import brings its SDK (boto3, azure: ~0.3 s in a fresh process):
    # opening a file:// root with the built-in policy must not pay for it.
    dists.add("silt-fake-tier", "0.1", "silt_fake_tier", FAKE_TIER, entry="fake")
    monkeypatch.setenv("SILT_DISABLE_PLUGIN_AUTOLOAD", "0")
    reset_registry()
    with silt.open((tmp_path / "db").as_uri()) as db:
        db.put(b"k", b"v")
        assert db.commit() == 1
    assert "silt_fake_tier" not in sys.modules
    # A name no built-in provides still finds the installed plugin.
    name = uuid.uuid4().hex
    try:
        with silt.open(f"fake://{name}") as db:
            db.put(b"k", b"v")
            assert db.commit() == 1
        assert "silt_fake_tier" in sys.modules
    finally:
        MemoryStore.drop(f"fake-{name}")


def test_misspelled_hook_fails_loudly(
    dists: Distributions, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dists.add("silt-typo", "1.0", "silt_typo", '''
        import silt


        @silt.hookimpl
        def silt_registr(registry):
            registry.add_tier("typo", object)
    ''')
    with pytest.raises(pluggy.PluginValidationError, match="silt_registr"):
        build_registry(autoload=True)
    # The command line reports it as an error, not a traceback.
    monkeypatch.setenv("SILT_DISABLE_PLUGIN_AUTOLOAD", "0")
    reset_registry()
    assert main(["plugins"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("silt: error: a plugin failed to load") and "silt_registr" in err


def test_duplicate_registration_names_both_plugins(dists: Distributions) -> None:
    dists.add("silt-shadow", "2.0", "silt_shadow", '''
        import silt


        @silt.hookimpl
        def silt_register(registry):
            registry.add_tier("memory", object)
    ''', entry="shadow")
    with pytest.raises(SiltError) as info:
        build_registry(autoload=True)
    message = str(info.value)
    assert "tier 'memory' is registered twice" in message
    assert "'memory'" in message and "'shadow'" in message and "uninstall one" in message


def test_duplicate_between_two_third_party_plugins(dists: Distributions) -> None:
    for n in (1, 2):
        dists.add(f"silt-twin{n}", "1.0", f"silt_twin{n}", '''
            import silt


            @silt.hookimpl
            def silt_register(registry):
                registry.add_cache("twin", lambda store, options: store)
        ''')
    with pytest.raises(SiltError, match="cache 'twin' is registered twice") as info:
        build_registry(autoload=True)
    assert "'silt_twin1'" in str(info.value) and "'silt_twin2'" in str(info.value)


def test_registry_rejects_bad_names() -> None:
    registry = Registry()
    with pytest.raises(InvalidArgumentError, match="non-empty str"):
        registry.add_tier("", object)
    with pytest.raises(InvalidArgumentError):
        registry.add_cache(None, object)  # type: ignore[arg-type]
    registry.add_tier("MiXed", object)
    assert "mixed" in registry.tiers  # schemes are case-insensitive, like URLs
    assert registry.owner("tier", "mixed") == "<direct>"


# --- install hints and cache options -------------------------------------------------------------


@pytest.mark.parametrize("scheme", sorted(KNOWN_TIERS))
def test_install_hint_for_first_party_schemes(scheme: str) -> None:
    with pytest.raises(NoTierError) as info:
        open_store(f"{scheme}://bucket/prefix", build_registry(autoload=False))
    dist = KNOWN_TIERS[scheme]
    assert str(info.value) == (
        f"no tier installed for '{scheme}://' - pip install {dist} (before it is on PyPI: pip "
        f"install ./packages/{dist[5:]} from a silt checkout, or dist/{dist.replace('-', '_')}"
        "-*.whl after nox -s build)"
    )
    assert isinstance(info.value, ValueError)  # a generic handler catches it too


def test_hints_cover_the_first_party_packages() -> None:
    assert KNOWN_TIERS["s3"] == "silt-tier-s3"
    assert KNOWN_TIERS["gs"] == "silt-tier-gcs"
    assert KNOWN_TIERS["az"] == "silt-tier-azure"
    assert KNOWN_CACHES["ssd"] == "silt-cache-ssd"


def test_unknown_scheme_lists_installed_tiers() -> None:
    with pytest.raises(NoTierError, match="installed: 'file://', 'memory://'"):
        silt.open("nosuch://x")


def test_install_hint_for_ssd_cache() -> None:
    with pytest.raises(NoTierError) as info:
        open_store("memory://hint-test?cache=ssd&cache_dir=/tmp/x")
    assert str(info.value) == (
        "no cache installed named 'ssd' - pip install silt-cache-ssd (before it is on PyPI: pip "
        "install ./packages/cache-ssd from a silt checkout, or dist/silt_cache_ssd-*.whl after "
        "nox -s build)")
    with pytest.raises(NoTierError, match=r"no cache installed named 'nope' \(installed: none\)"):
        open_store("memory://hint-test?cache=nope")
    MemoryStore.drop("hint-test")


def test_cache_options_need_a_cache() -> None:
    with pytest.raises(InvalidArgumentError, match=r"cache options \['cache_dir'\] given "
                       r"without 'cache=<name>'"):
        open_store("memory://opts-test?cache_dir=/tmp/x")
    MemoryStore.drop("opts-test")


def test_cache_plugin_wraps_the_tier() -> None:
    registry = build_registry(autoload=False)
    seen = {}

    def wrap(store, options):
        seen.update(options)
        return store

    registry.add_cache("passthrough", wrap)
    store = open_store("memory://cache-test?cache=passthrough&cache_size=10", registry)
    assert isinstance(store, MemoryStore) and seen == {"cache_size": "10"}
    MemoryStore.drop("cache-test")


# --- every hook documented and tested (datasette's test_docs.py) ---------------------------------


def _hookspecs() -> list[tuple[str, object]]:
    specs = [
        (name, fn) for name, fn in vars(hookspecs).items()
        if callable(fn) and hasattr(fn, f"{hookspecs.PROJECT_NAME}_spec")
    ]
    assert specs, "found no hookspecs in silt.hookspecs"
    return specs


@pytest.mark.parametrize("name", [name for name, _ in _hookspecs()])
def test_hook_is_documented_and_tested(name: str) -> None:
    fn = getattr(hookspecs, name)
    assert name.startswith("silt_"), "every hook is prefixed silt_"
    doc = inspect.getdoc(fn) or ""
    assert doc, f"hookspec {name} has no docstring"
    params = list(inspect.signature(fn).parameters.values())
    for p in params:
        assert f":param {p.name}:" in doc, f"hookspec {name} does not document {p.name!r}"
    assert "firstresult" in doc, f"hookspec {name} does not say whether it is firstresult"

    docs = (REPO / "docs" / "plugins.md").read_text()
    signature = f"{name}({', '.join(f'{p.name}: {p.annotation}' for p in params)})"
    assert signature in docs, f"docs/plugins.md does not give the signature {signature}"

    tests = [p for p in (REPO / "tests").rglob("*.py") if name in p.read_text()]
    assert tests, f"no test under tests/ uses the hook {name}"


# --- the plugin template (packages/_template) ----------------------------------------------------


def _load_template() -> ModuleType:
    """Import the template's module from its source folder, without installing or sys.path."""
    path = TEMPLATE / "src" / "silt_example" / "__init__.py"
    spec = importlib.util.spec_from_file_location("_silt_template_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would (its dataclasses look themselves up)
    spec.loader.exec_module(module)
    return module


template = _load_template()


class TestTemplateTierConformance(StoreConformance):
    """The template tier passes the same conformance suite as the built-in tiers."""

    @pytest.fixture
    def store(self) -> Iterator[object]:
        name = f"conformance-{uuid.uuid4().hex}"
        yield template.ExampleStore(name)
        template.ExampleClient.drop(name)


def test_template_is_discovered_through_its_declared_entry_point(
    dists: Distributions, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tomllib
    project = tomllib.loads((TEMPLATE / "pyproject.toml").read_text())["project"]
    [(entry, module)] = project["entry-points"]["silt"].items()
    monkeypatch.syspath_prepend(str(TEMPLATE / "src"))
    dists.modules.append(module)
    info = dists.root / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    (info / "entry_points.txt").write_text(f"[silt]\n{entry} = {module}\n")
    registry = build_registry(autoload=True)
    assert registry.plugins[entry].distribution == "silt-tier-example"
    assert registry.plugins[entry].provides == ["tier example"]
    name = uuid.uuid4().hex
    store = open_store(f"example://{name}", registry)
    try:
        with silt.open(f"example://{name}", store=store) as db:
            db.put(b"k", b"v")
            assert db.commit() == 1
        assert silt.read_manifest(store, 1).version == 1
    finally:
        importlib.import_module(module).ExampleClient.drop(name)


def test_loading_the_first_party_plugins_imports_no_sdk() -> None:
    """Every process that opens a silt URL loads all installed plugins (a Spark worker's first
    task paid 0.6 s importing boto3, google-cloud-storage and azure-storage-blob to open a
    ``file://`` shard). Registering a tier must import no SDK; opening one of its URLs does."""
    import os
    import subprocess

    code = textwrap.dedent("""
        import sys
        from silt.plugins import build_registry
        registry = build_registry(autoload=True)
        sdks = ("boto3", "botocore", "google.cloud.storage", "azure.storage.blob")
        print(sorted(registry.tiers))
        print([m for m in sdks if m in sys.modules])
        import silt_s3, silt_gcs, silt_azure
        print([m for m in sdks if m in sys.modules])
        print(silt_s3.S3Store.__name__, silt_gcs.GcsStore.__name__,
              silt_azure.AzureStore.__name__)
        print([m for m in sdks if m in sys.modules])
    """)
    env = {k: v for k, v in os.environ.items() if k != "SILT_DISABLE_PLUGIN_AUTOLOAD"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert {"s3", "gs", "gcs", "az", "azure"} <= set(eval(out[0])), out
    assert out[1] == "[]" and out[2] == "[]", out  # registering, importing the package
    assert out[3] == "S3Store GcsStore AzureStore"
    # (the S3 tier builds its clients with botocore: boto3 only for a session given in code)
    assert set(eval(out[4])) == {"botocore", "google.cloud.storage", "azure.storage.blob"}
