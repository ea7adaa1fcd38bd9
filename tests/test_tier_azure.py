"""The ``az://`` tier (silt-tier-azure) against a real Azure Blob protocol server: Azurite.

* the conformance suite from ``silt.testing``, on a container prefix with sibling blobs around it;
* URL parsing, options, and where the account and credential come from (options, the Azure CLI's
  environment variables, DefaultAzureCredential);
* the requests on the wire (``If-None-Match: *``, staged blocks, chunked reads, Blob Batch),
  error mapping, and no secrets in messages;
* faults from a TCP proxy between the SDK and Azurite (tests/faultproxy.py): bodies cut
  mid-read, resets, lost responses, a black hole;
* the engine on Azure: commit, reopen, reads, two writers racing for one version.

Fixtures ``azurite_server``, ``azurite_connection``, ``azurite_admin``, ``azure_env``,
``az_container`` and ``az_url`` live in ``conftest.py``; Azurite itself is installed from npm by
``.ci/install-azurite`` (run by the fixture when missing).

Azurite gaps: none that these tests meet, so nothing is marked xfail. Azurite 3.35 enforces
``If-None-Match: *`` on Put Blob and Put Block List (409 BlobAlreadyExists, one winner in a race),
answers 416 for ranges past the end and of empty blobs, supports Blob Batch, and checks
shared-key and SAS signatures. The differences from Azure that matter are in the package README.
"""

from __future__ import annotations

import pickle
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import silt
import silt_azure
from azure.core.credentials import AzureSasCredential
from azure.core.exceptions import HttpResponseError, ServiceRequestError
from faultproxy import FaultProxy
from hedgecheck import check_a_slow_read_is_hedged_and_billed_twice
from servers import AZURITE_ACCOUNT, AZURITE_KEY, azurite_connection_string, free_port
from silt import plugins
from silt.errors import (
    ClosedError,
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    RetriesExhaustedError,
    StoreError,
    TransientStoreError,
    VersionNotFoundError,
)
from silt.store import ObjectInfo
from silt.testing import StoreConformance, exception_texts
from silt_azure import AzureOptions, AzureStore
from silt_azure import store as az_store_module
from silt_azure.config import Account, parse_url, resolve_account
from silt_azure.errors import map_error
from silt_azure.plugin import open_azure, silt_register

KiB = 1024
MiB = 1024 * KiB
PACKAGE = Path(__file__).resolve().parents[1] / "packages" / "tier-azure"  # the source tree


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def open_on(
    container: str, connection: str, prefix: str = "state", **options: object
) -> AzureStore:
    return AzureStore(
        container, prefix, options=AzureOptions(connection_string=connection, **options)
    )


def recorder(proxy: FaultProxy) -> list[bytes]:
    """Record the head (request line and headers) of every request through ``proxy``."""
    heads: list[bytes] = []

    def record(head: bytes) -> bool:
        heads.append(head)
        return False  # never fires: the rule only watches

    proxy.fault("delay", match=record, times=None)
    return heads


def lines(heads: list[bytes], method: str, *needles: str) -> list[str]:
    """Request heads (as text) of ``method`` requests containing every needle."""
    out = []
    for head in heads:
        text = head.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        if text.startswith(method + " ") and all(n in text for n in needles):
            out.append(text)
    return out


@pytest.fixture
def proxy(azurite_server: str) -> Iterator[FaultProxy]:
    with FaultProxy(azurite_server) as p:
        yield p


@pytest.fixture
def via_proxy(proxy: FaultProxy) -> str:
    """A connection string for Azurite through the fault proxy."""
    return azurite_connection_string(proxy.url)


# --- conformance -------------------------------------------------------------------------------


class TestAzureConformance(StoreConformance):
    """The whole suite on ``az://<container>/kg-0-1`` with blobs just outside the prefix.

    Listings use pages of 250 names, so 600 keys span three pages (Azure's default page of
    5,000 would hide paging from the suite's 1,500 keys, at twice the cost in uploads).
    """

    threads = 6
    many_keys = 600

    @pytest.fixture
    def store(
        self, az_container: str, azurite_connection: str, azurite_admin: object
    ) -> Iterator[AzureStore]:
        container = azurite_admin.get_container_client(az_container)  # type: ignore[attr-defined]
        for key, body in [("kg-0-0/before", b"s"), ("kg-0-1", b"object named like the prefix"),
                          ("kg-0-10/x", b"s"), ("kg-0-2/after", b"s")]:
            container.upload_blob(key, body)
        store = open_on(az_container, azurite_connection, "kg-0-1", list_page_size=250)
        yield store
        store.close()


