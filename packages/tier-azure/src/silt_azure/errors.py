"""Mapping azure-core's and azure-storage-blob's errors onto silt's (:mod:`silt.errors`).

===========================================================  ======================================
what Azure (or the network) said                             silt error
===========================================================  ======================================
404 ``BlobNotFound`` (or a bodiless 404 on a blob)           ``NotFoundError``
404 ``ContainerNotFound``                                    ``StoreError`` ("container does not
                                                             exist")
401/403 (``AuthenticationFailed``, ``AuthorizationFailure``,  ``StoreError`` naming where
``AuthorizationPermissionMismatch``, ...), no credential      credentials come from (never the
found by ``DefaultAzureCredential``                          credentials)
408, 5xx (``ServerBusy``, ``InternalError``,                  ``RetriesExhaustedError`` (the SDK
``OperationTimedOut``), connection errors, timeouts, a body  retried them: the engine does not)
that broke mid-read (the SDK's downloader re-requests it)
429 (the SDK's policy does not retry it)                     ``TransientStoreError``
409 conflicts other than ``BlobAlreadyExists`` (leases,      ``StoreError`` naming the code
a container being deleted, ...)
anything else                                                ``StoreError``
===========================================================  ======================================

``409 BlobAlreadyExists`` (and ``412 ConditionNotMet``) on a create-only write and ``416
InvalidRange`` on a ranged read are answers, not errors: the store handles them before mapping.
Statuses mean what :func:`silt.tierkit.classify_status` says; Azure's error codes refine them
(:func:`status_kind`), and :func:`silt.tierkit.status_error` words the common cases.
Messages carry Azure's one-line explanation and error code, redacted: never the rest of the
error body (an authentication failure's details quote the request's signature).
"""

from __future__ import annotations

import http.client

import requests
import urllib3.exceptions
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    DecodeError,
    HttpResponseError,
    IncompleteReadError,
    ServiceRequestError,
    ServiceResponseError,
)
from silt.errors import RetriesExhaustedError, StoreError
from silt.tierkit import (
    StatusKind,
    chain_leaks,
    classify_status,
    redact,
    request_where,
    status_error,
)

from .config import CREDENTIALS_HINT

TRANSIENT_CODES = frozenset(
    {
        "ServerBusy",
        "InternalError",
        "OperationTimedOut",
        "ServiceUnavailable",
        "TooManyRequests",
    }
)
ACCESS_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationServiceMismatch",
        "AuthorizationSourceIPMismatch",
        "InsufficientAccountPermissions",
        "InvalidAuthenticationInfo",
        "AccountIsDisabled",
        "KeyBasedAuthenticationNotPermitted",
        "NoAuthenticationInformation",
    }
)

#: Exceptions that mean the connection or the response failed in transit: a retry may help.
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    ServiceRequestError,  # the request never got through (refused, DNS, connect timeout)
    ServiceResponseError,  # sent, but no (complete) answer: reset, read timeout
    requests.exceptions.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.Timeout,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
)

#: Failures of a response body while it was being read (the request itself was answered).
BODY_ERRORS: tuple[type[BaseException], ...] = (
    IncompleteReadError,
    DecodeError,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.IncompleteRead,
    http.client.IncompleteRead,
)


def error_code(exc: BaseException) -> tuple[str, int | None]:
    """Azure's error code (``"BlobNotFound"``; ``""`` if none) and the HTTP status."""
    code = getattr(exc, "error_code", None)
    code = str(getattr(code, "value", code) or "")
    status = getattr(exc, "status_code", None)
    if status is None:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        if not code and response is not None:
            headers = getattr(response, "headers", None) or {}
            code = str(headers.get("x-ms-error-code") or "")
    return code, status if isinstance(status, int) else None


def status_kind(code: str, status: int | None) -> StatusKind:
    """What an Azure answer means: its status (:func:`silt.tierkit.classify_status`), unless
    Azure's error code says more (``ServerBusy`` is transient; a 404 whose code is not
    ``BlobNotFound`` is no missing blob)."""
    kind = classify_status(status)
    if code == "BlobNotFound" or (kind is StatusKind.NOT_FOUND and not code):
        return StatusKind.NOT_FOUND
    if code in ACCESS_CODES or kind is StatusKind.AUTH:
        return StatusKind.AUTH
    if code in TRANSIENT_CODES or kind.transient:
        return kind if kind.transient else StatusKind.TRANSIENT
    return StatusKind.CLIENT if kind is StatusKind.NOT_FOUND else kind


