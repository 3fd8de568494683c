"""The app's cross-partition queries on a container split into partition key ranges, as Azure serves one past a
physical partition (~50 GB or 10,000 RU/s): the gateway answers a query with TOP, ORDER BY or an aggregate 400/1004,
the azure-cosmos SDK fetches a query plan, sends the rewritten query to each range and merges their results itself
(ORDER BY by a heap over the ranges' sorted pages, TOP on the merged stream, COUNT summed: its
``_execution_context``). The local server does so with ``cosmos_db_ranges`` (``localrun/cosmos_ranges.cjs``); the
keyset paging of the scans and the ops list runs on both in ``test_keyset_paging.py``.

Found: a scan page's request charge was read from the client's ``last_response_headers``, the last range's page
alone (and whatever request of the shared client came last): it is the sum of every response now (``RequestCharge``,
the SDK's ``response_hook``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.health_store import CosmosHealthStore
from adapters.cosmos.mapping import to_document
from adapters.cosmos.ops_queries import CosmosOpsQueries
from adapters.cosmos.state_store import CosmosStateStore
from contracts.names import STATE_CONTAINER
from domain import transitions
from domain.states import ProcessState
from tests.conftest import RANGES

pytestmark = pytest.mark.cosmos


@pytest.fixture
def container(cosmos_db_ranges: Any) -> Any:
    return cosmos_db_ranges.get_container_client(STATE_CONTAINER)


def _put(container: Any, order_id: str, state: ProcessState, at: datetime, last_error: str | None = None) -> None:
    record = transitions.new_record(order_id, None, at)
    record = replace(record, process_state=state, updated_at=at, complete_by=at, last_error=last_error)
    container.upsert_item(to_document(record))


def _range_queries(server: Any) -> int:
    return int(server.range_counts()["rangeQueries"])


def test_a_scan_pages_charge_is_every_ranges_response_not_the_last_ones(container, cosmos_ranges_server, clock):
    now = clock.now()
    for i in range(12):
        _put(container, f"o{i:02d}", ProcessState.PROCESSING, now - timedelta(minutes=i))
    before = _range_queries(cosmos_ranges_server)

    page = CosmosStateStore(container).expired_page(ProcessState.PROCESSING, now, None, 5, None)

    assert len(page.records) == 5 and page.after is not None
    queried = _range_queries(cosmos_ranges_server) - before
    assert queried == RANGES  # the SDK asked each range for the page (TOP 6 ... ORDER BY), one response each
    assert page.request_charge == queried * 1.0  # the server charges 1 RU a response; it read 1.0, one range's


def test_the_starters_claim_takes_the_oldest_pending_across_ranges(container, cosmos_ranges_server, clock):
    now = clock.now()
    ages = [7, 1, 9, 4, 12, 3, 8, 11, 2, 6]
    for i, minutes in enumerate(ages):
        _put(container, f"p{i:02d}", ProcessState.PENDING, now - timedelta(minutes=minutes))
    before = _range_queries(cosmos_ranges_server)

    claimed = CosmosStateStore(container).claimable(now, 4)

    assert [r.order_id for r in claimed] == ["p04", "p07", "p02", "p06"]  # 12, 11, 9 and 8 minutes old
    assert _range_queries(cosmos_ranges_server) - before == RANGES


def test_counts_sum_every_range(container, clock):
    now = clock.now()
    for i in range(9):
        _put(container, f"c{i}", ProcessState.PENDING if i % 3 else ProcessState.PROCESSING, now)
    for i in range(5):
        _put(container, f"w{i}", ProcessState.PROCESSING, now, last_error="down")

    assert CosmosStateStore(container).count(ProcessState.PENDING) == 6
    assert CosmosStateStore(container).count(ProcessState.PROCESSING) == 8
    assert CosmosHealthStore(container).count_waiting("down") == 5


def test_the_ops_summary_lists_the_soonest_deadlines_across_ranges(container, clock):
    now = clock.now()
    for i in range(10):
        _put(container, f"s{i}", ProcessState.PROCESSING, now + timedelta(minutes=(i * 7) % 10))

    page = CosmosOpsQueries(container).oldest_deadlines(ProcessState.PROCESSING, 3)

    assert [r.order_id for r in page.records] == ["s0", "s3", "s6"]  # due in 0, 1 and 2 minutes
