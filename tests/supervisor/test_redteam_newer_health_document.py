"""Red team (rt-upgrade2): a dependency's health document this version cannot read (a newer version's circuit
state, ``"throttled"`` say, or a field of another shape; during a rolling upgrade or after a rollback) raised
``DocumentError``, which is no ``StoreError``, out of the agents' gate and out of the supervisor's outage verdict:
every request to that dependency failed its trigger (redelivered, at last dead-lettered
``MaxDeliveryCountExceeded``: every order using it failed), and every expired attempt that was calling it failed
its recovery at every supervisor run (never retried, never escalated: stuck in ``Processing``).

Now both take it as a health they could not read (``DependencyHealthUnavailable``, naming the field): the agent
calls the service anyway, the supervisor counts the failure as the order's own; neither writes over the newer
document. Over the real Cosmos SDK (the local protocol server)."""

from __future__ import annotations

import logging
import random
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.health_store import CosmosHealthStore
from contracts.names import STATE_CONTAINER
from domain.circuit import document_id, partition_key
from domain.states import ProcessState
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.agents.support import START, ScriptedService, agent_settings, make_request, transient
from tests.circuit.test_gate_cosmos import POLICY
from tests.deadlines import just_past
from tests.supervisor.test_outage_wait import STEP_TIMEOUT, health, open_circuit, shipping_in_flight, with_health

pytestmark = pytest.mark.cosmos
__all__ = ["health"]  # the fixture, used below
NEWER_STATE = {"state": "throttled", "throttledUntil": "2026-12-06T00:00:00.000000Z"}


def _as_a_newer_version_wrote_it(container: Any, dependency: str) -> dict[str, Any]:
    item = container.read_item(document_id(dependency), partition_key=partition_key(dependency))
    newer = {k: v for k, v in item.items() if not k.startswith("_")} | NEWER_STATE
    container.replace_item(newer["id"], newer)
    return newer


def _stored(container: Any, dependency: str) -> dict[str, Any]:
    item = container.read_item(document_id(dependency), partition_key=partition_key(dependency))
    return {k: v for k, v in item.items() if not k.startswith("_")}


def test_an_agent_calls_a_dependency_whose_health_it_cannot_read_and_leaves_the_document_alone(cosmos_db, caplog):
    caplog.set_level(logging.WARNING)
    container = cosmos_db.get_container_client(STATE_CONTAINER)
    clock = ManualClock(START)
    gate = DependencyGate(CosmosHealthStore(container), clock, POLICY)
    gate.failed("payment")
    newer = _as_a_newer_version_wrote_it(container, "payment")
    up = ScriptedService(clock, [transient("503"), {"chargeId": "c-1"}])
    reply = run_agent_request(make_request(order_id="o1"), up, clock, agent_settings(), random.Random(3), gate)
    assert reply is not None and reply.outcome == "succeeded"  # before: DocumentError out of the trigger
    assert len(up.calls) == 2
    assert _stored(container, "payment") == newer  # never written over
    unavailable = [r for r in caplog.records if getattr(r, "event", "") == "DependencyHealthUnavailable"]
    assert unavailable and "field state" in unavailable[0].reason  # what it could not read


def test_the_supervisor_recovers_an_attempt_whose_dependency_health_it_cannot_read(
    make_ctx, health, states, clock, cosmos_db
):
    ctx = with_health(make_ctx, health)
    open_circuit(ctx)
    newer = _as_a_newer_version_wrote_it(cosmos_db.get_container_client(STATE_CONTAINER), "shipping")
    shipping_in_flight(states, clock)
    clock.advance(just_past(STEP_TIMEOUT))
    report = run_supervisor(ctx, ScanState())
    record = states.get("o1")
    # before: the recovery failed at every run (report.failed 1), the order stayed Processing, never retried
    assert (report.failed, record.process_state, record.failure_count) == (0, ProcessState.PENDING, 1)
    assert _stored(cosmos_db.get_container_client(STATE_CONTAINER), "shipping") == newer
