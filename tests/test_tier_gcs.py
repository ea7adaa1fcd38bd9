"""The ``gs://`` tier (silt-tier-gcs) against a real GCS protocol server: fake-gcs-server.

* the conformance suite from ``silt.testing``, on a bucket prefix with sibling objects around it;
* URL parsing, options, ``STORAGE_EMULATOR_HOST`` and Application Default Credentials;
* requests on the wire (``ifGenerationMatch=0``, ranges, paging), pooled connections;
* error mapping, on canned HTTP answers for what the emulator cannot produce;
* faults from a TCP proxy between google-cloud-storage and the emulator (tests/faultproxy.py):
  bodies cut mid-read, resets, lost responses, a black hole;
* the engine on GCS: commit, reopen, reads, two writers racing for one version;
* fake-gcs-server's known gaps, as strict expected failures.

Fixtures ``gcs_server``, ``gcs_admin``, ``gcs_env``, ``gcs_bucket`` and ``gcs_url`` live in
``conftest.py``.
"""

from __future__ import annotations

import base64
import json
import pickle
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import google_crc32c
import pytest
import requests
import requests.adapters
import silt
import silt_gcs
import urllib3
from faultproxy import FaultProxy
from google.api_core import exceptions as api_exceptions
from hedgecheck import check_a_slow_read_is_hedged_and_billed_twice
from servers import fake_gcs_server_binary, free_port
from silt import plugins
from silt.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    NotFoundError,
    RetriesExhaustedError,
    StoreError,
    TransientStoreError,
)
from silt.store import ObjectInfo
from silt.testing import StoreConformance, exception_texts
from silt_gcs import GcsOptions, GcsStore
from silt_gcs import store as gcs_store_module
from silt_gcs.config import parse_url
from silt_gcs.errors import clean
from silt_gcs.plugin import open_gcs, silt_register

MiB = 1024 * 1024
PACKAGE = Path(__file__).resolve().parents[1] / "packages" / "tier-gcs"  # works installed too


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def open_on(bucket: str, endpoint: str, prefix: str = "state", **options: Any) -> GcsStore:
    return GcsStore(bucket, prefix, options=GcsOptions(endpoint=endpoint, **options))


Seen = list[tuple[str, str, Any]]


def record_requests(store: GcsStore) -> Seen:
    """Record ``(method, url, headers)`` of every request the store's session sends."""
    seen: Seen = []

    def hook(response: requests.Response, *args: object, **kwargs: object) -> None:
        request = response.request
        seen.append((str(request.method), str(request.url),
                     requests.structures.CaseInsensitiveDict(request.headers)))

    store._client._http.hooks["response"].append(hook)
    return seen


def innermost(store: Any) -> Any:
    """The tier's store under the engine's wrappers (metering, caches)."""
    while hasattr(store, "inner"):
        store = store.inner
    return store


# --- conformance -------------------------------------------------------------------------------


class TestGcsConformance(StoreConformance):
    """The whole suite on ``gs://<bucket>/kg-0-1`` with objects just outside the prefix."""

    @pytest.fixture
    def store(self, gcs_bucket: str, gcs_server: str, gcs_admin: Any) -> Iterator[GcsStore]:
        bucket = gcs_admin.bucket(gcs_bucket)
        for key, body in [("kg-0-0/before", b"s"), ("kg-0-1", b"object named like the prefix"),
                          ("kg-0-10/x", b"s"), ("kg-0-2/after", b"s")]:
            bucket.blob(key).upload_from_string(body)
        store = open_on(gcs_bucket, gcs_server, "kg-0-1")
        yield store
        store.close()


