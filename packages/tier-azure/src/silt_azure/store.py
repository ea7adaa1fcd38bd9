"""``AzureStore``: the silt object-store contract on Azure Blob Storage (block blobs).

Layout: the object ``k`` of a store opened on ``az://container/prefix`` is the blob
``prefix/k``; listings return keys relative to the prefix.

How each method maps onto Azure:

* ``get`` / ``get_range``: Get Blob, with ``x-ms-range`` for ranges. Objects larger than
  ``download_chunk_size`` are fetched in chunks, ``download_concurrency`` at a time, pinned to
  the first answer's ETag. A range wholly past the end (Azure answers ``416 InvalidRange``, as it
  does for any range of an empty blob) returns ``b""``; an empty range is a Get Blob Properties
  so that a missing object still raises ``NotFoundError``. The bytes received are counted
  against the size announced. A body that breaks mid-read is re-requested by the SDK's
  downloader (three tries, built in); a read that comes back short without an error is
  repeated whole, ``read_attempts`` times.
* ``put``: Put Blob; above ``block_threshold`` the object goes up as staged blocks
  (``block_size`` each, ``upload_concurrency`` at a time) committed by one Put Block List, so
  readers see the old or the new object whole. Blocks of an upload that fails are never
  committed; Azure discards uncommitted blocks after a week.
* ``put_if_absent``: the same requests with ``If-None-Match: *`` (on the Put Block List for
  staged uploads). Azure answers ``409 BlobAlreadyExists`` when the blob exists (not 412 as S3
  and GCS do): ``False``. When a response is lost the SDK retries, and the retry answers 409
  although the first attempt created the blob: the method then returns ``False``, as the
  contract allows, and the engine resolves it with the writer token in the manifest.
* ``delete_many``: Blob Batch requests of up to 256 Delete Blob sub-requests (snapshots
  included); sub-requests answering 404 are ignored, others are reported. A server without Blob
  Batch support (some emulators and account kinds) gets one Delete Blob per key instead.
* ``list``: List Blobs with a name prefix, paged lazily (``list_page_size`` names per page,
  5,000 by default). Azure has no
  ``StartAfter``: ``start_after`` is applied by skipping names, so a listing that resumes deep
  inside a large prefix reads the pages before it again.

Requirements on the server: strong consistency and ``If-None-Match: *`` on Put Blob and Put
Block List, which Azure Blob Storage has always had.

Thread safety: every method may be called from any number of threads. The store holds one
``ContainerClient`` over one HTTP session with ``max_connections`` pooled connections; per-call
blob clients share that pipeline. Parallel chunk downloads and block uploads run on the SDK's
per-call worker threads.

Retries, by the policy of :mod:`silt.tierkit.retry`: the SDK's policy retries each request
(``max_attempts`` tries, capped exponential backoff with full jitter) on 408, 5xx, resets and
timeouts, and what still fails surfaces as ``RetriesExhaustedError``, which the engine does not
retry again (a 429, which the SDK's policy does not retry, surfaces as
``TransientStoreError``, for the engine's backoff). A request that keeps failing is sent at most
``max_attempts`` times; a whole read at most ``max_attempts * read_attempts`` times, plus the
downloader's re-requests of a broken body. Messages never contain the account key, the SAS or
the connection string.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import AzureError, HttpResponseError
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.blob import ContainerClient, ExponentialRetry
from requests.adapters import HTTPAdapter
from silt.errors import InvalidArgumentError, SiltError, StoreError, TransientStoreError
from silt.store import ObjectInfo
from silt.tierkit import BodyBrokenError, StatusKind, TierStore, classify_status, redact
from urllib3.util.retry import Retry

from . import __version__
from .config import Account, AzureOptions, check_container, parse_url, resolve_account
from .errors import NETWORK_ERRORS, error_code, map_error

try:  # azure-core's adapter with a larger socket block size for big transfers
    from azure.core.pipeline.transport._bigger_block_size_http_adapters import (
        BiggerBlockSizeHTTPAdapter as _Adapter,
    )
except ImportError:  # pragma: no cover - older or newer azure-core layouts
    _Adapter = HTTPAdapter

#: A Blob Batch request takes at most this many sub-requests.
DELETE_BATCH = 256
#: Bytes per socket read of a response (the storage SDK's own default).
_DATA_BLOCK_SIZE = 4 * 1024 * 1024

#: Exceptions the SDK raises that the store maps (silt's own errors pass through untouched).
_SDK_ERRORS: tuple[type[BaseException], ...] = (AzureError, *NETWORK_ERRORS)

def _no_batch_support(status: int | None, code: str) -> bool:
    """Whether a refused Blob Batch request means "no batch here" (an emulator or account kind
    without it, a proxy that blocks multipart POSTs): then each key is deleted on its own, which
    reports real problems (auth, a missing container) through the single deletes."""
    if status == 501:  # Not Implemented
        return True
    kind = classify_status(status)
    if status is None or code == "ContainerNotFound" or kind is StatusKind.AUTH or kind.transient:
        return False
    return 400 <= status < 500


class _JitteredRetry(ExponentialRetry):
    """The storage SDK's retry policy with silt's backoff: capped exponential, full jitter.

    (The SDK's default waits 15 s, then 18 s, then 24 s: far too long under an engine that
    retries on its own.)
    """

    def __init__(self, attempts: int, base: float = 0.1, cap: float = 2.0) -> None:
        retries = max(0, attempts - 1)
        super().__init__(
            initial_backoff=0, increment_base=2, retry_total=retries, random_jitter_range=0,
            retry_connect=retries, retry_read=retries, retry_status=retries,
        )
        self.base = base
        self.cap = cap

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        return random.uniform(0, min(self.cap, self.base * (2 ** settings["count"])))


def make_transport(options: AzureOptions) -> RequestsTransport:
    """One ``requests`` session with a pool of ``max_connections`` connections per host, so
    parallel chunk reads and block uploads overlap instead of discarding connections."""
    import requests

    session = requests.Session()
    session.trust_env = True  # HTTPS_PROXY & co., as the SDK's own transport does
    adapter = _Adapter(
        pool_connections=4,
        pool_maxsize=options.max_connections,
        max_retries=Retry(total=False, redirect=False, raise_on_status=False),
    )
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return RequestsTransport(
        session=session,
        session_owner=True,
        connection_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
        connection_data_block_size=_DATA_BLOCK_SIZE,
    )


class AzureStore(TierStore):
    """Objects under ``az://container/prefix``. See the module docstring for the mapping.

    ``options`` tune the client and say which account to use (see :mod:`silt_azure.config`;
    unset, the account comes from the environment). ``credential`` (anything the SDK accepts:
    a ``TokenCredential`` such as ``DefaultAzureCredential()``, an ``AzureNamedKeyCredential``,
    a SAS string) replaces the credential chain in code; ``client`` (a ``ContainerClient``)
    replaces the client entirely (tests, custom pipelines). Without either the store is
    picklable: it travels as its container, prefix and options, and opens a fresh client where
    it lands.
    """

    scheme = "az"
    options_type = AzureOptions
    sdk_errors = _SDK_ERRORS
    handles = "credential=/client="
    parse_url = staticmethod(parse_url)

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        options: AzureOptions | None = None,
        credential: Any = None,
        client: ContainerClient | None = None,
    ) -> None:
        super().__init__(check_container(container), prefix, options,
                         picklable=credential is None and client is None)
        self.container = self.root
        self.options: AzureOptions
        self.account: Account | None = None
        if client is None:
            client = self._make_client(credential)
        self._client = client
        self.endpoint = _endpoint_of(client, self.container)

    # --- construction --------------------------------------------------------------------------

    def _make_client(self, credential: Any) -> ContainerClient:
        opts = self.options
        account = resolve_account(opts)
        self.account = account
        self._secrets = account.secrets()
        common: dict[str, Any] = {
            "transport": make_transport(opts),
            "retry_policy": _JitteredRetry(opts.max_attempts),
            "max_single_put_size": opts.block_threshold,
            "max_block_size": opts.block_size,
            "max_single_get_size": opts.download_chunk_size,
            "max_chunk_get_size": opts.download_chunk_size,
            "user_agent": f"silt-tier-azure/{__version__}",
        }
        try:
            if account.credential == "connection_string":
                assert account.connection_string is not None
                return ContainerClient.from_connection_string(
                    account.connection_string, self.container, credential=credential, **common
                )
            assert account.account_url is not None
            if credential is None:
                credential = self._credential(account)
            if hasattr(credential, "get_token") and not account.account_url.startswith("https:"):
                raise InvalidArgumentError(
                    f"cannot open {self.url}: Entra ID sign-in (a token credential) needs an "
                    f"https:// account URL, and {account.source} gives "
                    f"{account.account_url!r}; for an emulator on plain HTTP use a connection "
                    "string, AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN"
                )
            return ContainerClient(account.account_url, self.container, credential=credential,
                                   **common)
        except SiltError:
            raise
        except (ValueError, TypeError) as exc:  # malformed connection string or URL
            raise StoreError(
                f"cannot open {self.url} with the account from {account.source}: "
                f"{redact(str(exc), self._secrets)}"
            ) from None
        except _SDK_ERRORS as exc:
            raise self._error(exc, "open", None) from None

    @staticmethod
    def _credential(account: Account) -> Any:
        if account.credential == "sas":
            assert account.sas is not None
            return AzureSasCredential(account.sas.lstrip("?"))
        if account.credential == "key":
            assert account.key is not None and account.account_name is not None
            return AzureNamedKeyCredential(account.account_name, account.key)
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            raise StoreError(
                f"the account from {account.source} has no key or SAS, and Entra ID sign-in "
                "needs azure-identity: pip install 'silt-tier-azure[identity]' (or set "
                "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN)"
            ) from None
        return DefaultAzureCredential()

    def _release(self) -> None:
        """Close the client's connections."""
        self._client.close()

    # --- helpers -------------------------------------------------------------------------------

    def _error(self, exc: BaseException, action: str, key: str | None) -> StoreError:
        """The silt error for ``exc``; chained to ``exc`` unless that would carry a secret
        into a logged traceback (raise it ``from`` :meth:`_cause`)."""
        error = map_error(
            exc, action=action, key=key, url=self.url, container=self.container,
            endpoint=self.endpoint, secrets=self._secrets,
            source=self.account.source if self.account else None,
        )
        return error

    # --- reads ---------------------------------------------------------------------------------

    def _head(self, key: str, full: str) -> None:
        self._request("read", key, self._client.get_blob_client(full).get_blob_properties)

    def _read(self, key: str, full: str, start: int | None, length: int | None) -> bytes:
        blob = self._client.get_blob_client(full)
        try:
            stream = blob.download_blob(
                offset=start, length=length, max_concurrency=self.options.download_concurrency
            )
            data = stream.readall()
        except HttpResponseError as exc:
            code, status = error_code(exc)
            if start is not None and (classify_status(status) is StatusKind.RANGE
                                      or code == "InvalidRange"):
                return b""  # the range starts at or past the end (or the blob is empty)
            raise self._error(exc, "read", key) from self._cause(exc)
        except _SDK_ERRORS as exc:
            raise self._error(exc, "read", key) from self._cause(exc)
        expected = stream.size
        if isinstance(expected, int) and len(data) != expected:
            raise BodyBrokenError(
                f"read {key!r} in {self.url}: got {len(data)} of {expected} bytes; the whole "
                "read is retried"
            )
        return data

    # --- writes --------------------------------------------------------------------------------

    def _put(self, key: str, full: str, payload: bytes) -> None:
        """Put Blob, staged blocks above ``block_threshold``."""
        blob = self._client.get_blob_client(full)
        self._request(
            "write",
            key,
            lambda: blob.upload_blob(
                payload, length=len(payload), overwrite=True,
                max_concurrency=self.options.upload_concurrency,
            ),
        )

    def _create(self, key: str, full: str, payload: bytes) -> bool:
        """Create the object unless the key exists (``If-None-Match: *``); see the module
        docstring for what a lost response means."""
        blob = self._client.get_blob_client(full)
        try:
            blob.upload_blob(
                payload, length=len(payload), overwrite=False,
                max_concurrency=self.options.upload_concurrency,
            )
            return True
        except HttpResponseError as exc:
            code, status = error_code(exc)
            kind = classify_status(status)
            if code == "BlobAlreadyExists" or (kind is StatusKind.CONFLICT and not code) or (
                    kind is StatusKind.PRECONDITION):
                return False  # the blob exists (Azure says 409 where S3 and GCS say 412)
            raise self._error(exc, "create", key) from self._cause(exc)
        except _SDK_ERRORS as exc:
            raise self._error(exc, "create", key) from self._cause(exc)

    # --- delete / list -------------------------------------------------------------------------

    def _delete(self, names: list[str]) -> None:
        """Blob Batch requests of up to 256 deletes; missing blobs are ignored."""
        for i in range(0, len(names), DELETE_BATCH):
            self._delete_batch(names[i : i + DELETE_BATCH])

    def _delete_batch(self, names: list[str]) -> None:
        try:
            parts = list(self._client.delete_blobs(
                *names, delete_snapshots="include", raise_on_any_failure=False
            ))
        except HttpResponseError as exc:
            code, status = error_code(exc)
            if _no_batch_support(status, code):
                self._delete_singly(names)  # no Blob Batch support on this server
                return
            raise self._error(exc, "delete objects from", None) from self._cause(exc)
        except _SDK_ERRORS as exc:
            raise self._error(exc, "delete objects from", None) from self._cause(exc)
        failed = []
        for name, part in zip(names, parts):
            status = getattr(part, "status_code", None)
            headers = getattr(part, "headers", None) or {}
            code = str(headers.get("x-ms-error-code") or "")
            if status is not None and 200 <= status < 300:
                continue
            if classify_status(status) is StatusKind.NOT_FOUND and code in ("", "BlobNotFound"):
                continue  # already gone
            if code == "ContainerNotFound" or classify_status(status) is StatusKind.AUTH:
                raise StoreError(
                    f"delete objects from {self.url}: "
                    + (f"container {self.container!r} does not exist at {self.endpoint}; create "
                       "it, or fix the container name or the account"
                       if code == "ContainerNotFound" else
                       f"access denied ({code or status}); check the credential's permissions")
                )
            failed.append((name, status, code or str(status)))
        if len(parts) != len(names):
            raise StoreError(
                f"delete objects from {self.url}: the batch answered {len(parts)} of "
                f"{len(names)} deletes; retry the delete"
            )
        self._report_delete_failures(failed)

    def _delete_singly(self, names: list[str]) -> None:
        def delete(name: str) -> tuple[str, int | None, str] | None:
            try:
                self._client.delete_blob(name, delete_snapshots="include")
            except HttpResponseError as exc:
                code, status = error_code(exc)
                missing = classify_status(status) is StatusKind.NOT_FOUND
                if code == "BlobNotFound" or (missing and code != "ContainerNotFound"):
                    return None
                if code == "ContainerNotFound" or classify_status(status) is StatusKind.AUTH:
                    raise self._error(exc, "delete", name[len(self.prefix):]) from self._cause(exc)
                return (name, status, code or str(status))
            except _SDK_ERRORS as exc:
                raise self._error(exc, "delete", name[len(self.prefix):]) from self._cause(exc)
            return None

        with ThreadPoolExecutor(
            min(8, self.options.max_connections), thread_name_prefix="silt-az-delete"
        ) as pool:
            results = list(pool.map(delete, names))
        self._report_delete_failures([r for r in results if r is not None])

    def _report_delete_failures(self, failed: list[tuple[str, int | None, str]]) -> None:
        if not failed:
            return
        codes = sorted({code for _, _, code in failed})
        sample = ", ".join(repr(name[len(self.prefix):]) for name, _, _ in failed[:3])
        summary = (
            f"delete objects from {self.url}: {len(failed)} key(s) failed ({', '.join(codes)}), "
            f"e.g. {sample}"
        )
        if all(classify_status(status).transient for _, status, _ in failed):
            raise TransientStoreError(summary + "; retry the delete")
        raise StoreError(summary)

    def _list(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        cut = len(self.prefix)
        name_prefix = self.prefix + prefix
        pages = self._client.list_blobs(
            name_starts_with=name_prefix or None, results_per_page=self.options.list_page_size
        ).by_page()
        while True:
            try:
                page = list(next(pages))
            except StopIteration:
                return
            except SiltError:
                raise
            except _SDK_ERRORS as exc:
                raise self._error(exc, "list", prefix or None) from self._cause(exc)
            for item in page:
                key = item.name[cut:]
                if start_after is not None and key <= start_after:
                    continue  # Azure has no StartAfter
                yield ObjectInfo(key, int(item.size or 0))

def _endpoint_of(client: Any, container: str) -> str | None:
    """The account endpoint of ``client`` for messages: no query (a SAS lives there)."""
    url = getattr(client, "url", None)
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path.endswith("/" + container):
        path = path[: -len(container) - 1]
    return f"{parts.scheme}://{parts.netloc}{path}"


__all__ = ["DELETE_BATCH", "AzureStore", "parse_url"]
