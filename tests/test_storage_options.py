"""Storage options: settings and credentials given in code (``silt.open(url,
storage_options=...)``), reaching the tier, refused when unknown, and never shown.

The S3 case runs against a moto server that checks credentials (IAM auth on): the environment
holds wrong credentials and a dead endpoint, so only what ``storage_options`` carries can work.
"""

from __future__ import annotations

import json
import logging
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import silt
from silt.errors import InvalidArgumentError, InvalidTypeError, StoreError
from silt.plugins import open_store

#: Recognisable fake secrets: none may appear in any message, repr or log.
FAKE_SECRET = "FAKE-SECRET-d3adb33f-never-print-me"
FAKE_TOKEN = "FAKE-TOKEN-0ff1ce-never-print-me"


@pytest.fixture(autouse=True)
def tier_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry with the three object-store tiers registered as their entry points would
    (autoloading stays off: an installed copy must not register them twice)."""
    from silt import plugins

    monkeypatch.setattr(plugins, "DEFAULT_PLUGINS", (
        *plugins.DEFAULT_PLUGINS, ("s3", "silt_s3.plugin"), ("gcs", "silt_gcs.plugin"),
        ("azure", "silt_azure.plugin"),
    ))
    plugins.reset_registry()
    yield
    plugins.reset_registry()


@pytest.fixture(scope="module")
def moto_auth() -> Iterator[dict[str, str]]:
    """A moto S3 server that checks credentials, an IAM user allowed everything, and a bucket.

    The first four requests (create the user, its key, its policy, the bucket) are let through
    unauthenticated (``INITIAL_NO_AUTH_ACTION_COUNT``); every later one must be signed with the
    user's key."""
    import os

    import boto3
    from servers import start_server

    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="4")
    server = start_server(
        "moto S3", [sys.executable, "-m", "moto.server", "-H", "{host}", "-p", "{port}"],
        ready_path="/moto-api/", env=env, timeout=60,
    )
    anon = dict(endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="setup",
                aws_secret_access_key="setup")
    iam = boto3.client("iam", **anon)
    iam.create_user(UserName="silt")
    key = iam.create_access_key(UserName="silt")["AccessKey"]
    iam.put_user_policy(UserName="silt", PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
    }))
    boto3.client("s3", **anon).create_bucket(Bucket="silt-auth")
    yield {"endpoint": server.url, "key_id": key["AccessKeyId"],
           "secret": key["SecretAccessKey"]}
    server.stop()


@pytest.fixture
def wrong_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """An environment whose credentials exist nowhere and whose endpoint answers nothing."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDWRONGWRONGWRONG0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-north-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def capture_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Everything silt logs, and what the SDKs log at INFO (botocore's DEBUG output prints
    signed request headers, a session token among them: an SDK's debug trace, not a log)."""
    caplog.set_level(logging.INFO)
    for name in ("silt", "silt_s3", "silt_gcs", "silt_azure", "silt_spark"):
        caplog.set_level(logging.DEBUG, logger=name)


def s3_options(auth: dict[str, str], **more: str) -> dict[str, str]:
    return {"access_key_id": auth["key_id"], "secret_access_key": auth["secret"],
            "endpoint_url": auth["endpoint"], "region": "us-east-1", **more}


