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
``max_pool_connections``   HTTP connections kept per store (default 32)
``connect_timeout``        seconds (default 5)
``read_timeout``           seconds without a byte from the server (default 30)
``retry_deadline``         seconds the SDK spends retrying one request (default 30)
``read_attempts``          tries of a whole read whose bytes came back corrupt or short
                           (default 4)
``delete_concurrency``     objects deleted at once by ``delete_many`` (default 16)
=========================  ========================================================================

Credentials never go in the URL: use Application Default Credentials
(``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth application-default login``, or the service
account attached to the VM, GKE pod, Cloud Run service ...), or pass ``credentials=`` to
:class:`silt_gcs.GcsStore` in code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from silt.errors import InvalidArgumentError
from silt.store import split_url
from silt.tierkit import (
    check_endpoint,
    check_options,
    check_path,
    decode_path,
    parse_bool,
    parse_float,
    parse_int,
)

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
class GcsOptions:
    """Options of one :class:`~silt_gcs.GcsStore`; ``None`` means "use the standard fallback".

    A frozen, picklable value: a store shipped to another process carries these options, not a
    client, and opens its own client there.
    """

    endpoint: str | None = None
    anonymous: bool | None = None
    project: str | None = None
    user_project: str | None = None
    max_pool_connections: int = 32
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    retry_deadline: float = 30.0
    read_attempts: int = 4
    delete_concurrency: int = 16

    def __post_init__(self) -> None:
        if self.endpoint is not None:
            object.__setattr__(self, "endpoint", normalize_endpoint(self.endpoint))
        for name in ("max_pool_connections", "read_attempts", "delete_concurrency"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name} must be >= 1")
        for name in ("connect_timeout", "read_timeout", "retry_deadline"):
            if not getattr(self, name) > 0:
                raise InvalidArgumentError(f"{name} must be > 0 seconds")

    @classmethod
    def names(cls) -> frozenset[str]:
        """Option names accepted in a URL query (the dataclass fields)."""
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_query(cls, url: str, options: Mapping[str, str]) -> GcsOptions:
        """Parse URL query options (strings); unknown options are an error that lists them."""
        url = url.split("?", 1)[0]  # never echo query values: they might hold secrets
        secret_like = sorted(set(options) & _CREDENTIAL_OPTIONS)
        if secret_like:
            raise InvalidArgumentError(
                f"option(s) {', '.join(secret_like)} look like credentials; silt never takes "
                f"credentials from a URL (URLs end up in logs). {CREDENTIALS_HINT}; in code, "
                "pass credentials= to GcsStore"
            )
        check_options(url, options, cls.names(), SCHEME)
        kwargs: dict[str, object] = {}
        for name, raw in options.items():
            if name in ("endpoint", "project", "user_project"):
                if not raw.strip():
                    raise InvalidArgumentError(f"option {name}= is empty in {url!r}")
                kwargs[name] = raw.strip()
            elif name == "anonymous":
                kwargs[name] = parse_bool(name, raw)
            elif name in ("connect_timeout", "read_timeout", "retry_deadline"):
                kwargs[name] = parse_float(name, raw, minimum=0.001)
            else:
                kwargs[name] = parse_int(name, raw, minimum=1)
        return cls(**kwargs)  # type: ignore[arg-type]

    def to_query(self) -> dict[str, str]:
        """The options that differ from the defaults, as URL query strings."""
        out: dict[str, str] = {}
        default = GcsOptions()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                out[f.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

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
        """Whether to send no credentials: the option, else ``True`` for an emulator."""
        if self.anonymous is not None:
            return self.anonymous
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
    scheme, location, options = split_url(url)
    if scheme not in SCHEMES:
        raise InvalidArgumentError(
            f"GcsStore opens gs:// URLs, got {url.split('?', 1)[0]!r}; write "
            "'gs://bucket/prefix'"
        )
    raw_bucket, _, raw_prefix = location.partition("/")
    check_bucket(unquote(raw_bucket), url)
    # The prefix is decoded and checked by the name rule every tier shares (silt.tierkit).
    prefix = decode_path(raw_prefix, what=f"the prefix of {url.split('?', 1)[0]!r}")
    return unquote(raw_bucket), normalize_prefix(prefix, url), options


def check_bucket(bucket: str, url: str = "") -> str:
    """Reject empty and clearly malformed bucket names (the server checks the rest)."""
    url = url.split("?", 1)[0]
    if "@" in bucket or "@" in url.split("://", 1)[-1].split("/", 1)[0]:
        raise InvalidArgumentError(
            "a gs:// URL must not contain '@': credentials never go in a URL (URLs end up in "
            f"logs). {CREDENTIALS_HINT}; use endpoint= for an emulator"
        )
    where = f" in {url!r}" if url else ""
    if not isinstance(bucket, str) or not bucket:
        raise InvalidArgumentError(
            f"no bucket named{where}; write 'gs://bucket' or 'gs://bucket/prefix'"
        )
    if any(ch in bucket for ch in "/?#:\\ \t\r\n\x00"):
        raise InvalidArgumentError(
            f"bucket name {bucket!r}{where} is not valid; GCS bucket names are 3-63 lower-case "
            "letters, digits, dots, hyphens and underscores (put an emulator's address in "
            "endpoint=, never credentials in the URL)"
        )
    return bucket


def normalize_prefix(prefix: str, url: str = "") -> str:
    """``"a/b"``, ``"/a/b/"`` -> ``"a/b/"``; ``""`` stays ``""``. Segments must be plain."""
    prefix = prefix.strip("/")
    if not prefix:
        return ""
    try:
        check_path(prefix, what="prefix")
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(
            f"prefix {prefix!r} in {url.split('?', 1)[0] or 'the gs:// URL'} is not a plain "
            f"'/'-separated path ({exc}); use a URL like 'gs://bucket/jobs/clicks'"
        ) from None
    return prefix + "/"
