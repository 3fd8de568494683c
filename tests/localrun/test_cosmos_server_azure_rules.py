"""The local Cosmos DB protocol server refuses what Azure Cosmos DB refuses and ``@vercel/cosmosdb-server``
took (``localrun/cosmos_guards.cjs``), for both clients the tests and the runner use: the stock one
(``CosmosServer.client``, the fixtures') and the runner's (``CosmosServer.fast_client``).

- Per-item limits (learn.microsoft.com/azure/cosmos-db/concepts-limits): an item of more than 2 MB is a 413,
  an id of more than 1,023 bytes or a partition key value of more than 2,048 bytes a 400. The server stored them.
- A cross-partition ORDER BY over values of more than one type fails on Azure: the azure-cosmos SDK merges
  the partitions' sorted results and raises on mixed types, a missing property counting as one
  (README, "Limitations": "Cross-partition ORDER BY for mixed types"; Azure/azure-sdk-for-python#43965). The
  server sorted them and left out the items without the property, so such a query passed every local test."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.cosmos

MB2 = 2 * 1024 * 1024


@pytest.fixture(scope="module", params=["stock", "fast"])
def container(request: pytest.FixtureRequest, cosmos_server: Any) -> Iterator[Any]:
    from azure.cosmos import PartitionKey

    client = cosmos_server.client() if request.param == "stock" else cosmos_server.fast_client()
    name = f"rules-{uuid.uuid4().hex[:8]}"
    db = client.create_database(name)
    yield db.create_container("items", partition_key=PartitionKey(path="/pk"))
    client.delete_database(name)


def _refused(call: Any) -> Any:
    from azure.cosmos.exceptions import CosmosHttpResponseError

    with pytest.raises(CosmosHttpResponseError) as refused:
        call()
    return refused.value


def _sized(doc_id: str, total: int) -> dict[str, Any]:
    """An item whose JSON (without spaces, as the service holds it) is ``total`` bytes long."""
    doc = {"id": doc_id, "pk": doc_id, "blob": ""}
    doc["blob"] = "x" * (total - len(json.dumps(doc, separators=(",", ":"))))
    return doc


def test_an_item_of_two_megabytes_is_stored_one_byte_more_is_413(container: Any) -> None:
    container.create_item(_sized("at-limit", MB2))
    assert _refused(lambda: container.create_item(_sized("over", MB2 + 1))).status_code == 413
    grown = {**container.read_item("at-limit", partition_key="at-limit"), "more": "y"}
    assert _refused(lambda: container.replace_item("at-limit", grown)).status_code == 413
    assert _refused(lambda: container.upsert_item(_sized("up", MB2 + 1))).status_code == 413


def test_the_size_is_of_the_body_as_sent_with_every_character_past_ascii_escaped(container: Any) -> None:
    """The service measures the JSON it receives; the SDK sends an emoji as two ``\\uXXXX`` escapes (12 bytes
    for its 4 in UTF-8; Azure/azure-sdk-for-python#48914)."""
    emoji = "\U0001f600" * 180_000  # 720,000 bytes of UTF-8, 2,160,000 escaped
    assert len(json.dumps({"e": emoji}, ensure_ascii=False).encode()) < MB2 < len(json.dumps({"e": emoji}))
    assert _refused(lambda: container.create_item({"id": "emoji", "pk": "emoji", "e": emoji})).status_code == 413


def test_an_id_past_1023_bytes_and_a_partition_key_past_2048_bytes_are_400(container: Any) -> None:
    container.create_item({"id": "i" * 1023, "pk": "p"})
    assert _refused(lambda: container.create_item({"id": "i" * 1024, "pk": "p"})).status_code == 400
    # bytes, not characters
    assert _refused(lambda: container.create_item({"id": "é" * 512, "pk": "p"})).status_code == 400
    container.create_item({"id": "k1", "pk": "k" * 2048})
    assert _refused(lambda: container.create_item({"id": "k2", "pk": "k" * 2049})).status_code == 400


@pytest.fixture(scope="module")
def sorted_items(container: Any) -> Any:
    for n, value in enumerate(["2026-01-02", "2026-01-01", None, 5]):
        container.create_item({"id": f"m{n}", "pk": f"m{n}", "group": "m", "k": value})
    container.create_item({"id": "m-missing", "pk": "m-missing", "group": "m"})
    return container


@pytest.mark.parametrize(
    "where",
    [
        "c.group = 'm'",  # string, null, number and undefined
        "c.group = 'm' AND (IS_STRING(c.k) OR NOT IS_DEFINED(c.k))",  # string and undefined
        "c.group = 'm' AND (IS_STRING(c.k) OR IS_NULL(c.k))",  # string and null
    ],
)
@pytest.mark.parametrize("order", ["", " DESC"])
def test_a_cross_partition_sort_over_mixed_types_is_refused_400(sorted_items: Any, where: str, order: str) -> None:
    query = f"SELECT TOP 1 * FROM c WHERE {where} ORDER BY c.k{order}"
    refused = _refused(lambda: list(sorted_items.query_items(query, enable_cross_partition_query=True)))
    assert refused.status_code == 400
    assert "Cannot execute cross partition order-by queries on mixed types" in str(refused.message)


def test_a_sort_filtered_to_one_type_or_within_one_partition_is_answered(sorted_items: Any) -> None:
    query = "SELECT * FROM c WHERE c.group = 'm' AND IS_STRING(c.k) ORDER BY c.k"
    assert [d["id"] for d in sorted_items.query_items(query, enable_cross_partition_query=True)] == ["m1", "m0"]
    within = "SELECT * FROM c WHERE c.pk = 'm2' ORDER BY c.k"
    assert [d["id"] for d in sorted_items.query_items(within, partition_key="m2")] == ["m2"]
    unsorted = "SELECT VALUE COUNT(1) FROM c WHERE c.group = 'm'"
    assert sum(sorted_items.query_items(unsorted, enable_cross_partition_query=True)) == 5
