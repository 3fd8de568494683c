"""Red team of the caps' cached counts (``dependencies.CachedCounts``, ``STATE_COUNT_CACHE_SECONDS``) under load: an
instance handles up to ``maxConcurrentCalls`` (16) messages at once, and each submission reads the ``Pending`` count
(``MAX_PENDING``). When the cached count lapses, every handler that asks before the refresh's answer is back used
to send a cross-partition ``COUNT`` query of its own: 16 at once per instance and state, instead of one (a ``COUNT``
is charged more the more records are in that state, on every partition). Against the Cosmos protocol server."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore
from contracts.names import STATE_CONTAINER
from dependencies import CachedCounts
from domain.states import ProcessState

pytestmark = pytest.mark.cosmos
HANDLERS = 16
TTL = timedelta(seconds=5)


class SlowCounts:
    """The Cosmos state store, its ``count`` a cross-partition query that takes 0.2 s (a large backlog), counted."""

    def __init__(self, inner: CosmosStateStore) -> None:
        self.inner = inner
        self.queries = 0
        self._lock = threading.Lock()

    def count(self, state: ProcessState) -> int:
        with self._lock:
            self.queries += 1
        time.sleep(0.2)
        return self.inner.count(state)


def at_once(work: Any) -> list[Any]:
    start = threading.Barrier(HANDLERS)
    results: list[Any] = [None] * HANDLERS

    def run(n: int) -> None:
        start.wait()
        results[n] = work()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(HANDLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


@pytest.fixture
def store(cosmos_db: Any) -> SlowCounts:
    return SlowCounts(CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER)))


def test_a_lapsed_count_is_refreshed_by_one_query_while_the_other_handlers_use_the_one_it_replaces(store):
    clock = ManualClock()
    counts = CachedCounts(store, clock, TTL)  # type: ignore[arg-type]
    assert counts.get(ProcessState.PENDING) == 0
    counts.bump(ProcessState.PENDING, +3)  # this instance admitted three since
    clock.advance(TTL)  # lapsed
    seen = at_once(lambda: counts.get(ProcessState.PENDING))
    assert store.queries == 2  # the first, and one refresh: before, 17 (each handler sent its own)
    assert sorted(set(seen)) == [0, 3]  # the refresh's answer (nothing stored), or the value it replaces
    assert seen.count(0) == 1
    assert counts.get(ProcessState.PENDING) == 0 and store.queries == 2  # refreshed: cached again


def test_a_refresh_that_fails_lets_the_next_caller_refresh(store):
    clock = ManualClock()
    counts = CachedCounts(store, clock, TTL)  # type: ignore[arg-type]
    counts.get(ProcessState.PENDING)
    clock.advance(TTL)
    real = store.inner.count

    def failing(state: ProcessState) -> int:
        raise RuntimeError("throttled past the SDK's retries")

    store.inner.count = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        counts.get(ProcessState.PENDING)
    store.inner.count = real  # type: ignore[method-assign]
    assert counts.get(ProcessState.PENDING) == 0
    assert store.queries == 3


def test_with_nothing_cached_yet_every_handler_asks(store):
    """No value to answer with while the first query is out (a new instance): each asks, never waits on another's
    query (the local runner's tasks take turns: one blocked on another's query would stop the simulation)."""
    counts = CachedCounts(store, ManualClock(), TTL)  # type: ignore[arg-type]
    assert at_once(lambda: counts.get(ProcessState.PROCESSING)) == [0] * HANDLERS
    assert 1 <= store.queries <= HANDLERS
