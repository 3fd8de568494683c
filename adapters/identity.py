"""The credential the app's Cosmos DB and Service Bus clients use in Azure: the managed identity.

``DefaultAzureCredential`` with the user-assigned identity's client id: in Azure the app setting
``AZURE_TOKEN_CREDENTIALS=ManagedIdentityCredential`` (the Bicep's; azure-identity reads it) leaves only its managed
identity credential (App Service's ``IDENTITY_ENDPOINT``), so an identity not assigned to the app fails saying so
instead of falling through to whatever else answers; on a developer's machine running against the provisioned
resources (docs/deploy.md) the setting is unset and the chain reaches the Azure CLI sign-in. Each client builds
one when the worker builds its wiring (``dependencies.build_from_settings``, once per process) and keeps it: the
credential caches its tokens and the SDKs renew them before they expire. Its token requests are bounded
(``settings.identity_transport``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from settings import identity_transport

if TYPE_CHECKING:
    from azure.identity import DefaultAzureCredential


def managed_identity(client_id: str) -> DefaultAzureCredential:
    """The credential for the user-assigned identity ``client_id`` (empty: the system-assigned one)."""
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential(managed_identity_client_id=client_id or None, **identity_transport())
