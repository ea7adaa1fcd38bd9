"""Shared fixtures for silt's test suite.

The core's tests load only the built-in plugins: whatever else happens to be installed in the
environment must not change their outcome (tests that exercise entry-point discovery turn it on
explicitly).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

os.environ.setdefault("SILT_DISABLE_PLUGIN_AUTOLOAD", "1")

import silt
from silt.tiers.memory import MemoryStore
from sparkconf import TEST_SPARK_CONF

# Hypothesis's deadline (200 ms an example) and its "too slow" health check time the tests,
# and the suite must stay green on a loaded 2-core machine (a property test of merging failed
# its deadline there at load 15). Speed is measured by bench/, never by a test's clock: every
# property test runs without them (a test's own @settings still wins for what it names).
hypothesis_settings.register_profile(
    "silt", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("silt")

#: Small sizes so a few thousand keys exercise flushes, many blocks and several SSTs.
SMALL = silt.Settings(memtable_bytes=64 * 1024, block_bytes=1024, block_cache_bytes=256 * 1024)


@pytest.fixture
def fds(monkeypatch: pytest.MonkeyPatch):
    """A fresh process cache of 4 ``file://`` descriptors (``silt.tiers.fdcache``), so a test
    sees only its own."""
    from silt.tiers import file as file_tier
    from silt.tiers.fdcache import FdCache

    cache = FdCache(4)
    monkeypatch.setattr(file_tier, "FDS", cache)
    yield cache
    cache.clear()


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
    from servers import start_moto

    server = start_moto(timeout=60)
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


# --- Spark (packages/spark) ---------------------------------------------------------------------
# One local SparkSession for every Spark test: 2 cores, task retries on (local[2,2]: a failed
# task is retried once, as on a cluster), tiny shuffles, no UI, no console progress bars, and the
# settings of tests/sparkconf.py (C1 only, serial GC, in-process checkpoint renames, 200 ms
# polling).
# pyspark missing is an error. Every test that runs a SparkSession is marked ``spark_session``
# (pytest.ini), so the noxfile can run them once, against the compiled core, plus a smoke set
# against pure Python: the twins themselves are compared where they live (tests/test_twins.py
# and every core test runs under both).


#: The longest files, longest first (their share of a run of the suite, 2026-11-27: these five
#: are 1,100 of its 2,500 test-seconds). pytest-xdist's ``--dist loadfile`` hands whole files to
#: its workers in collection order, and collection order is alphabetical, which put the Spark
#: files in the last third: a long file started near the end left the other worker idle for
#: minutes. The order of the files changes nothing else: each file's tests keep their order and
#: their module fixtures.
LONGEST_FIRST = (
    "test_spark_event_time.py", "test_spark_join.py", "test_spark_cluster.py",
    "test_spark_tws_fidelity.py", "test_simulation.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that runs a SparkSession ``spark_session``, then order the files: the
    :data:`LONGEST_FIRST` files in that order, then the other files with a Spark test, then the
    rest, each group in collection order."""
    spark_files = set()
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark_session)
            spark_files.add(item.path)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def place(item: pytest.Item) -> tuple[int, int]:
        if item.path.name in rank:
            return 0, rank[item.path.name]
        return (1 if item.path in spark_files else 2), 0

    items.sort(key=place)  # stable: within a group, collection order


@pytest.fixture(autouse=True)
def _no_shared_s3_clients_between_tests() -> Iterator[None]:
    """Each test starts without the S3 clients earlier tests left in this process
    (``silt_s3.sdk.shared_client``): a test that registers event handlers on its store's client
    must not see them in the next test, and a long run must not hold every test's client."""
    yield
    sdk = sys.modules.get("silt_s3.sdk")
    if sdk is not None:
        sdk.forget_clients()


