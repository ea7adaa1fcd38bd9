"""What an HTTP status means to a tier, in one table, and the silt error for each meaning.

Every object store answers over HTTP, so the S3, GCS and Azure tiers share one reading of
statuses (:data:`STATUS_KINDS`, :func:`classify_status`). A tier maps only its SDK's exception
shape onto a :class:`StatusKind` (where the service's error code says more than the status, as
S3's ``SlowDown``, the tier decides), handles what is particular to its service (a missing
bucket, a region redirect), and leaves the rest to :func:`status_error`: not found, access
denied, a temporary failure, any other failed request.

A simplification, stated: a status alone cannot tell throttling from an overloaded server, so
only ``429`` reads as :attr:`StatusKind.THROTTLED`; ``503`` (S3's ``SlowDown``, Azure's
``ServerBusy``) reads as :attr:`StatusKind.TRANSIENT`. Both are transient.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from ..errors import NotFoundError, RetriesExhaustedError, StoreError, TransientStoreError


class StatusKind(enum.Enum):
    """What an answer's status means for the request that got it."""

    OK = "ok"  #: 2xx
    REDIRECT = "redirect"  #: the resource is elsewhere (S3: a bucket in another region)
    PRECONDITION = "precondition"  #: a conditional request's condition did not hold
    NOT_FOUND = "not_found"  #: the object (or what the request names) does not exist
    AUTH = "auth"  #: the credentials are missing, wrong, expired, or lack a permission
    CONFLICT = "conflict"  #: the request conflicts with the resource's state (a lease, ...)
    RANGE = "range"  #: a ranged read that starts past the end
    THROTTLED = "throttled"  #: too many requests: a retry after a pause may help
    TRANSIENT = "transient"  #: a timeout or a server-side failure: a retry may help
    CLIENT = "client"  #: any other refusal of the request (4xx): retrying will not help
    UNKNOWN = "unknown"  #: no status (no answer), or one HTTP does not define

    @property
    def transient(self) -> bool:
        """Whether a retry may help (throttling, timeouts, server failures)."""
        return self in _TRANSIENT


_TRANSIENT = frozenset({StatusKind.THROTTLED, StatusKind.TRANSIENT})

#: The statuses with a meaning of their own; other 2xx are ``OK``, 3xx ``REDIRECT``, 4xx
#: ``CLIENT``, 5xx ``TRANSIENT`` (a server's failure, including ones it has no name for).
STATUS_KINDS: Mapping[int, StatusKind] = MappingProxyType({
    304: StatusKind.PRECONDITION,  # If-None-Match on a read: the condition did not hold
    401: StatusKind.AUTH,
    403: StatusKind.AUTH,
    404: StatusKind.NOT_FOUND,
    408: StatusKind.TRANSIENT,  # request timeout
    409: StatusKind.CONFLICT,
    412: StatusKind.PRECONDITION,
    416: StatusKind.RANGE,
    429: StatusKind.THROTTLED,
})

_BY_CLASS = {2: StatusKind.OK, 3: StatusKind.REDIRECT, 4: StatusKind.CLIENT,
             5: StatusKind.TRANSIENT}


def classify_status(status: int | None) -> StatusKind:
    """The :class:`StatusKind` of an HTTP status; ``UNKNOWN`` for ``None`` (no answer) or a
    number outside 200-599."""
    if not isinstance(status, int) or isinstance(status, bool):
        return StatusKind.UNKNOWN
    kind = STATUS_KINDS.get(status)
    if kind is not None:
        return kind
    return _BY_CLASS.get(status // 100, StatusKind.UNKNOWN) if 200 <= status < 600 \
        else StatusKind.UNKNOWN


def request_where(action: str, key: str | None, url: str) -> str:
    """How messages name a request: ``"read 'k' in s3://b/p"`` (``action`` is a verb phrase;
    without a key, ``"list s3://b/p"``)."""
    return f"{action} {key!r} in {url}" if key is not None else f"{action} {url}"


def status_error(
    kind: StatusKind,
    *,
    service: str,
    where: str,
    detail: str,
    key: str | None,
    url: str,
    endpoint: str | None,
    access_hint: str,
    retried: bool = True,
) -> StoreError:
    """The silt error for an HTTP answer of ``kind`` that the tier's own rules did not claim.

    ``NOT_FOUND``: :class:`~silt.errors.NotFoundError` (the object ``key``). ``AUTH``: a
    :class:`~silt.errors.StoreError` saying access was denied, then ``access_hint`` (where
    credentials come from, which permissions are needed; never a credential). A transient kind:
    :class:`~silt.errors.RetriesExhaustedError` when the SDK ``retried`` it already (the engine
    does not retry again), else :class:`~silt.errors.TransientStoreError` (the engine retries).
    Anything else: a ``StoreError`` saying the ``service`` request failed. ``where`` comes from
    :func:`request_where`; ``detail`` (the status or code and the service's message) must be
    redacted already.
    """
    at = f" at {endpoint}" if endpoint else ""
    if kind is StatusKind.NOT_FOUND:
        return NotFoundError(f"object {key!r} does not exist in {url}")
    if kind is StatusKind.AUTH:
        return StoreError(f"{where}: access denied ({detail}){at}; {access_hint}")
    if kind.transient:
        error = RetriesExhaustedError if retried else TransientStoreError
        return error(f"{where}: temporary {service} failure ({detail}){at}")
    return StoreError(f"{where}: {service} request failed ({detail}){at}")


__all__ = [
    "STATUS_KINDS",
    "StatusKind",
    "classify_status",
    "request_where",
    "status_error",
]
