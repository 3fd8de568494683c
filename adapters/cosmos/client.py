"""Building the Cosmos DB client: managed identity in Azure, the emulator key locally."""

from __future__ import annotations

from typing import TYPE_CHECKING

from settings import Settings

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy


def create_client(settings: Settings) -> CosmosClient:
    from azure.cosmos import CosmosClient

    if settings.cosmos_key:
        return CosmosClient(
            settings.cosmos_endpoint, credential=settings.cosmos_key, connection_verify=settings.cosmos_verify_tls
        )
    from azure.identity import DefaultAzureCredential

    client_id = settings.azure_client_id or None
    credential = DefaultAzureCredential(managed_identity_client_id=client_id)
    return CosmosClient(settings.cosmos_endpoint, credential=credential, connection_verify=settings.cosmos_verify_tls)


def ensure_database(client: CosmosClient, database: str) -> DatabaseProxy:
    """Local only: create the database and containers the Bicep creates in Azure."""
    from azure.cosmos import PartitionKey

    from contracts.names import ORDERS_CONTAINER, PARTITION_KEY_PATH, STATE_CONTAINER

    db = client.create_database_if_not_exists(database)
    for name in (ORDERS_CONTAINER, STATE_CONTAINER):
        db.create_container_if_not_exists(name, partition_key=PartitionKey(PARTITION_KEY_PATH))
    return db


def container(client: CosmosClient, database: str, name: str) -> ContainerProxy:
    return client.get_database_client(database).get_container_client(name)
