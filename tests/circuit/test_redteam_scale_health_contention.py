"""Red team of dependency health at scale: many agent instances write one health document at once (a
service starts failing under load, every in-flight call fails together). Against the Cosmos protocol
server through the real SDK, from concurrent threads, each with a gate of its own (an instance).

Before: a write that lost its etag race read and wrote again at once, five times, then gave up
(``ConcurrencyExhausted``, logged ``DependencyHealthUnavailable``, the failure not counted): of 40
writers' failures 16 to 21 were counted, in 152 to 168 reads and as many replaces. Now the losers pause a
random time whose ceiling doubles (``documents.RacePause``) for up to ten tries (``HEALTH_RACE_ATTEMPTS``)."""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import SystemClock
from adapters.cosmos.health_store import CosmosHealthStore, read_health
from contracts.names import STATE_CONTAINER
from domain.circuit import CircuitPolicy, CircuitState, DependencyHealth
from order_agents.circuit_gate import DependencyGate

pytestmark = pytest.mark.cosmos
WRITERS = 40
NEVER_OPENS = CircuitPolicy(
    threshold=10**6, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=240), probes=1
)


class CountingStore:
    """The Cosmos health store, counting the requests made through it (it delegates every one)."""

    def __init__(self, inner: CosmosHealthStore) -> None:
        self.inner = inner
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, what: str) -> None:
        with self._lock:
            self.requests[what] += 1

    def get(self, dependency: str) -> DependencyHealth | None:
        self._count("read")
        return self.inner.get(dependency)

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        self._count("write")
        return self.inner.save(doc)

    def count_waiting(self, reason: str) -> int:
        return self.inner.count_waiting(reason)


@pytest.fixture
def store(cosmos_db: Any) -> CountingStore:
    return CountingStore(CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER)))


def all_at_once(writers: int, work: Any) -> None:
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        start.wait()
        try:
            work(n)
        except BaseException as exc:  # a thread's failure fails the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def unavailable(caplog: Any) -> int:
    return sum(1 for r in caplog.records if getattr(r, "event", "") == "DependencyHealthUnavailable")


def test_forty_instances_failing_at_once_all_count_and_the_races_stay_bounded(store, caplog):
    caplog.set_level(logging.WARNING)
    clock = SystemClock()
    store.inner.save(DependencyHealth.fresh("payment", clock.now()))  # created: the races are replaces

    def instance(n: int) -> None:
        DependencyGate(store, clock, NEVER_OPENS, rng=random.Random(n)).failed("payment")

    all_at_once(WRITERS, instance)
    health = read_health(store.inner, "payment", clock.now())
    assert unavailable(caplog) == 0  # before: 16 to 24 of 40 (ConcurrencyExhausted)
    assert health.consecutive_failures == WRITERS  # before: 16 to 21 (every count lost is a failure lost)
    # one read and one write per failure, and one more of each per race lost: about 4.3 of each (136 to 194
    # in all); ten tries without the pauses lost 6 or 7 counts in 208 to 228 of each
    assert store.requests["write"] == store.requests["read"]
    assert store.requests["write"] <= 6 * WRITERS, store.requests


def test_an_outage_under_load_opens_the_circuit_once_and_the_rest_stop_writing(store, caplog):
    """Threshold 8, forty failures at once: eight land, the circuit opens, the other writers read it open
    and write nothing (a failure on an open circuit changes nothing)."""
    caplog.set_level(logging.WARNING)
    clock = SystemClock()
    policy = CircuitPolicy(threshold=8, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=240), probes=1)
    store.inner.save(DependencyHealth.fresh("payment", clock.now()))

    def instance(n: int) -> None:
        DependencyGate(store, clock, policy, rng=random.Random(n)).failed("payment")

    all_at_once(WRITERS, instance)
    health = read_health(store.inner, "payment", clock.now())
    assert health.state is CircuitState.OPEN
    assert health.consecutive_failures == policy.threshold
    assert unavailable(caplog) == 0
    assert [r.event for r in caplog.records if getattr(r, "event", "") == "DependencyOutage"] == ["DependencyOutage"]
