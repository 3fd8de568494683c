"""Red team: asking the dependency's health before a call takes time under load (the SDK retrying 429s on the hot
health document's partition, or a write that keeps losing its etag race pausing between tries: up to 1.6 s of
pauses). An agent starts no new side effect after its request's deadline; before, it checked the deadline before
asking and after the call, not between: a call admitted past the deadline was made (against the Cosmos protocol
server, the health request's time spent on the manual clock)."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.health_store import CosmosHealthStore
from contracts.names import STATE_CONTAINER
from domain.circuit import CircuitPolicy
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from tests.agents.support import START, ScriptedService, agent_settings, make_request, transient
from tests.circuit.support import SlowHealthStore

pytestmark = pytest.mark.cosmos
POLICY = CircuitPolicy(threshold=8, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=240), probes=1)


@pytest.fixture
def store(cosmos_db: Any) -> SlowHealthStore:
    return SlowHealthStore(CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER)))


def test_a_call_admitted_after_the_deadline_is_not_made(store):
    clock = ManualClock(START)
    request = make_request(deadline=START + timedelta(seconds=1))
    service = ScriptedService(clock, [{"chargeId": "c-1"}])
    store.during_next_read = lambda: clock.advance(timedelta(seconds=2))  # the admission's read: slow
    reply = run_agent_request(
        request, service, clock, agent_settings(), random.Random(1), DependencyGate(store, clock, POLICY)
    )
    assert reply is None  # past the deadline: no reply
    assert service.calls == []  # before: one call, started a second after the deadline


def test_a_retry_admitted_after_the_deadline_is_not_made(store):
    clock = ManualClock(START)
    request = make_request(deadline=START + timedelta(seconds=5))
    service = ScriptedService(clock, [transient("503"), {"chargeId": "c-1"}])
    gate = DependencyGate(store, clock, POLICY)

    def slow_admission() -> None:  # the second call's admission (after the failure's read and write)
        store.during_next_read = lambda: clock.advance(timedelta(seconds=10))

    store.after_next_save = slow_admission  # the first failure counted
    reply = run_agent_request(request, service, clock, agent_settings(), random.Random(1), gate)
    assert reply is None
    assert len(service.calls) == 1  # before: 2, the retry started past the deadline
