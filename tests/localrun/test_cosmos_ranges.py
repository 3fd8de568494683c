"""The local Cosmos DB server with containers split into partition key ranges (``localrun/cosmos_ranges.cjs``), met by
the real azure-cosmos SDK as it meets Azure's gateway for a partitioned container: the ranges read from ``/pkranges``
(drained until a 304), a query the gateway cannot serve across ranges answered 400/1004, the query plan fetched, the
rewritten query sent to each range and the results merged by the SDK (``azure/cosmos/_execution_context``). Both
clients the tests and the runner use: the stock one (``CosmosServer.client``) and the runner's (``fast_client``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import RANGES

pytestmark = pytest.mark.cosmos

ITEMS = 30


@pytest.fixture(scope="module", params=["stock", "fast"])
def container(request: pytest.FixtureRequest, cosmos_ranges_server: Any) -> Iterator[Any]:
    from azure.cosmos import PartitionKey

    server = cosmos_ranges_server
    client = server.client() if request.param == "stock" else server.fast_client()
    name = f"ranges-{uuid.uuid4().hex[:8]}"
    db = client.create_database(name)
    c = db.create_container("items", partition_key=PartitionKey(path="/pk"))
    for n in range(ITEMS):
        c.create_item({"id": f"i{n:02d}", "pk": f"p{n}", "n": (n * 7) % ITEMS, "g": n % 3})
    yield c
    client.delete_database(name)


def _counts(server: Any, **before: int) -> dict[str, int]:
    now = server.range_counts()
    return {k: now[k] - before.get(k, 0) for k in ("pkranges", "notServable", "plans", "rangeQueries")}


def test_the_sdk_reads_the_ranges_and_each_holds_its_own_documents(container: Any) -> None:
    ranges = list(container.read_feed_ranges())
    assert len(ranges) == RANGES
    held = [sorted(d["id"] for d in container.query_items("SELECT * FROM c", feed_range=r)) for r in ranges]
    assert all(held), "every range holds some of the 30 documents"
    assert sorted(i for ids in held for i in ids) == [f"i{n:02d}" for n in range(ITEMS)]  # each once


def test_a_sorted_top_is_planned_queried_per_range_and_merged_by_the_sdk(container: Any, cosmos_ranges_server) -> None:
    before = cosmos_ranges_server.range_counts()
    query = "SELECT TOP @t * FROM c WHERE c.n >= @low ORDER BY c.n DESC"
    params = [{"name": "@t", "value": 7}, {"name": "@low", "value": 3}]
    found = [d["n"] for d in container.query_items(query, parameters=params, enable_cross_partition_query=True)]
    assert found == list(range(ITEMS - 1, ITEMS - 8, -1))
    counts = _counts(cosmos_ranges_server, **before)
    assert (counts["notServable"], counts["plans"], counts["rangeQueries"]) == (1, 1, RANGES)


def test_aggregates_are_summed_over_the_ranges(container: Any) -> None:
    def value(query: str) -> Any:
        return list(container.query_items(query, enable_cross_partition_query=True))

    assert value("SELECT VALUE COUNT(1) FROM c WHERE c.g = 1") == [10]
    assert value("SELECT VALUE SUM(c.n) FROM c") == [sum(range(ITEMS))]
    assert value("SELECT VALUE MAX(c.n) FROM c WHERE c.n < 20") == [19]
    assert value("SELECT VALUE COUNT(1) FROM c WHERE c.g = 9") == [0]


def test_a_streamable_query_is_served_by_the_gateway_across_ranges(container: Any, cosmos_ranges_server) -> None:
    before = cosmos_ranges_server.range_counts()
    found = list(container.query_items("SELECT * FROM c WHERE c.g = 2", enable_cross_partition_query=True))
    assert len(found) == 10
    assert _counts(cosmos_ranges_server, **before)["plans"] == 0


def test_what_the_python_sdk_cannot_run_across_ranges_is_refused(container: Any) -> None:
    from azure.cosmos.exceptions import CosmosHttpResponseError

    with pytest.raises(CosmosHttpResponseError, match="Query contained GroupBy"):
        list(container.query_items("SELECT c.g, COUNT(1) AS k FROM c GROUP BY c.g", enable_cross_partition_query=True))
    with pytest.raises(CosmosHttpResponseError, match="Query contained NonValueAggregate"):
        list(container.query_items("SELECT COUNT(1) AS k FROM c", enable_cross_partition_query=True))


def test_a_sort_over_mixed_types_fails_in_the_sdks_merge(container: Any) -> None:
    # one item whose sort key is text among numbers: the SDK's merge compares the ranges' heads and raises
    container.upsert_item({"id": "odd", "pk": "odd", "n": "text", "g": 5})
    try:
        with pytest.raises(ValueError, match="Expected"):
            list(container.query_items("SELECT * FROM c ORDER BY c.n", enable_cross_partition_query=True))
    finally:
        container.delete_item("odd", partition_key="odd")


def test_a_sorted_query_resumed_from_its_token_skips_what_the_other_ranges_held(container: Any) -> None:
    """What Azure does with the continuation token of a cross-partition ORDER BY through this SDK (where the
    one-range server refuses it, 400: ``test_cosmos_server_refuses_resumed_sorts.py``): the iterator's token is the
    last range's own (``last_response_headers``), and a new query given it sends it to every range, which skip what
    they never returned (azure-cosmos README, "Limitations"; Azure/azure-sdk-for-python#37230). The app pages by
    keyset (``state_store.seek_page``), never by token."""
    query = "SELECT * FROM c ORDER BY c.n"
    pages = container.query_items(query, enable_cross_partition_query=True, max_item_count=4).by_page()
    read = [d["n"] for _ in range(2) for d in next(pages)]
    assert read == list(range(8))  # paged on in memory: merged right
    token = pages.continuation_token
    resumed = container.query_items(query, enable_cross_partition_query=True, max_item_count=4).by_page(token)
    rest = [d["n"] for page in resumed for d in page]
    assert rest == sorted(rest) and rest[:1] != [8]
    assert len(set(read + rest)) < ITEMS  # documents skipped
