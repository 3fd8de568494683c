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


def _composite(*paths: str) -> list[dict[str, str]]:
    """A composite index over ``paths`` ("/field" ascending, "-/field" descending)."""
    return [{"path": p.lstrip("-"), "order": "descending" if p.startswith("-") else "ascending"} for p in paths]


# The ``state`` container's composite indexes, as infra/modules/cosmos.bicep declares them (a test checks they
# are the same, and that every multi-property ORDER BY of the adapters has one). Cosmos DB answers such a
# query 400 without its index, and so does the local protocol server once the container declares them.
# Each matches its ORDER BY exactly (Azure also takes one whose orders are all inverted; the local server
# does not). The equality-filtered processState comes first, as the Cosmos DB docs recommend.
STATE_COMPOSITE_INDEXES = [
    _composite("/processState", "/completeBy"),  # the filters of the scans and of the starter's claim
    _composite("/processState", "/completeBy", "/id"),  # state_store.EXPIRED_ORDER: the scans' pages
    _composite("-/processState", "-/updatedAt", "-/id"),  # ops_queries.LIST_ORDER_OF_STATE
    _composite("-/updatedAt", "-/id"),  # ops_queries.LIST_ORDER_ANY
]


def ensure_database(client: CosmosClient, database: str) -> DatabaseProxy:
    """Local only: create the database and containers the Bicep creates in Azure (with the ``state``
    container's composite indexes, so that a sort without its index fails here as there)."""
    from azure.cosmos import PartitionKey

    from contracts.names import ORDERS_CONTAINER, PARTITION_KEY_PATH, STATE_CONTAINER

    db = client.create_database_if_not_exists(database)
    db.create_container_if_not_exists(ORDERS_CONTAINER, partition_key=PartitionKey(PARTITION_KEY_PATH))
    db.create_container_if_not_exists(
        STATE_CONTAINER,
        partition_key=PartitionKey(PARTITION_KEY_PATH),
        indexing_policy={"compositeIndexes": STATE_COMPOSITE_INDEXES},
    )
    return db


def container(client: CosmosClient, database: str, name: str) -> ContainerProxy:
    return client.get_database_client(database).get_container_client(name)
