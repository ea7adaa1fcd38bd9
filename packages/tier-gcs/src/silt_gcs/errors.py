"""Mapping google-cloud-storage's errors onto silt's (:mod:`silt.errors`), in one place.

=======================================================  ==========================================
what GCS (or the network, or google-auth) said           silt error
=======================================================  ==========================================
404 on a read of an object                               ``NotFoundError``
404 on a write or a listing, "bucket does not exist"     ``StoreError`` ("bucket does not exist")
401, 403                                                 ``StoreError`` naming where Application
                                                         Default Credentials come from (never the
                                                         credentials) and the roles needed
403 for a retention policy or hold; requester pays       ``StoreError`` saying so
no Application Default Credentials, refresh refused      ``StoreError`` with the same hint
408, 429, 5xx, connection errors, timeouts, the SDK's    ``RetriesExhaustedError`` (the SDK
retry deadline exceeded (``RetryError``), the token      retried them: the engine does not)
server unreachable
a token refresh the server may accept later              ``TransientStoreError``
a body that came back corrupt                            ``BodyBrokenError`` (a whole read again)
anything else                                            ``StoreError``
=======================================================  ==========================================

``412 Precondition Failed`` on a create-only write and ``416 Requested Range Not Satisfiable``
on a ranged read are answers, not errors: the store handles them before mapping. Statuses mean
what :func:`silt.tierkit.classify_status` says, and :func:`silt.tierkit.status_error` words the
common cases. Every message goes through :func:`clean` (known secret shapes removed).
"""

from __future__ import annotations

import http.client
import re

import requests.exceptions
import urllib3.exceptions
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud.storage.exceptions import InvalidResponse
from silt.errors import RetriesExhaustedError, StoreError, TransientStoreError
from silt.tierkit import StatusKind, classify_status, redact, request_where, status_error

from .config import CREDENTIALS_HINT

#: Exceptions that mean the connection or the response failed in transit: a retry may help.
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
    OSError,
)

#: Everything the SDK raises that the store maps (silt's own errors pass through untouched).
SDK_ERRORS: tuple[type[BaseException], ...] = (
    api_exceptions.GoogleAPICallError,
    api_exceptions.RetryError,
    auth_exceptions.GoogleAuthError,
    InvalidResponse,
    requests.exceptions.RequestException,
    *NETWORK_ERRORS,
)

ROLES_HINT = (
    "and that the account may create, read, list and delete objects in bucket {bucket!r} "
    "(roles/storage.objectUser or roles/storage.objectAdmin)"
)

def clean(text: str, secrets: tuple[str | None, ...] = ()) -> str:
    """``text`` without known secret shapes (:func:`silt.tierkit.redact` knows Google's) or the
    given ``secrets``."""
    return redact(text, secrets)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an SDK error, if it has one."""
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        code = exc.code
        return int(code) if isinstance(code, int) else None
    if isinstance(exc, InvalidResponse):
        return getattr(getattr(exc, "response", None), "status_code", None)
    return None


_JSON_MESSAGE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _detail(exc: BaseException) -> str:
    """A one-line description of an API error: its status and the server's message."""
    status = status_of(exc)
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        reason = ""
        for error in exc.errors or []:
            if isinstance(error, dict) and error.get("message"):
                reason = str(error["message"])
                break
        text = str(exc.message or "")
        if not reason:  # media downloads keep the raw JSON body in the message
            match = _JSON_MESSAGE.search(text)
            reason = match.group(1) if match else ""
        if not reason and text:
            # "GET http://host/download/storage/v1/b/b/o/k?alt=media: Not Found" -> "Not Found"
            first = text.splitlines()[0].split(": ('Request failed", 1)[0]
            reason = first.split(": ", 1)[1] if ": " in first else first
        return f"{status} {reason}".strip()
    return f"{status}" if status is not None else type(exc).__name__


def bucket_missing(exc: BaseException) -> bool:
    """Whether a 404 says the *bucket* does not exist (GCS: "The specified bucket does not
    exist."; emulators may answer a bare "Not Found" for both cases)."""
    text = str(getattr(exc, "message", "") or exc).lower()
    return "bucket does not exist" in text or "no such bucket" in text


