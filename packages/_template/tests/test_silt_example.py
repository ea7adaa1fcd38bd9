"""The example tier's tests: silt's conformance suite plus what is specific to this tier.

(The file name is unique across the monorepo so that pytest can collect it next to silt's own
tests without an import-name clash.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import silt
from silt.errors import InvalidArgumentError, NotFoundError
from silt.plugins import Registry, open_store
from silt.testing import StoreConformance
from silt_example import ExampleStore, silt_register


@pytest.fixture
def name() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex}"
    yield name
    ExampleStore.drop(name)


class TestExampleStore(StoreConformance):
    """Every test of the conformance suite, run against a fresh example store."""

    @pytest.fixture
    def store(self, name: str) -> ExampleStore:
        return ExampleStore(name)


@pytest.fixture
def registry() -> Registry:
    registry = Registry()
    silt_register(registry=registry)
    return registry


def test_registers_its_scheme(registry: Registry) -> None:
    assert set(registry.tiers) == {"example"}
    store = open_store("example://shared", registry)
    assert isinstance(store, ExampleStore)
    assert store.url == "example://shared"
    ExampleStore.drop("shared")


def test_rejects_unknown_options_and_empty_names(registry: Registry) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown option"):
        open_store("example://x?speed=fast", registry)
    with pytest.raises(InvalidArgumentError, match="names no store"):
        open_store("example://", registry)


def test_errors_map_to_silt_names(name: str) -> None:
    with pytest.raises(NotFoundError, match="missing"):
        ExampleStore(name).get("missing")


def test_the_engine_runs_on_it(name: str) -> None:
    with silt.open(f"example://{name}", store=ExampleStore(name)) as db:
        db.put(b"k", b"v")
        assert db.commit() == 1
    with silt.open(f"example://{name}", store=ExampleStore(name)) as db:
        assert db.version == 1
        assert db.get(b"k") == b"v"
