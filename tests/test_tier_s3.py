"""The ``s3://`` tier (silt-tier-s3) against a real S3 protocol server: moto, as a subprocess.

* the conformance suite from ``silt.testing``, on a bucket prefix with sibling objects around it;
* URL parsing, options and the standard AWS environment fallbacks;
* conditional writes on the wire, multipart uploads, batch deletes, error mapping;
* faults from a TCP proxy between boto3 and moto (tests/faultproxy.py): bodies cut mid-read,
  resets, lost responses, a black hole;
* the engine on S3: commit, reopen, reads, and two writers racing for one version.

Fixtures ``moto_server``, ``moto_admin``, ``aws_env``, ``s3_bucket`` and ``s3_url`` live in
``conftest.py``.
"""

from __future__ import annotations

import os
import pickle
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
import silt
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from faultproxy import FaultProxy
from hedgecheck import check_a_slow_read_is_hedged_and_billed_twice
from servers import free_port
from silt import plugins
from silt import tierkit as _tierkit
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
from silt_s3 import S3Options, S3Store
from silt_s3 import store as s3_store_module
from silt_s3.config import parse_url
from silt_s3.plugin import open_s3, silt_register

MiB = 1024 * 1024
PACKAGE = Path(__file__).resolve().parents[1] / "packages" / "tier-s3"


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def open_on(bucket: str, endpoint: str, prefix: str = "state", **options: object) -> S3Store:
    return S3Store(bucket, prefix, options=S3Options(endpoint_url=endpoint, **options))


def record_requests(store: S3Store) -> list[tuple[str, dict[str, str]]]:
    """Record ``(operation, headers)`` of every request the store's client sends."""
    seen: list[tuple[str, dict[str, str]]] = []

    def before_send(request: object, **kwargs: object) -> None:
        name = kwargs.get("event_name", "")
        headers = {
            k: v.decode() if isinstance(v, bytes) else v
            for k, v in request.headers.items()  # type: ignore[attr-defined]
        }
        seen.append((str(name).rsplit(".", 1)[-1], headers))

    store._client.meta.events.register("before-send.s3", before_send)
    return seen


# --- conformance -------------------------------------------------------------------------------


class TestS3Conformance(StoreConformance):
    """The whole suite on ``s3://<bucket>/kg-0-1`` with objects just outside the prefix.

    ``many_keys`` is cut from 1,500 to 1,100: still more than one 1,000-key LIST page, and
    moto's single-process server makes every PUT count.
    """

    threads = 6
    many_keys = 1100

    @pytest.fixture
    def store(self, s3_bucket: str, moto_server: str, moto_admin: object) -> Iterator[S3Store]:
        for key, body in [("kg-0-0/before", b"s"), ("kg-0-1", b"object named like the prefix"),
                          ("kg-0-10/x", b"s"), ("kg-0-2/after", b"s")]:
            moto_admin.put_object(Bucket=s3_bucket, Key=key, Body=body)  # type: ignore[attr-defined]
        store = open_on(s3_bucket, moto_server, "kg-0-1")
        yield store
        store.close()


