"""``az://`` URLs, their options, and where the account and its credential come from.

URL: ``az://container`` or ``az://container/prefix/path`` (``azure://`` is an alias), optionally
with query options::

    az://state/jobs/clicks                                  # account from the environment
    az://state/jobs/clicks?account_name=mystorageacct       # Entra ID (DefaultAzureCredential)
    az://state/jobs/clicks?account_url=http://127.0.0.1:10000/devstoreaccount1

Which account, and which credential, first match wins:

=======================================  =========================================================
where                                    credential
=======================================  =========================================================
``connection_string=`` option            the connection string's key or SAS
``account_url=`` / ``account_name=``     see "credential for an account URL" below
``AZURE_STORAGE_CONNECTION_STRING``      the connection string's key or SAS (the Azure SDK does
                                         not read this variable by itself; silt does)
``AZURE_STORAGE_ACCOUNT_URL``            see below
``AZURE_STORAGE_ACCOUNT``                ``https://<name>.blob.core.windows.net``, see below
=======================================  =========================================================

Credential for an account URL: the ``sas_token`` or ``account_key`` storage option (see below),
else ``AZURE_STORAGE_SAS_TOKEN`` if set, else ``AZURE_STORAGE_KEY``
(the account key, with the account name from ``AZURE_STORAGE_ACCOUNT`` or the URL), else
``DefaultAzureCredential`` from azure-identity (``pip install 'silt-tier-azure[identity]'``):
environment service principal, workload identity, managed identity, ``az login``... The
variables are the ones the Azure CLI reads.

Other options (sizes accept ``8MiB``-style units):

==========================  ===================================================================
option                      meaning (default)
==========================  ===================================================================
``block_threshold``         objects larger than this are uploaded as staged blocks (32MiB)
``block_size``              size of each staged block (8MiB; Azure allows 50,000 per blob)
``upload_concurrency``      blocks of one object uploaded at once (8)
``download_chunk_size``     bytes per GET of a whole-object read; larger objects are fetched
                            in chunks of this size (8MiB)
``download_concurrency``    chunks of one object fetched at once (8)
``max_connections``         HTTP connections kept per store (64)
``connect_timeout``         seconds (5)
``read_timeout``            seconds without a byte from the server (30)
``max_attempts``            tries of each request by the SDK's retry policy (5)
``read_attempts``           tries of a whole read that came back short (4)
``hedge_after_ms``          a read not answered after this many ms sends a second request, the first
                            answer wins (default 0: off; silt.tierkit.hedge)
``hedge_quantile``          hedge after this quantile of recent read latencies (e.g. 0.95; at least
                            ``hedge_after_ms``; default 0: off)
``list_page_size``          names per List Blobs request (5000, Azure's maximum)
==========================  ===================================================================

Storage options (``silt.open(url, storage_options={...})``, silt_spark's ``storage_options=``
and ``spark.silt.storage.<name>``) accept every option above plus credentials, which take
precedence over the environment and are never shown in ``repr`` or messages:

==========================  ===================================================================
storage option              azure-storage-blob parameter
==========================  ===================================================================
``account_key``             ``credential=AzureNamedKeyCredential(account name, key)`` (the
                            account name from ``account_name=``, the URL or the environment)
``sas_token``               ``credential=AzureSasCredential(token)``
``connection_string``       ``ContainerClient.from_connection_string``
``account_url``             ``account_url`` (the endpoint)
``account_name``            ``https://<name>.blob.core.windows.net``
==========================  ===================================================================

Secrets: prefer the environment or storage options to ``connection_string=`` in the URL (URLs
end up in logs and in
``silt inspect`` output). Neither the store's URL, its ``repr`` nor any error message contains a
connection string, account key or SAS; options holding one are not shown in ``repr``. A pickled
store (shipped to Spark executors) carries its options, so a connection string given as an option
travels with it; one from the environment is read again where the store lands.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import unquote, urlsplit

from silt.errors import InvalidArgumentError, StoreError
from silt.tierkit import NetworkOptions, check_endpoint, check_root_name, parse_root_url

SCHEMES = ("az", "azure")
MiB = 1024 * 1024

#: Azure's limits: a block is at most 4,000 MiB and a blob has at most 50,000 blocks; one
#: Put Blob takes at most 5,000 MiB.
MAX_BLOCK_SIZE = 4000 * MiB
MAX_BLOCKS = 50_000
MAX_SINGLE_PUT = 5000 * MiB
#: Names per List Blobs page: Azure returns at most this many.
MAX_LIST_PAGE = 5000

#: Azurite's well-known development account (public, documented by Microsoft: not a secret).
DEVSTORE_ACCOUNT = "devstoreaccount1"

#: The Azure CLI's variables, read as fallbacks (see the module docstring).
ENV_CONNECTION_STRING = "AZURE_STORAGE_CONNECTION_STRING"
ENV_ACCOUNT_URL = "AZURE_STORAGE_ACCOUNT_URL"
ENV_ACCOUNT = "AZURE_STORAGE_ACCOUNT"
ENV_KEY = "AZURE_STORAGE_KEY"
ENV_SAS = "AZURE_STORAGE_SAS_TOKEN"

#: Options that look like credentials: rejected with a pointer to the environment variables.
_CREDENTIAL_OPTIONS = frozenset(
    {
        "account_key",
        "accountkey",
        "key",
        "storage_key",
        "sas",
        "sas_token",
        "sig",
        "token",
        "credential",
        "password",
        "secret",
        "client_secret",
    }
)

_CONTAINER = re.compile(r"^(?=.{3,63}$)[a-z0-9]+(?:-[a-z0-9]+)*$")
_ACCOUNT_NAME = re.compile(r"^[a-z0-9]{3,24}$")

CREDENTIALS_HINT = (
    f"set {ENV_CONNECTION_STRING} (or the connection_string= option), or an account with "
    f"{ENV_ACCOUNT_URL} / {ENV_ACCOUNT} (or account_url= / account_name=) and a credential: "
    f"{ENV_SAS}, {ENV_KEY}, or Entra ID through DefaultAzureCredential (az login, a managed or "
    "workload identity, AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET)"
)


@dataclass(frozen=True)
class AzureOptions(NetworkOptions):
    """Options of one :class:`~silt_azure.AzureStore`; ``None`` means "use the environment".

    A frozen, picklable value: a store shipped to another process carries these options, not a
    client, and opens its own client there. ``connection_string`` is kept out of ``repr``.
    """

    SCHEME = "az"
    SIZES: ClassVar[Mapping[str, int]] = {
        "block_threshold": 1, "block_size": 1, "download_chunk_size": 1
    }
    CREDENTIAL_OPTIONS = _CREDENTIAL_OPTIONS
    CREDENTIAL_HINT = (
        f"Use {ENV_KEY} or {ENV_SAS} with {ENV_ACCOUNT}, {ENV_CONNECTION_STRING}, or Entra ID "
        "(DefaultAzureCredential)"
    )
    SECRET_OPTIONS = frozenset({"account_key", "sas_token"})

    connection_string: str | None = field(default=None, repr=False)
    account_url: str | None = None
    account_name: str | None = None
    block_threshold: int = 32 * MiB
    block_size: int = 8 * MiB
    upload_concurrency: int = 8
    download_chunk_size: int = 8 * MiB
    download_concurrency: int = 8
    max_connections: int = 64
    list_page_size: int = MAX_LIST_PAGE
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.account_key is not None and self.sas_token is not None:
            raise InvalidArgumentError(
                "give either the account_key or the sas_token storage option, not both"
            )
        if self.connection_string and (self.account_key or self.sas_token):
            raise InvalidArgumentError(
                "a connection string carries its own credential: drop the account_key / "
                "sas_token storage option, or give the account with account_url= instead"
            )
        if not 1 <= self.block_size <= MAX_BLOCK_SIZE:
            raise InvalidArgumentError(
                f"block_size={self.block_size} must be between 1 byte and {MAX_BLOCK_SIZE} "
                "bytes (4000MiB, Azure's largest block)"
            )
        if not 1 <= self.block_threshold <= MAX_SINGLE_PUT:
            raise InvalidArgumentError(
                f"block_threshold={self.block_threshold} must be between 1 byte and "
                f"{MAX_SINGLE_PUT} bytes (5000MiB, Azure's largest single Put Blob)"
            )
        if self.download_chunk_size < 1:
            raise InvalidArgumentError("download_chunk_size must be at least 1 byte")
        for name in ("upload_concurrency", "download_concurrency", "max_connections",
                     "list_page_size"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name} must be >= 1")
        if self.list_page_size > MAX_LIST_PAGE:
            raise InvalidArgumentError(
                f"list_page_size must be at most {MAX_LIST_PAGE} (Azure's largest page)"
            )
        if self.account_url is not None:
            check_account_url(self.account_url)
        if self.account_name is not None and not _ACCOUNT_NAME.match(self.account_name):
            raise InvalidArgumentError(
                f"account_name={self.account_name!r} is not a storage account name (3-24 "
                "lower-case letters and digits); for an emulator or a custom domain use "
                "account_url="
            )


@dataclass(frozen=True)
class Account:
    """Where a store connects and how it proves who it is (resolved from options and the
    environment by :func:`resolve_account`). Secrets are kept out of ``repr``.

    ``credential`` is ``"connection_string"``, ``"sas"``, ``"key"`` or ``"default"``
    (DefaultAzureCredential); ``source`` says where the account came from, for messages.
    """

    source: str
    credential: str
    account_url: str | None = None
    connection_string: str | None = field(default=None, repr=False)
    account_name: str | None = None
    key: str | None = field(default=None, repr=False)
    sas: str | None = field(default=None, repr=False)

    def secrets(self) -> tuple[str, ...]:
        """Every secret this account holds, for redaction of messages."""
        found = [self.connection_string, self.key, self.sas]
        if self.connection_string:
            fields = connection_string_fields(self.connection_string)
            found += [fields.get("ACCOUNTKEY"), fields.get("SHAREDACCESSSIGNATURE")]
        out: list[str] = []
        for secret in found:
            if secret:
                out.append(secret)
                if secret.startswith("?"):
                    out.append(secret[1:])
                sig = re.search(r"(?:^|[?&])sig=([^&]+)", secret)
                if sig:
                    out.append(sig.group(1))
                    out.append(unquote(sig.group(1)))
        return tuple(s for s in out if len(s) >= 4)


def connection_string_fields(connection_string: str) -> dict[str, str]:
    """``Key=Value;...`` as a dict with upper-case keys (values are not checked)."""
    out: dict[str, str] = {}
    for part in connection_string.strip().rstrip(";").split(";"):
        name, sep, value = part.partition("=")
        if sep:
            out[name.strip().upper()] = value.strip()
    return out


def check_connection_string(connection_string: str, source: str) -> None:
    """Reject a malformed connection string without ever echoing it."""
    parts = [p for p in connection_string.strip().rstrip(";").split(";") if p.strip()]
    fields = connection_string_fields(connection_string)
    ok = bool(parts) and all("=" in p for p in parts) and (
        fields.get("USEDEVELOPMENTSTORAGE", "").lower() == "true"
        or "ACCOUNTNAME" in fields
        or "BLOBENDPOINT" in fields
    )
    if not ok:
        raise InvalidArgumentError(
            f"the connection string from {source} is malformed (it is not shown: it may hold a "
            "key). Expected 'DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...;"
            "EndpointSuffix=core.windows.net', or 'BlobEndpoint=...;SharedAccessSignature=...', "
            "as the Azure portal's 'Access keys' page shows it"
        )
    if "BLOBENDPOINT" in fields:
        check_endpoint(fields["BLOBENDPOINT"], what=f"BlobEndpoint in the connection string from "
                       f"{source}", hint="put the key or SAS in AccountKey= or "
                       "SharedAccessSignature=")


def check_account_url(url: str) -> str:
    """An ``http(s)://host[:port][/account]`` URL without credentials; returns it unchanged."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgumentError(
            "account_url must look like 'https://<account>.blob.core.windows.net' (or "
            "'http://127.0.0.1:10000/devstoreaccount1' for Azurite)"
        )
    check_endpoint(url, what="account_url", hint=f"put the SAS in {ENV_SAS} or use "
                   f"{ENV_CONNECTION_STRING}")
    return url


