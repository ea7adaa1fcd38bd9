"""Mapping botocore's errors onto silt's (:mod:`silt.errors`), in one place.

=======================================================  ==========================================
what S3 (or the network) said                            silt error
=======================================================  ==========================================
``NoSuchKey``, 404 on an object                          ``NotFoundError``
``NoSuchBucket``                                         ``StoreError`` ("bucket does not exist")
``AccessDenied``, 403, bad/expired keys, no credentials  ``StoreError`` naming where credentials
                                                         come from (never the credentials)
5xx, ``SlowDown``, throttling, ``RequestTimeout``,       ``RetriesExhaustedError`` (botocore
connection errors, connect/read timeouts                 retried them: the engine does not)
409 ``ConditionalRequestConflict``, ``OperationAborted``  ``TransientStoreError``
301 ``PermanentRedirect``, 307 ``TemporaryRedirect``      ``StoreError`` ("set region=")
a body that broke mid-read                               ``BodyBrokenError`` (a whole read again)
anything else                                            ``StoreError``
=======================================================  ==========================================

``412 PreconditionFailed`` on a create-only write and ``416 InvalidRange`` on a ranged read are
answers, not errors: the store handles them before mapping. Statuses mean what
:func:`silt.tierkit.classify_status` says; S3's error codes refine them (:func:`status_kind`),
and :func:`silt.tierkit.status_error` words the common cases. Every message goes through
:func:`~silt.tierkit.redact`.
"""

from __future__ import annotations

import http.client

import urllib3.exceptions
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    CredentialRetrievalError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
    ResponseStreamingError,
    TokenRetrievalError,
)
from silt.errors import RetriesExhaustedError, StoreError
from silt.tierkit import StatusKind, classify_status, redact, request_where, status_error

#: S3's answers for a bucket in another region than the request's (301 PermanentRedirect,
#: 307 TemporaryRedirect while a new bucket's DNS name spreads).
REGION_CODES = frozenset({"PermanentRedirect", "TemporaryRedirect"})
REGION_STATUS = frozenset({301, 307})
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
        "ServiceUnavailable",
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)
ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AccountProblem",
        "InvalidSecurity",
        "RequestTimeTooSkewed",
    }
)

#: Exceptions that mean the connection or the response failed in transit: a retry may help.
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError,  # botocore's: endpoint, connect timeout, closed, proxy
    HTTPClientError,  # includes ReadTimeoutError
    ReadTimeoutError,
    ResponseStreamingError,
    IncompleteReadError,
    FlexibleChecksumError,  # body damaged in transit (checksum mismatch)
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
)

CREDENTIALS_HINT = (
    "check where credentials come from: the profile= option or AWS_PROFILE, "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY(/AWS_SESSION_TOKEN), ~/.aws/credentials, SSO "
    "(aws sso login), or the instance/container role"
)


def error_code(exc: ClientError) -> tuple[str, int | None]:
    """S3's error code (``"NoSuchKey"``, or the status as text for bodiless HEAD answers)
    and the HTTP status."""
    response = getattr(exc, "response", None) or {}
    code = str((response.get("Error") or {}).get("Code") or "")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return code, status if isinstance(status, int) else None


def status_kind(code: str, status: int | None) -> StatusKind:
    """What an S3 answer means: its status (:func:`silt.tierkit.classify_status`), unless S3's
    error code says more (``SlowDown`` is transient whatever its status; a 404 about something
    other than the object, such as ``NoSuchUpload``, is no missing object)."""
    kind = classify_status(status)
    if code in ("NoSuchKey", "NotFound") or (kind is StatusKind.NOT_FOUND and code in ("", "404")):
        return StatusKind.NOT_FOUND
    if code in ACCESS_CODES or kind is StatusKind.AUTH:
        return StatusKind.AUTH
    if code in TRANSIENT_CODES or kind.transient:
        return kind if kind.transient else StatusKind.TRANSIENT
    if code in REGION_CODES or status in REGION_STATUS:
        return StatusKind.REDIRECT  # what botocore's region redirects did not resolve
    if kind in (StatusKind.NOT_FOUND, StatusKind.REDIRECT):
        return StatusKind.CLIENT  # a 404 about something else; a redirect S3 does not send
    return kind


def map_error(
    exc: BaseException,
    *,
    action: str,
    key: str | None,
    url: str,
    bucket: str,
    endpoint: str | None,
    secrets: tuple[str | None, ...] = (),
) -> StoreError:
    """Return the silt error for ``exc`` raised while ``action`` (a verb phrase) on ``key``."""
    where = request_where(action, key, url)
    at = f" at {endpoint}" if endpoint else ""

    def clean(text: str) -> str:
        return redact(text, secrets)

    if isinstance(exc, ClientError):
        code, status = error_code(exc)
        message = clean(str(((exc.response or {}).get("Error") or {}).get("Message") or ""))
        detail = f"{code or status}" + (f": {message}" if message else "")
        if code == "NoSuchBucket":
            return StoreError(
                f"{where}: bucket {bucket!r} does not exist{at}; create it, or fix the bucket "
                "name or the endpoint (endpoint_url= option, AWS_ENDPOINT_URL_S3)"
            )
        kind = status_kind(code, status)
        if kind is StatusKind.REDIRECT:
            return StoreError(
                f"{where}: bucket {bucket!r} is in another region ({detail}); set region= to "
                "the bucket's region"
            )
        skew = "the machine's clock is off; " if code == "RequestTimeTooSkewed" else ""
        return status_error(
            kind, service="S3", where=where, detail=detail, key=key, url=url,
            endpoint=endpoint, access_hint=f"{skew}{CREDENTIALS_HINT}; and that they may "
            f"read, write, list and delete objects in bucket {bucket!r}",
            # botocore's retries covered it (max_attempts); a 409 conflict they do not retry.
            retried=classify_status(status) is not StatusKind.CONFLICT,
        )
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return StoreError(f"{where}: no usable AWS credentials found; {CREDENTIALS_HINT}")
    if isinstance(exc, ProfileNotFound):
        return StoreError(f"{where}: {clean(str(exc))}; {CREDENTIALS_HINT}")
    if isinstance(exc, (CredentialRetrievalError, TokenRetrievalError)):
        return StoreError(f"{where}: could not load credentials ({type(exc).__name__}); "
                          f"{CREDENTIALS_HINT}")
    if isinstance(exc, NETWORK_ERRORS):
        return RetriesExhaustedError(
            f"{where}: connection problem{at} ({type(exc).__name__}: {clean(str(exc))})"
        )
    if isinstance(exc, BotoCoreError):
        return StoreError(f"{where}: {type(exc).__name__}: {clean(str(exc))}")
    return StoreError(f"{where}: unexpected {type(exc).__name__}: {clean(str(exc))}")