# --- URLs, options, environment ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "options"),
    [
        ("s3://bucket", "bucket", "", {}),
        ("s3://bucket/", "bucket", "", {}),
        ("s3://bucket/jobs/clicks", "bucket", "jobs/clicks/", {}),
        ("s3://bucket//jobs/clicks/", "bucket", "jobs/clicks/", {}),
        ("S3://bucket/a%20b", "bucket", "a b/", {}),
        ("s3://b.c-d/x?region=eu-west-1&endpoint_url=http://h:9000", "b.c-d", "x/",
         {"region": "eu-west-1", "endpoint_url": "http://h:9000"}),
    ],
)
def test_parse_url(url: str, bucket: str, prefix: str, options: dict[str, str]) -> None:
    assert parse_url(url) == (bucket, prefix, options)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "no bucket"),
        ("s3:///prefix", "no bucket"),
        ("s3://bucket/../x", "not a plain"),
        ("s3://bucket/a/./b", "not a plain"),
        ("gs://bucket/x", "s3:// URLs"),
        ("bucket/x", "not a store URL"),
        ("s3://host:9000/x", "not valid"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        S3Store.from_url(url, {})


def test_credentials_never_accepted_in_urls(aws_env: None) -> None:
    secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYzzSECRET"
    with pytest.raises(InvalidArgumentError) as info:
        S3Store.from_url(f"s3://AKIAIOSFODNN7EXAMPLE:{secret}@bucket/x", {})
    assert secret not in str(info.value) and "AKIAIOSFODNN7EXAMPLE" not in str(info.value)
    assert "credential chain" in str(info.value)
    with pytest.raises(InvalidArgumentError) as info:
        S3Store.from_url(f"s3://bucket/x?secret_access_key={secret}", {})
    assert secret not in str(info.value)
    assert "secret_access_key" in str(info.value)
    with pytest.raises(InvalidArgumentError) as info:
        S3Store.from_url(f"s3://bucket/x?unknown_thing={secret}", {})
    assert secret not in str(info.value)
    assert "unknown_thing" in str(info.value) and "endpoint_url" in str(info.value)


#: A password or token that must never appear in any message, repr or chained exception.
SENTINEL = "hunter2-SENTINEL-pw"


@pytest.mark.parametrize(
    "endpoint",
    [f"http://user:{SENTINEL}@127.0.0.1:1", f"http://:{SENTINEL}@127.0.0.1:1",
     f"http://{SENTINEL}@127.0.0.1:1", f"https://AKIAIOSFODNN7EXAMPLE:{SENTINEL}@s3.example.com",
     f"http://127.0.0.1:1/?token={SENTINEL}", f"http://127.0.0.1:1/#{SENTINEL}"],
)
def test_endpoints_with_credentials_are_refused_without_echoing_them(
    aws_env: None, s3_plugin: None, monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    """Credentials in an endpoint (``http://user:password@host``) or a token in its query are
    refused before any request, from every place an endpoint comes from, and the secret is in no
    message, repr or chained exception (it used to be echoed by connection errors)."""
    attempts = [
        lambda: S3Store.from_url(f"s3://bucket/p?endpoint_url={quote(endpoint, safe=':/@')}", {}),
        lambda: S3Store.from_url("s3://bucket/p", {"endpoint_url": endpoint}),
        lambda: S3Options(endpoint_url=endpoint),
        lambda: silt.open(f"s3://bucket/p?endpoint_url={quote(endpoint, safe='')}"),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidArgumentError) as info:
            attempt()
        assert "credential" in str(info.value) or "query" in str(info.value)
        for text in exception_texts(info.value):
            assert SENTINEL not in text, text
    for variable in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.setenv(variable, endpoint)
        with pytest.raises(InvalidArgumentError) as info:
            silt.open("s3://bucket/p")
        assert variable in str(info.value)
        for text in exception_texts(info.value):
            assert SENTINEL not in text, text
        monkeypatch.delenv(variable)


def test_no_secret_reaches_a_connection_error(
    aws_env: None, s3_plugin: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that cannot reach its endpoint says so, with no secret anywhere in the chain."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SENTINEL)
    url = (f"s3://bucket/p?endpoint_url=http://127.0.0.1:{free_port()}&max_attempts=1"
           "&connect_timeout=0.2")
    with pytest.raises(TransientStoreError) as info:
        silt.open(url)
    assert "connection problem" in str(info.value)
    for text in exception_texts(info.value):
        assert SENTINEL not in text, text


def test_options_are_parsed(aws_env: None) -> None:
    store = S3Store.from_url(
        "s3://bucket/p?endpoint_url=http://127.0.0.1:1&region=eu-west-3&multipart_threshold=8MiB"
        "&multipart_part_size=5MiB&multipart_concurrency=3&max_pool_connections=40"
        "&connect_timeout=1.5&read_timeout=2&max_attempts=2&read_attempts=7"
        "&checksums=when_required&addressing_style=virtual&verify=false"
    )
    o = store.options
    assert (o.multipart_threshold, o.multipart_part_size) == (8 * MiB, 5 * MiB)
    assert (o.multipart_concurrency, o.max_pool_connections, o.max_attempts, o.read_attempts) == (
        3, 40, 2, 7)
    assert (o.connect_timeout, o.read_timeout, o.verify) == (1.5, 2.0, False)
    config = store._client.meta.config
    assert store._client.meta.region_name == "eu-west-3"
    assert config.max_pool_connections == 40
    assert config.retries == {"mode": "standard", "total_max_attempts": 2}
    assert (config.connect_timeout, config.read_timeout) == (1.5, 2.0)
    assert config.s3["addressing_style"] == "virtual"
    assert config.tcp_keepalive is True
    assert config.request_checksum_calculation == "when_required"
    assert store.url == "s3://bucket/p"
    assert "endpoint_url" not in store.url
    assert S3Options.from_query("u", o.to_query()) == o
    store.close()


def test_stores_share_the_sdks_decoded_service_models(aws_env: None) -> None:
    """Every store of a process builds its client from one botocore data loader
    (silt_s3.sdk): the S3 service model and endpoint rules are read and decoded once, not once
    per store (a query's build opens its root several times; each shard opens one). Each store
    keeps its own credentials and region."""
    from silt_s3 import sdk

    S3Store.from_url("s3://bucket/first?endpoint_url=http://127.0.0.1:9").close()
    loader = sdk.shared_loader()
    files: list[str] = []
    reader = loader.file_loader  # what reads and decodes botocore's JSON files
    load_file = reader.load_file

    def counting(path: str, *args, **kwargs):
        files.append(path)
        return load_file(path, *args, **kwargs)

    reader.load_file = counting  # type: ignore[method-assign]
    try:
        a = S3Store.from_url("s3://bucket/a?endpoint_url=http://127.0.0.1:9&region=eu-west-3",
                             storage_options={"access_key_id": "AKIAONE",
                                              "secret_access_key": "one"})
        b = S3Store.from_url("s3://bucket/b?region=us-west-2")
    finally:
        del reader.load_file
    assert files == []  # the models came from the loader's cache
    assert a._client._loader is b._client._loader is loader
    assert (a._client.meta.region_name, b._client.meta.region_name) == ("eu-west-3", "us-west-2")
    assert a._client._request_signer._credentials.access_key == "AKIAONE"
    assert b._client._request_signer._credentials.access_key == "testing"  # the environment's
    a.close()
    b.close()


def test_defaults(aws_env: None) -> None:
    store = S3Store.from_url("s3://bucket")
    config = store._client.meta.config
    assert config.max_pool_connections >= 32
    assert config.retries["mode"] == "standard"
    assert config.s3["addressing_style"] == "auto"  # AWS: botocore chooses
    assert store._client.meta.region_name == "us-east-1"
    assert store.endpoint == store._client.meta.endpoint_url
    assert "amazonaws.com" in store.endpoint
    with_endpoint = S3Store.from_url("s3://bucket?endpoint_url=http://127.0.0.1:9")
    assert with_endpoint._client.meta.config.s3["addressing_style"] == "path"  # MinIO & co.
    store.close()
    with_endpoint.close()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("multipart_part_size", "1MiB", "at least 5242880"),
        ("multipart_threshold", "lots", "not a size"),
        ("max_attempts", "0", ">= 1"),
        ("read_timeout", "-1", ">= 0.001"),
        ("read_timeout", "nan", ">= 0.001"),
        ("addressing_style", "sideways", "one of auto, path, virtual"),
        ("checksums", "never", "when_supported, when_required"),
        ("region", "", "empty"),
    ],
)
def test_bad_options(aws_env: None, name: str, value: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        S3Store.from_url(f"s3://bucket?{name}={value}")


def test_endpoint_from_environment(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, s3_bucket: str, moto_server: str
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the S3-specific one wins
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_server)
    store = S3Store.from_url(f"s3://{s3_bucket}/env")
    assert store.endpoint == moto_server
    store.put("k", b"v")
    assert store.get("k") == b"v"
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    assert S3Options().resolved_endpoint() is None
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    assert S3Options().resolved_endpoint() == "http://127.0.0.1:9"
    store.close()


@pytest.fixture
def s3_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process registry with silt-tier-s3 registered through pluggy, as its entry point
    would (the core's tests run with plugin autoloading off; keep it off here so an installed
    silt-tier-s3 is not registered twice)."""
    monkeypatch.setenv("SILT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setattr(
        plugins, "DEFAULT_PLUGINS", (*plugins.DEFAULT_PLUGINS, ("s3", "silt_s3.plugin"))
    )
    plugins.reset_registry()
    yield
    plugins.reset_registry()


def test_silt_open_with_endpoint_in_environment(
    aws_env: None, s3_plugin: None, monkeypatch: pytest.MonkeyPatch, s3_bucket: str,
    moto_server: str, small: silt.Settings,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    url = f"s3://{s3_bucket}/x"
    with silt.open(url, settings=small) as db:
        assert isinstance(getattr(db.store, "inner", db.store), S3Store)
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
    assert added == {"s3": open_s3}  # imports boto3 when an s3:// URL is opened
    pyproject = (PACKAGE / "pyproject.toml").read_text()
    assert 'name = "silt-tier-s3"' in pyproject
    assert '[project.entry-points.silt]\ns3 = "silt_s3.plugin"\n' in pyproject
    assert (PACKAGE / "src" / "silt_s3" / "py.typed").exists()
    registry = plugins.build_registry(autoload=True)
    if "s3" in registry.tiers:  # installed with pip: discovered through the entry point
        assert registry.plugins["s3"].distribution == "silt-tier-s3"


def test_pickles_as_options(aws_env: None, s3_bucket: str, moto_server: str) -> None:
    store = open_on(s3_bucket, moto_server, multipart_concurrency=2)
    store.put("k", b"v")
    clone = pickle.loads(pickle.dumps(store))
    assert clone is not store and clone.options == store.options and clone.url == store.url
    assert clone.get("k") == b"v"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(S3Store("b", client=store._client))
    clone.close()
    store.close()


# --- conditional writes, multipart, deletes, ranges ---------------------------------------------


def test_put_if_absent_sends_if_none_match(
    aws_env: None, s3_bucket: str, moto_server: str
) -> None:
    store = open_on(s3_bucket, moto_server)
    seen = record_requests(store)
    assert store.put_if_absent("manifest/00000000000000000001", b"one") is True
    assert store.put_if_absent("manifest/00000000000000000001", b"two") is False  # 412
    store.put("plain", b"p")
    puts = [headers for op, headers in seen if op == "PutObject"]
    assert [h.get("If-None-Match") for h in puts] == ["*", "*", None]
    assert store.get("manifest/00000000000000000001") == b"one"
    store.close()


def test_multipart_round_trip(
    aws_env: None, s3_bucket: str, moto_server: str, moto_admin: object
) -> None:
    store = open_on(s3_bucket, moto_server, multipart_threshold=5 * MiB,
                    multipart_part_size=5 * MiB, multipart_concurrency=3)
    seen = record_requests(store)
    data = payload(3, 12 * MiB + 12345)  # three parts: 5 MiB, 5 MiB, the rest
    store.put("sst/big.sst", data)
    assert [op for op, _ in seen].count("UploadPart") == 3
    assert store.get("sst/big.sst") == data
    assert store.get_range("sst/big.sst", 5 * MiB - 10, 20) == data[5 * MiB - 10 : 5 * MiB + 10]
    assert list(store.list("sst/")) == [ObjectInfo("sst/big.sst", len(data))]
    store.put("small", b"x" * 100)  # at or below the threshold: one PutObject
    assert [op for op, _ in seen].count("CreateMultipartUpload") == 1
    uploads = moto_admin.list_multipart_uploads(Bucket=s3_bucket)  # type: ignore[attr-defined]
    assert not uploads.get("Uploads")
    store.close()


def test_multipart_put_if_absent(
    aws_env: None, s3_bucket: str, moto_server: str, moto_admin: object
) -> None:
    """Create-only multipart: ``CompleteMultipartUpload`` with ``If-None-Match: *``; the loser
    gets ``False``, the winner's object stays, and the loser's parts are aborted."""
    store = open_on(s3_bucket, moto_server, multipart_threshold=5 * MiB,
                    multipart_part_size=5 * MiB)
    seen = record_requests(store)
    first, second = payload(4, 6 * MiB), payload(5, 7 * MiB)
    assert store.put_if_absent("sst/x.sst", first) is True
    completes = [h for op, h in seen if op == "CompleteMultipartUpload"]
    assert completes and completes[0].get("If-None-Match") == "*"
    assert store.put_if_absent("sst/x.sst", second) is False
    assert store.get("sst/x.sst") == first
    uploads = moto_admin.list_multipart_uploads(Bucket=s3_bucket)  # type: ignore[attr-defined]
    assert not uploads.get("Uploads")
    store.close()


def test_multipart_failure_aborts_the_upload(
    aws_env: None, s3_bucket: str, moto_server: str, moto_admin: object
) -> None:
    store = open_on(s3_bucket, moto_server, multipart_threshold=5 * MiB,
                    multipart_part_size=5 * MiB, multipart_concurrency=2)
    seen = record_requests(store)

    def deny_second_part(params: dict, **kwargs: object) -> object:
        if str((params.get("query_string") or {}).get("partNumber")) != "2":
            return None  # the request goes to the server
        error = {"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                 "ResponseMetadata": {"HTTPStatusCode": 403}}
        return AWSResponse("http://x", 403, {}, None), error

    store._client.meta.events.register("before-call.s3.UploadPart", deny_second_part)
    with pytest.raises(StoreError, match=r"upload part 2/3 .*access denied"):
        store.put("sst/y.sst", payload(6, 11 * MiB))
    assert [op for op, _ in seen][-1] == "AbortMultipartUpload"
    uploads = moto_admin.list_multipart_uploads(Bucket=s3_bucket)  # type: ignore[attr-defined]
    assert not uploads.get("Uploads")
    assert list(store.list()) == []
    store.close()


def test_delete_many_in_batches(
    aws_env: None, s3_bucket: str, moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_store_module, "DELETE_BATCH", 40)
    store = open_on(s3_bucket, moto_server)
    keys = [f"sst/{i:04d}.sst" for i in range(100)]
    for key in keys:
        store.put(key, b"x")
    seen = record_requests(store)
    store.delete_many([*keys[:-1], "never/existed", keys[0]])  # duplicates and missing are fine
    assert [op for op, _ in seen] == ["DeleteObjects"] * 3
    store.delete_many([])
    assert len(seen) == 3  # nothing to delete, no request
    assert [i.key for i in store.list()] == [keys[-1]]
    with pytest.raises(InvalidTypeError):
        store.delete_many("sst/0000.sst")
    with pytest.raises(InvalidArgumentError):
        store.delete_many(["ok", "../bad"])
    assert [i.key for i in store.list()] == [keys[-1]]
    store.close()


def test_delete_many_reports_per_key_errors(aws_env: None) -> None:
    store = S3Store("bucket", "p", options=S3Options(endpoint_url="http://127.0.0.1:9"))
    with Stubber(store._client) as stub:
        stub.add_response("delete_objects", {"Errors": [
            {"Key": "p/a", "Code": "AccessDenied", "Message": "Access Denied"},
            {"Key": "p/b", "Code": "NoSuchKey", "Message": "gone"},
        ]})
        with pytest.raises(StoreError, match=r"1 key\(s\) failed \(AccessDenied\).*'a'") as info:
            store.delete_many(["a", "b"])
        assert not isinstance(info.value, TransientStoreError)
        stub.add_response("delete_objects", {"Errors": [
            {"Key": "p/a", "Code": "SlowDown", "Message": "Reduce your request rate"}]})
        with pytest.raises(TransientStoreError):
            store.delete_many(["a"])
    store.close()


def test_ranges_against_the_server(aws_env: None, s3_bucket: str, moto_server: str) -> None:
    store = open_on(s3_bucket, moto_server)
    seen = record_requests(store)
    store.put("r", b"0123456789")
    assert store.get_range("r", 2, 3) == b"234"
    assert [h.get("Range") for op, h in seen if op == "GetObject"] == ["bytes=2-4"]
    assert store.get_range("r", 10, 5) == b""  # 416 InvalidRange
    assert store.get_range("r", 5, 0) == b""  # no GET: a HEAD checks that it exists
    assert [op for op, _ in seen][-1] == "HeadObject"
    store.close()


# --- error mapping -----------------------------------------------------------------------------

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSENTINELKEY"
ACCESS_KEY = "AKIAZZZZSENTINEL0000"


def assert_no_credentials(exc: BaseException) -> None:
    texts = [str(exc), repr(exc)]
    if exc.__cause__ is not None:
        texts += [str(exc.__cause__), repr(exc.__cause__)]
    for text in texts:
        assert SECRET not in text and ACCESS_KEY not in text, text


def test_missing_bucket_is_a_clear_store_error(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, moto_server: str
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    store = open_on("silt-no-such-bucket", moto_server)
    calls = [
        lambda: store.get("k"),
        lambda: store.get_range("k", 0, 10),
        lambda: store.put("k", b"v"),
        lambda: store.put_if_absent("k", b"v"),
        lambda: list(store.list()),
        lambda: store.delete_many(["k"]),
    ]
    for call in calls:
        with pytest.raises(StoreError) as info:
            call()
        assert type(info.value) is StoreError  # neither NotFoundError nor transient
        assert "bucket 'silt-no-such-bucket' does not exist" in str(info.value)
        assert moto_server in str(info.value)
        assert_no_credentials(info.value)
    store.close()


def test_no_credentials(aws_env: None, monkeypatch: pytest.MonkeyPatch, moto_server: str) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    store = open_on("bucket", moto_server)
    with pytest.raises(StoreError, match=r"no usable AWS credentials.*AWS_PROFILE") as info:
        store.get("k")
    assert not isinstance(info.value, TransientStoreError)
    store.close()
    with pytest.raises(StoreError, match="profile"):
        S3Store.from_url(f"s3://bucket?profile=nope&endpoint_url={moto_server}")


@pytest.mark.parametrize(
    ("code", "status", "error", "text"),
    [
        ("NoSuchKey", 404, NotFoundError, "does not exist in s3://bucket/p"),
        ("AccessDenied", 403, StoreError, "access denied"),
        ("InvalidAccessKeyId", 403, StoreError, "AWS_ACCESS_KEY_ID"),
        ("SignatureDoesNotMatch", 403, StoreError, "credentials"),
        ("SlowDown", 503, RetriesExhaustedError, "temporary"),
        ("InternalError", 500, RetriesExhaustedError, "temporary"),
        ("RequestTimeout", 400, RetriesExhaustedError, "temporary"),
        ("ServiceUnavailable", 503, RetriesExhaustedError, "temporary"),
        ("OperationAborted", 409, TransientStoreError, "temporary"),  # botocore does not retry
        ("InvalidArgument", 400, StoreError, "InvalidArgument"),
        ("PermanentRedirect", 301, StoreError, "region="),
    ],
)
def test_client_errors_are_mapped(
    aws_env: None, code: str, status: int, error: type, text: str
) -> None:
    store = S3Store("bucket", "p", options=S3Options(endpoint_url="http://127.0.0.1:9"))
    with Stubber(store._client) as stub:
        stub.add_client_error("get_object", code, f"message for {code}", status)
        with pytest.raises(error, match=text) as info:
            store.get("k")
    assert type(info.value) is error
    store.close()


def test_conditional_conflict_is_retried(aws_env: None) -> None:
    store = S3Store("bucket", "p", options=S3Options(endpoint_url="http://127.0.0.1:9"))
    with Stubber(store._client) as stub:
        stub.add_client_error("put_object", "ConditionalRequestConflict", "conflict", 409)
        stub.add_client_error("put_object", "ConditionalRequestConflict", "conflict", 409)
        stub.add_response("put_object", {})
        assert store.put_if_absent("manifest/00000000000000000001", b"m") is True
        stub.add_client_error("put_object", "ConditionalRequestConflict", "conflict", 409)
        stub.add_client_error("put_object", "PreconditionFailed", "exists", 412)
        assert store.put_if_absent("manifest/00000000000000000001", b"m") is False
        stub.assert_no_pending_responses()
    store.close()


def test_unreachable_endpoint_is_transient(aws_env: None) -> None:
    store = S3Store("bucket", options=S3Options(
        endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1, connect_timeout=0.5))
    with pytest.raises(TransientStoreError, match="connection problem") as info:
        store.get("k")
    assert_no_credentials(info.value)
    store.close()


# --- faults on the wire (tests/faultproxy.py) ---------------------------------------------------


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server) as p:
        yield p


@pytest.mark.parametrize("rst", [False, True], ids=["cut", "reset"])
def test_body_broken_mid_read_is_retried(
    aws_env: None, s3_bucket: str, proxy: FaultProxy, rst: bool
) -> None:
    store = open_on(s3_bucket, proxy.url, read_timeout=5)
    data = payload(7, 300_000)
    store.put("sst/a.sst", data)
    proxy.fault("truncate", match=b"GET /", keep=5000, rst=rst)
    assert store.get("sst/a.sst") == data
    proxy.fault("truncate", match=b"GET /", keep=5000, rst=rst)
    assert store.get_range("sst/a.sst", 1000, 200_000) == data[1000:201_000]
    assert proxy.counts["truncate"] == 2
    store.close()


def test_body_broken_every_time_gives_a_transient_error(
    aws_env: None, s3_bucket: str, proxy: FaultProxy
) -> None:
    store = open_on(s3_bucket, proxy.url, read_attempts=3)
    store.put("k", payload(8, 100_000))
    proxy.fault("truncate", match=b"GET /", keep=3000, times=None)
    with pytest.raises(TransientStoreError, match="broke mid-read"):
        store.get("k")
    assert proxy.counts["truncate"] == 3
    store.close()


def test_reset_before_the_request_is_retried(
    aws_env: None, s3_bucket: str, proxy: FaultProxy
) -> None:
    store = open_on(s3_bucket, proxy.url)
    proxy.fault("reset", match=b"PUT /", times=2)
    store.put("k", b"survives two resets")
    assert proxy.counts["reset"] == 2
    assert store.get("k") == b"survives two resets"
    store.close()


def test_lost_response_to_a_conditional_write(
    aws_env: None, s3_bucket: str, proxy: FaultProxy
) -> None:
    """moto creates the object, the answer is lost, botocore retries and gets 412: the call
    reports ``False`` (the contract's ambiguous case) and the object holds our bytes."""
    store = open_on(s3_bucket, proxy.url)
    proxy.fault("lose_response", match=b"If-None-Match")
    assert store.put_if_absent("manifest/00000000000000000001", b"mine") is False
    assert proxy.counts["lose_response"] == 1
    assert store.get("manifest/00000000000000000001") == b"mine"
    store.close()


def test_black_hole_fails_within_the_deadline(
    aws_env: None, s3_bucket: str, proxy: FaultProxy
) -> None:
    store = open_on(s3_bucket, proxy.url, read_timeout=0.5, connect_timeout=0.5, max_attempts=2,
                    read_attempts=1)
    proxy.fault("blackhole", times=None)
    started = time.monotonic()
    with pytest.raises(TransientStoreError, match=r"connection problem.*ReadTimeout"):
        store.put("k", b"v")
    assert time.monotonic() - started < 5
    proxy.clear()
    store.put("k", b"v")
    assert store.get("k") == b"v"
    store.close()


def test_proxy_latency_and_delay(aws_env: None, s3_bucket: str, proxy: FaultProxy) -> None:
    store = open_on(s3_bucket, proxy.url)
    store.put("k", b"v" * 1000)
    proxy.latency = 0.15
    started = time.monotonic()
    assert store.get("k") == b"v" * 1000
    assert time.monotonic() - started >= 0.15
    proxy.latency = 0
    proxy.fault("delay", match=b"GET /", seconds=0.3)
    started = time.monotonic()
    assert store.get_range("k", 0, 10) == b"v" * 10
    assert time.monotonic() - started >= 0.3
    proxy.bandwidth = 200_000
    big = payload(9, 100_000)
    store.put("big", big)
    started = time.monotonic()
    assert store.get("big") == big
    assert time.monotonic() - started >= 0.4  # 100 kB at 200 kB/s
    store.close()


def test_redaction() -> None:
    text = (
        "GET /b/k?X-Amz-Credential=AKIAABCDEFGHIJKLMNOP%2F2024&X-Amz-Signature=deadbeef&x=1 "
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIAABCDEFGHIJKLMNOP/x, Signature=abc\n"
        "secret is hunter22 and AccountKey=Zm9vYmFy;"
    )
    out = _tierkit.redact(text, ["hunter22", None, ""])
    for secret in ("AKIAABCDEFGHIJKLMNOP", "deadbeef", "hunter22", "Zm9vYmFy", "Signature=abc"):
        assert secret not in out, out
    assert "x=1" in out and "GET /b/k" in out


# The engine on this tier (round trip, commit races, lost responses, corruption,
# compaction and GC, the model test) is tests/test_engine_on_tiers.py, run for every tier.


def test_a_slow_read_is_hedged(aws_env: None, s3_bucket: str, proxy: FaultProxy) -> None:
    store = open_on(s3_bucket, proxy.url, hedge_after_ms=300)
    try:
        check_a_slow_read_is_hedged_and_billed_twice(store, proxy)
    finally:
        store.close()


# --- one client per configuration and process ---------------------------------------------------


def test_stores_of_one_configuration_share_a_client(
    aws_env: None, s3_bucket: str, moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores whose options and environment would build identical clients get one client
    (a Spark worker's origin check and shard open built two); any other option, credentials
    of another environment, or a session given in code gets its own; closing one store leaves
    the shared client working for the others; the table holds digests, never a secret."""
    import boto3
    from silt_s3 import sdk

    a = open_on(s3_bucket, moto_server, "a")
    b = open_on(s3_bucket, moto_server, "b")
    assert a._client is b._client
    assert open_on(s3_bucket, moto_server, "c", read_timeout=7)._client is not a._client
    keyed = open_on(s3_bucket, moto_server, "d", access_key_id="AKIAOTHER",
                    secret_access_key="very-secret-key")
    assert keyed._client is not a._client
    assert not any("very-secret-key" in k or "AKIAOTHER" in k for k in sdk._clients)
    given = S3Store(s3_bucket, "e", options=S3Options(endpoint_url=moto_server),
                    session=boto3.Session())
    assert given._client is not a._client and not sdk.is_shared(given._client)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAROTATED")
    rotated = open_on(s3_bucket, moto_server, "f")
    assert rotated._client is not a._client  # the credential chain reads the environment
    a.put("x", b"1")
    a.close()
    b.put("y", b"2")  # a's close did not close the shared client
    assert b.get("y") == b"2" and [i.key for i in b.list()] == ["y"]
    closed: list[bool] = []
    close_given = given._client.close
    given._client.close = lambda: closed.append(True) or close_given()  # type: ignore[method-assign]
    given.close()
    assert closed == [True]  # a client given in code is the store's own: its close closes it
    sdk.forget_clients()
    assert b.get("y") == b"2"  # an open store's next request opens new connections
    assert open_on(s3_bucket, moto_server, "g")._client is not b._client
    for store in (b, keyed, rotated):
        store.close()


def test_a_forked_child_never_uses_its_parents_client(
    aws_env: None, s3_bucket: str, moto_server: str
) -> None:
    """A child forked after its parent opened a store builds its own client (the parent's
    sockets are the parent's): its store works, and the parent's client is untouched."""
    import os

    parent = open_on(s3_bucket, moto_server, "p")
    parent.put("x", b"parent")
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if it got a new, working client
        code = 1
        try:
            child = open_on(s3_bucket, moto_server, "p")
            if child._client is not parent._client and child.get("x") == b"parent":
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert open_on(s3_bucket, moto_server, "p")._client is parent._client
    assert parent.get("x") == b"parent"
    parent.close()


def test_a_child_forked_during_a_build_opens_its_own_store(
    aws_env: None, s3_bucket: str, moto_server: str,
) -> None:
    """A fork while another thread is inside ``shared_client``'s build (a Spark task's origin
    check builds the worker's first client on a thread) leaves the child a working table: its
    first store builds its own client and answers. Before, the child waited forever on the lock
    the parent's thread held."""
    from silt_s3 import sdk

    inside, release = threading.Event(), threading.Event()

    def slow_build() -> object:
        inside.set()
        release.wait(30)
        return SimpleNamespace(close=lambda: None)

    builder = threading.Thread(target=sdk.shared_client, args=("slow-build", slow_build))
    builder.start()
    assert inside.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: 0 only if its store opened and answered
        code = 1
        try:
            store = open_on(s3_bucket, moto_server, "child")
            store.put("k", b"child")
            if store.get("k") == b"child":
                code = 0
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung on the parent's client lock")
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        builder.join(30)