# --- URLs, options, accounts -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "container", "prefix", "options"),
    [
        ("az://state", "state", "", {}),
        ("az://state/", "state", "", {}),
        ("az://state/jobs/clicks", "state", "jobs/clicks/", {}),
        ("azure://state//jobs/clicks/", "state", "jobs/clicks/", {}),
        ("AZ://state/a%20b", "state", "a b/", {}),
        ("az://my-state-1/x?account_name=acct&block_size=4MiB", "my-state-1", "x/",
         {"account_name": "acct", "block_size": "4MiB"}),
        ("az://$root/x", "$root", "x/", {}),
    ],
)
def test_parse_url(url: str, container: str, prefix: str, options: dict[str, str]) -> None:
    assert parse_url(url) == (container, prefix, options)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("az://", "no container"),
        ("az:///prefix", "no container"),
        ("az://state/../x", "not a plain"),
        ("az://State/x", "not valid"),
        ("az://ab/x", "not valid"),
        ("az://a--b/x", "not valid"),
        ("az://host:10000/x", "not valid"),
        ("az://state@acct.blob.core.windows.net/x", "container@account"),
        ("s3://state/x", "az:// URLs"),
        ("state/x", "not a store URL"),
    ],
)
def test_bad_urls(azure_env: None, url: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        AzureStore.from_url(url, {})


def test_credentials_never_accepted_in_urls(azure_env: None) -> None:
    secret = "c2VjcmV0IGtleSB0aGF0IG11c3Qgbm90IGxlYWsK=="
    for option in ("account_key", "sas_token", "sig", "key"):
        with pytest.raises(InvalidArgumentError) as info:
            AzureStore.from_url(f"az://state/x?{option}={quote(secret)}", {})
        assert secret not in str(info.value) and quote(secret) not in str(info.value)
        assert option in str(info.value) and "AZURE_STORAGE_KEY" in str(info.value)
    with pytest.raises(InvalidArgumentError) as info:
        AzureStore.from_url(f"az://state/x?unknown_thing={secret}", {})
    assert secret not in str(info.value)
    assert "unknown_thing" in str(info.value) and "account_url" in str(info.value)
    with pytest.raises(InvalidArgumentError, match="must not carry a SAS") as info:
        AzureStore("state", options=AzureOptions(
            account_url=f"https://acct.blob.core.windows.net/?sv=2024&sig={secret}"))
    assert secret not in str(info.value)
    for malformed in (f"AccountKey={secret}", f"garbage{secret}"):
        with pytest.raises(InvalidArgumentError, match="malformed") as info:
            AzureStore("state", options=AzureOptions(connection_string=malformed))
        assert secret not in str(info.value)


def test_options_are_parsed(azure_env: None, azurite_connection: str) -> None:
    url = (
        f"az://state/p?connection_string={quote(azurite_connection, safe='')}"
        "&block_threshold=2MiB&block_size=512KiB&upload_concurrency=3&download_chunk_size=1MiB"
        "&download_concurrency=5&max_connections=40&connect_timeout=1.5&read_timeout=2"
        "&max_attempts=2&read_attempts=7&list_page_size=100"
    )
    store = AzureStore.from_url(url)
    o = store.options
    assert (o.block_threshold, o.block_size, o.download_chunk_size) == (2 * MiB, 512 * KiB, MiB)
    assert (o.upload_concurrency, o.download_concurrency, o.max_connections) == (3, 5, 40)
    assert (o.connect_timeout, o.read_timeout, o.max_attempts, o.read_attempts) == (
        1.5, 2.0, 2, 7)
    assert o.list_page_size == 100
    assert AzureOptions.from_query("u", o.to_query()) == o
    client = store._client
    assert client.url.startswith(f"{store.endpoint}/state")
    config = client._config
    assert (config.max_single_put_size, config.max_block_size) == (2 * MiB, 512 * KiB)
    assert (config.max_single_get_size, config.max_chunk_get_size) == (MiB, MiB)
    assert config.retry_policy.total_retries == 1
    transport = config.transport
    assert transport.connection_config.timeout == 1.5
    assert transport.connection_config.read_timeout == 2.0
    adapter = transport.session.get_adapter("http://127.0.0.1")
    assert adapter._pool_maxsize == 40  # parallel reads and uploads keep their connections
    # Neither the URL, the repr nor the options' repr show the connection string.
    for text in (store.url, repr(store), repr(o), str(store.account)):
        assert AZURITE_KEY not in text and "AccountKey" not in text
    store.close()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("block_size", "0", "at least 1"),
        ("block_size", "5000MiB", "4000MiB"),
        ("block_threshold", "lots", "not a size"),
        ("max_attempts", "0", ">= 1"),
        ("read_timeout", "-1", ">= 0.001"),
        ("read_timeout", "nan", ">= 0.001"),
        ("account_name", "Not_An_Account", "storage account name"),
        ("account_url", "ftp://x", "account_url must look like"),
        ("account_name", "", "empty"),
        ("list_page_size", "5001", "at most 5000"),
    ],
)
def test_bad_options(azure_env: None, name: str, value: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        AzureStore.from_url(f"az://state?{name}={value}")


CS = "DefaultEndpointsProtocol=https;AccountName=envacct;AccountKey=ZW52a2V5;EndpointSuffix=x"


@pytest.mark.parametrize(
    ("options", "env", "expected"),
    [
        ({"connection_string": CS}, {"AZURE_STORAGE_ACCOUNT_URL": "https://o.example"},
         ("the connection_string= option", "connection_string", None)),
        ({"account_name": "optacct"}, {"AZURE_STORAGE_CONNECTION_STRING": CS},
         ("the account_name= option", "default", "https://optacct.blob.core.windows.net")),
        ({}, {"AZURE_STORAGE_CONNECTION_STRING": CS, "AZURE_STORAGE_ACCOUNT": "other"},
         ("AZURE_STORAGE_CONNECTION_STRING", "connection_string", None)),
        ({}, {"AZURE_STORAGE_ACCOUNT_URL": "https://u.example/", "AZURE_STORAGE_ACCOUNT": "a1b"},
         ("AZURE_STORAGE_ACCOUNT_URL", "default", "https://u.example")),
        ({}, {"AZURE_STORAGE_ACCOUNT": "envacct", "AZURE_STORAGE_KEY": "a2V5"},
         ("AZURE_STORAGE_ACCOUNT", "key", "https://envacct.blob.core.windows.net")),
        ({"account_url": "http://127.0.0.1:1/devstoreaccount1"},
         {"AZURE_STORAGE_SAS_TOKEN": "?sv=1&sig=abc", "AZURE_STORAGE_KEY": "a2V5"},
         ("the account_url= option", "sas", "http://127.0.0.1:1/devstoreaccount1")),
    ],
)
def test_account_resolution_order(
    options: dict[str, str], env: dict[str, str], expected: tuple[str, str, str | None]
) -> None:
    account = resolve_account(AzureOptions(**options), env)
    assert (account.source, account.credential, account.account_url) == expected
    assert "ZW52a2V5" not in repr(account) and "a2V5" not in repr(account)


def test_account_key_needs_an_account_name_and_nothing_configured_is_clear() -> None:
    account = resolve_account(AzureOptions(account_url="http://127.0.0.1:1/devstoreaccount1"),
                              {"AZURE_STORAGE_KEY": "a2V5"})
    assert (account.credential, account.account_name) == ("key", "devstoreaccount1")
    with pytest.raises(StoreError, match="set AZURE_STORAGE_ACCOUNT"):
        resolve_account(AzureOptions(account_url="http://127.0.0.1:1"),
                        {"AZURE_STORAGE_KEY": "a2V5"})
    with pytest.raises(StoreError, match=r"no Azure storage account configured.*"
                       r"AZURE_STORAGE_CONNECTION_STRING.*DefaultAzureCredential"):
        resolve_account(AzureOptions(), {})
    secrets = Account("x", "sas", sas="?sv=1&sig=abc%2Fdef").secrets()
    assert {"?sv=1&sig=abc%2Fdef", "abc%2Fdef", "abc/def"} <= set(secrets)


def test_account_url_with_key_from_environment(
    azure_env: None, monkeypatch: pytest.MonkeyPatch, az_container: str, azurite_server: str
) -> None:
    """Azurite through ``account_url=`` plus ``AZURE_STORAGE_KEY`` (shared-key signing)."""
    monkeypatch.setenv("AZURE_STORAGE_KEY", AZURITE_KEY)
    store = AzureStore.from_url(
        f"az://{az_container}/k?account_url={azurite_server}/{AZURITE_ACCOUNT}")
    assert store.account is not None and store.account.credential == "key"
    store.put("k", b"v")
    assert store.get("k") == b"v"
    store.close()


def test_sas_from_environment(
    azure_env: None, monkeypatch: pytest.MonkeyPatch, az_container: str, azurite_server: str,
) -> None:
    """A container SAS in ``AZURE_STORAGE_SAS_TOKEN``: it works, and never shows in messages."""
    from datetime import UTC, datetime, timedelta

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    sas = generate_container_sas(
        AZURITE_ACCOUNT, az_container, account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_URL", f"{azurite_server}/{AZURITE_ACCOUNT}")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", sas)
    store = AzureStore.from_url(f"az://{az_container}/sas")
    assert isinstance(store._client.credential, AzureSasCredential)
    store.put("k", b"v")
    assert store.get("k") == b"v"
    assert [i.key for i in store.list()] == ["k"]
    store.delete_many(["k"])
    signature = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    assert signature not in repr(store) and signature not in store.endpoint
    # A SAS for another container is refused: a clear, permanent error without the SAS.
    other = AzureStore.from_url("az://silt-other-container/sas")
    with pytest.raises(StoreError, match="access denied") as info:
        other.get("k")
    assert not isinstance(info.value, TransientStoreError)
    assert_no_secret(info.value, sas, signature)
    # Nothing listens here: the connection error quotes the request URL, SAS and all.
    dead = AzureStore("state", options=AzureOptions(
        account_url=f"http://127.0.0.1:{free_port()}/{AZURITE_ACCOUNT}", max_attempts=1,
        connect_timeout=0.5))
    with pytest.raises(TransientStoreError, match="connection problem") as info:
        dead.get("k")
    assert_no_secret(info.value, sas, signature)
    for s in (store, other, dead):
        s.close()


def test_default_azure_credential_without_a_key(
    azure_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.identity import DefaultAzureCredential

    store = AzureStore.from_url("az://state/x?account_name=siltnoaccount")
    assert isinstance(store._client.credential, DefaultAzureCredential)
    assert store.endpoint == "https://siltnoaccount.blob.core.windows.net"
    store.close()
    with pytest.raises(InvalidArgumentError, match="needs an https:// account URL"):
        AzureStore.from_url("az://state/x?account_url=http://127.0.0.1:1/devstoreaccount1")
    monkeypatch.setitem(sys.modules, "azure.identity", None)  # not installed
    with pytest.raises(StoreError, match=r"pip install 'silt-tier-azure\[identity\]'"):
        AzureStore.from_url("az://state/x?account_name=siltnoaccount")


def test_connection_string_from_environment(
    azure_env: None, monkeypatch: pytest.MonkeyPatch, az_container: str, azurite_connection: str
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite_connection)
    store = AzureStore.from_url(f"az://{az_container}/env")
    assert store.account is not None
    assert store.account.source == "AZURE_STORAGE_CONNECTION_STRING"
    store.put("k", b"v")
    assert store.get("k") == b"v"
    store.close()


#: A password or token that must never appear in any message, repr or chained exception.
SENTINEL = "hunter2-SENTINEL-pw"


@pytest.mark.parametrize(
    "endpoint",
    [f"http://user:{SENTINEL}@127.0.0.1:1/devstoreaccount1",
     f"http://{SENTINEL}@127.0.0.1:1/devstoreaccount1",
     f"http://127.0.0.1:1/devstoreaccount1?sv=2024&sig={SENTINEL}",
     f"http://127.0.0.1:1/devstoreaccount1#{SENTINEL}"],
)
def test_endpoints_with_credentials_are_refused_without_echoing_them(
    azure_env: None, monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    """An account URL or a connection string's ``BlobEndpoint`` carrying a user, a password or a
    SAS is refused from the options and the environment alike, and the secret is in no message,
    repr or chained exception (a ``BlobEndpoint`` with ``user:password@`` used to be accepted and
    shown by every error's "at <endpoint>")."""
    connection = f"AccountName=devstoreaccount1;BlobEndpoint={endpoint};"
    attempts = [
        lambda: AzureStore.from_url(f"az://state/p?account_url={quote(endpoint, safe='')}", {}),
        lambda: AzureStore("state", options=AzureOptions(account_url=endpoint)),
        lambda: AzureStore.from_url(
            f"az://state/p?connection_string={quote(connection, safe='')}", {}),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidArgumentError) as info:
            attempt()
        for text in exception_texts(info.value):
            assert SENTINEL not in text, text
    for variable, value in (("AZURE_STORAGE_ACCOUNT_URL", endpoint),
                            ("AZURE_STORAGE_CONNECTION_STRING", connection)):
        monkeypatch.setenv(variable, value)
        with pytest.raises(InvalidArgumentError) as info:
            AzureStore.from_url("az://state/p", {})
        for text in exception_texts(info.value):
            assert SENTINEL not in text, text
        monkeypatch.delenv(variable)


def test_a_connection_string_in_the_url_is_never_shown(
    az_plugin: None, az_url: str, azurite_connection: str
) -> None:
    """``connection_string=`` in a URL holds the account key: silt.open's errors, a DB's repr and
    its messages show the URL without its query (they used to show the key)."""
    secrets = (AZURITE_KEY, azurite_connection, quote(azurite_connection, safe=""),
               quote(AZURITE_KEY, safe=""))
    with pytest.raises(VersionNotFoundError) as info:
        silt.open(az_url, version=99)
    assert "does not exist" in str(info.value)
    for text in exception_texts(info.value):
        assert not any(s in text for s in secrets), text
    db = silt.open(az_url)
    db.put(b"k", b"v")
    db.commit()
    shown = [repr(db)]
    db.close()
    with pytest.raises(ClosedError) as closed:
        db.get(b"k")
    shown += exception_texts(closed.value)
    for text in shown:
        assert az_url.split("?")[0] in text and not any(s in text for s in secrets), text


@pytest.fixture
def az_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process registry with silt-tier-azure registered through pluggy, as its entry point
    would (the core's tests run with plugin autoloading off)."""
    monkeypatch.setattr(
        plugins, "DEFAULT_PLUGINS", (*plugins.DEFAULT_PLUGINS, ("az", "silt_azure.plugin"))
    )
    plugins.reset_registry()
    yield
    plugins.reset_registry()


@pytest.mark.parametrize("scheme", ["az", "azure"])
def test_silt_open_with_connection_string_in_environment(
    azure_env: None, az_plugin: None, monkeypatch: pytest.MonkeyPatch, az_container: str,
    azurite_connection: str, small: silt.Settings, scheme: str,
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite_connection)
    url = f"{scheme}://{az_container}/x"
    with silt.open(url, settings=small) as db:
        assert isinstance(getattr(db.store, "inner", db.store), AzureStore)  # maybe metered
        db.put(b"k", b"v")
        assert db.commit() == 1
    assert silt.versions(url) == [1]
    with silt.open(url) as db:
        assert db.get(b"k") == b"v"


def test_hook_and_entry_point() -> None:
    added: dict[str, object] = {}

    class Registry:
        def add_tier(self, scheme: str, factory: object) -> None:
            added[scheme] = factory

    silt_register(Registry())
    assert added == {"az": open_azure, "azure": open_azure}  # the SDK loads on first use
    pyproject = (PACKAGE / "pyproject.toml").read_text()
    assert 'name = "silt-tier-azure"' in pyproject
    assert '[project.entry-points.silt]\naz = "silt_azure.plugin"\n' in pyproject
    assert (PACKAGE / "src" / "silt_azure" / "py.typed").exists()
    assert Path(silt_azure.__file__).with_name("py.typed").exists()  # and it is installed
    registry = plugins.build_registry(autoload=True)
    if "az" in registry.tiers:  # installed with pip: discovered through the entry point
        assert registry.plugins["az"].distribution == "silt-tier-azure"
        assert registry.tiers["azure"] == registry.tiers["az"]


def test_pickles_as_options(azure_env: None, az_container: str, azurite_connection: str) -> None:
    store = open_on(az_container, azurite_connection, upload_concurrency=2)
    store.put("k", b"v")
    clone = pickle.loads(pickle.dumps(store))
    assert clone is not store and clone.options == store.options and clone.url == store.url
    assert clone.get("k") == b"v"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(AzureStore(az_container, client=store._client))
    clone.close()
    store.close()


# --- requests on the wire ------------------------------------------------------------------------


def test_put_if_absent_sends_if_none_match_and_409_is_false(
    az_container: str, via_proxy: str, proxy: FaultProxy
) -> None:
    store = open_on(az_container, via_proxy)
    heads = recorder(proxy)
    assert store.put_if_absent("manifest/00000000000000000001", b"one") is True
    assert store.put_if_absent("manifest/00000000000000000001", b"two") is False  # 409
    store.put("plain", b"p")
    puts = lines(heads, "PUT", "/state/")
    assert len(puts) == 3
    assert ["If-None-Match: *" in p for p in puts] == [True, True, False]
    assert store.get("manifest/00000000000000000001") == b"one"
    store.close()


def test_staged_block_uploads(
    az_container: str, via_proxy: str, proxy: FaultProxy, azurite_admin: object
) -> None:
    """Above ``block_threshold`` an object goes up as parallel Put Block requests and one Put
    Block List; create-only sends ``If-None-Match: *`` on the block list, and the loser of a
    create-only upload gets ``False`` while the winner's bytes stay."""
    store = open_on(az_container, via_proxy, block_threshold=256 * KiB, block_size=256 * KiB,
                    upload_concurrency=4, download_chunk_size=256 * KiB)
    heads = recorder(proxy)
    data = payload(3, MiB + 12345)  # five blocks
    store.put("sst/big.sst", data)
    assert len(lines(heads, "PUT", "comp=block&")) + len(
        lines(heads, "PUT", "comp=block ")) == 5
    assert len(lines(heads, "PUT", "comp=blocklist")) == 1
    assert store.get("sst/big.sst") == data  # five ranged GETs (256 KiB chunks)
    assert len(lines(heads, "GET", "/state/sst/big.sst")) == 5
    at = 256 * KiB - 10
    assert store.get_range("sst/big.sst", at, 20) == data[at : at + 20]
    assert list(store.list("sst/")) == [ObjectInfo("sst/big.sst", len(data))]
    first, second = payload(4, 600 * KiB), payload(5, 700 * KiB)
    assert store.put_if_absent("sst/x.sst", first) is True
    assert store.put_if_absent("sst/x.sst", second) is False
    block_lists = lines(heads, "PUT", "comp=blocklist")
    assert len(block_lists) == 3 and all("If-None-Match: *" in h for h in block_lists[1:])
    assert store.get("sst/x.sst") == first
    store.put("small", b"x" * 100)  # at or below the threshold: one Put Blob
    assert len(lines(heads, "PUT", "comp=blocklist")) == 3
    store.close()


def test_list_pages_and_delete_many_in_batches(
    az_container: str, via_proxy: str, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(az_store_module, "DELETE_BATCH", 40)
    store = open_on(az_container, via_proxy, list_page_size=40)
    keys = [f"sst/{i:04d}.sst" for i in range(100)]
    for key in keys:
        store.put(key, b"x")
    heads = recorder(proxy)
    listing = store.list("sst/", start_after=keys[9])
    assert heads == []  # lazy: nothing is asked before the first item is wanted
    assert next(listing).key == keys[10]
    assert [i.key for i in listing] == keys[11:]
    pages = lines(heads, "GET", "comp=list", "maxresults=40", "prefix=state%2Fsst%2F")
    assert len(pages) == len(heads) == 3
    heads.clear()
    store.delete_many([*keys[:-1], "never/existed", keys[0]])  # duplicates and missing are fine
    assert len(lines(heads, "POST", "comp=batch")) == 3
    assert len(heads) == 3
    store.delete_many([])
    assert len(heads) == 3  # nothing to delete, no request
    assert [i.key for i in store.list()] == [keys[-1]]
    with pytest.raises(InvalidTypeError):
        store.delete_many("sst/0000.sst")
    with pytest.raises(InvalidArgumentError):
        store.delete_many(["ok", "../bad"])
    assert [i.key for i in store.list()] == [keys[-1]]
    store.close()


def fake_http_error(status: int, code: str = "", message: str = "the message") -> HttpResponseError:
    class Response:
        status_code = status
        reason = "Reason"
        headers = {"x-ms-error-code": code} if code else {}

        def text(self) -> str:
            return ""

    error = HttpResponseError(message=message, response=Response())
    if code:
        error.error_code = code
    return error


def test_delete_without_blob_batch_support(
    az_container: str, azurite_connection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that refuses Blob Batch gets one Delete Blob per key, 404s ignored."""
    store = open_on(az_container, azurite_connection)
    for key in ("a", "b", "c"):
        store.put(key, b"x")

    def no_batch(*names: str, **kwargs: object) -> None:
        raise fake_http_error(501, "NotImplemented", "Blob Batch is not supported")

    monkeypatch.setattr(store._client, "delete_blobs", no_batch)
    store.delete_many(["a", "c", "missing"])
    assert [i.key for i in store.list()] == ["b"]
    store.close()


def test_ranges_against_the_server(az_container: str, via_proxy: str, proxy: FaultProxy) -> None:
    store = open_on(az_container, via_proxy)
    heads = recorder(proxy)
    store.put("r", b"0123456789")
    assert store.get_range("r", 2, 3) == b"234"
    assert "x-ms-range: bytes=2-4" in lines(heads, "GET", "/state/r")[0].lower()
    assert store.get_range("r", 10, 5) == b""  # 416 InvalidRange
    assert store.get_range("r", 5, 0) == b""  # no GET: a HEAD checks that it exists
    assert heads[-1].startswith(b"HEAD ")
    store.close()


# --- error mapping -----------------------------------------------------------------------------


def assert_no_secret(exc: BaseException, *secrets: str) -> None:
    """Neither the error nor anything chained to it shows a secret."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current is exc or not current.__suppress_context__ or current.__cause__:
            for text in (str(current), repr(current)):
                for secret in secrets:
                    assert secret not in text, text
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__)


def test_missing_container_is_a_clear_store_error(
    azure_env: None, azurite_connection: str, azurite_server: str
) -> None:
    store = open_on("silt-no-such-container", azurite_connection)
    calls: list[Callable[[], object]] = [
        lambda: store.get("k"),
        lambda: store.get_range("k", 0, 10),
        lambda: store.get_range("k", 0, 0),
        lambda: store.put("k", b"v"),
        lambda: store.put_if_absent("k", b"v"),
        lambda: list(store.list()),
        lambda: store.delete_many(["k"]),
    ]
    for call in calls:
        with pytest.raises(StoreError) as info:
            call()
        assert type(info.value) is StoreError  # neither NotFoundError nor transient
        assert "container 'silt-no-such-container' does not exist" in str(info.value)
        assert azurite_server in str(info.value)
        assert_no_secret(info.value, AZURITE_KEY)
    store.close()


def test_wrong_key_is_access_denied_without_the_key(
    azure_env: None, az_container: str, azurite_server: str
) -> None:
    wrong = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3JvbmdLZXk=" * 2
    connection = azurite_connection_string(azurite_server).replace(AZURITE_KEY, wrong)
    store = open_on(az_container, connection)
    for call in (lambda: store.get("k"), lambda: store.put_if_absent("k", b"v"),
                 lambda: store.delete_many(["k"]), lambda: list(store.list())):
        with pytest.raises(StoreError, match=r"access denied \(Authorization") as info:
            call()
        assert not isinstance(info.value, TransientStoreError)
        assert "the connection_string= option" in str(info.value)
        assert_no_secret(info.value, wrong, connection)
    store.close()


@pytest.mark.parametrize(
    ("status", "code", "error", "text"),
    [
        (404, "BlobNotFound", NotFoundError, "does not exist in az://state/p"),
        (404, "", NotFoundError, "does not exist in az://state/p"),
        (404, "ContainerNotFound", StoreError, "container 'state' does not exist"),
        (403, "AuthorizationPermissionMismatch", StoreError, "Storage Blob Data Contributor"),
        (401, "InvalidAuthenticationInfo", StoreError, "access denied"),
        (503, "ServerBusy", RetriesExhaustedError, "temporary"),
        (500, "InternalError", RetriesExhaustedError, "temporary"),
        (500, "OperationTimedOut", RetriesExhaustedError, "temporary"),
        (429, "", TransientStoreError, "temporary"),
        (408, "", RetriesExhaustedError, "temporary"),
        (409, "LeaseIdMissing", StoreError, "conflict"),
        (400, "InvalidHeaderValue", StoreError, "InvalidHeaderValue"),
    ],
)
def test_http_errors_are_mapped(status: int, code: str, error: type, text: str) -> None:
    secret = "sig=SECRETSIGNATURE"
    exc = fake_http_error(status, code, f"Azure says no ({secret})\nAuthenticationErrorDetail: x")
    mapped = map_error(exc, action="read", key="k", url="az://state/p", container="state",
                       endpoint="https://acct.blob.core.windows.net")
    assert type(mapped) is error
    assert text in str(mapped)
    assert "SECRETSIGNATURE" not in str(mapped) and "AuthenticationErrorDetail" not in str(mapped)


def test_network_errors_are_transient() -> None:
    mapped = map_error(ServiceRequestError("connection refused"), action="write", key="k",
                       url="az://state/p", container="state", endpoint=None)
    assert type(mapped) is RetriesExhaustedError and "connection problem" in str(mapped)


def test_unreachable_endpoint_is_transient(azure_env: None) -> None:
    store = AzureStore("state", options=AzureOptions(
        connection_string=azurite_connection_string(f"http://127.0.0.1:{free_port()}"),
        max_attempts=1, connect_timeout=0.5))
    with pytest.raises(TransientStoreError, match="connection problem") as info:
        store.get("k")
    assert_no_secret(info.value, AZURITE_KEY)
    store.close()


# --- faults on the wire (tests/faultproxy.py) ---------------------------------------------------


@pytest.mark.parametrize("rst", [False, True], ids=["cut", "reset"])
def test_body_broken_mid_read_is_retried(
    az_container: str, via_proxy: str, proxy: FaultProxy, rst: bool
) -> None:
    store = open_on(az_container, via_proxy, read_timeout=5)
    data = payload(7, 300_000)
    store.put("sst/a.sst", data)
    proxy.fault("truncate", match=b"GET /", keep=5000, rst=rst)
    assert store.get("sst/a.sst") == data
    proxy.fault("truncate", match=b"GET /", keep=5000, rst=rst)
    assert store.get_range("sst/a.sst", 1000, 200_000) == data[1000:201_000]
    assert proxy.counts["truncate"] == 2
    store.close()


def test_body_broken_every_time_gives_a_transient_error(
    az_container: str, via_proxy: str, proxy: FaultProxy
) -> None:
    store = open_on(az_container, via_proxy, read_attempts=2, max_attempts=1)
    store.put("k", payload(8, 100_000))
    proxy.fault("truncate", match=b"GET /", keep=3000, times=None)
    with pytest.raises(TransientStoreError, match="broke mid-read"):
        store.get("k")
    assert proxy.counts["truncate"] >= 2
    proxy.clear()
    assert len(store.get("k")) == 100_000
    store.close()


def test_reset_before_the_request_is_retried(
    az_container: str, via_proxy: str, proxy: FaultProxy
) -> None:
    store = open_on(az_container, via_proxy)
    proxy.fault("reset", match=b"PUT /", times=2)
    store.put("k", b"survives two resets")
    assert proxy.counts["reset"] == 2
    assert store.get("k") == b"survives two resets"
    store.close()


def test_lost_response_to_a_conditional_write(
    az_container: str, via_proxy: str, proxy: FaultProxy
) -> None:
    """Azurite creates the blob, the answer is lost, the SDK retries and gets 409: the call
    reports ``False`` (the contract's ambiguous case) and the blob holds our bytes."""
    store = open_on(az_container, via_proxy)
    proxy.fault("lose_response", match=b"If-None-Match")
    assert store.put_if_absent("manifest/00000000000000000001", b"mine") is False
    assert proxy.counts["lose_response"] == 1
    assert store.get("manifest/00000000000000000001") == b"mine"
    store.close()


def test_black_hole_fails_within_the_deadline(
    az_container: str, via_proxy: str, proxy: FaultProxy
) -> None:
    store = open_on(az_container, via_proxy, read_timeout=0.5, connect_timeout=0.5,
                    max_attempts=2, read_attempts=1)
    proxy.fault("blackhole", times=None)
    started = time.monotonic()
    with pytest.raises(TransientStoreError, match="connection problem"):
        store.put("k", b"v")
    assert time.monotonic() - started < 5
    proxy.clear()
    store.put("k", b"v")
    assert store.get("k") == b"v"
    store.close()


# The engine on this tier (round trip, commit races, lost responses, corruption,
# compaction and GC, the model test) is tests/test_engine_on_tiers.py, run for every tier.


def test_a_slow_read_is_hedged(az_container: str, via_proxy: str, proxy: FaultProxy) -> None:
    store = open_on(az_container, via_proxy, hedge_after_ms=300)
    try:
        check_a_slow_read_is_hedged_and_billed_twice(store, proxy)
    finally:
        store.close()
