"""Shared fixtures for silt's test suite.

The core's tests load only the built-in plugins: whatever else happens to be installed in the
environment must not change their outcome (tests that exercise entry-point discovery turn it on
explicitly).
"""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("SILT_DISABLE_PLUGIN_AUTOLOAD", "1")

import silt
from silt.tiers.memory import MemoryStore

#: Small sizes so a few thousand keys exercise flushes, many blocks and several SSTs.
SMALL = silt.Settings(memtable_bytes=64 * 1024, block_bytes=1024, block_cache_bytes=256 * 1024)


@pytest.fixture(params=["file", "memory"])
def url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A fresh, empty root on each built-in tier."""
    if request.param == "file":
        yield (tmp_path / "root").as_uri()
        return
    name = f"test-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStore.drop(name)


@pytest.fixture
def file_url(tmp_path) -> str:
    """A fresh, empty root on the file:// tier."""
    return (tmp_path / "root").as_uri()


@pytest.fixture
def small() -> silt.Settings:
    return SMALL


# --- object-store servers for the tier packages (tests/servers.py) ------------------------------
# Each server starts once per session on a free 127.0.0.1 port and is stopped by PID at the end;
# each test gets its own bucket. A server that cannot start fails the tests loudly (no skips).

MOTO_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="session")
def moto_server():
    """The endpoint URL (``http://127.0.0.1:<port>``) of a moto S3 server subprocess."""
    import sys

    from servers import start_server

    server = start_server(
        "moto S3",
        [sys.executable, "-m", "moto.server", "-H", "{host}", "-p", "{port}"],
        ready_path="/moto-api/",
        timeout=60,
    )
    yield server.url
    server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A clean, dummy AWS environment: fake keys, us-east-1, no profile, no endpoint, and no
    config or credentials file of the machine's user."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_ROLE_ARN",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in MOTO_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def moto_admin(moto_server):
    """A boto3 S3 client on the moto server, for setting up buckets (not for the code under
    test)."""
    import boto3

    client = boto3.client(
        "s3", endpoint_url=moto_server, region_name="us-east-1",
        aws_access_key_id=MOTO_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=MOTO_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    yield client
    client.close()


@pytest.fixture
def s3_bucket(moto_admin, aws_env) -> str:
    """A new, empty bucket on the moto server, unique to this test."""
    name = f"silt-{uuid.uuid4().hex[:24]}"
    moto_admin.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_url(s3_bucket, moto_server) -> str:
    """``s3://<fresh bucket>/state?endpoint_url=<moto>``: a fresh, empty root on moto."""
    return f"s3://{s3_bucket}/state?endpoint_url={moto_server}"