def account_name_of(url: str) -> str | None:
    """The account name in an account URL: the host's first label on Azure
    (``acct.blob.core.windows.net``), the first path segment on an emulator
    (``http://127.0.0.1:10000/devstoreaccount1``)."""
    parts = urlsplit(url)
    path = parts.path.strip("/")
    if path:
        return path.split("/", 1)[0]
    host = parts.hostname or ""
    if host and not host.replace(".", "").isdigit() and host != "localhost":
        return host.split(".", 1)[0]
    return None


def resolve_account(options: AzureOptions, environ: Mapping[str, str] | None = None) -> Account:
    """The account and credential for ``options``, falling back to the environment (see the
    module docstring for the order). Raises ``StoreError`` when nothing is configured."""
    env = os.environ if environ is None else environ

    def var(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None

    if options.connection_string:
        check_connection_string(options.connection_string, "the connection_string= option")
        return Account("the connection_string= option", "connection_string",
                       connection_string=options.connection_string)
    if options.account_url:
        url, source = options.account_url, "the account_url= option"
    elif options.account_name:
        url = f"https://{options.account_name}.blob.core.windows.net"
        source = "the account_name= option"
    elif var(ENV_CONNECTION_STRING):
        connection_string = var(ENV_CONNECTION_STRING)
        assert connection_string is not None
        check_connection_string(connection_string, ENV_CONNECTION_STRING)
        return Account(ENV_CONNECTION_STRING, "connection_string",
                       connection_string=connection_string)
    elif var(ENV_ACCOUNT_URL):
        url, source = var(ENV_ACCOUNT_URL) or "", ENV_ACCOUNT_URL
        check_account_url(url)
    elif var(ENV_ACCOUNT):
        name = var(ENV_ACCOUNT) or ""
        if not _ACCOUNT_NAME.match(name):
            raise InvalidArgumentError(
                f"{ENV_ACCOUNT}={name!r} is not a storage account name (3-24 lower-case "
                f"letters and digits); set {ENV_ACCOUNT_URL} for an emulator or custom domain"
            )
        url, source = f"https://{name}.blob.core.windows.net", ENV_ACCOUNT
    else:
        raise StoreError(f"no Azure storage account configured; {CREDENTIALS_HINT}")
    url = url.rstrip("/")
    name = var(ENV_ACCOUNT) or account_name_of(url)
    if options.sas_token:
        return Account(source, "sas", account_url=url, account_name=name,
                       sas=options.sas_token)
    if options.account_key:
        if not name:
            raise InvalidArgumentError(
                f"the account_key storage option needs the account name, unknown for {url}; "
                "give account_name="
            )
        return Account(source, "key", account_url=url, account_name=name,
                       key=options.account_key)
    if var(ENV_SAS):
        return Account(source, "sas", account_url=url, account_name=name, sas=var(ENV_SAS))
    if var(ENV_KEY):
        if not name:
            raise StoreError(
                f"{ENV_KEY} is set but the account name is unknown for {url}; set {ENV_ACCOUNT}"
            )
        return Account(source, "key", account_url=url, account_name=name, key=var(ENV_KEY))
    return Account(source, "default", account_url=url, account_name=name)


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split ``az://container/prefix?opts`` into ``(container, prefix, options)``.

    ``prefix`` is ``""`` or a ``/``-terminated blob-name prefix (``"jobs/clicks/"``);
    percent-escapes in the path are decoded.
    """
    return parse_root_url(url, SCHEMES, check_root=check_container,
                          example="az://container/prefix")


def check_container(container: str, url: str = "") -> str:
    """Reject names Azure would refuse: 3-63 lower-case letters, digits and single hyphens."""
    return check_root_name(
        container, url, what="container", example="az://container/prefix",
        rule="Azure container names are 3-63 lower-case letters, digits and single hyphens, "
             "starting and ending with a letter or digit (the account goes in account_name= or "
             "account_url=)",
        advice=f"An az:// URL names a container, not 'container@account': give the account "
               f"with account_name= or account_url=, or {ENV_ACCOUNT} / {ENV_CONNECTION_STRING}",
        valid=lambda name: name == "$root" or bool(_CONTAINER.match(name)),
    )
