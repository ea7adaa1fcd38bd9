"""``s3://`` URLs and their options.

URL: ``s3://bucket`` or ``s3://bucket/prefix/path``, optionally with query options::

    s3://state-bucket/jobs/clicks?region=eu-west-1
    s3://state/jobs/clicks?endpoint_url=http://127.0.0.1:9000&addressing_style=path

Every option falls back to the standard AWS configuration, so with the usual environment
variables (or a profile, or an instance role) ``silt.open("s3://bucket/prefix")`` just works:

=========================  ========================================================================
option                     default / fallback
=========================  ========================================================================
``endpoint_url``           ``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL`` (unless
                           ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`` is true), then botocore's own
                           resolution (``endpoint_url`` in the profile, else AWS)
``region``                 ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` / the profile, else us-east-1
``profile``                ``AWS_PROFILE``, else the default credential chain
``addressing_style``       ``path`` with a custom endpoint (MinIO & co.), ``auto`` on AWS
``multipart_threshold``    objects larger than this are uploaded in parts (default 64MiB)
``multipart_part_size``    part size (default 16MiB; S3's minimum is 5MiB)
``multipart_concurrency``  parts of one object uploaded at once (default 8)
``max_pool_connections``   HTTP connections kept per store (default 64: a cold read's wave of
                           ``read_parallelism`` + 1 GETs beside ``upload_parallelism`` uploads of
                           ``multipart_concurrency`` parts each, at the engine's defaults)
``connect_timeout``        seconds (default 5)
``read_timeout``           seconds without a byte from the server (default 30)
``max_attempts``           botocore's attempts per request, "standard" retry mode (default 5)
``read_attempts``          tries of a whole read whose body broke mid-transfer (default 4)
``hedge_after_ms``         a read not answered after this many ms sends a second request, the first
                           answer wins (default 0: off; silt.tierkit.hedge)
``hedge_quantile``         hedge after this quantile of recent read latencies (e.g. 0.95; at least
                           ``hedge_after_ms``; default 0: off)
``checksums``              ``when_supported`` (botocore's default: CRC32 on uploads) or
                           ``when_required`` (for S3-compatible stores that reject them)
``verify``                 ``true`` / ``false`` / path to a CA bundle for TLS verification
=========================  ========================================================================

Credentials never go in the URL, nor in the endpoint (``http://user:password@host`` and endpoints
with a query are refused, from the option and from the environment alike, without echoing them):
use the standard chain (environment variables, shared
credentials/config files and ``profile=``, SSO, container and instance roles), pass them in code
as storage options, or pass a ``boto3.Session`` to :class:`silt_s3.S3Store` in code.

Storage options (``silt.open(url, storage_options={...})``, silt_spark's ``storage_options=``
and ``spark.silt.storage.<name>``) accept every option above plus the credentials, which take
precedence over the credential chain and are never shown in ``repr`` or messages:

=========================  ========================================================================
storage option             boto3 parameter
=========================  ========================================================================
``access_key_id``          ``aws_access_key_id`` (needs ``secret_access_key``)
``secret_access_key``      ``aws_secret_access_key``
``session_token``          ``aws_session_token`` (temporary credentials)
``region``                 ``region_name``
``endpoint_url``           ``endpoint_url``
=========================  ========================================================================
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from silt.errors import InvalidArgumentError
from silt.tierkit import (
    NetworkOptions,
    check_endpoint,
    check_root_name,
    parse_bool,
    parse_root_url,
)

SCHEME = "s3"
MiB = 1024 * 1024

#: S3's smallest part (every part but the last) and its largest number of parts.
MIN_PART_SIZE = 5 * MiB
MAX_PARTS = 10_000

ADDRESSING_STYLES = ("auto", "path", "virtual")
CHECKSUM_MODES = ("when_supported", "when_required")

#: What to do instead of putting credentials into an endpoint URL.
ENDPOINT_HINT = (
    "give only the server's address (as in 'http://127.0.0.1:9000') and take credentials from "
    "the AWS credential chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile (profile=name "
    "or AWS_PROFILE), SSO, or an instance/container role"
)

#: Options that look like credentials: rejected with a pointer to the credential chain.
_CREDENTIAL_OPTIONS = frozenset(
    {
        "access_key",
        "access_key_id",
        "aws_access_key_id",
        "secret",
        "secret_key",
        "secret_access_key",
        "aws_secret_access_key",
        "session_token",
        "aws_session_token",
        "token",
    }
)


@dataclass(frozen=True)
class S3Options(NetworkOptions):
    """Options of one :class:`~silt_s3.S3Store`; ``None`` means "use the standard fallback".

    A frozen, picklable value: a store shipped to another process carries these options, not a
    client, and opens its own client there.
    """

    SCHEME = SCHEME
    SIZES: ClassVar[Mapping[str, int]] = {
        "multipart_threshold": 1, "multipart_part_size": MIN_PART_SIZE
    }
    CHOICES: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "addressing_style": ADDRESSING_STYLES, "checksums": CHECKSUM_MODES
    }
    CREDENTIAL_OPTIONS = _CREDENTIAL_OPTIONS
    CREDENTIAL_HINT = (
        "Use the AWS credential chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile "
        "(profile=name or AWS_PROFILE), SSO, or an instance/container role"
    )
    SECRET_OPTIONS = frozenset({"access_key_id", "secret_access_key", "session_token"})

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    addressing_style: str | None = None
    multipart_threshold: int = 64 * MiB
    multipart_part_size: int = 16 * MiB
    multipart_concurrency: int = 8
    max_pool_connections: int = 64
    checksums: str = "when_supported"
    verify: bool | str | None = None
    access_key_id: str | None = dataclasses.field(default=None, repr=False)
    secret_access_key: str | None = dataclasses.field(default=None, repr=False)
    session_token: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise InvalidArgumentError(
                "storage options access_key_id and secret_access_key go together: give both "
                "(and session_token for temporary credentials) or neither"
            )
        if self.session_token is not None and self.access_key_id is None:
            raise InvalidArgumentError(
                "storage option session_token needs access_key_id and secret_access_key"
            )
        if self.endpoint_url is not None:
            object.__setattr__(self, "endpoint_url", check_endpoint(
                self.endpoint_url, what="the endpoint in endpoint_url=", hint=ENDPOINT_HINT))
        if self.multipart_part_size < MIN_PART_SIZE:
            raise InvalidArgumentError(
                f"multipart_part_size={self.multipart_part_size} is below S3's minimum part "
                f"size of {MIN_PART_SIZE} bytes (5MiB)"
            )
        if self.multipart_threshold < 1:
            raise InvalidArgumentError("multipart_threshold must be at least 1 byte")
        if self.addressing_style is not None and self.addressing_style not in ADDRESSING_STYLES:
            raise InvalidArgumentError(
                f"addressing_style must be one of {', '.join(ADDRESSING_STYLES)}"
            )
        if self.checksums not in CHECKSUM_MODES:
            raise InvalidArgumentError(f"checksums must be one of {', '.join(CHECKSUM_MODES)}")
        for name in ("multipart_concurrency", "max_pool_connections"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name} must be >= 1")

    @classmethod
    def parse_option(cls, name: str, raw: str, field: dataclasses.Field[Any], url: str) -> Any:
        """``verify`` is a boolean or the path of a CA bundle; the rest as for every tier."""
        if name == "verify" and raw.strip().lower() not in (
            "1", "0", "true", "false", "yes", "no", "on", "off"
        ):
            return raw
        if name == "verify":
            return parse_bool(name, raw)
        return super().parse_option(name, raw, field, url)

    def resolved_endpoint(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The endpoint URL from the option or the standard environment variables."""
        if self.endpoint_url:
            return self.endpoint_url
        env = os.environ if environ is None else environ
        if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
            return None
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
            value = env.get(name, "").strip()
            if value:
                return check_endpoint(value, what=f"the endpoint in {name}", hint=ENDPOINT_HINT)
        return None


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split ``s3://bucket/prefix?opts`` into ``(bucket, prefix, options)``.

    ``prefix`` is ``""`` or a ``/``-terminated key prefix (``"jobs/clicks/"``); percent-escapes
    in the path are decoded.
    """
    return parse_root_url(url, (SCHEME,), check_root=check_bucket, example="s3://bucket/prefix")


def check_bucket(bucket: str, url: str = "") -> str:
    """Reject empty and clearly malformed bucket names (the server checks the rest)."""
    return check_root_name(
        bucket, url, what="bucket", example="s3://bucket/prefix",
        rule="S3 bucket names are 3-63 lower-case letters, digits, dots and hyphens (put the "
             "endpoint in endpoint_url=, never credentials in the URL)",
        advice="Use the AWS credential chain (environment, profile=, SSO, roles) and "
               "endpoint_url= for a custom endpoint",
    )
