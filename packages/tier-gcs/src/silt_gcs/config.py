"""``gs://`` URLs and their options.

URL: ``gs://bucket`` or ``gs://bucket/prefix/path`` (``gcs://`` is an alias), optionally with
query options::

    gs://state-bucket/jobs/clicks
    gs://state/jobs/clicks?endpoint=http://127.0.0.1:4443&project=test    # an emulator

Every option falls back to Google's standard configuration, so with Application Default
Credentials (or ``STORAGE_EMULATOR_HOST`` for an emulator) ``silt.open("gs://bucket/prefix")``
just works:

=========================  ========================================================================
option                     default / fallback
=========================  ========================================================================
``endpoint``               ``STORAGE_EMULATOR_HOST`` (``host:port`` or a URL; plain ``host:port``
                           means ``http://``), else Google Cloud Storage itself
``anonymous``              ``true`` for an emulator (the endpoint came from
                           ``STORAGE_EMULATOR_HOST`` or is a plain ``http://`` URL), else
                           ``false``: Application Default Credentials
``project``                ``GOOGLE_CLOUD_PROJECT`` for an emulator; otherwise unset (reading
                           and writing objects needs no project)
``user_project``           the project billed for a requester-pays bucket (unset)
``max_pool_connections``   HTTP connections kept per store (default 64)
``connect_timeout``        seconds (default 5)
``read_timeout``           seconds without a byte from the server (default 30)
``max_attempts``           tries of each request by the SDK's retry policy (default 5)
``retry_deadline``         seconds the SDK spends retrying one request (default 30)
``read_attempts``          tries of a whole read whose bytes came back corrupt or short
                           (default 4)
``hedge_after_ms``         a read not answered after this many ms sends a second request, the first
                           answer wins (default 0: off; silt.tierkit.hedge)
``hedge_quantile``         hedge after this quantile of recent read latencies (e.g. 0.95; at least
                           ``hedge_after_ms``; default 0: off)
``delete_concurrency``     objects deleted at once by ``delete_many`` (default 16)
=========================  ========================================================================

Credentials never go in the URL: use Application Default Credentials
(``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth application-default login``, or the service
account attached to the VM, GKE pod, Cloud Run service ...), pass them in code as storage
options, or pass ``credentials=`` to :class:`silt_gcs.GcsStore` in code.

Storage options (``silt.open(url, storage_options={...})``, silt_spark's ``storage_options=``
and ``spark.silt.storage.<name>``) accept every option above plus the credentials, which take
precedence over Application Default Credentials and are never shown in ``repr`` or messages:

=========================  ========================================================================
storage option             google-cloud-storage parameter
=========================  ========================================================================
``credentials_file``       a credentials file (service account key, workload identity federation
                           or authorized user JSON), loaded with
                           ``google.auth.load_credentials_from_file`` as ``credentials``
``credentials_json``       the same file's JSON text, loaded with
                           ``google.auth.load_credentials_from_dict``
``project``                ``project``
``endpoint``               ``client_options={"api_endpoint": ...}``
=========================  ========================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from silt.errors import InvalidArgumentError
from silt.tierkit import NetworkOptions, check_endpoint, check_root_name, parse_root_url

#: The canonical scheme first; ``gcs://`` is an alias that opens the same store.
SCHEMES = ("gs", "gcs")
SCHEME = SCHEMES[0]

#: The environment variable the Google SDKs read for an emulator's address.
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"

#: Options that look like credentials: rejected with a pointer to Application Default Credentials.
_CREDENTIAL_OPTIONS = frozenset(
    {
        "token",
        "access_token",
        "refresh_token",
        "credentials",
        "credentials_file",
        "key",
        "key_file",
        "private_key",
        "client_secret",
        "api_key",
        "service_account",
        "service_account_key",
    }
)

CREDENTIALS_HINT = (
    "Application Default Credentials come from GOOGLE_APPLICATION_CREDENTIALS (a service account "
    "or workload identity file), 'gcloud auth application-default login', or the service account "
    "attached to the VM, GKE pod or Cloud Run service"
)


@dataclass(frozen=True)
class GcsOptions(NetworkOptions):
    """Options of one :class:`~silt_gcs.GcsStore`; ``None`` means "use the standard fallback".

    A frozen, picklable value: a store shipped to another process carries these options, not a
    client, and opens its own client there.
    """

    SCHEME = SCHEME
    CREDENTIAL_OPTIONS = _CREDENTIAL_OPTIONS
    CREDENTIAL_HINT = f"{CREDENTIALS_HINT}; in code, pass credentials= to GcsStore"
    SECRET_OPTIONS = frozenset({"credentials_file", "credentials_json"})

    endpoint: str | None = None
    anonymous: bool | None = None
    project: str | None = None
    user_project: str | None = None
    max_pool_connections: int = 64
    retry_deadline: float = 30.0
    delete_concurrency: int = 16
    credentials_file: str | None = field(default=None, repr=False)
    credentials_json: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.credentials_file is not None and self.credentials_json is not None:
            raise InvalidArgumentError(
                "give either the credentials_file or the credentials_json storage option, "
                "not both"
            )
        if (self.credentials_file or self.credentials_json) and self.anonymous:
            raise InvalidArgumentError(
                "anonymous=true sends no credentials; drop it or the credentials_file / "
                "credentials_json storage option"
            )
        if self.endpoint is not None:
            object.__setattr__(self, "endpoint", normalize_endpoint(self.endpoint))
        for name in ("max_pool_connections", "delete_concurrency"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name} must be >= 1")
        if not self.retry_deadline > 0:
            raise InvalidArgumentError("retry_deadline must be > 0 seconds")

    def resolved_endpoint(self, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
        """``(endpoint, source)``: the endpoint URL and where it came from (``"option"``,
        ``"env"`` for ``STORAGE_EMULATOR_HOST``, or ``"default"`` with ``None`` for GCS)."""
        if self.endpoint:
            return self.endpoint, "option"
        env = os.environ if environ is None else environ
        value = env.get(EMULATOR_ENV, "").strip()
        if value:
            return normalize_endpoint(value, source=EMULATOR_ENV), "env"
        return None, "default"

    def resolved_anonymous(self, endpoint: str | None, source: str) -> bool:
        """Whether to send no credentials: the option, else ``False`` with credentials given as
        storage options, else ``True`` for an emulator."""
        if self.anonymous is not None:
            return self.anonymous
        if self.credentials_file or self.credentials_json:
            return False
        return endpoint is not None and (source == "env" or endpoint.startswith("http://"))

    def resolved_project(
        self, anonymous: bool, environ: Mapping[str, str] | None = None
    ) -> str | None:
        """The project option; for anonymous clients also ``GOOGLE_CLOUD_PROJECT``."""
        if self.project:
            return self.project
        env = os.environ if environ is None else environ
        if anonymous:
            return env.get(PROJECT_ENV, "").strip() or None
        return None


def normalize_endpoint(value: str, *, source: str = "endpoint=") -> str:
    """``"127.0.0.1:4443"`` -> ``"http://127.0.0.1:4443"``; a trailing ``/`` is dropped.

    URLs carrying a user or password are refused (without echoing them).
    """
    text = str(value).strip()
    if "://" not in text:
        text = "http://" + text
    text = check_endpoint(text, what=f"the endpoint in {source}", hint=CREDENTIALS_HINT,
                          allow_path=False)
    parts = urlsplit(text)
    return f"{parts.scheme}://{parts.netloc}"


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split ``gs://bucket/prefix?opts`` into ``(bucket, prefix, options)``.

    ``prefix`` is ``""`` or a ``/``-terminated object-name prefix (``"jobs/clicks/"``);
    percent-escapes in the path are decoded.
    """
    return parse_root_url(url, SCHEMES, check_root=check_bucket, example="gs://bucket/prefix")


def check_bucket(bucket: str, url: str = "") -> str:
    """Reject empty and clearly malformed bucket names (the server checks the rest)."""
    return check_root_name(
        bucket, url, what="bucket", example="gs://bucket/prefix",
        rule="GCS bucket names are 3-63 lower-case letters, digits, dots, hyphens and "
             "underscores (put an emulator's address in endpoint=, never credentials in the URL)",
        advice=f"{CREDENTIALS_HINT}; use endpoint= for an emulator",
    )
