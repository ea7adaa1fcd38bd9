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
``max_pool_connections``   HTTP connections kept per store (default 32)
``connect_timeout``        seconds (default 5)
``read_timeout``           seconds without a byte from the server (default 30)
``max_attempts``           botocore's attempts per request, "standard" retry mode (default 5)
``read_attempts``          tries of a whole read whose body broke mid-transfer (default 4)
``checksums``              ``when_supported`` (botocore's default: CRC32 on uploads) or
                           ``when_required`` (for S3-compatible stores that reject them)
``verify``                 ``true`` / ``false`` / path to a CA bundle for TLS verification
=========================  ========================================================================

Credentials never go in the URL, nor in the endpoint (``http://user:password@host`` and endpoints
with a query are refused, from the option and from the environment alike, without echoing them):
use the standard chain (environment variables, shared
credentials/config files and ``profile=``, SSO, container and instance roles), or pass a
``boto3.Session`` to :class:`silt_s3.S3Store` in code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from silt.errors import InvalidArgumentError
from silt.store import split_url
from silt.tierkit import (
    check_endpoint,
    check_options,
    check_path,
    decode_path,
    parse_bool,
    parse_choice,
    parse_float,
    parse_int,
    parse_size,
    public_url,
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
class S3Options:
    """Options of one :class:`~silt_s3.S3Store`; ``None`` means "use the standard fallback".

    A frozen, picklable value: a store shipped to another process carries these options, not a
    client, and opens its own client there.
    """

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    addressing_style: str | None = None
    multipart_threshold: int = 64 * MiB
    multipart_part_size: int = 16 * MiB
    multipart_concurrency: int = 8
    max_pool_connections: int = 32
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_attempts: int = 5
    read_attempts: int = 4
    checksums: str = "when_supported"
    verify: bool | str | None = None

    def __post_init__(self) -> None:
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
        for name in ("multipart_concurrency", "max_pool_connections", "max_attempts",
                     "read_attempts"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name} must be >= 1")

    #: Option names accepted in a URL query (the dataclass fields).
    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_query(cls, url: str, options: Mapping[str, str]) -> S3Options:
        """Parse URL query options (strings); unknown options are an error that lists them."""
        url = url.split("?", 1)[0]  # never echo query values: they might hold secrets
        secret_like = sorted(set(options) & _CREDENTIAL_OPTIONS)
        if secret_like:
            raise InvalidArgumentError(
                f"option(s) {', '.join(secret_like)} look like credentials; silt never takes "
                "credentials from a URL (URLs end up in logs). Use the AWS credential chain: "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile (profile=name or "
                "AWS_PROFILE), SSO, or an instance/container role"
            )
        check_options(url, options, cls.names(), SCHEME)
        kwargs: dict[str, object] = {}
        for name, raw in options.items():
            if name in ("endpoint_url", "region", "profile"):
                if not raw.strip():
                    raise InvalidArgumentError(f"option {name}= is empty in {url!r}")
                kwargs[name] = raw.strip()
            elif name == "addressing_style":
                kwargs[name] = parse_choice(name, raw, ADDRESSING_STYLES)
            elif name == "checksums":
                kwargs[name] = parse_choice(name, raw, CHECKSUM_MODES)
            elif name in ("multipart_threshold",):
                kwargs[name] = parse_size(name, raw, minimum=1)
            elif name == "multipart_part_size":
                kwargs[name] = parse_size(name, raw, minimum=MIN_PART_SIZE)
            elif name in ("connect_timeout", "read_timeout"):
                kwargs[name] = parse_float(name, raw, minimum=0.001)
            elif name == "verify":
                lowered = raw.strip().lower()
                kwargs[name] = (
                    parse_bool(name, raw)
                    if lowered in ("1", "0", "true", "false", "yes", "no", "on", "off")
                    else raw
                )
            else:
                kwargs[name] = parse_int(name, raw, minimum=1)
        return cls(**kwargs)  # type: ignore[arg-type]

    def to_query(self) -> dict[str, str]:
        """The options that differ from the defaults, as URL query strings."""
        out: dict[str, str] = {}
        default = S3Options()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                out[f.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

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
    scheme, location, options = split_url(url)
    if scheme != SCHEME:
        raise InvalidArgumentError(
            f"S3Store opens s3:// URLs, got {public_url(url)!r}; write 's3://bucket/prefix'"
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
            "an s3:// URL must not contain '@': credentials never go in a URL (URLs end up in "
            "logs). Use the AWS credential chain (environment, profile=, SSO, roles) and "
            "endpoint_url= for a custom endpoint"
        )
    where = f" in {url!r}" if url else ""
    if not isinstance(bucket, str) or not bucket:
        raise InvalidArgumentError(
            f"no bucket named{where}; write 's3://bucket' or 's3://bucket/prefix'"
        )
    if any(ch in bucket for ch in "/?#:\\ \t\r\n\x00"):
        raise InvalidArgumentError(
            f"bucket name {bucket!r}{where} is not valid; S3 bucket names are 3-63 lower-case "
            "letters, digits, dots and hyphens (put the endpoint in endpoint_url=, never "
            "credentials in the URL)"
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
            f"prefix {prefix!r} in {url.split('?', 1)[0] or 'the S3 URL'} is not a plain "
            f"'/'-separated path ({exc}); use a URL like 's3://bucket/jobs/clicks'"
        ) from None
    return prefix + "/"