def test_s3_credentials_reach_the_tier_only_through_storage_options(
    moto_auth: dict[str, str], wrong_aws_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    capture_logs(caplog)
    url = "s3://silt-auth/creds"
    options = s3_options(moto_auth)
    with silt.open(url, storage_options=options) as db:
        db.put(b"k", b"v")
        version = db.commit()
    assert silt.versions(url, storage_options=options) == [version]
    with silt.open(url, version=version, storage_options=options) as db:
        assert db.get(b"k") == b"v"
    store = open_store(url, storage_options=options)
    try:
        assert moto_auth["secret"] not in repr(store)
        assert moto_auth["secret"] not in repr(store.options)
        again = pickle.loads(pickle.dumps(store))  # what a Spark task receives
        try:
            listed = list(again.list())
            assert listed and again.get(listed[0].key)
        finally:
            again.close()
    finally:
        store.close()
    # The environment's credentials and endpoint are wrong: without the options nothing works.
    with pytest.raises(StoreError):
        silt.versions(url)
    with pytest.raises(StoreError):
        silt.versions(url, storage_options={"endpoint_url": moto_auth["endpoint"]})
    assert moto_auth["secret"] not in caplog.text


def test_s3_wrong_secret_in_storage_options_is_never_shown(
    moto_auth: dict[str, str], wrong_aws_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    capture_logs(caplog)
    options = s3_options(moto_auth, secret_access_key=FAKE_SECRET, session_token=FAKE_TOKEN)
    with pytest.raises(StoreError) as info:
        silt.versions("s3://silt-auth/creds", storage_options=options)
    texts = [str(info.value), repr(info.value), caplog.text]
    cause = info.value.__cause__
    while cause is not None:
        texts += [str(cause), repr(cause)]
        cause = cause.__cause__
    for text in texts:
        assert FAKE_SECRET not in text and FAKE_TOKEN not in text


@pytest.mark.parametrize(
    ("url", "secret_option", "accepted"),
    [
        ("s3://bucket/p", "secret_access_key", "access_key_id"),
        ("gs://bucket/p", "credentials_json", "credentials_file"),
        ("az://container/p", "account_key", "sas_token"),
    ],
)
def test_unknown_storage_option_lists_the_accepted_names(
    url: str, secret_option: str, accepted: str
) -> None:
    options = {secret_option: FAKE_SECRET, "no_such_option": FAKE_TOKEN}
    with pytest.raises(InvalidArgumentError) as info:
        open_store(url, storage_options=options)
    text = str(info.value)
    assert "unknown storage option(s) 'no_such_option'" in text
    assert accepted in text and secret_option in text
    assert FAKE_SECRET not in text and FAKE_TOKEN not in text


@pytest.mark.parametrize(
    "url",
    [
        f"s3://bucket/p?secret_access_key={FAKE_SECRET}",
        f"s3://bucket/p?session_token={FAKE_SECRET}",
        f"gs://bucket/p?credentials_json={FAKE_SECRET}",
        f"az://container/p?sas_token={FAKE_SECRET}",
        f"az://container/p?account_key={FAKE_SECRET}",
    ],
)
def test_secret_options_are_refused_in_urls(url: str) -> None:
    with pytest.raises(InvalidArgumentError, match="never takes credentials from a URL") as info:
        open_store(url)
    assert FAKE_SECRET not in str(info.value)
    assert "storage_options" in str(info.value)


def test_tiers_without_storage_options_refuse_them(tmp_path: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=r"'file://' tier takes no storage_options"):
        silt.open(f"file://{tmp_path}/db", storage_options={"token": FAKE_SECRET})
    assert not (tmp_path / "db").exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("options", "error", "text"),
    [
        ("token=x", InvalidTypeError, "must be a dict"),
        ({"region": 1}, InvalidTypeError, "storage option 'region' must be a str"),
        ({1: "x"}, InvalidTypeError, "names must be non-empty str"),
        ({"secret_access_key": FAKE_SECRET}, InvalidArgumentError, "go together"),
        ({"access_key_id": "a", "secret_access_key": FAKE_SECRET, "profile": "p",
          "addressing_style": "sideways"}, InvalidArgumentError, "addressing_style"),
    ],
)
def test_bad_storage_options_are_clear_errors(options: Any, error: type, text: str) -> None:
    with pytest.raises(error, match=text) as info:
        open_store("s3://bucket/p", storage_options=options)
    assert FAKE_SECRET not in str(info.value)


def test_gcs_credentials_json_that_is_not_credentials_is_named_not_shown() -> None:
    with pytest.raises(InvalidArgumentError, match="credentials_json storage option") as info:
        open_store("gs://bucket/p", storage_options={
            "credentials_json": json.dumps({"type": "service_account", "x": FAKE_SECRET}),
            "project": "p",
        })
    assert FAKE_SECRET not in str(info.value) and info.value.__cause__ is None
    with pytest.raises(InvalidArgumentError, match="credentials_json storage option") as info:
        open_store("gs://bucket/p", storage_options={"credentials_json": FAKE_SECRET})
    assert FAKE_SECRET not in str(info.value)


def test_gcs_and_azure_options_keep_secrets_out_of_repr() -> None:
    from silt_azure.config import AzureOptions, resolve_account
    from silt_gcs.config import GcsOptions

    gcs = GcsOptions.from_query("gs://b", {}, {"credentials_json": FAKE_SECRET, "project": "p"})
    assert FAKE_SECRET not in repr(gcs) and "credentials_json" not in gcs.to_query()
    assert gcs.secrets() == (FAKE_SECRET,)
    az = AzureOptions.from_query("az://c", {}, {"account_key": FAKE_SECRET,
                                                 "account_name": "acct"})
    account = resolve_account(az, environ={})
    assert (account.credential, account.account_name, account.key) == ("key", "acct",
                                                                       FAKE_SECRET)
    assert FAKE_SECRET not in repr(az) and FAKE_SECRET not in repr(account)
    sas = AzureOptions.from_query("az://c", {}, {"sas_token": FAKE_TOKEN, "account_url":
                                                  "http://127.0.0.1:10000/devstoreaccount1"})
    assert resolve_account(sas, environ={"AZURE_STORAGE_KEY": "env-key"}).sas == FAKE_TOKEN


def test_azure_key_and_sas_from_storage_options_reach_azurite(
    az_container: str, azurite_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The environment has no Azure settings (``azure_env``): the account URL and its key, or
    a SAS, come only from the storage options; a wrong key fails without being shown."""
    from datetime import UTC, datetime, timedelta

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    from servers import AZURITE_ACCOUNT, AZURITE_KEY

    capture_logs(caplog)
    url = f"az://{az_container}/state"
    account = {"account_url": f"{azurite_server}/{AZURITE_ACCOUNT}"}
    with silt.open(url, storage_options={**account, "account_key": AZURITE_KEY}) as db:
        db.put(b"k", b"v")
        version = db.commit()
    sas = generate_container_sas(
        AZURITE_ACCOUNT, az_container, account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    with silt.open(url, storage_options={**account, "sas_token": sas}) as db:
        assert db.version == version and db.get(b"k") == b"v"
    wrong = "V3JvbmdLZXkt" + FAKE_SECRET.encode().hex()  # base64-shaped, not the account's
    with pytest.raises(StoreError) as info:
        silt.versions(url, storage_options={**account, "account_key": wrong})
    for text in (str(info.value), repr(info.value), caplog.text, repr(info.value.__cause__)):
        assert wrong not in text and AZURITE_KEY not in text and sas not in text
