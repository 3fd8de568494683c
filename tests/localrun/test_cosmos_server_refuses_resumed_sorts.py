"""The local Cosmos DB protocol server refuses what Azure refuses (``localrun/cosmos_server.cjs``): a
cross-partition query with ORDER BY (or DISTINCT, GROUP BY, an aggregate), resumed from a continuation token, is a
400. The azure-cosmos SDK documents it as not supported (README, "Limitations": "Continuation token support
for aggregate cross-partition queries like sorting, counting, and distinct"); on Azure such a page 2 is a
400 "Invalid Continuation Token" or skips results (Azure/azure-sdk-for-python#41434, #37230), while the
single-partition server here answered it, so paging by token passed every local test. Both clients the
tests and the runner use meet the refusal: the stock one (``CosmosServer.client``, the fixtures') and the
runner's (``CosmosServer.fast_client``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.cosmos

SORTED = [
    "SELECT * FROM c ORDER BY c.n",
    "SELECT * FROM c WHERE c.n >= 0 ORDER BY c.n DESC, c.id DESC",
    "select * from c order   by c.n",
]


@pytest.fixture(scope="module", params=["stock", "fast"])
def container(request: pytest.FixtureRequest, cosmos_server: Any) -> Iterator[Any]:
    from azure.cosmos import PartitionKey

    client = cosmos_server.client() if request.param == "stock" else cosmos_server.fast_client()
    name = f"guard-{uuid.uuid4().hex[:8]}"
    db = client.create_database(name)
    composite = [{"path": "/n", "order": "descending"}, {"path": "/id", "order": "descending"}]
    c = db.create_container(
        "items", partition_key=PartitionKey(path="/pk"), indexing_policy={"compositeIndexes": [composite]}
    )
    for n in range(7):
        c.create_item({"id": f"i{n}", "pk": f"p{n}", "n": n})
    yield c
    client.delete_database(name)


def _pages(container: Any, query: str, **options: Any) -> Any:
    return container.query_items(query, max_item_count=3, **options).by_page()


@pytest.mark.parametrize("query", SORTED)
def test_a_cross_partition_sort_resumed_from_a_token_is_refused_400(container: Any, query: str) -> None:
    from azure.cosmos.exceptions import CosmosHttpResponseError

    pages = _pages(container, query, enable_cross_partition_query=True)
    first = list(next(pages))
    assert len(first) == 3  # the first page has no token: answered
    with pytest.raises(CosmosHttpResponseError) as refused:
        list(next(pages))  # page 2 carries the first page's token
    assert refused.value.status_code == 400
    assert "Continuation token support for aggregate cross-partition queries" in str(refused.value.message)
    token = pages.continuation_token
    with pytest.raises(CosmosHttpResponseError) as again:  # a token passed in to a new query, as the app did
        list(next(container.query_items(query, enable_cross_partition_query=True, max_item_count=3).by_page(token)))
    assert again.value.status_code == 400


def test_a_streamable_cross_partition_query_still_pages_by_token(container: Any) -> None:
    pages = _pages(container, "SELECT * FROM c WHERE c.n >= 0", enable_cross_partition_query=True)
    assert sorted(d["n"] for page in pages for d in page) == list(range(7))


def test_a_sort_within_one_partition_still_pages_by_token(container: Any) -> None:
    pages = _pages(container, "SELECT * FROM c WHERE c.pk = 'p3' ORDER BY c.n", partition_key="p3")
    assert [d["n"] for page in pages for d in page] == [3]


def test_a_sort_read_as_one_list_is_answered(container: Any) -> None:
    query = "SELECT TOP 5 * FROM c ORDER BY c.n DESC"
    assert [d["n"] for d in container.query_items(query, enable_cross_partition_query=True)] == [6, 5, 4, 3, 2]
