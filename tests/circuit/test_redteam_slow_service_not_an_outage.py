"""A slow service is not an outage: what an agent's calls tell the circuit (against the Cosmos protocol server).

The ``slow-remote-calls`` profile (no outage; a quarter of the calls outlive ``REMOTE_CALL_TIMEOUT``, the
service committing them later and answering a same-key retry "still working") raised about ten
``DependencyOutage`` operator alerts per 100 orders: the timeout and the three "still working" answers of
one order's retries counted as four failures in a row, so two slow orders opened the circuit
(``CIRCUIT_FAILURE_THRESHOLD`` 8). An operator paged for outages that are not learns to ignore the page.

The rule now (docs/supervisor.md, "What counts toward a circuit"): the circuit opens on the weight of the
failures since the service last answered anything. An error it answers (or a connection it refuses) weighs
one failure; a timeout (no answer) is ambiguous, a hung service also times out, so it weighs half; an answer
that it is still working on the same key proves it up and clears the weight. A hung service still opens the
circuit, after twice as many calls; an outage answering errors at the threshold, as before."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.health_store import CosmosHealthStore, read_health
from adapters.remote.interface import RemoteCall
from adapters.remote.simulators.config import Outage, SimulatorConfig
from adapters.remote.simulators.service import SimulatedService
from contracts.messages import AgentReply
from contracts.names import STATE_CONTAINER
from domain.circuit import CircuitState
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from settings import Settings
from tests.agents.support import START, make_request

pytestmark = pytest.mark.cosmos

SETTINGS = Settings.from_env({}, AGENT_MAX_ATTEMPTS="4", AGENT_RETRY_BASE_MS="1000", AGENT_RETRY_MAX_MS="8000")
THRESHOLD = SETTINGS.circuit_failure_threshold
SLOW = SimulatorConfig(latency_ms=(90_000, 90_000))  # the client gives up after 10 s, the service commits at 90 s
FAST = SimulatorConfig(latency_ms=(1_000, 1_000))


class FirstCallSlow:
    """payment, alive and slow: the first call of each idempotency key takes 90 s, every later one 1 s (a retry
    that arrives while the first still runs is answered "still working")."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = SimulatedService("payment", clock, FAST)
        self.seen: set[str] = set()

    def call(self, request: RemoteCall) -> dict[str, Any]:
        self.inner.config = FAST if request.idempotency_key in self.seen else SLOW
        self.seen.add(request.idempotency_key)
        return self.inner.call(request)


@pytest.fixture
def store(cosmos_db: Any) -> CosmosHealthStore:
    return CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER))


def run_orders(service: Any, store: CosmosHealthStore, clock: ManualClock, orders: int) -> list[AgentReply | None]:
    """``orders`` orders' payment requests, one after the other (no success between them)."""
    gate = DependencyGate(store, clock, SETTINGS.circuit_policy)
    replies = []
    for number in range(orders):
        request = make_request(order_id=f"o{number}", deadline=clock.now() + timedelta(seconds=60))
        replies.append(run_agent_request(request, service, clock, SETTINGS, random.Random(number), gate))
        clock.advance(timedelta(seconds=1))
    return replies


def test_still_working_answers_prove_the_service_up_and_slow_orders_in_a_row_open_no_circuit(store):
    clock = ManualClock(START)
    service = FirstCallSlow(clock)
    replies = run_orders(service, store, clock, THRESHOLD)

    assert service.inner.calls == 4 * THRESHOLD  # each order: a timeout, then three "still working"
    assert all(r is not None and r.outcome == "failed" and r.transient for r in replies)
    assert not any(r is not None and r.dependency_open for r in replies)  # before: open after the second order
    health = read_health(store, "payment", clock.now())
    assert health.state is CircuitState.CLOSED and health.failure_weight == 0  # each timeout answered since
    assert health.consecutive_failures == 4 * THRESHOLD  # no result yet: the supervisor lets the orders wait


def test_a_still_working_answer_resets_the_timeouts_counted_before_it(store):
    clock = ManualClock(START)
    gate = DependencyGate(store, clock, SETTINGS.circuit_policy)
    for _ in range(2 * THRESHOLD - 2):
        gate.failed("payment", timed_out=True)  # other orders' slow calls: one timeout short of opening
    [reply] = run_orders(FirstCallSlow(clock), store, clock, 1)  # a timeout, then "still working"

    assert reply is not None and not reply.dependency_open
    health = read_health(store, "payment", clock.now())
    assert health.state is CircuitState.CLOSED
    assert (health.consecutive_failures, health.failure_weight) == (2 * THRESHOLD - 2 + 4, 0)


def test_a_hung_service_still_opens_the_circuit_after_twice_as_many_calls(store):
    clock = ManualClock(START)
    hung = SimulatedService("payment", clock, SLOW)  # no call is ever answered in time
    replies = run_orders(hung, store, clock, 5)

    assert hung.calls == 2 * THRESHOLD  # 16 timeouts, half a failure each: the fourth order's last call opened it
    assert [bool(r is not None and r.dependency_open) for r in replies] == [False, False, False, False, True]
    assert read_health(store, "payment", clock.now()).state is CircuitState.OPEN


def test_an_outage_answering_errors_opens_the_circuit_at_the_threshold_as_before(store):
    clock = ManualClock(START)
    down = SimulatedService(
        "payment", clock, SimulatorConfig(latency_ms=(100, 100), outages=(Outage(timedelta(0), timedelta(hours=1)),))
    )
    replies = run_orders(down, store, clock, 3)

    assert down.calls == THRESHOLD
    assert [bool(r is not None and r.dependency_open) for r in replies] == [False, False, True]
    assert read_health(store, "payment", clock.now()).state is CircuitState.OPEN
