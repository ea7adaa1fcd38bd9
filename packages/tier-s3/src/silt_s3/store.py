"""``S3Store``: the silt object-store contract on Amazon S3 or any S3-compatible store.

Layout: the object ``k`` of a store opened on ``s3://bucket/prefix`` is the S3 key
``prefix/k``; listings return keys relative to the prefix.

How each method maps onto S3:

* ``get`` / ``get_range``: ``GetObject``, with ``Range: bytes=a-b`` for ranges. A range wholly
  past the end (S3 answers ``416 InvalidRange``) and an empty range return ``b""``; an empty
  range is a ``HeadObject`` so that a missing object still raises ``NotFoundError``. The body
  is read whole and its length checked; a body that breaks mid-read (reset, truncated,
  checksum mismatch) is retried as a whole read, ``read_attempts`` times (botocore retries
  requests, not bodies).
* ``put``: ``PutObject``; above ``multipart_threshold`` a multipart upload whose parts go up in
  parallel (``multipart_concurrency``), aborted if anything fails.
* ``put_if_absent``: ``PutObject`` (or ``CompleteMultipartUpload``) with ``If-None-Match: *``.
  ``412 PreconditionFailed`` means the key exists: ``False``. ``409
  ConditionalRequestConflict`` (a concurrent conditional write) is retried. When a response is
  lost, botocore's retry can answer 412 although the first attempt created the object: the
  method then returns ``False``, as the contract allows, and the engine resolves it with the
  writer token in the manifest.
* ``delete_many``: ``DeleteObjects`` in batches of 1,000 (quiet mode); per-key errors are
  checked, ``NoSuchKey`` ignored.
* ``list``: ``ListObjectsV2`` with ``Prefix`` and ``StartAfter``, paged lazily.

Requirements on the server: strong read-after-write consistency and conditional writes
(``If-None-Match: *``), which AWS S3 has had since 2020 and 2024. An S3-compatible store that
ignores ``If-None-Match`` would let two writers commit the same version: check yours.

Thread safety: every method may be called from any number of threads. The store holds one
boto3 client (clients are thread-safe; the session is used only while the client is built) with
``max_pool_connections`` connections, and one thread pool for multipart parts.

Retries, by the policy of :mod:`silt.tierkit.retry`: botocore retries each request
("standard" mode: ``max_attempts`` tries in all, exponential backoff with jitter) on throttling,
5xx and connection errors, and what still fails surfaces as ``RetriesExhaustedError``, which the
engine does not retry again. silt repeats only what botocore does not: a whole read whose body
broke (``read_attempts`` reads) and a create-only write answered ``409`` (``max_attempts``). A
request that keeps failing is sent at most ``max_attempts`` times, a whole read at most
``max_attempts * read_attempts`` times. Messages never contain credentials.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from typing import Any, TypeVar

import botocore.config
import botocore.session
from botocore.exceptions import BotoCoreError, ClientError
from silt.errors import StoreError, TransientStoreError
from silt.store import ObjectInfo
from silt.tierkit import (
    BodyBrokenError,
    StatusKind,
    TierStore,
    classify_status,
    retry_on,
    safe_cause,
)

from . import sdk
from .config import MAX_PARTS, SCHEME, S3Options, check_bucket, parse_url
from .errors import NETWORK_ERRORS, error_code, map_error

T = TypeVar("T")

#: DeleteObjects takes at most this many keys per request.
DELETE_BATCH = 1000

#: Exceptions the SDK raises that the store maps (silt's own errors pass through untouched).
_SDK_ERRORS: tuple[type[BaseException], ...] = (BotoCoreError, ClientError, *NETWORK_ERRORS)


class _Conflict(TransientStoreError):
    """409 ConditionalRequestConflict: a concurrent conditional write; retry the request."""


class S3Store(TierStore):
    """Objects under ``s3://bucket/prefix``. See the module docstring for the mapping.

    ``options`` tune the client (see :mod:`silt_s3.config`). ``session`` (a ``boto3.Session``)
    supplies credentials and region in code, instead of the standard chain; ``client`` replaces
    the client entirely (tests, custom middleware). Without either the store is picklable: it
    travels as its URL and options and opens a fresh client where it lands.
    """

    scheme = SCHEME
    options_type = S3Options
    sdk_errors = _SDK_ERRORS
    handles = "session=/client="
    parse_url = staticmethod(parse_url)

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        options: S3Options | None = None,
        session: Any = None,
        client: Any = None,
    ) -> None:
        super().__init__(check_bucket(bucket), prefix, options,
                         picklable=session is None and client is None)
        self.bucket = self.root
        self.options: S3Options
        self.endpoint = self.options.resolved_endpoint()
        if client is None:
            client = self._make_client(session)
        self._client = client
        self.endpoint = getattr(getattr(client, "meta", None), "endpoint_url", self.endpoint)

    # --- construction --------------------------------------------------------------------------

    def _make_client(self, session: Any) -> Any:
        """A client for the options: from ``session`` (a ``boto3.Session`` given in code) or,
        without one, the process's client of the same configuration (:func:`sdk.shared_client`:
        a new botocore session sharing the process's service models, with the options'
        credentials when they name them)."""
        opts = self.options
        addressing = opts.addressing_style or ("path" if self.endpoint else "auto")
        if session is not None:
            return self._build_client(session, opts.region or session.region_name, addressing)
        digest = sdk.configuration_digest((
            opts.profile, opts.region, opts.access_key_id, opts.secret_access_key,
            opts.session_token, self.endpoint, addressing, opts.max_attempts,
            opts.connect_timeout, opts.read_timeout, opts.max_pool_connections, opts.checksums,
            opts.verify,
        ))
        return sdk.shared_client(digest, lambda: self._build_client(None, opts.region,
                                                                     addressing))

    def _build_client(self, session: Any, region: str | None, addressing: str) -> Any:
        """A new client: on ``session`` (given in code), else on a new botocore session of the
        options' profile (region from the options, the session's configuration, else
        ``us-east-1``)."""
        opts = self.options
        kwargs: dict[str, Any] = {}
        try:
            if session is None:
                session = sdk.session(opts.profile)
                region = region or sdk.region(session)
                if opts.access_key_id is not None:
                    kwargs.update(aws_access_key_id=opts.access_key_id,
                                  aws_secret_access_key=opts.secret_access_key,
                                  aws_session_token=opts.session_token)
        except _SDK_ERRORS as exc:
            raise self._error(exc, "open", None) from None
        config = botocore.config.Config(
            region_name=region or "us-east-1",
            retries={"mode": "standard", "total_max_attempts": opts.max_attempts},
            connect_timeout=opts.connect_timeout,
            read_timeout=opts.read_timeout,
            max_pool_connections=opts.max_pool_connections,
            tcp_keepalive=True,
            s3={"addressing_style": addressing},
            request_checksum_calculation=opts.checksums,
            response_checksum_validation=opts.checksums,
            user_agent_appid="silt",
        )
        kwargs["config"] = config
        if self.endpoint:
            kwargs["endpoint_url"] = self.endpoint
        if opts.verify is not None:
            kwargs["verify"] = opts.verify
        try:
            if isinstance(session, botocore.session.Session):
                return session.create_client("s3", **kwargs)
            return session.client("s3", **kwargs)
        except _SDK_ERRORS as exc:
            raise self._error(exc, "open", None) from None
        except ValueError as exc:  # e.g. a malformed endpoint URL
            raise StoreError(f"cannot open {self.url}: {exc}") from None

    def _release(self) -> None:
        """Close the client's connections, unless it is the process's shared client of this
        configuration (:mod:`silt_s3.sdk`: other stores use it)."""
        close = getattr(self._client, "close", None)
        if close is not None and not sdk.is_shared(self._client):
            close()

    # --- helpers -------------------------------------------------------------------------------

    def _error(self, exc: BaseException, action: str, key: str | None) -> StoreError:
        return map_error(
            exc, action=action, key=key, url=self.url, bucket=self.bucket, endpoint=self.endpoint,
            secrets=self._secrets,
        )

    # --- reads ---------------------------------------------------------------------------------

    def _head(self, key: str, full: str) -> None:
        self._request("read", key, lambda: self._client.head_object(Bucket=self.bucket, Key=full))

    def _read(self, key: str, full: str, start: int | None, length: int | None) -> bytes:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
        if start is not None and length is not None:
            kwargs["Range"] = f"bytes={start}-{start + length - 1}"
        try:
            response = self._client.get_object(**kwargs)
        except ClientError as exc:
            code, status = error_code(exc)
            if "Range" in kwargs and (code == "InvalidRange"
                                      or classify_status(status) is StatusKind.RANGE):
                return b""  # the range starts at or past the end (or the object is empty)
            raise self._error(exc, "read", key) from safe_cause(exc)
        except _SDK_ERRORS as exc:
            raise self._error(exc, "read", key) from safe_cause(exc)
        body = response["Body"]
        try:
            data = body.read()
        except _SDK_ERRORS as exc:
            raise BodyBrokenError(
                f"read {key!r} in {self.url}: the response body broke mid-read "
                f"({type(exc).__name__}); the whole read is retried"
            ) from safe_cause(exc)
        finally:
            body.close()
        expected = response.get("ContentLength")
        if isinstance(expected, int) and len(data) != expected:
            raise BodyBrokenError(
                f"read {key!r} in {self.url}: got {len(data)} of {expected} bytes"
            )
        if start is not None and length is not None and not response.get("ContentRange"):
            # A server that ignored the Range header sent the whole object: cut it here.
            data = data[start : start + length]
        return data

    # --- writes --------------------------------------------------------------------------------

    def _put(self, key: str, full: str, payload: bytes) -> None:
        """``PutObject``, multipart above ``multipart_threshold``."""
        if len(payload) > self.options.multipart_threshold:
            self._multipart(key, full, payload, create_only=False)
            return
        self._request(
            "write",
            key,
            lambda: self._client.put_object(Bucket=self.bucket, Key=full, Body=payload),
        )

    def _create(self, key: str, full: str, payload: bytes) -> bool:
        """Create the object unless the key exists (``If-None-Match: *``); see the module
        docstring for what a lost response means."""
        if len(payload) > self.options.multipart_threshold:
            return self._multipart(key, full, payload, create_only=True)

        def attempt() -> bool:
            try:
                self._client.put_object(
                    Bucket=self.bucket, Key=full, Body=payload, IfNoneMatch="*"
                )
                return True
            except ClientError as exc:
                return self._create_outcome(exc, "create", key)
            except _SDK_ERRORS as exc:
                raise self._error(exc, "create", key) from safe_cause(exc)

        return self._retry_conflicts(attempt)

    def _create_outcome(self, exc: ClientError, action: str, key: str) -> bool:
        """``False`` for 412 (the key exists); raise the mapped error otherwise."""
        code, status = error_code(exc)
        kind = classify_status(status)
        if code == "PreconditionFailed" or kind is StatusKind.PRECONDITION:
            return False
        if code == "ConditionalRequestConflict" or kind is StatusKind.CONFLICT:
            raise _Conflict(
                f"{action} {key!r} in {self.url}: a concurrent conditional write conflicted "
                f"({code or status}); retrying"
            ) from safe_cause(exc)
        raise self._error(exc, action, key) from safe_cause(exc)

    def _retry_conflicts(self, call: Callable[[], T]) -> T:
        return retry_on(_Conflict, call, attempts=self.options.max_attempts, deadline=30.0)

    def _multipart(self, key: str, full: str, payload: bytes, *, create_only: bool) -> bool:
        """Upload ``payload`` in parts; with ``create_only`` complete with ``If-None-Match``.

        Returns ``False`` only for a create-only upload whose key already existed.
        """
        size = len(payload)
        part_size = max(self.options.multipart_part_size, math.ceil(size / MAX_PARTS))
        checksum = self.options.checksums == "when_supported"
        extra: dict[str, Any] = {"ChecksumAlgorithm": "CRC32"} if checksum else {}
        created = self._request(
            "start multipart upload of",
            key,
            lambda: self._client.create_multipart_upload(Bucket=self.bucket, Key=full, **extra),
        )
        upload_id = created["UploadId"]
        completed = False
        try:
            parts = self._upload_parts(key, full, upload_id, payload, part_size, extra)
            kwargs: dict[str, Any] = {
                "Bucket": self.bucket,
                "Key": full,
                "UploadId": upload_id,
                "MultipartUpload": {"Parts": parts},
            }
            if create_only:
                kwargs["IfNoneMatch"] = "*"

            def complete() -> bool:
                try:
                    self._client.complete_multipart_upload(**kwargs)
                    return True
                except ClientError as exc:
                    code, _status = error_code(exc)
                    if code == "NoSuchUpload":
                        # Our earlier attempt completed it (its response was lost) or the upload
                        # was aborted. Only an existing object makes the first reading possible.
                        return self._after_lost_completion(key, full, create_only)
                    return self._create_outcome(exc, "complete multipart upload of", key)
                except _SDK_ERRORS as exc:
                    raise self._error(exc, "complete multipart upload of", key) from safe_cause(exc)

            result = self._retry_conflicts(complete)
            completed = result
            return result
        finally:
            if not completed:
                self._abort(full, upload_id)

    def _after_lost_completion(self, key: str, full: str, create_only: bool) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            code, status = error_code(exc)
            missing = classify_status(status) is StatusKind.NOT_FOUND
            if missing or code in ("NoSuchKey", "NotFound", "404"):
                raise TransientStoreError(
                    f"complete multipart upload of {key!r} in {self.url}: the upload vanished "
                    "(aborted by a lifecycle rule?); retry the write"
                ) from safe_cause(exc)
            raise self._error(exc, "check", key) from safe_cause(exc)
        except _SDK_ERRORS as exc:
            raise self._error(exc, "check", key) from safe_cause(exc)
        # The object exists. For a create-only write we cannot tell whose it is: report False
        # (the contract's "lost response" case); a plain put completed.
        return not create_only

    def _upload_parts(
        self,
        key: str,
        full: str,
        upload_id: str,
        payload: bytes,
        part_size: int,
        extra: dict[str, Any],
    ) -> list[dict[str, Any]]:
        view = memoryview(payload)
        count = max(1, math.ceil(len(payload) / part_size))

        def upload(number: int) -> dict[str, Any]:
            chunk = bytes(view[(number - 1) * part_size : number * part_size])
            response = self._request(
                f"upload part {number}/{count} of",
                key,
                lambda: self._client.upload_part(
                    Bucket=self.bucket,
                    Key=full,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=chunk,
                    **extra,
                ),
            )
            part = {"ETag": response["ETag"], "PartNumber": number}
            if "ChecksumCRC32" in response:
                part["ChecksumCRC32"] = response["ChecksumCRC32"]
            return part

        if count == 1:
            return [upload(1)]
        pool = self._threads(self.options.multipart_concurrency, "silt-s3-part")
        futures: list[Future[dict[str, Any]]] = [
            pool.submit(upload, number) for number in range(1, count + 1)
        ]
        _done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for future in pending:
            future.cancel()  # after a failure: parts not started yet are not sent
        wait(pending)
        for future in futures:
            error = None if future.cancelled() else future.exception()
            if error is not None:
                raise error
        return [future.result() for future in futures]

    def _abort(self, full: str, upload_id: str) -> None:
        """Best effort: a failed abort leaves parts that a lifecycle rule cleans up."""
        try:
            self._client.abort_multipart_upload(
                Bucket=self.bucket, Key=full, UploadId=upload_id
            )
        except _SDK_ERRORS:
            pass

    # --- delete / list -------------------------------------------------------------------------

    def _delete(self, fulls: list[str]) -> None:
        """``DeleteObjects`` in batches of 1,000, quiet mode; per-key errors are checked."""
        for i in range(0, len(fulls), DELETE_BATCH):
            batch = fulls[i : i + DELETE_BATCH]
            request = {
                "Bucket": self.bucket,
                "Delete": {"Objects": [{"Key": k} for k in batch], "Quiet": True},
            }
            response = self._request(
                "delete objects from", None, lambda r=request: self._client.delete_objects(**r)
            )
            self._check_delete_errors(response.get("Errors") or [])

    def _check_delete_errors(self, errors: list[dict[str, Any]]) -> None:
        failed = [e for e in errors if e.get("Code") not in ("NoSuchKey", None)]
        if not failed:
            return
        codes = sorted({str(e.get("Code")) for e in failed})
        sample = ", ".join(
            repr(str(e.get("Key", ""))[len(self.prefix):]) for e in failed[:3]
        )
        summary = (
            f"delete objects from {self.url}: {len(failed)} key(s) failed ({', '.join(codes)}), "
            f"e.g. {sample}"
        )
        if all(c in _TRANSIENT_DELETE_CODES for c in codes):
            raise TransientStoreError(summary + "; retry the delete")
        raise StoreError(summary)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        cut = len(self.prefix)
        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
        if start_after:
            request["StartAfter"] = self.prefix + start_after
        while True:
            page = self._request(
                "list", prefix or None, lambda: self._client.list_objects_v2(**request)
            )
            for item in page.get("Contents") or []:
                full = item["Key"]
                if start_after is not None and full[cut:] <= start_after:
                    continue  # servers that ignore StartAfter
                yield ObjectInfo(full[cut:], int(item.get("Size", 0)))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            request.pop("StartAfter", None)
            request["ContinuationToken"] = token


_TRANSIENT_DELETE_CODES = frozenset({"InternalError", "SlowDown", "ServiceUnavailable"})


__all__ = ["DELETE_BATCH", "S3Store", "parse_url"]