# --- URLs, options, environment ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "options"),
    [
        ("gs://bucket", "bucket", "", {}),
        ("gs://bucket/", "bucket", "", {}),
        ("gs://bucket/jobs/clicks", "bucket", "jobs/clicks/", {}),
        ("gcs://bucket//jobs/clicks/", "bucket", "jobs/clicks/", {}),
        ("GS://bucket/a%20b", "bucket", "a b/", {}),
        ("gs://b.c-d_e/x?project=p&endpoint=http://h:4443", "b.c-d_e", "x/",
         {"project": "p", "endpoint": "http://h:4443"}),
    ],
)
def test_parse_url(url: str, bucket: str, prefix: str, options: dict[str, str]) -> None:
    assert parse_url(url) == (bucket, prefix, options)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("gs://", "no bucket"),
        ("gs:///prefix", "no bucket"),
        ("gs://bucket/../x", "not a plain"),
        ("gs://bucket/a/./b", "not a plain"),
        ("s3://bucket/x", "gs:// URLs"),
        ("bucket/x", "not a store URL"),
        ("gs://host:4443/x", "not valid"),
        ("gs://bucket?endpoint=ftp://h", "http:// or https://"),
        ("gs://bucket?endpoint=http://h:1/storage/v1", "base URL"),
    ],
)
def test_bad_urls(gcs_env: None, url: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        GcsStore.from_url(url, {})


def test_credentials_never_accepted_in_urls(gcs_env: None) -> None:
    secret = "ya29.a0SENTINELTOKENvalue-_xyz"
    for url in [f"gs://user:{secret}@bucket/x", f"gs://bucket/x?access_token={secret}",
                f"gs://bucket/x?endpoint=http://u:{secret}@127.0.0.1:1",
                f"gs://bucket/x?unknown_thing={secret}"]:
        with pytest.raises(InvalidArgumentError) as info:
            GcsStore.from_url(url, {})
        assert secret not in str(info.value), url
    with pytest.raises(InvalidArgumentError, match="GOOGLE_APPLICATION_CREDENTIALS"):
        GcsStore.from_url(f"gs://bucket/x?access_token={secret}")
    with pytest.raises(InvalidArgumentError, match=r"unknown_thing.*endpoint"):
        GcsStore.from_url(f"gs://bucket/x?unknown_thing={secret}")


#: A password or token that must never appear in any message, repr or chained exception.
SENTINEL = "hunter2-SENTINEL-pw"


@pytest.mark.parametrize(
    "endpoint",
    [f"http://user:{SENTINEL}@127.0.0.1:1", f"http://:{SENTINEL}@127.0.0.1:1",
     f"{SENTINEL}@127.0.0.1:1", f"http://127.0.0.1:1/?token={SENTINEL}",
     f"http://127.0.0.1:1#{SENTINEL}"],
)
def test_endpoints_with_credentials_are_refused_without_echoing_them(
    gcs_env: None, monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    """From the option, the options mapping, ``GcsOptions`` and ``STORAGE_EMULATOR_HOST`` alike:
    refused, and the secret is in no message, repr or chained exception."""
    from urllib.parse import quote

    attempts = [
        lambda: GcsStore.from_url(f"gs://bucket/p?endpoint={quote(endpoint, safe=':/@')}", {}),
        lambda: GcsStore.from_url("gs://bucket/p", {"endpoint": endpoint}),
        lambda: GcsOptions(endpoint=endpoint),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidArgumentError) as info:
            attempt()
        for text in exception_texts(info.value):
            assert SENTINEL not in text, text
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
    with pytest.raises(InvalidArgumentError) as info:
        GcsStore.from_url("gs://bucket/p", {})
    assert "STORAGE_EMULATOR_HOST" in str(info.value)
    for text in exception_texts(info.value):
        assert SENTINEL not in text, text


def adapter_of(store: GcsStore, url: str = "https://storage.googleapis.com") -> Any:
    return store._client._http.get_adapter(url)


def test_options_are_parsed(gcs_env: None) -> None:
    store = GcsStore.from_url(
        "gs://bucket/p?endpoint=http://127.0.0.1:1/&project=proj&user_project=payer"
        "&max_pool_connections=40&connect_timeout=1.5&read_timeout=2&retry_deadline=7"
        "&read_attempts=3&delete_concurrency=5&anonymous=true"
    )
    o = store.options
    assert o.endpoint == "http://127.0.0.1:1"  # normalized
    assert (o.project, o.user_project, o.anonymous) == ("proj", "payer", True)
    assert (o.max_pool_connections, o.read_attempts, o.delete_concurrency) == (40, 3, 5)
    assert (o.connect_timeout, o.read_timeout, o.retry_deadline) == (1.5, 2.0, 7.0)
    assert store._timeout == (1.5, 2.0)
    assert store._retry.timeout == 7.0
    assert adapter_of(store, "http://127.0.0.1:1")._pool_maxsize == 40
    assert store._client.project == "proj"
    assert store._bucket.user_project == "payer"
    assert store.url == "gs://bucket/p" and "endpoint" not in store.url
    assert store.endpoint == "http://127.0.0.1:1"
    assert GcsOptions.from_query("u", o.to_query()) == o
    store.close()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("max_pool_connections", "0", ">= 1"),
        ("read_timeout", "-1", ">= 0.001"),
        ("retry_deadline", "nan", ">= 0.001"),
        ("anonymous", "maybe", "true or false"),
        ("project", "", "empty"),
    ],
)
def test_bad_options(gcs_env: None, name: str, value: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        GcsStore.from_url(f"gs://bucket?{name}={value}")


def test_application_default_credentials(
    gcs_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No endpoint: real GCS with ADC (here an authorized-user file). Nothing is requested."""
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "cid",
                               "client_secret": "not-a-secret", "refresh_token": "r"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    store = GcsStore.from_url("gs://bucket/x")
    assert store.anonymous is False
    assert store.endpoint == "https://storage.googleapis.com"
    assert type(store._client._credentials).__module__ == "google.oauth2.credentials"
    assert adapter_of(store)._pool_maxsize >= 32  # requests' default is 10
    assert store._client.project is None  # objects need no project: none is looked up
    assert store._client._bucket_metadata_cache is None  # no background bucket lookups
    store.close()


def test_no_credentials_is_a_clear_error(gcs_env: None) -> None:
    with pytest.raises(StoreError, match=r"no usable Google credentials.*application-default") \
            as info:
        GcsStore.from_url("gs://bucket/x")
    assert not isinstance(info.value, TransientStoreError)
    # An https endpoint is not taken for an emulator: it needs credentials too.
    with pytest.raises(StoreError, match="no usable Google credentials"):
        GcsStore.from_url("gs://bucket/x?endpoint=https://storage.example.internal")
    # Anonymous access (public buckets) needs none.
    GcsStore.from_url("gs://bucket/x?anonymous=true").close()


def test_emulator_from_environment(
    gcs_env: None, monkeypatch: pytest.MonkeyPatch, gcs_bucket: str, gcs_server: str
) -> None:
    """``STORAGE_EMULATOR_HOST`` as the Google SDKs take it: ``host:port`` (or a URL)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.removeprefix("http://"))
    store = GcsStore.from_url(f"gs://{gcs_bucket}/env")
    assert (store.endpoint, store.anonymous) == (gcs_server, True)
    store.put("k", b"v")
    assert store.get("k") == b"v"
    store.close()
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    store = GcsStore.from_url(f"gs://{gcs_bucket}/env?project=opt")
    assert store._client.project == "opt"
    store.close()
    assert GcsStore.from_url(f"gs://{gcs_bucket}")._client.project == "from-env"


@pytest.fixture
def gcs_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process registry with silt-tier-gcs registered through pluggy, as its entry point
    would (the core's tests run with plugin autoloading off)."""
    monkeypatch.setattr(
        plugins, "DEFAULT_PLUGINS", (*plugins.DEFAULT_PLUGINS, ("gs", "silt_gcs.plugin"))
    )
    plugins.reset_registry()
    yield
    plugins.reset_registry()


def test_silt_open_with_emulator_in_environment(
    gcs_env: None, gcs_plugin: None, monkeypatch: pytest.MonkeyPatch, gcs_bucket: str,
    gcs_server: str, small: silt.Settings,
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    url = f"gs://{gcs_bucket}/x"
    with silt.open(url, settings=small) as db:
        assert isinstance(innermost(db.store), GcsStore)
        db.put(b"k", b"v")
        assert db.commit() == 1
    assert silt.versions(url) == [1]
    with silt.open(f"gcs://{gcs_bucket}/x") as db:  # the alias opens the same root
        assert db.get(b"k") == b"v"


def test_hook_and_entry_point() -> None:
    added: dict[str, object] = {}

    class Registry:
        def add_tier(self, scheme: str, factory: object) -> None:
            added[scheme] = factory

    silt_register(Registry())
    assert added == {"gs": open_gcs, "gcs": open_gcs}  # the SDK loads on first use
    pyproject = (PACKAGE / "pyproject.toml").read_text()
    assert 'name = "silt-tier-gcs"' in pyproject
    assert f'version = "{silt_gcs.__version__}"' in pyproject
    assert '[project.entry-points.silt]\ngs = "silt_gcs.plugin"\n' in pyproject
    assert (PACKAGE / "src" / "silt_gcs" / "py.typed").exists()
    assert plugins.KNOWN_TIERS["gs"] == plugins.KNOWN_TIERS["gcs"] == "silt-tier-gcs"
    registry = plugins.build_registry(autoload=True)
    if "gs" in registry.tiers:  # installed with pip: discovered through the entry point
        assert registry.plugins["gs"].distribution == "silt-tier-gcs"
        assert registry.tiers["gcs"] == registry.tiers["gs"]


def test_pickles_as_options(gcs_env: None, gcs_bucket: str, gcs_server: str) -> None:
    store = open_on(gcs_bucket, gcs_server, delete_concurrency=2)
    store.put("k", b"v")
    clone = pickle.loads(pickle.dumps(store))
    assert clone is not store and clone.options == store.options and clone.url == store.url
    assert clone.get("k") == b"v"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(GcsStore("b", client=store._client))
    clone.close()
    store.close()


# --- requests on the wire ----------------------------------------------------------------------


def test_put_if_absent_sends_if_generation_match(
    gcs_env: None, gcs_bucket: str, gcs_server: str
) -> None:
    store = open_on(gcs_bucket, gcs_server)
    seen = record_requests(store)
    assert store.put_if_absent("manifest/00000000000000000001", b"one") is True
    assert store.put_if_absent("manifest/00000000000000000001", b"two") is False  # 412
    store.put("plain", b"p")
    uploads = [url for method, url, _ in seen if method == "POST" and "/upload/" in url]
    assert len(uploads) == 3
    assert ["ifGenerationMatch=0" in url for url in uploads] == [True, True, False]
    assert store.get("manifest/00000000000000000001") == b"one"
    # A few MiB (still one multipart request) is just as create-only.
    big = payload(1, 5 * MiB)
    assert store.put_if_absent("sst/five.sst", big) is True
    assert store.put_if_absent("sst/five.sst", b"other") is False
    assert store.get("sst/five.sst") == big
    store.close()


def test_large_upload_is_resumable(gcs_env: None, gcs_bucket: str, gcs_server: str) -> None:
    store = open_on(gcs_bucket, gcs_server)
    seen = record_requests(store)
    data = payload(3, 9 * MiB)  # above the SDK's 8 MiB limit for one multipart request
    store.put("sst/big.sst", data)
    assert any("uploadType=resumable" in url for method, url, _ in seen if method == "POST")
    assert store.get("sst/big.sst") == data
    assert store.get_range("sst/big.sst", 8 * MiB - 10, 20) == data[8 * MiB - 10 : 8 * MiB + 10]
    assert list(store.list("sst/")) == [ObjectInfo("sst/big.sst", len(data))]
    store.close()


def test_ranges_against_the_server(gcs_env: None, gcs_bucket: str, gcs_server: str) -> None:
    store = open_on(gcs_bucket, gcs_server)
    store.put("r", b"0123456789")
    seen = record_requests(store)
    assert store.get_range("r", 2, 3) == b"234"
    assert [h.get("Range") for _, url, h in seen if "alt=media" in url] == ["bytes=2-4"]
    assert store.get_range("r", 10, 5) == b""  # 416
    del seen[:]
    assert store.get_range("r", 5, 0) == b""  # no download: metadata says it exists
    assert len(seen) == 1 and "alt=media" not in seen[0][1]
    with pytest.raises(NotFoundError):
        store.get_range("missing", 5, 0)
    store.close()


def test_listing_pages_with_start_offset(
    gcs_env: None, gcs_bucket: str, gcs_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gcs_store_module, "LIST_PAGE", 7)
    store = open_on(gcs_bucket, gcs_server)
    keys = [f"sst/{i:03d}" for i in range(20)]
    for key in keys:
        store.put(key, b"x")
    seen = record_requests(store)
    listing = store.list("sst/", start_after="sst/004")
    assert seen == []  # lazy: nothing is requested before iteration
    assert [info.key for info in listing] == keys[5:]
    lists = [url for _, url, _ in seen]
    assert len(lists) == 3  # 15 objects, 7 a page
    assert all("maxResults=7" in url and "prefix=state%2Fsst%2F" in url for url in lists)
    assert "startOffset=state%2Fsst%2F004" in lists[0]
    store.close()


def test_delete_many_in_parallel(gcs_env: None, gcs_bucket: str, gcs_server: str) -> None:
    store = open_on(gcs_bucket, gcs_server, delete_concurrency=4)
    keys = [f"sst/{i:04d}.sst" for i in range(30)]
    for key in keys:
        store.put(key, b"x")
    seen = record_requests(store)
    store.delete_many([*keys[:-1], "never/existed", keys[0]])  # duplicates and missing are fine
    assert sorted(method for method, _, _ in seen) == ["DELETE"] * 30
    store.delete_many([])
    assert len(seen) == 30  # nothing to delete, no request
    assert [i.key for i in store.list()] == [keys[-1]]
    with pytest.raises(InvalidTypeError):
        store.delete_many("sst/0000.sst")
    with pytest.raises(InvalidArgumentError):
        store.delete_many([keys[-1], "../bad"])
    assert [i.key for i in store.list()] == [keys[-1]]  # validated before deleting anything
    store.close()


def test_parallel_reads_overlap_on_pooled_connections(
    gcs_env: None, gcs_bucket: str, proxy: FaultProxy
) -> None:
    """16 reads at once, each answered 0.3 s late, take about 0.3 s, not 16 x 0.3 s; a second
    round reuses the 16 connections (requests' default pool keeps only 10)."""
    store = open_on(gcs_bucket, proxy.url)
    data = payload(2, 64 * 1024)
    store.put("sst/a.sst", data)
    proxy.latency = 0.3
    threads = 16
    barrier = threading.Barrier(threads)

    def read(i: int) -> bytes:
        barrier.wait(timeout=10)
        return store.get_range("sst/a.sst", i * 1000, 1000)

    with ThreadPoolExecutor(threads) as pool:
        for _ in range(2):
            started = time.monotonic()
            results = list(pool.map(read, range(threads)))
            elapsed = time.monotonic() - started
            assert results == [data[i * 1000 : (i + 1) * 1000] for i in range(threads)]
            assert elapsed < 0.3 * threads / 2, elapsed  # one at a time: 4.8 s
    assert proxy.counts["connections"] <= threads + 1  # the put's connection, then 16 kept
    store.close()


# --- error mapping -----------------------------------------------------------------------------


def test_missing_bucket_is_a_clear_store_error(gcs_env: None, gcs_server: str) -> None:
    store = open_on("silt-no-such-bucket", gcs_server)
    for call in [lambda: store.put("k", b"v"), lambda: store.put_if_absent("k", b"v"),
                 lambda: list(store.list())]:
        with pytest.raises(StoreError) as info:
            call()
        assert type(info.value) is StoreError  # neither NotFoundError nor transient
        assert "bucket 'silt-no-such-bucket' does not exist" in str(info.value)
        assert gcs_server in str(info.value)
    store.close()


class Canned(requests.adapters.HTTPAdapter):
    """Answers every request with the next canned ``(status, body, headers)`` (the last one
    repeats): for answers the emulator cannot be made to give."""

    def __init__(self, answers: list[tuple[int, bytes, dict[str, str]]]) -> None:
        super().__init__()
        self.answers = list(answers)
        self.requests: list[requests.PreparedRequest] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        self.requests.append(request)
        status, body, headers = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        raw = urllib3.HTTPResponse(
            body=__import__("io").BytesIO(body), status=status, preload_content=False,
            headers={"Content-Length": str(len(body)), **headers},
        )
        return self.build_response(request, raw)


def canned_store(answers: list[tuple[int, bytes, dict[str, str]]], **options: Any
                 ) -> tuple[GcsStore, Canned]:
    options.setdefault("retry_deadline", 0.3)
    store = open_on("bucket", "http://127.0.0.1:9", "p", **options)
    adapter = Canned(answers)
    store._client._http.mount("http://127.0.0.1:9", adapter)
    return store, adapter


def api_error(status: int, message: str, reason: str = "") -> tuple[int, bytes, dict[str, str]]:
    body = {"error": {"code": status, "message": message,
                      "errors": [{"message": message, "domain": "global", "reason": reason}]}}
    return status, json.dumps(body).encode(), {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("status", "message", "error", "text"),
    [
        (404, "No such object: bucket/p/k", NotFoundError, "'k' does not exist in gs://bucket/p"),
        (404, "The specified bucket does not exist.", StoreError, "bucket 'bucket' does not exist"),
        (403, "x@y.iam.gserviceaccount.com does not have storage.objects.get access",
         StoreError, r"access denied.*GOOGLE_APPLICATION_CREDENTIALS.*roles/storage"),
        (403, "Object 'p/k' is subject to bucket's retention policy and cannot be deleted",
         StoreError, "retention policy or an object hold"),
        (401, "Anonymous caller", StoreError, "refused anonymous access"),
        (400, "Bucket is a requester pays bucket but no user project provided.", StoreError,
         "user_project="),
        (400, "Invalid argument.", StoreError, r"GCS request failed \(400 Invalid argument"),
        (429, "rate limit", RetriesExhaustedError, "retry deadline"),
        (500, "backend error", RetriesExhaustedError, "retry deadline"),
        (503, "unavailable", RetriesExhaustedError, "retry deadline"),
    ],
)
def test_api_errors_are_mapped(
    gcs_env: None, status: int, message: str, error: type, text: str
) -> None:
    # max_attempts beyond what fits in the deadline: the deadline ends the SDK's retries
    store, adapter = canned_store([api_error(status, message)], max_attempts=1000)
    with pytest.raises(error, match=text) as info:
        store.get("k")
    assert type(info.value) is error
    if status in (429, 500, 503):
        assert len(adapter.requests) > 1  # the SDK retried until the deadline
    store.close()


def test_missing_bucket_while_deleting(gcs_env: None) -> None:
    store, _ = canned_store([api_error(404, "The specified bucket does not exist.")])
    with pytest.raises(StoreError, match="bucket 'bucket' does not exist") as info:
        store.delete_many(["a", "b"])
    assert type(info.value) is StoreError
    store.close()
    store, adapter = canned_store([api_error(404, "No such object: bucket/p/a")])
    store.delete_many(["a", "b"])  # missing objects are fine
    assert len(adapter.requests) == 2
    store.close()


def crc32c_header(data: bytes) -> dict[str, str]:
    digest = google_crc32c.Checksum(data).digest()
    return {"x-goog-hash": "crc32c=" + base64.b64encode(digest).decode()}


def test_corrupt_download_is_retried_as_a_whole_read(gcs_env: None) -> None:
    good = b"the stored bytes"
    bad = b"the st0red bytes"
    store, adapter = canned_store([(200, bad, crc32c_header(good)),
                                   (200, good, crc32c_header(good))])
    assert store.get("k") == good
    assert len(adapter.requests) == 2
    store.close()
    store, adapter = canned_store([(200, bad, crc32c_header(good))], read_attempts=3)
    with pytest.raises(TransientStoreError, match="do not match the stored checksum"):
        store.get("k")
    assert len(adapter.requests) == 3
    store.close()


SECRET = "SENTINEL-client-secret-0000"
REFRESH = "1//SENTINEL-refresh-token-1111"


def user_credentials(token_uri: str) -> Any:
    from google.oauth2.credentials import Credentials

    return Credentials(token=None, refresh_token=REFRESH, client_id="cid",
                       client_secret=SECRET, token_uri=token_uri)


def assert_no_credentials(exc: BaseException) -> None:
    texts = [str(exc), repr(exc)]
    if exc.__cause__ is not None:
        texts += [str(exc.__cause__), repr(exc.__cause__)]
    for text in texts:
        assert SECRET not in text and REFRESH not in text, text


@pytest.fixture
def token_server() -> Iterator[str]:
    """A local OAuth token endpoint that refuses every refresh (``invalid_grant``)."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"error": "invalid_grant",
                               "error_description": "Token has been expired or revoked."})
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/token"
    server.shutdown()
    server.server_close()


def test_refused_credentials(
    gcs_env: None, gcs_bucket: str, gcs_server: str, token_server: str
) -> None:
    store = GcsStore(gcs_bucket, options=GcsOptions(endpoint=gcs_server),
                     credentials=user_credentials(token_server))
    with pytest.raises(StoreError, match=r"access token.*expired or revoked") as info:
        store.get("k")
    assert not isinstance(info.value, TransientStoreError)
    assert_no_credentials(info.value)
    store.close()


def test_unreachable_token_server_is_transient(gcs_env: None, gcs_server: str) -> None:
    token_uri = f"http://127.0.0.1:{free_port()}/token"
    store = GcsStore("bucket", options=GcsOptions(endpoint=gcs_server, retry_deadline=0.5),
                     credentials=user_credentials(token_uri))
    with pytest.raises(TransientStoreError) as info:
        store.put("k", b"v")
    assert_no_credentials(info.value)
    store.close()


def test_unreachable_endpoint_is_transient(gcs_env: None) -> None:
    store = open_on("bucket", f"http://127.0.0.1:{free_port()}", retry_deadline=0.5,
                    connect_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(TransientStoreError, match="ConnectionError"):
        store.get("k")
    assert time.monotonic() - started < 5
    store.close()


def test_secrets_are_redacted_from_messages() -> None:
    text = ("GET https://storage.googleapis.com/b/o?X-Goog-Signature=abcdef&X-Goog-Credential=sa"
            "%40p.iam Authorization: Bearer ya29.a0SENTINEL-token "
            '{"refresh_token": "1//SENTINEL", "private_key": "-----BEGIN PRIVATE KEY-----\\nMII'
            'SENTINEL\\n-----END PRIVATE KEY-----\\n"}')
    cleaned = clean(text)
    assert "SENTINEL" not in cleaned and "abcdef" not in cleaned and "sa%40p" not in cleaned
    assert "storage.googleapis.com/b/o" in cleaned


# --- faults on the wire (tests/faultproxy.py) ---------------------------------------------------


@pytest.fixture
def proxy(gcs_server: str) -> Iterator[FaultProxy]:
    with FaultProxy(gcs_server) as p:
        yield p


def is_create_only_upload(head: bytes) -> bool:
    return head.startswith(b"POST /upload/") and b"ifGenerationMatch=0" in head


@pytest.mark.parametrize("rst", [False, True], ids=["cut", "reset"])
def test_body_broken_mid_read_is_resumed(
    gcs_env: None, gcs_bucket: str, proxy: FaultProxy, rst: bool
) -> None:
    """The SDK resumes a broken download from where it broke (a ranged request pinned to the
    object's generation), and checks whole downloads against the stored CRC32C."""
    store = open_on(gcs_bucket, proxy.url)
    data = payload(7, 300_000)
    store.put("sst/a.sst", data)
    proxy.fault("truncate", match=b"GET /download/", keep=5000, rst=rst)
    assert store.get("sst/a.sst") == data
    proxy.fault("truncate", match=b"GET /download/", keep=5000, rst=rst)
    assert store.get_range("sst/a.sst", 1000, 200_000) == data[1000:201_000]
    assert proxy.counts["truncate"] == 2
    store.close()


def test_body_broken_every_time_gives_a_transient_error(
    gcs_env: None, gcs_bucket: str, proxy: FaultProxy
) -> None:
    store = open_on(gcs_bucket, proxy.url, retry_deadline=1.0)
    store.put("k", payload(8, 100_000))
    proxy.fault("truncate", match=b"GET /download/", keep=100, times=None)  # not even headers
    started = time.monotonic()
    with pytest.raises(RetriesExhaustedError, match=r"retry deadline|connection problem"):
        store.get("k")  # the deadline or max_attempts ends the SDK's retries, whichever first
    assert time.monotonic() - started < 10
    assert 2 <= proxy.counts["truncate"] <= 5  # max_attempts
    store.close()
    before = proxy.counts["truncate"]
    store = open_on(gcs_bucket, proxy.url, max_attempts=3)
    with pytest.raises(RetriesExhaustedError, match="connection problem"):
        store.get("k")  # a broken body the SDK resumes: its retries, never silt's on top
    assert proxy.counts["truncate"] - before == 3
    store.close()


def test_reset_before_the_request_is_retried(
    gcs_env: None, gcs_bucket: str, proxy: FaultProxy
) -> None:
    store = open_on(gcs_bucket, proxy.url)
    proxy.fault("reset", match=b"POST /upload/", times=2)
    store.put("k", b"survives two resets")  # a plain upload: retried by the store's policy
    assert proxy.counts["reset"] == 2
    proxy.fault("reset", match=b"GET /", times=2)
    assert store.get("k") == b"survives two resets"
    assert list(store.list()) == [ObjectInfo("k", 19)]
    proxy.fault("reset", match=b"DELETE /", times=2)
    store.delete_many(["k"])
    assert proxy.counts["reset"] == 6
    assert list(store.list()) == []
    store.close()


def test_lost_response_to_a_conditional_write(
    gcs_env: None, gcs_bucket: str, proxy: FaultProxy
) -> None:
    """fake-gcs creates the object, the answer is lost, the SDK retries and gets 412: the call
    reports ``False`` (the contract's ambiguous case) and the object holds our bytes."""
    store = open_on(gcs_bucket, proxy.url)
    proxy.fault("lose_response", match=is_create_only_upload)
    assert store.put_if_absent("manifest/00000000000000000001", b"mine") is False
    assert proxy.counts["lose_response"] == 1
    assert store.get("manifest/00000000000000000001") == b"mine"
    store.close()


def test_black_hole_fails_within_the_deadline(
    gcs_env: None, gcs_bucket: str, proxy: FaultProxy
) -> None:
    store = open_on(gcs_bucket, proxy.url, read_timeout=0.5, connect_timeout=0.5,
                    retry_deadline=1.0)
    proxy.fault("blackhole", times=None)
    started = time.monotonic()
    with pytest.raises(TransientStoreError, match=r"retry deadline.*ReadTimeout"):
        store.put("k", b"v")
    assert time.monotonic() - started < 5
    proxy.clear()
    store.put("k", b"v")
    assert store.get("k") == b"v"
    store.close()


# The engine on this tier (round trip, commit races, lost responses, corruption,
# compaction and GC, the model test) is tests/test_engine_on_tiers.py, run for every tier.


# --- fake-gcs-server's known gaps (documented in packages/tier-gcs/README.md) -------------------


def test_fake_gcs_server_binary_is_bundled() -> None:
    path = Path(fake_gcs_server_binary())
    assert path.is_file() and path.stat().st_mode & 0o111


@pytest.mark.xfail(
    strict=True,
    reason="fake-gcs-server ignores ifGenerationMatch on resumable uploads (over 8 MiB)",
)
def test_emulator_gap_create_only_resumable_upload(
    gcs_env: None, gcs_bucket: str, gcs_server: str
) -> None:
    store = open_on(gcs_bucket, gcs_server)
    first = payload(9, 9 * MiB)  # above the SDK's 8 MiB multipart limit: a resumable upload
    assert store.put_if_absent("sst/big.sst", first) is True
    assert store.put_if_absent("sst/big.sst", b"y" * (9 * MiB)) is False
    store.close()


@pytest.mark.xfail(strict=True, reason="fake-gcs-server ignores preconditions on reads")
def test_emulator_gap_precondition_on_read(gcs_env: None, gcs_bucket: str, gcs_admin: Any) -> None:
    blob = gcs_admin.bucket(gcs_bucket).blob("k")
    blob.upload_from_string(b"v")
    with pytest.raises(api_exceptions.PreconditionFailed):
        gcs_admin.bucket(gcs_bucket).blob("k").download_as_bytes(
            if_generation_match=blob.generation + 1)


@pytest.mark.xfail(strict=True, reason="fake-gcs-server ignores preconditions on deletes")
def test_emulator_gap_precondition_on_delete(
    gcs_env: None, gcs_bucket: str, gcs_admin: Any
) -> None:
    blob = gcs_admin.bucket(gcs_bucket).blob("k")
    blob.upload_from_string(b"v")
    with pytest.raises(api_exceptions.PreconditionFailed):
        gcs_admin.bucket(gcs_bucket).blob("k").delete(if_generation_match=blob.generation + 1)


def test_a_slow_read_is_hedged(gcs_env: None, gcs_bucket: str, proxy: FaultProxy) -> None:
    store = open_on(gcs_bucket, proxy.url, hedge_after_ms=300)
    try:
        check_a_slow_read_is_hedged_and_billed_twice(store, proxy)
    finally:
        store.close()