def azure_message(exc: BaseException, secrets: tuple[str, ...] = ()) -> str:
    """The first line of the service's message (the explanation), redacted and shortened."""
    message = getattr(exc, "message", None) or str(exc)
    first = str(message).strip().splitlines()[0] if str(message).strip() else ""
    first = redact(first, secrets)
    return first if len(first) <= 240 else first[:237] + "..."


def leaks(exc: BaseException, secrets: tuple[str, ...] = ()) -> bool:
    """Whether the text of ``exc`` (or of what it wraps) holds a secret: a SAS in a request URL
    that requests put in a connection error, say. Such an exception is not chained to silt's.
    (The one check all tiers share: :func:`silt.tierkit.chain_leaks`.)"""
    return chain_leaks(exc, secrets)


def is_body_broken(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is a response body that broke mid-read."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, BODY_ERRORS):
            return True
        if isinstance(current, HttpResponseError) and error_code(current)[1] is not None:
            return False  # a real answer from the service
        # Follow what the SDK wrapped (not ``__context__``: requests raises a reset before any
        # answer inside an ``except ProtocolError``, and that is no broken body).
        inner = getattr(current, "inner_exception", None)
        current = inner if isinstance(inner, BaseException) else current.__cause__
    return False


def map_error(
    exc: BaseException,
    *,
    action: str,
    key: str | None,
    url: str,
    container: str,
    endpoint: str | None,
    secrets: tuple[str, ...] = (),
    source: str | None = None,
) -> StoreError:
    """Return the silt error for ``exc`` raised while ``action`` (a verb phrase) on ``key``.

    ``secrets`` are removed from any text taken from ``exc``; ``source`` says where the
    account's credential came from (``"AZURE_STORAGE_CONNECTION_STRING"``), for hints.
    """
    where = request_where(action, key, url)
    at = f" at {endpoint}" if endpoint else ""

    def clean(text: str) -> str:
        return redact(text, secrets)

    if isinstance(exc, HttpResponseError) and error_code(exc)[1] is not None:
        code, status = error_code(exc)
        message = azure_message(exc, secrets)
        detail = f"{code or status}" + (f": {message}" if message and message != code else "")
        if code == "ContainerNotFound":
            return StoreError(
                f"{where}: container {container!r} does not exist{at}; create it (az storage "
                "container create), or fix the container name or the account"
            )
        kind = status_kind(code, status)
        if kind is StatusKind.CONFLICT:
            return StoreError(f"{where}: conflict ({detail}){at}")
        origin = f"the credential from {source}" if source else "the credential"
        return status_error(
            kind, service="Azure", where=where, detail=detail, key=key, url=url,
            endpoint=endpoint, access_hint=f"check {origin}: is the key or SAS current (and "
            "the machine's clock right), and may it read, write, list and delete blobs in "
            f"container {container!r} (Entra ID: role 'Storage Blob Data Contributor')?",
            # The SDK's policy retried it (max_attempts), except a 429.
            retried=classify_status(status) is not StatusKind.THROTTLED,
        )
    if isinstance(exc, ClientAuthenticationError):
        # No HTTP answer: the credential itself failed (DefaultAzureCredential found nothing,
        # a token request was refused).
        return StoreError(
            f"{where}: could not get a credential ({type(exc).__name__}: "
            f"{azure_message(exc, secrets)}); {CREDENTIALS_HINT}"
        )
    if is_body_broken(exc):  # after the SDK's downloader re-requested it
        return RetriesExhaustedError(
            f"{where}: the response body broke mid-read{at} ({type(exc).__name__})"
        )
    if isinstance(exc, NETWORK_ERRORS) or (
        isinstance(exc, HttpResponseError) and isinstance(
            getattr(exc, "inner_exception", None), NETWORK_ERRORS)
    ):
        return RetriesExhaustedError(
            f"{where}: connection problem{at} ({type(exc).__name__}: "
            f"{azure_message(exc, secrets)})"
        )
    if isinstance(exc, AzureError):
        return StoreError(f"{where}: {type(exc).__name__}: {azure_message(exc, secrets)}")
    return StoreError(f"{where}: unexpected {type(exc).__name__}: {clean(str(exc))}")
