"""The ``memory://`` tier: the conformance suite plus named namespaces and URL parsing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from silt.errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from silt.store import ObjectInfo
from silt.testing import StoreConformance
from silt.tiers import memory as memory_tier
from silt.tiers.memory import MemoryStore


class TestAnonymousMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestNamedMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self, name: str) -> MemoryStore:
        return MemoryStore(name)


class TestMemoryStoreUnderPrefix(StoreConformance):
    """A store opened on ``memory://ns/sub`` behaves like a whole store, with siblings around."""

    @pytest.fixture
    def store(self, name: str) -> MemoryStore:
        outside = MemoryStore(name)
        outside.put("kg-0-0/before", b"sibling")  # sorts before "kg-0-1/"
        outside.put("kg-0-1", b"an object that is a prefix of the store's path")
        outside.put("kg-0-10/x", b"sibling")
        outside.put("kg-0-2/after", b"sibling")
        return MemoryStore(f"{name}/kg-0-1")


@pytest.fixture
def name() -> Iterator[str]:
    """A unique namespace name, dropped after the test."""
    value = f"test-{uuid.uuid4().hex}"
    yield value
    MemoryStore.drop(value)


def test_same_name_shares_objects(name: str) -> None:
    a = MemoryStore(name)
    a.put("manifest/00000000000000000001", b"m1")
    b = MemoryStore.from_url(f"memory://{name}", {})
    assert b.get("manifest/00000000000000000001") == b"m1"
    b.put("sst/x.sst", b"s")
    assert [i.key for i in a.list()] == ["manifest/00000000000000000001", "sst/x.sst"]
    assert name in MemoryStore.namespaces()


def test_names_are_isolated(name: str) -> None:
    other = name + "-other"
    try:
        MemoryStore(name).put("k", b"mine")
        with pytest.raises(NotFoundError):
            MemoryStore(other).get("k")
        assert list(MemoryStore(other).list()) == []
    finally:
        MemoryStore.drop(other)


def test_anonymous_stores_are_private() -> None:
    a, b = MemoryStore(), MemoryStore()
    a.put("k", b"v")
    with pytest.raises(NotFoundError):
        b.get("k")
    assert a.url == "memory://"


def test_drop(name: str) -> None:
    store = MemoryStore(name)
    store.put("k", b"v")
    MemoryStore.drop(name)
    assert name not in MemoryStore.namespaces()
    assert list(store.list()) == []  # open stores see the namespace emptied
    with pytest.raises(NotFoundError):
        MemoryStore(name).get("k")
    MemoryStore.drop(name)
    MemoryStore.drop("never-created-" + name)


def test_path_is_a_key_prefix(name: str) -> None:
    root = MemoryStore(name)
    shard = MemoryStore.from_url(f"memory://{name}/kg-0-127", {})
    assert shard.url == f"memory://{name}/kg-0-127"
    shard.put("manifest/00000000000000000001", b"m")
    assert list(root.list()) == [ObjectInfo("kg-0-127/manifest/00000000000000000001", 1)]
    assert root.get("kg-0-127/manifest/00000000000000000001") == b"m"
    root.put("kg-0-127/sst/a.sst", b"ss")
    assert [i.key for i in shard.list()] == ["manifest/00000000000000000001", "sst/a.sst"]
    assert MemoryStore(f"{name}/kg-0-127/").url == shard.url
    shard.delete_many(["sst/a.sst"])
    with pytest.raises(NotFoundError, match=r"sst/a\.sst"):
        root.get("kg-0-127/sst/a.sst")


def test_data_is_copied(name: str) -> None:
    store = MemoryStore(name)
    buf = bytearray(b"original")
    store.put("k", buf)
    buf[:] = b"mutated!"
    assert store.get("k") == b"original"
    assert isinstance(store.get("k"), bytes)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memory://", "names no store"),
        ("memory:///", "names no store"),
        ("memory:///x", "is empty"),
        ("memory://ns/../x", "not a plain"),
        ("memory://ns//x", "not a plain"),
        ("file:///tmp/x", "memory:// URLs"),
        ("memory", "not a store URL"),
    ],
)
def test_from_url_rejects_bad_urls(url: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        MemoryStore.from_url(url, {})


def test_from_url_rejects_options() -> None:
    with pytest.raises(InvalidArgumentError, match=r"unknown option\(s\) 'size'.*accepts: none"):
        MemoryStore.from_url("memory://x", {"size": "1"})
    with pytest.raises(InvalidArgumentError, match="'size'"):
        MemoryStore.from_url("memory://x?size=1", {})


def test_invalid_keys_and_types() -> None:
    store = MemoryStore()
    for key in ["", "/abs", "../x", "a//b", "a\\b"]:
        with pytest.raises(InvalidArgumentError):
            store.put(key, b"x")
    with pytest.raises(InvalidTypeError):
        store.put("k", "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        store.delete_many("k")
    with pytest.raises(InvalidTypeError):
        MemoryStore(3)  # type: ignore[arg-type]


def test_registers_through_the_hook() -> None:
    added: dict[str, object] = {}

    class Registry:
        def add_tier(self, scheme: str, factory: object) -> None:
            added[scheme] = factory

    memory_tier.silt_register(Registry())
    assert added == {"memory": MemoryStore.from_url}


def test_listing_is_a_snapshot() -> None:
    store = MemoryStore()
    store.put("a", b"1")
    store.put("b", b"1")
    listing = store.list()
    assert next(listing) == ObjectInfo("a", 1)
    store.put("c", b"1")
    store.delete_many(["b"])
    assert list(listing) == [ObjectInfo("b", 1)]
    assert [i.key for i in store.list()] == ["a", "c"]


@settings(max_examples=150, deadline=None)
@given(
    keys=st.sets(st.text(alphabet="ab0-/", min_size=1, max_size=6), max_size=25),
    prefix=st.text(alphabet="ab0-/", max_size=4),
    start_after=st.none() | st.text(alphabet="ab0-/", max_size=4),
)
def test_list_matches_a_sorted_model(keys: set[str], prefix: str, start_after: str | None) -> None:
    keys = {k for k in keys if not k.startswith("/") and "//" not in k and not k.endswith("/")}
    store = MemoryStore()
    for key in keys:
        store.put(key, key.encode())
    expected = [
        ObjectInfo(k, len(k))
        for k in sorted(keys)
        if k.startswith(prefix) and (start_after is None or k > start_after)
    ]
    assert list(store.list(prefix, start_after)) == expected
    doomed = sorted(keys)[::2]
    store.delete_many(doomed)
    remaining = sorted(keys - set(doomed))
    assert [i.key for i in store.list()] == remaining


def test_no_secret_from_a_url_query_reaches_a_message() -> None:
    """Whatever a URL's query holds (this tier takes no options; another tier's may hold a key)
    is never echoed, by the tier or by silt.open, in the message, the repr or the chain."""
    import silt

    secret = "hunter2-SENTINEL-pw"
    for url in (f"memory://ns?token={secret}", f"memory://?token={secret}",
                f"memory://ns/%2e%2e?password={secret}", f"file:///x?token={secret}"):
        for attempt in (lambda url=url: MemoryStore.from_url(url), lambda url=url: silt.open(url)):
            with pytest.raises(InvalidArgumentError) as info:
                attempt()
            seen, pending = set(), [info.value]
            while pending:
                exc = pending.pop()
                if id(exc) in seen:
                    continue
                seen.add(id(exc))
                assert secret not in str(exc) and secret not in repr(exc)
                pending += [e for e in (exc.__cause__, exc.__context__) if e is not None]
