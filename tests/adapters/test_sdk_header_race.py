"""azure-cosmos keeps the last answer's headers in one dict on the client and, after every request, writes the throttle
counts into it. When another thread's query is copying that same dict (``__QueryFeed``'s ``response_headers.update``),
the copy raises RuntimeError "OrderedDict mutated during iteration": seen in CI, one of 16 concurrent ``COUNT`` queries
of one instance (``tests/test_redteam_scale_cached_counts.py``). Here the other thread's write is made at that exact
moment, every time, against the Cosmos protocol server: a query is run again; any other call meeting it is a
``StoreOutcomeUnknown`` (its answer had come back)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.utils import CaseInsensitiveDict
from azure.cosmos._cosmos_client_connection import CosmosClientConnection

from adapters.cosmos.errors import QUERY_TRIES, StoreOutcomeUnknown, mapped_errors, query_all
from adapters.cosmos.state_store import CosmosStateStore
from contracts.names import STATE_CONTAINER
from domain.states import ProcessState

pytestmark = pytest.mark.cosmos
THROTTLE_COUNT = "x-ms-throttle-retry-count"  # what azure.cosmos._retry_utility.Execute writes after each request


class OtherThreadsWrite:
    """While a query copies its answer's headers, another request's end writes into the client's shared
    ``last_response_headers``, which at that moment is this query's answer's: ``times`` times in a row."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, times: int) -> None:
        self.left = times
        self.armed: Any = None
        update_session = CosmosClientConnection._UpdateSessionIfRequired  # called just before the copy
        set_item = CaseInsensitiveDict.__setitem__

        def arm(conn: Any, request_headers: Any, result: Any, response_headers: Any) -> None:
            update_session(conn, request_headers, result, response_headers)
            if self.left > 0:
                self.armed = conn

        def copying(headers: Any, key: str, value: Any) -> None:
            set_item(headers, key, value)
            conn, self.armed = self.armed, None
            if conn is not None and conn.last_response_headers is not headers:
                self.left -= 1
                conn.last_response_headers[THROTTLE_COUNT] = 0  # a new key, mid-iteration

        monkeypatch.setattr(CosmosClientConnection, "_UpdateSessionIfRequired", arm)
        monkeypatch.setattr(CaseInsensitiveDict, "__setitem__", copying)


@pytest.fixture
def state(cosmos_db: Any) -> Iterator[Any]:
    yield cosmos_db.get_container_client(STATE_CONTAINER)


def test_the_race_raises_in_the_sdk_itself(state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The injection is the SDK's own failure, not one of the test's making: a bare query meets it."""
    OtherThreadsWrite(monkeypatch, times=1)
    with pytest.raises(RuntimeError, match="mutated during iteration"):
        list(state.query_items("SELECT VALUE COUNT(1) FROM c", enable_cross_partition_query=True))


def test_a_count_that_meets_the_race_is_run_again(state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    race = OtherThreadsWrite(monkeypatch, times=QUERY_TRIES - 1)
    assert CosmosStateStore(state).count(ProcessState.PROCESSING) == 0
    assert race.left == 0


def test_a_query_that_keeps_meeting_it_is_a_store_error(state: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    OtherThreadsWrite(monkeypatch, times=QUERY_TRIES)
    with pytest.raises(StoreOutcomeUnknown, match="headers"):
        query_all(state, "SELECT VALUE COUNT(1) FROM c", enable_cross_partition_query=True)


def test_other_runtime_errors_are_not_taken_for_it() -> None:
    with pytest.raises(RuntimeError, match="something else"), mapped_errors():
        raise RuntimeError("something else")
