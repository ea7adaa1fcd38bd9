"""The example tier's tests: silt's conformance suite plus what is specific to this tier.

(The file name is unique across the monorepo so that pytest can collect it next to silt's own
tests without an import-name clash.)
"""

from __future__ import annotations

import importlib
import pickle
import uuid
from collections.abc import Iterator

import pytest
import silt
from silt.errors import InvalidArgumentError, NotFoundError, TransientStoreError
from silt.plugins import Registry, open_store
from silt.store import retrying
from silt.testing import StoreConformance
from silt_example import ExampleClient, ExampleStore, silt_register


@pytest.fixture
def bucket() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex}"
    yield name
    ExampleClient.drop(name)


class TestExampleStore(StoreConformance):
    """Every test of the conformance suite, run against a fresh example store."""

    @pytest.fixture
    def store(self, bucket: str) -> Iterator[ExampleStore]:
        store = ExampleStore.from_url(f"example://{bucket}/conformance?page_size=700")
        yield store
        store.close()


@pytest.fixture
def registry() -> Registry:
    registry = Registry()
    silt_register(registry=registry)
    return registry


def test_registers_its_scheme(registry: Registry, bucket: str) -> None:
    assert set(registry.tiers) == {"example"}
    store = open_store(f"example://{bucket}/jobs/clicks?page_size=10", registry)
    assert isinstance(store, ExampleStore)
    assert store.url == f"example://{bucket}/jobs/clicks"
    assert store.options.page_size == 10


@pytest.mark.parametrize(
    ("url", "text"),
    [
        ("example://x?speed=fast", "unknown option"),
        ("example://x?page_size=0", "page_size"),
        ("example://", "no bucket"),
        ("example://user:secret@x/p", "must not contain '@'"),
        ("example://x/a/../b", "not a plain"),
        ("example://x/%252e%252e/b", "not a plain"),
    ],
)
def test_rejects_bad_urls(registry: Registry, url: str, text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=text) as info:
        open_store(url, registry)
    assert "secret" not in str(info.value)


def test_errors_map_to_silt_names(bucket: str) -> None:
    client = ExampleClient()
    store = ExampleStore(bucket, "p", client=client)
    with pytest.raises(NotFoundError, match="missing"):
        store.get("missing")
    client.failures = 2  # this client does not retry: the engine does
    retrying(lambda: store.put("k", b"v"), sleep=lambda _s: None)
    assert store.get("k") == b"v"
    client.failures = 1
    with pytest.raises(TransientStoreError, match="timed out"):
        store.get("k")
    store.close()
    store.close()  # a second close does nothing


def test_travels_as_its_url_and_options(bucket: str) -> None:
    # Pickles name the class by module: take it from the module as imported now (another test
    # may have imported the package afresh).
    module = importlib.import_module("silt_example")
    store = module.ExampleStore.from_url(f"example://{bucket}/p?page_size=5")
    store.put("k", b"v")
    copy = pickle.loads(pickle.dumps(store))
    assert (copy.url, copy.options, copy.get("k")) == (store.url, store.options, b"v")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(module.ExampleStore(bucket, client=module.ExampleClient()))
    module.ExampleClient.drop(bucket)


def test_the_engine_runs_on_it(bucket: str) -> None:
    url = f"example://{bucket}/db"
    with silt.open(url, store=ExampleStore.from_url(url)) as db:
        db.put(b"k", b"v")
        assert db.commit() == 1
    with silt.open(url, store=ExampleStore.from_url(url)) as db:
        assert db.version == 1
        assert db.get(b"k") == b"v"