def map_error(
    exc: BaseException,
    *,
    action: str,
    key: str | None,
    url: str,
    bucket: str,
    endpoint: str | None,
    missing: str = "object",
) -> StoreError:
    """Return the silt error for ``exc`` raised while ``action`` (a verb phrase) on ``key``.

    ``missing`` says what a 404 means for this request: ``"object"`` (reads: the object does
    not exist) or ``"bucket"`` (writes, listings: only the bucket can be missing).
    """
    where = request_where(action, key, url)
    at = f" at {endpoint}" if endpoint else ""

    if isinstance(exc, api_exceptions.RetryError):
        cause = exc.cause
        what = f"{type(cause).__name__}: {clean(str(cause))[:300]}" if cause else clean(str(exc))
        return RetriesExhaustedError(
            f"{where}: still failing when the retry deadline ran out{at} ({what}); raise "
            "retry_deadline= or check the network"
        )
    status = status_of(exc)
    if status is not None:
        detail = clean(_detail(exc))
        kind = classify_status(status)
        if kind is StatusKind.NOT_FOUND and (missing == "bucket" or bucket_missing(exc)):
            return StoreError(
                f"{where}: bucket {bucket!r} does not exist{at}; create it, or fix the bucket "
                "name or the endpoint (endpoint= option, STORAGE_EMULATOR_HOST)"
            )
        text = detail.lower()
        requester_pays = "requester pays" in text or "user project" in text
        if 400 <= status < 500 and kind is not StatusKind.NOT_FOUND and requester_pays:
            return StoreError(
                f"{where}: bucket {bucket!r} is requester-pays ({detail}); set "
                "user_project= to the project to bill"
            )
        if status == 403 and ("retention" in text or "hold" in text):
            return StoreError(
                f"{where}: the object is under a retention policy or an object hold ({detail}); "
                "it cannot be deleted or replaced until that ends"
            )
        # The SDK's retries covered a transient one (max_attempts, retry_deadline).
        return status_error(
            kind, service="GCS", where=where, detail=detail, key=key, url=url,
            endpoint=endpoint, access_hint=f"check the credentials: {CREDENTIALS_HINT}; "
            f"{ROLES_HINT.format(bucket=bucket)}",
        )
    if isinstance(exc, auth_exceptions.InvalidOperation) and "anonymous" in str(exc).lower():
        # A 401 to anonymous requests: the session cannot refresh "anonymous credentials".
        return StoreError(
            f"{where}: the server refused anonymous access{at}; drop anonymous=true (or the "
            f"emulator settings) to use Google credentials. {CREDENTIALS_HINT}"
        )
    if isinstance(exc, auth_exceptions.DefaultCredentialsError):
        return StoreError(
            f"{where}: no usable Google credentials ({clean(str(exc))[:300]}). "
            f"{CREDENTIALS_HINT}. For an emulator set STORAGE_EMULATOR_HOST or endpoint= "
            "(anonymous access)"
        )
    if isinstance(exc, auth_exceptions.RefreshError):
        summary = f"{where}: could not obtain an access token ({type(exc).__name__}: " \
                  f"{clean(str(exc))[:300]})"
        if getattr(exc, "retryable", False):
            return TransientStoreError(summary + "; the token server had a temporary problem")
        return StoreError(f"{summary}; the credentials may be expired or revoked. "
                          f"{CREDENTIALS_HINT}")
    if isinstance(exc, auth_exceptions.TransportError):
        return RetriesExhaustedError(
            f"{where}: could not reach the credentials server ({clean(str(exc))[:300]})"
        )
    if isinstance(exc, NETWORK_ERRORS) or isinstance(exc, requests.exceptions.RequestException):
        return RetriesExhaustedError(
            f"{where}: connection problem{at} ({type(exc).__name__}: {clean(str(exc))[:500]})"
        )
    if isinstance(exc, auth_exceptions.GoogleAuthError):
        return StoreError(f"{where}: {type(exc).__name__}: {clean(str(exc))[:300]}; "
                          f"{CREDENTIALS_HINT}")
    return StoreError(f"{where}: unexpected {type(exc).__name__}: {clean(str(exc))[:500]}")
