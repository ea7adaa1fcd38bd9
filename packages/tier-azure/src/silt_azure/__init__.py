"""silt-tier-azure: the ``az://`` tier for silt, on azure-storage-blob (Azure Blob Storage).

Install it next to silt-core and open a URL::

    import silt

    db = silt.open("az://state/jobs/clicks")   # account from AZURE_STORAGE_CONNECTION_STRING,
                                                # AZURE_STORAGE_ACCOUNT_URL or AZURE_STORAGE_ACCOUNT
    db = silt.open("az://state/jobs/clicks?account_name=mystorageacct")  # Entra ID sign-in

Options, the account and credential fallbacks are listed in :mod:`silt_azure.config`; the
mapping of the store contract onto Azure requests in :mod:`silt_azure.store`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import Any

from .config import AzureOptions, parse_url

__all__ = ["AzureOptions", "AzureStore", "__version__", "parse_url"]


def __getattr__(name: str) -> Any:
    # The store (and azure-storage-blob) load on first use, not when silt loads the plugin.
    if name == "AzureStore":
        from .store import AzureStore

        return AzureStore
    raise AttributeError(f"module 'silt_azure' has no attribute {name!r}")
