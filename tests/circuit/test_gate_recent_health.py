"""The gate trusts the health it last read or wrote for ``CIRCUIT_HEALTH_CACHE_SECONDS``: a healthy
dependency costs no Cosmos request per call, an open circuit refuses without a read before its probe,
and a failure is always read and written at once (against the Cosmos protocol server)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.health_store import CosmosHealthStore, RecentHealth, read_health
from contracts.names import STATE_CONTAINER
from domain.circuit import CircuitPolicy, CircuitState
from order_agents.circuit_gate import DependencyGate
from tests.agents.support import START

pytestmark = pytest.mark.cosmos
POLICY = CircuitPolicy(threshold=3, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=120), probes=1)
TTL = timedelta(seconds=5)


class Counting:
    """The real store, its requests counted."""

    def __init__(self, inner: CosmosHealthStore) -> None:
        self.inner = inner
        self.gets = 0
        self.saves = 0
        self.broken = False

    def get(self, dependency: str) -> Any:
        self.gets += 1
        if self.broken:
            raise StoreUnavailable("503")
        return self.inner.get(dependency)

    def save(self, doc: Any) -> Any:
        self.saves += 1
        if self.broken:
            raise StoreUnavailable("503")
        return self.inner.save(doc)

    def count_waiting(self, reason: str) -> int:
        return self.inner.count_waiting(reason)


@pytest.fixture
def store(cosmos_db) -> Counting:
    return Counting(CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER)))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def test_a_healthy_dependency_is_admitted_on_one_read_per_window(store, clock):
    gate = DependencyGate(store, clock, POLICY, RecentHealth(TTL))
    assert gate.admit("payment")
    assert store.gets == 1
    for _ in range(20):
        assert gate.admit("payment")
        clock.advance(timedelta(milliseconds=100))
    assert (store.gets, store.saves) == (1, 0)
    clock.advance(TTL)
    assert gate.admit("payment")
    assert store.gets == 2  # the window passed: read again


def test_a_success_is_read_but_not_written_when_nothing_is_counted(store, clock):
    gate = DependencyGate(store, clock, POLICY, RecentHealth(TTL))
    for _ in range(5):
        assert gate.admit("payment")
        gate.succeeded("payment")  # another instance's failures may be counted: read
    assert (store.gets, store.saves) == (6, 0)


def test_without_a_window_every_call_reads(store, clock):
    gate = DependencyGate(store, clock, POLICY, RecentHealth(timedelta(0)))
    for _ in range(3):
        assert gate.admit("payment")
        gate.succeeded("payment")
    assert (store.gets, store.saves) == (6, 0)


def test_a_failure_is_always_read_and_written_and_the_next_success_resets_it(store, clock):
    gate = DependencyGate(store, clock, POLICY, RecentHealth(TTL))
    assert gate.admit("payment")
    gate.failed("payment")
    gate.failed("payment")
    assert (store.gets, store.saves) == (3, 2)
    assert read_health(store.inner, "payment", clock.now()).consecutive_failures == 2
    gate.succeeded("payment")  # the window knows failures are counted: reset them
    assert read_health(store.inner, "payment", clock.now()).consecutive_failures == 0
    gate.succeeded("payment")  # and now nothing is counted: no write
    assert store.saves == 3


def test_an_open_circuit_is_read_before_each_refusal(store, clock):
    gate = DependencyGate(store, clock, POLICY, RecentHealth(TTL))
    for _ in range(POLICY.threshold):
        gate.failed("payment")
    assert read_health(store.inner, "payment", clock.now()).state is CircuitState.OPEN
    gets = store.gets
    assert not gate.admit("payment")
    assert store.gets == gets + 1
    clock.advance(POLICY.cooldown)  # the probe is due: read, grant, write
    assert gate.admit("payment")
    assert read_health(store.inner, "payment", clock.now()).state is CircuitState.HALF_OPEN


def test_a_circuit_another_instance_closed_is_not_refused_on_an_earlier_view(store, clock):
    mine = DependencyGate(store, clock, POLICY, RecentHealth(TTL))
    ahead = ManualClock(clock.now() + POLICY.cooldown)  # another host, its clock ahead of this one's
    theirs = DependencyGate(store, ahead, POLICY, RecentHealth(TTL))
    for _ in range(POLICY.threshold):
        mine.failed("payment")  # this instance saw it open, its probe 30 s away
    assert theirs.admit("payment")  # their probe
    theirs.succeeded("payment")  # closes it
    assert read_health(store.inner, "payment", clock.now()).state is CircuitState.CLOSED
    clock.advance(timedelta(seconds=1))
    assert mine.admit("payment")  # what this instance saw a second ago (open) does not refuse the call


def test_another_instance_opening_the_circuit_is_seen_once_the_window_passes(store, clock):
    mine = DependencyGate(store, clock, POLICY, RecentHealth(TTL))
    theirs = DependencyGate(store, clock, POLICY, RecentHealth(TTL))
    assert mine.admit("payment")
    for _ in range(POLICY.threshold):
        theirs.failed("payment")
    assert mine.admit("payment")  # within the window: still closed for this instance
    clock.advance(TTL)
    assert not mine.admit("payment")


def test_a_store_that_fails_is_not_trusted_later(store, clock):
    gate = DependencyGate(store, clock, POLICY, RecentHealth(TTL))
    for _ in range(POLICY.threshold):
        gate.failed("payment")
    store.broken = True
    gate.failed("payment")  # not written: what the gate knew is dropped
    assert gate.admit("payment")  # fail open: the store cannot be read, the call goes through
    store.broken = False
    assert not gate.admit("payment")  # read again: open