@pytest.fixture(scope="session")
def spark():
    """A session-wide local SparkSession (``local[2,2]``)."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2,2]")
        .appName("silt-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in TEST_SPARK_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# --- which hot path runs (silt._speedups or pure Python; see tests/test_twins.py) ---------------
def pytest_report_header(config: pytest.Config) -> str:
    compiled = sorted(name for name, on in silt.speedups().items() if on)
    if not compiled:
        return "silt hot path: pure Python"
    return f"silt hot path: compiled ({len(compiled)} modules, silt._speedups)"


# --- Azurite (packages/tier-azure) --------------------------------------------------------------
# Azurite's blob service, installed from npm by .ci/install-azurite (run here if missing), starts
# once per session on a free port and is stopped by PID; each test gets its own container.


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory):
    """The blob endpoint (``http://127.0.0.1:<port>``) of an Azurite subprocess."""
    from servers import start_azurite

    server = start_azurite(tmp_path_factory.mktemp("azurite"))
    yield server.url
    server.stop()


@pytest.fixture
def azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Azure account, key, SAS or Entra ID settings from the machine's environment."""
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_URL",
                 "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
                 "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET",
                 "AZURE_FEDERATED_TOKEN_FILE", "AZURE_AUTHORITY_HOST"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def azurite_connection(azurite_server) -> str:
    """The connection string of Azurite's development account (its key is public)."""
    from servers import azurite_connection_string

    return azurite_connection_string(azurite_server)


@pytest.fixture(scope="session")
def azurite_admin(azurite_connection):
    """An SDK ``BlobServiceClient`` on Azurite, for setting up containers (not for the code
    under test)."""
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(azurite_connection)
    yield client
    client.close()


@pytest.fixture
def az_container(azurite_admin, azure_env) -> str:
    """A new, empty container on Azurite, unique to this test (deleted afterwards)."""
    name = f"silt-{uuid.uuid4().hex[:24]}"
    azurite_admin.create_container(name)
    yield name
    azurite_admin.delete_container(name)


@pytest.fixture
def az_url(az_container, azurite_connection) -> str:
    """``az://<fresh container>/state?connection_string=...``: a fresh, empty root on Azurite."""
    from urllib.parse import quote

    return f"az://{az_container}/state?connection_string={quote(azurite_connection, safe='')}"


# --- fake-gcs-server for packages/tier-gcs (tests/servers.py) -----------------------------------
# One emulator per session (plain HTTP, in-memory backend); each test gets its own bucket.

#: Environment variables through which the machine's Google setup could leak into a test.
GCS_ENV_VARIABLES = (
    "STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "API_ENDPOINT_OVERRIDE",
    "GOOGLE_CLOUD_UNIVERSE_DOMAIN", "GOOGLE_API_USE_CLIENT_CERTIFICATE",
    "GCE_METADATA_HOST", "GCE_METADATA_ROOT", "GCE_METADATA_IP",
)


@pytest.fixture(scope="session")
def gcs_server():
    """The endpoint URL (``http://127.0.0.1:<port>``) of a fake-gcs-server subprocess."""
    from servers import start_fake_gcs

    server = start_fake_gcs()
    yield server.url
    server.stop()


@pytest.fixture
def gcs_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A clean Google environment: no emulator variable, no ADC file, no gcloud configuration
    of the machine's user, and no probing for a GCE metadata server."""
    for name in GCS_ENV_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud-config"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    from google.auth.compute_engine import _metadata

    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # read at import time


@pytest.fixture(scope="session")
def gcs_admin(gcs_server):
    """A google-cloud-storage client on the emulator, for setting up buckets (not for the code
    under test)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="silt-test", credentials=AnonymousCredentials(),
        client_options={"api_endpoint": gcs_server},
    )
    client._bucket_metadata_cache = None  # no background bucket lookups
    yield client
    client.close()


@pytest.fixture
def gcs_bucket(gcs_admin, gcs_env) -> str:
    """A new, empty bucket on the emulator, unique to this test."""
    name = f"silt-{uuid.uuid4().hex[:24]}"
    gcs_admin.create_bucket(name)
    return name


@pytest.fixture
def gcs_url(gcs_bucket, gcs_server) -> str:
    """``gs://<fresh bucket>/state?endpoint=<emulator>``: a fresh, empty root on fake-gcs."""
    return f"gs://{gcs_bucket}/state?endpoint={gcs_server}"
