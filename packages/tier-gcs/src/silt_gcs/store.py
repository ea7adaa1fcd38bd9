"""``GcsStore``: the silt object-store contract on Google Cloud Storage (or an emulator).

Layout: the object ``k`` of a store opened on ``gs://bucket/prefix`` is the GCS object
``prefix/k``; listings return keys relative to the prefix.

How each method maps onto the JSON API (through google-cloud-storage):

* ``get`` / ``get_range``: a media download (``alt=media``), with ``Range: bytes=a-b`` for
  ranges. A range wholly past the end (GCS answers ``416``) and the range of an empty object
  return ``b""``; an empty range reads the object's metadata instead, so that a missing object
  still raises ``NotFoundError``. The SDK resumes a download whose body broke mid-read (pinned
  to the object's generation, so it never mixes two versions) and checks whole downloads
  against the stored CRC32C; a read that still comes back corrupt is retried as a whole read,
  ``read_attempts`` times.
* ``put``: an upload (one multipart request up to 8 MiB, a resumable upload above), retried by
  the SDK: a replayed put writes the same bytes under the same name.
* ``put_if_absent``: the same upload with ``ifGenerationMatch=0``; ``412`` means the object
  exists: ``False``. When a response is lost the SDK retries and the retry answers 412
  although the first attempt created the object: the method then returns ``False``, as the
  contract allows, and the engine resolves it with the writer token in the manifest.
* ``delete_many``: one ``DELETE`` per object, ``delete_concurrency`` at a time; ``404`` is
  ignored. (The JSON API's batch endpoint is not used: the SDK does not retry it, each
  sub-request would need its own retry, and emulators do not implement it.)
* ``list``: ``objects.list`` with ``prefix`` and ``startOffset`` (inclusive, so the
  ``start_after`` key itself is dropped), 1,000 objects a page, paged lazily.

Requirements on the server: none beyond GCS itself (strongly consistent, honours
``ifGenerationMatch``). Emulators differ; see the package README for fake-gcs-server's gaps.

Thread safety: every method may be called from any number of threads. The store holds one
``storage.Client`` on one ``requests`` session with ``max_pool_connections`` pooled connections
per host (requests' default of 10 would make parallel block reads and uploads queue and
reconnect), and a thread pool for deletes. Blob objects are made per call, never shared.

Retries, by the policy of :mod:`silt.tierkit.retry`: the SDK retries each request (408, 429,
5xx, connection errors, timeouts; uploads too, which it otherwise retries only with a
precondition) with exponential backoff and jitter, ``max_attempts`` tries within
``retry_deadline`` seconds (:class:`CappedRetry`); what still fails
surfaces as ``RetriesExhaustedError``, which the engine does not retry again. silt repeats only
what the SDK does not: a whole read that came back corrupt (``read_attempts`` reads). A request
that keeps failing is sent at most ``max_attempts`` times, a whole read at most
``max_attempts * read_attempts`` times. Messages never contain credentials.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import google.auth
import requests.adapters
from google.api_core.client_info import ClientInfo
from google.api_core.retry import Retry
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import storage
from google.cloud.storage.exceptions import DataCorruption
from google.cloud.storage.retry import DEFAULT_RETRY
from silt.errors import InvalidArgumentError, StoreError, TransientStoreError
from silt.store import ObjectInfo
from silt.tierkit import BodyBrokenError, StatusKind, TierStore, classify_status, safe_cause

from . import __version__
from .config import SCHEME, GcsOptions, check_bucket, parse_url
from .errors import SDK_ERRORS, bucket_missing, map_error, status_of

T = TypeVar("T")


#: OAuth scope for Application Default Credentials: objects only, no IAM or bucket settings.
SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)

#: Objects per listing page (the JSON API's maximum).
LIST_PAGE = 1000

#: Every object silt writes is opaque bytes.
CONTENT_TYPE = "application/octet-stream"


class CappedRetry(Retry):
    """The SDK's retry policy, set explicitly: its own choice of what to retry (408, 429, 5xx,
    connection errors, timeouts), backoff from 0.1 s doubling up to 2 s with jitter, and at
    most ``attempts`` tries of each request it wraps, within ``deadline`` seconds.

    google-api-core's ``Retry`` has a deadline but no limit on tries; this one counts the tries
    of each call it wraps (the SDK wraps every request, every page of a listing, on its own).
    """

    def __init__(self, attempts: int, deadline: float) -> None:
        super().__init__(predicate=DEFAULT_RETRY._predicate, initial=0.1, maximum=2.0,
                         multiplier=2.0, timeout=deadline)
        self.attempts = attempts

    def __call__(self, func: Any, on_error: Any = None) -> Any:
        tries = iter(range(2, self.attempts + 1))  # the 2nd, 3rd, ... try
        sdk_predicate = self._predicate

        def should_retry(exc: Exception) -> bool:
            return bool(sdk_predicate(exc)) and next(tries, None) is not None

        policy = Retry(predicate=should_retry, initial=self._initial, maximum=self._maximum,
                       multiplier=self._multiplier, timeout=self._timeout)
        return policy(func, on_error=on_error)


class GcsStore(TierStore):
    """Objects under ``gs://bucket/prefix``. See the module docstring for the mapping.

    ``options`` tune the client (see :mod:`silt_gcs.config`). ``credentials`` (any
    ``google.auth`` credentials) replace Application Default Credentials in code; ``client``
    (a ``google.cloud.storage.Client``) replaces the client entirely (tests, custom transports).
    Without either the store is picklable: it travels as its URL and options and opens a fresh
    client where it lands.
    """

    scheme = SCHEME
    options_type = GcsOptions
    sdk_errors = SDK_ERRORS
    handles = "credentials=/client="
    parse_url = staticmethod(parse_url)

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        options: GcsOptions | None = None,
        credentials: Any = None,
        client: Any = None,
    ) -> None:
        super().__init__(check_bucket(bucket), prefix, options,
                         picklable=credentials is None and client is None)
        self.bucket = self.root
        self.options: GcsOptions
        endpoint, source = self.options.resolved_endpoint()
        self.endpoint = endpoint
        self.anonymous = False
        if client is None:
            client = self._make_client(credentials, endpoint, source)
        self._client = client
        connection = getattr(client, "_connection", None)
        self.endpoint = getattr(connection, "API_BASE_URL", None) or endpoint
        self._bucket = client.bucket(self.bucket, user_project=self.options.user_project)
        self._timeout = (self.options.connect_timeout, self.options.read_timeout)
        self._retry = CappedRetry(self.options.max_attempts, self.options.retry_deadline)

    # --- construction --------------------------------------------------------------------------

    def _make_client(self, credentials: Any, endpoint: str | None, source: str) -> Any:
        opts = self.options
        if credentials is None:
            self.anonymous = opts.resolved_anonymous(endpoint, source)
            if self.anonymous:
                credentials = AnonymousCredentials()
            elif opts.credentials_file or opts.credentials_json:
                credentials = self._given_credentials()
            else:
                try:
                    credentials, _project = google.auth.default(scopes=list(SCOPES))
                except SDK_ERRORS as exc:
                    raise self._error(exc, "open", None) from None
        session = AuthorizedSession(credentials)
        # requests keeps 10 connections per host by default; parallel block fetches and SST
        # uploads need more, or they queue and reconnect.
        adapter = requests.adapters.HTTPAdapter(
            pool_connections=4, pool_maxsize=opts.max_pool_connections, max_retries=0
        )
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        try:
            client = storage.Client(
                project=opts.resolved_project(self.anonymous),  # None: no project lookup
                credentials=credentials,
                _http=session,
                client_options={"api_endpoint": endpoint} if endpoint else None,
                client_info=ClientInfo(user_agent=f"silt-tier-gcs/{__version__}"),
            )
        except SDK_ERRORS as exc:
            session.close()
            raise self._error(exc, "open", None) from None
        except ValueError as exc:  # e.g. mismatched universe domains
            session.close()
            raise StoreError(f"cannot open {self.url}: {exc}") from None
        # The client fetches each bucket's metadata in a background thread only to label
        # OpenTelemetry spans: an extra request per bucket that needs storage.buckets.get.
        if getattr(client, "_bucket_metadata_cache", None) is not None:
            client._bucket_metadata_cache = None
        return client

    def _given_credentials(self) -> Any:
        """The credentials of the ``credentials_file`` or ``credentials_json`` storage option
        (the message of a bad one names the option, never its content)."""
        import json

        opts = self.options
        try:
            if opts.credentials_file:
                credentials, _project = google.auth.load_credentials_from_file(
                    opts.credentials_file, scopes=list(SCOPES))
            else:
                info = json.loads(opts.credentials_json or "")
                if not isinstance(info, dict):
                    raise ValueError("not a JSON object")
                credentials, _project = google.auth.load_credentials_from_dict(
                    info, scopes=list(SCOPES))
        except (ValueError, OSError, *SDK_ERRORS):
            which = "credentials_file" if opts.credentials_file else "credentials_json"
            raise InvalidArgumentError(
                f"cannot open {self.url}: the {which} storage option does not hold usable "
                "Google credentials (a service account key, workload identity federation or "
                "authorized user JSON); its content is not shown"
            ) from None
        return credentials

    def _release(self) -> None:
        """Close the client's connections."""
        close = getattr(self._client, "close", None)
        if close is not None:
            close()

    # --- helpers -------------------------------------------------------------------------------

    def _error(
        self, exc: BaseException, action: str, key: str | None, missing: str = "object"
    ) -> StoreError:
        return map_error(
            exc, action=action, key=key, url=self.url, bucket=self.bucket,
            endpoint=self.endpoint if self.endpoint and "googleapis.com" not in self.endpoint
            else None,
            missing=missing,
        )

    # --- reads ---------------------------------------------------------------------------------

    def _head(self, key: str, full: str) -> None:
        blob = self._bucket.blob(full)
        self._request("read", key, lambda: blob.reload(timeout=self._timeout, retry=self._retry))

    def _read(self, key: str, full: str, start: int | None, length: int | None) -> bytes:
        blob = self._bucket.blob(full)
        ranged = start is not None and length is not None
        try:
            data = blob.download_as_bytes(
                start=start,
                end=start + length - 1 if ranged else None,  # type: ignore[operator]
                timeout=self._timeout,
                retry=self._retry,
                checksum=None if ranged else "auto",  # GCS keeps checksums of whole objects
            )
        except DataCorruption as exc:
            raise BodyBrokenError(
                f"read {key!r} in {self.url}: the downloaded bytes do not match the stored "
                "checksum; the whole read is retried"
            ) from safe_cause(exc)
        except SDK_ERRORS as exc:
            if ranged and classify_status(status_of(exc)) is StatusKind.RANGE:
                return b""  # the range starts at or past the end (or the object is empty)
            raise self._error(exc, "read", key) from safe_cause(exc)
        if ranged and len(data) > length:  # type: ignore[operator]
            # A server that ignored the Range header sent the whole object: cut it here.
            data = data[start : start + length]  # type: ignore[operator]
        return data

    # --- writes --------------------------------------------------------------------------------

    def _put(self, key: str, full: str, payload: bytes) -> None:
        """An upload, retried by the SDK: a replay writes the same bytes."""
        blob = self._bucket.blob(full)
        self._request(
            "write",
            key,
            lambda: blob.upload_from_string(
                payload, content_type=CONTENT_TYPE, timeout=self._timeout, retry=self._retry
            ),
            missing="bucket",
        )

    def _create(self, key: str, full: str, payload: bytes) -> bool:
        """Create the object unless the name exists (``ifGenerationMatch=0``); see the module
        docstring for what a lost response means."""
        blob = self._bucket.blob(full)
        try:
            blob.upload_from_string(
                payload,
                content_type=CONTENT_TYPE,
                if_generation_match=0,
                timeout=self._timeout,
                retry=self._retry,
            )
            return True
        except SDK_ERRORS as exc:
            if classify_status(status_of(exc)) is StatusKind.PRECONDITION:
                return False
            raise self._error(exc, "create", key, missing="bucket") from safe_cause(exc)

    # --- delete / list -------------------------------------------------------------------------

    def _delete(self, fulls: list[str]) -> None:
        """One ``DELETE`` per object, ``delete_concurrency`` at a time; every delete is
        attempted, then the first failure (if any) is raised, transient only if every failure
        was."""
        if len(fulls) == 1:
            self._delete_one(fulls[0])
            return
        failures: list[StoreError] = []

        def run(full: str) -> None:
            try:
                self._delete_one(full)
            except StoreError as exc:
                failures.append(exc)

        list(self._threads(self.options.delete_concurrency, "silt-gcs-delete").map(run, fulls))
        if failures:
            permanent = [f for f in failures if not isinstance(f, TransientStoreError)]
            first = (permanent or failures)[0]
            kind = type(first) if not permanent else StoreError
            raise kind(f"delete objects from {self.url}: {len(failures)} of {len(fulls)} "
                       f"failed; first: {first}") from first

    def _delete_one(self, full: str) -> None:
        key = full[len(self.prefix):]
        blob = self._bucket.blob(full)
        try:
            blob.delete(timeout=self._timeout, retry=self._retry)
        except SDK_ERRORS as exc:
            if classify_status(status_of(exc)) is StatusKind.NOT_FOUND and not bucket_missing(exc):
                return  # already gone (or our own earlier attempt deleted it)
            raise self._error(exc, "delete", key, missing="bucket") from safe_cause(exc)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        cut = len(self.prefix)
        kwargs: dict[str, Any] = {}
        if start_after:
            kwargs["start_offset"] = self.prefix + start_after  # inclusive: filtered below
        iterator = self._client.list_blobs(
            self._bucket,
            prefix=self.prefix + prefix,
            page_size=LIST_PAGE,
            fields="items(name,size),nextPageToken",
            timeout=self._timeout,
            retry=self._retry,
            **kwargs,
        )
        pages = self._request("list", prefix or None, lambda: iterator.pages, missing="bucket")
        while True:
            page = self._request(
                "list", prefix or None, lambda: next(pages, None), missing="bucket"
            )
            if page is None:
                return
            for blob in page:
                name = blob.name
                if start_after is not None and name[cut:] <= start_after:
                    continue
                yield ObjectInfo(name[cut:], int(blob.size or 0))


__all__ = ["GcsStore", "LIST_PAGE", "parse_url"]
