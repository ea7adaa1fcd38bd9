"""The S3, GCS and Azure tiers read every HTTP status through the one table in
``silt.tierkit.status``: for each status from 300 to 599, an SDK error that carries only that
status (no service error code, no special message) maps to the silt error its
:class:`~silt.tierkit.StatusKind` names. What differs between tiers is stated here: which
transient kinds the SDK does not retry, and the few kinds a tier words in its own way.

The SDK errors are the SDKs' own exception classes, built as each SDK builds them from an
answer; no request is sent.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from azure.core.exceptions import HttpResponseError
from botocore.exceptions import ClientError
from google.api_core import exceptions as api_exceptions
from silt.errors import NotFoundError, RetriesExhaustedError, StoreError, TransientStoreError
from silt.tierkit import StatusKind, classify_status
from silt_azure.errors import map_error as azure_map_error
from silt_gcs.errors import map_error as gcs_map_error
from silt_s3.errors import map_error as s3_map_error

STATUSES = range(300, 600)


def s3_error(status: int) -> StoreError:
    exc = ClientError({"Error": {"Code": "", "Message": "the message"},
                       "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")
    return s3_map_error(exc, action="read", key="k", url="s3://b/p", bucket="b",
                        endpoint="http://h")


def gcs_error(status: int) -> StoreError:
    exc = api_exceptions.from_http_status(status, "the message")
    return gcs_map_error(exc, action="read", key="k", url="gs://b/p", bucket="b",
                         endpoint="http://h")


def azure_error(status: int) -> StoreError:
    class Response:  # the parts of azure-core's HttpResponse that HttpResponseError reads
        status_code = status
        reason = "Reason"
        headers: ClassVar[dict[str, str]] = {}

        def text(self) -> str:
            return ""

    exc = HttpResponseError(message="the message", response=Response())
    return azure_map_error(exc, action="read", key="k", url="az://b/p", container="b",
                           endpoint="http://h")


#: tier -> (how to map a bare status, the service's name in messages, the transient kinds its
#: SDK does not retry, the statuses it words itself: status -> text of its message)
TIERS = {
    "s3": (s3_error, "S3", set(), {301: "is in another region", 307: "is in another region"}),
    "gs": (gcs_error, "GCS", set(), {}),
    "az": (azure_error, "Azure", {StatusKind.THROTTLED}, {409: ": conflict ("}),
}


@pytest.mark.parametrize("tier", sorted(TIERS))
def test_every_status_maps_through_the_shared_table(tier: str) -> None:
    to_error, service, unretried, own = TIERS[tier]
    seen: set[StatusKind] = set()
    for status in STATUSES:
        kind = classify_status(status)
        seen.add(kind)
        error = to_error(status)
        text = str(error)
        assert "read 'k' in " in text or type(error) is NotFoundError, (status, text)
        if status in own:
            assert type(error) is StoreError and own[status] in text, (status, text)
        elif kind is StatusKind.NOT_FOUND:
            assert type(error) is NotFoundError, (status, text)
            assert "'k' does not exist in" in text
        elif kind is StatusKind.AUTH:
            assert type(error) is StoreError and "access denied" in text, (status, text)
        elif kind.transient:
            expected = TransientStoreError if kind in unretried else RetriesExhaustedError
            assert type(error) is expected, (status, text)
            assert f"temporary {service} failure" in text, (status, text)
        else:
            assert type(error) is StoreError, (status, text)
            assert f"{service} request failed" in text, (status, text)
    assert seen >= {StatusKind.REDIRECT, StatusKind.NOT_FOUND, StatusKind.AUTH,
                    StatusKind.THROTTLED, StatusKind.TRANSIENT, StatusKind.CLIENT,
                    StatusKind.CONFLICT, StatusKind.PRECONDITION, StatusKind.RANGE}
