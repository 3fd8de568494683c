"""Dependency health stored in Cosmos (the protocol server) and the agents' gate on it: fail fast
while open, one probe at a time, concurrent writers never lose a count, events for transitions."""

from __future__ import annotations

import logging
import random
from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.health_store import CosmosHealthStore, read_health, update_health
from contracts.names import STATE_CONTAINER
from domain.circuit import CircuitPolicy, CircuitState, record_failure
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from tests.agents.support import START, ScriptedService, agent_settings, make_request, permanent, transient

pytestmark = pytest.mark.cosmos
POLICY = CircuitPolicy(threshold=4, cooldown=timedelta(seconds=30), cooldown_max=timedelta(seconds=120), probes=1)


@pytest.fixture
def store(cosmos_db):
    return CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER))


@pytest.fixture
def mclock():
    return ManualClock(START)


def events(caplog) -> list[str]:
    return [r.event for r in caplog.records if getattr(r, "event", "").startswith("Dependency")]


def run(request, service, clock, gate):
    return run_agent_request(request, service, clock, agent_settings(), random.Random(3), gate)


def test_one_order_exhausting_its_calls_and_a_second_open_the_circuit_and_a_third_is_not_called(store, mclock, caplog):
    caplog.set_level(logging.INFO)
    gate = DependencyGate(store, mclock, POLICY)
    down = ScriptedService(mclock, [transient("503")] * 8)
    first = run(make_request(order_id="o1"), down, mclock, gate)
    assert first is not None and first.transient and not first.dependency_open
    assert read_health(store, "payment", mclock.now()).consecutive_failures == 4
    assert read_health(store, "payment", mclock.now()).state is CircuitState.OPEN
    assert events(caplog) == ["DependencyOutage"]
    calls_before = len(down.calls)
    second = run(make_request(order_id="o2"), down, mclock, gate)
    assert second is not None and second.outcome == "failed" and second.transient and second.dependency_open
    assert len(down.calls) == calls_before  # failed fast: no call


def test_a_probe_after_the_cool_down_closes_it_on_success_and_says_so(store, mclock, caplog):
    caplog.set_level(logging.INFO)
    gate = DependencyGate(store, mclock, POLICY)
    for _ in range(POLICY.threshold):
        gate.failed("payment")
    mclock.advance(POLICY.cooldown)
    assert gate.admit("payment")  # the probe
    assert not gate.admit("payment")  # a second agent meanwhile: fail fast
    gate.succeeded("payment")
    health = read_health(store, "payment", mclock.now())
    assert health.state is CircuitState.CLOSED and health.last_outage_started_at == START
    assert events(caplog) == ["DependencyOutage", "DependencyProbing", "DependencyRecovered"]
    recovered = next(r for r in caplog.records if getattr(r, "event", "") == "DependencyRecovered")
    assert recovered.outageSeconds == 30


def test_a_permanent_refusal_is_an_answer_not_an_outage(store, mclock):
    gate = DependencyGate(store, mclock, POLICY)
    gate.failed("payment")
    gate.failed("payment")
    refusing = ScriptedService(mclock, [permanent("card declined")])
    reply = run(make_request(), refusing, mclock, gate)
    assert reply is not None and not reply.transient
    assert read_health(store, "payment", mclock.now()).consecutive_failures == 0


def test_two_writers_holding_the_same_version_both_count(store, mclock):
    """update_health re-reads on a lost etag race: two failures from two agents are two failures."""
    now = mclock.now()
    update_health(store, "shipping", lambda h: (record_failure(h, now, POLICY)[0], None), now)
    stale = store.get("shipping")
    update_health(store, "shipping", lambda h: (record_failure(h, now, POLICY)[0], None), now)
    calls = []

    def change(h):
        calls.append(h.consecutive_failures)
        return record_failure(h, now, POLICY)[0], None

    real_get = store.get
    served = iter([stale])
    store.get = lambda dep: next(served, None) or real_get(dep)  # the first read is stale
    written, _ = update_health(store, "shipping", change, now)
    assert calls == [1, 2]  # lost the race once, re-read and re-applied
    assert written.consecutive_failures == 3


def test_a_health_store_that_fails_lets_the_call_through(mclock, caplog):
    caplog.set_level(logging.INFO)

    class Broken:
        def get(self, dependency):
            raise StoreUnavailable("503")

        def save(self, doc):
            raise StoreUnavailable("503")

        def count_waiting(self, reason):
            raise StoreUnavailable("503")

    gate = DependencyGate(Broken(), mclock, POLICY)
    ok = ScriptedService(mclock, [{"chargeId": "c"}])
    reply = run(make_request(), ok, mclock, gate)
    assert reply is not None and reply.outcome == "succeeded"
    assert "DependencyHealthUnavailable" in events(caplog)
