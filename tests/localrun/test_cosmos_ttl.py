"""The local Cosmos DB protocol server expires items as Azure Cosmos DB's time to live does
(``localrun/cosmos_ttl.cjs``; learn.microsoft.com/azure/cosmos-db/time-to-live), through the real azure-cosmos SDK.
``@vercel/cosmosdb-server`` kept every item for ever, whatever the container's ``defaultTtl`` or the item's ``ttl``.

The server's clock is moved ahead (``CosmosServer.set_clock_offset``) instead of waiting: a server of this module's
own, so the session's server keeps the machine's time."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from localrun.cosmos_server import CosmosServer

pytestmark = pytest.mark.cosmos


@pytest.fixture(scope="module", params=[1, 3], ids=["one range", "ranges"])
def server(request: pytest.FixtureRequest) -> Iterator[CosmosServer]:
    with CosmosServer(ranges=request.param) as started:
        yield started


@pytest.fixture
def database(server: CosmosServer) -> Iterator[Any]:
    client = server.client()
    name = f"ttl-{uuid.uuid4().hex[:8]}"
    db = client.create_database(name)
    server.set_clock_offset(0)
    yield db
    server.set_clock_offset(0)
    client.delete_database(name)


def _container(db: Any, default_ttl: int | None) -> Any:
    from azure.cosmos import PartitionKey

    return db.create_container("items", partition_key=PartitionKey(path="/pk"), default_ttl=default_ttl)


def _put(container: Any, doc_id: str, **fields: Any) -> None:
    container.create_item({"id": doc_id, "pk": doc_id, **fields})


def _seen(container: Any) -> dict[str, set[str]]:
    """The ids each way of reading answers: a point read of each id put, a cross-partition query, the read feed."""
    from azure.cosmos.exceptions import CosmosResourceNotFoundError

    ids = ["plain", "never", "short", "long"]
    read = set()
    for doc_id in ids:
        with contextlib.suppress(CosmosResourceNotFoundError):
            read.add(container.read_item(doc_id, partition_key=doc_id)["id"])
    every = "SELECT * FROM c"
    query = {d["id"] for d in container.query_items(every, enable_cross_partition_query=True)}
    ordered = {d["id"] for d in container.query_items(every + " ORDER BY c.id", enable_cross_partition_query=True)}
    feed = {d["id"] for d in container.read_all_items()}
    return {"read": read, "query": query, "ordered": ordered, "feed": feed}


def _everywhere(ids: set[str]) -> dict[str, set[str]]:
    return {"read": ids, "query": ids, "ordered": ids, "feed": ids}


def _fill(container: Any) -> None:
    _put(container, "plain")  # no ttl
    _put(container, "never", ttl=-1)
    _put(container, "short", ttl=50)
    _put(container, "long", ttl=1000)


def test_without_a_default_ttl_on_the_container_no_item_expires_whatever_its_ttl(
    database: Any, server: CosmosServer
) -> None:
    container = _container(database, None)
    _fill(container)
    server.set_clock_offset(5000)
    assert _seen(container) == _everywhere({"plain", "never", "short", "long"})


def test_default_ttl_minus_one_expires_only_the_items_with_a_ttl_of_their_own(
    database: Any, server: CosmosServer
) -> None:
    container = _container(database, -1)
    _fill(container)
    assert _seen(container) == _everywhere({"plain", "never", "short", "long"})
    server.set_clock_offset(60)
    assert _seen(container) == _everywhere({"plain", "never", "long"})
    server.set_clock_offset(1100)
    assert _seen(container) == _everywhere({"plain", "never"})


def test_a_default_ttl_expires_the_items_without_one_and_an_item_ttl_overrides_it(
    database: Any, server: CosmosServer
) -> None:
    container = _container(database, 100)
    _fill(container)
    server.set_clock_offset(60)
    assert _seen(container) == _everywhere({"plain", "never", "long"})  # short: its own 50 s
    server.set_clock_offset(150)
    assert _seen(container) == _everywhere({"never", "long"})  # plain: the container's 100 s
    server.set_clock_offset(1100)
    assert _seen(container) == _everywhere({"never"})


def test_the_time_counts_from_the_last_write_and_an_expired_id_is_free_again(
    database: Any, server: CosmosServer
) -> None:
    from azure.cosmos.exceptions import CosmosResourceNotFoundError

    container = _container(database, -1)
    _put(container, "short", ttl=50)
    server.set_clock_offset(40)
    container.replace_item("short", {"id": "short", "pk": "short", "ttl": 50, "again": True})
    server.set_clock_offset(80)  # 80 s after the create, 40 s after the replace
    assert container.read_item("short", partition_key="short")["again"] is True
    server.set_clock_offset(100)
    with pytest.raises(CosmosResourceNotFoundError):
        container.replace_item("short", {"id": "short", "pk": "short", "ttl": 50})  # deleted: nothing to replace
    _put(container, "short", ttl=50)  # no conflict with the expired one
    assert container.read_item("short", partition_key="short")["ttl"] == 50


def test_a_default_ttl_other_than_minus_one_or_a_positive_integer_is_refused(database: Any) -> None:
    from azure.cosmos.exceptions import CosmosHttpResponseError

    for wrong in (0, -2):
        with pytest.raises(CosmosHttpResponseError) as refused:
            _container(database, wrong)
        assert refused.value.status_code == 400


def test_turning_ttl_on_for_an_existing_container_keeps_its_items_and_expires_those_with_a_ttl(
    database: Any, server: CosmosServer
) -> None:
    from azure.cosmos import PartitionKey

    container = _container(database, None)
    _fill(container)
    database.replace_container(container, partition_key=PartitionKey(path="/pk"), default_ttl=-1)
    assert database.get_container_client("items").read()["defaultTtl"] == -1
    assert _seen(container) == _everywhere({"plain", "never", "short", "long"})  # in place: nothing lost
    server.set_clock_offset(60)
    assert _seen(container) == _everywhere({"plain", "never", "long"})


@pytest.mark.parametrize("ttl_on", [-1, None], ids=["ttl on", "ttl off"])
def test_an_item_ttl_other_than_minus_one_or_a_positive_integer_is_refused_on_every_write(
    database: Any, ttl_on: int | None
) -> None:
    """Azure answers 400 "The input ttl '0' is invalid. Ensure to provide a nonzero positive integer less than or
    equal to '2147483647', or '-1' which means never expire." (MicrosoftDocs/azure-docs#107151 for null,
    Azure/azure-cosmos-dotnet-v3#620 for 0). Before, the server stored each of them (and kept the item for ever)."""
    from azure.cosmos.exceptions import CosmosHttpResponseError

    container = _container(database, ttl_on)
    _put(container, "kept", ttl=100)
    for wrong in (0, None, -2, "100", 1.5, 2147483648):
        writes = {
            "create": lambda w=wrong: _put(container, "new", ttl=w),
            "replace": lambda w=wrong: container.replace_item("kept", {"id": "kept", "pk": "kept", "ttl": w}),
            "upsert": lambda w=wrong: container.upsert_item({"id": "kept", "pk": "kept", "ttl": w}),
            "patch": lambda w=wrong: container.patch_item(
                "kept", partition_key="kept", patch_operations=[{"op": "set", "path": "/ttl", "value": w}]
            ),
        }
        for name, write in writes.items():
            with pytest.raises(CosmosHttpResponseError) as refused:
                write()
            assert refused.value.status_code == 400, (name, wrong)
            assert "The input ttl" in str(refused.value.message), (name, wrong)
    assert container.read_item("kept", partition_key="kept")["ttl"] == 100  # nothing written
    assert {d["id"] for d in container.read_all_items()} == {"kept"}
    for right in (-1, 1, 2147483647):
        container.upsert_item({"id": "kept", "pk": "kept", "ttl": right})
