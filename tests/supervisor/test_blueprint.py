"""The supervisor's timer trigger, called as the Functions host would (through ``function_app``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus
from azure.functions.timer import TimerRequest

import dependencies
import supervisor.blueprint
from domain.states import ProcessState
from supervisor.scan import ScanState
from supervisor.terminate import TERMINATE_REASON
from tests.supervisor.conftest import expired, expired_in_a_step

pytestmark = pytest.mark.cosmos


class FakeDurableClient:
    """Answers ``get_status`` from a table of runtime statuses; ``broken`` instances fail to terminate."""

    def __init__(self, statuses: dict[str, str], broken: set[str]) -> None:
        self.statuses = statuses
        self.broken = broken
        self.terminated: list[tuple[str, str]] = []

    async def get_status(self, instance_id: str) -> DurableOrchestrationStatus:
        return DurableOrchestrationStatus(instanceId=instance_id, runtimeStatus=self.statuses[instance_id])

    async def terminate(self, instance_id: str, reason: str) -> None:
        if instance_id in self.broken:
            raise Exception(f"The operation failed with an unexpected status code 500 for {instance_id}")
        self.terminated.append((instance_id, reason))


def _trigger(functions):
    registered = functions["supervisor"]
    bindings = {b["type"]: b for b in registered.bindings}
    assert bindings["timerTrigger"]["schedule"] == "%SUPERVISOR_SCHEDULE%"
    assert bindings["timerTrigger"]["useMonitor"] is True
    assert bindings["timerTrigger"]["runOnStartup"] is False
    assert "durableClient" in bindings
    user = registered.func
    return getattr(user, "client_function", None) or user.__wrapped__


@pytest.fixture
def installed(make_ctx, monkeypatch):
    ctx = make_ctx()
    dependencies.use_context(ctx)
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    yield ctx
    dependencies.use_context(None)


def test_the_timer_recovers_then_terminates_only_active_instances(installed, functions, states, clock):
    # oldest deadline first, the scan's order (equal deadlines would go by id); each past
    # SUPERVISOR_BACKEND_WAIT_SECONDS, so the instances still Running or Pending are taken too (test_backend_wait.py)
    for n, order_id in enumerate(("running", "completed", "broken", "after-broken")):
        expired(states, order_id, clock, timedelta(seconds=600 + 9 - n))
    client = FakeDurableClient(
        {"running:1": "Running", "completed:1": "Completed", "broken:1": "Running", "after-broken:1": "Pending"},
        broken={"broken:1"},
    )

    asyncio.run(_trigger(functions)(timer=TimerRequest(past_due=False), client=client))

    assert client.terminated == [("running:1", TERMINATE_REASON), ("after-broken:1", TERMINATE_REASON)]
    for order_id in ("running", "completed", "broken", "after-broken"):
        record = states.get(order_id)
        assert record is not None and record.process_state is ProcessState.PENDING


def test_a_failing_status_query_does_not_fail_the_run(installed, functions, states, clock):
    expired_in_a_step(states, "o1", clock, timedelta(seconds=5))
    expired(states, "o2", clock, timedelta(seconds=5))  # claimed, never began
    client = FakeDurableClient({}, broken=set())  # get_status raises KeyError for every instance

    asyncio.run(_trigger(functions)(timer=TimerRequest(past_due=True), client=client))

    assert client.terminated == []
    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.PENDING
    # whether its start was missed is not known: left to a later run (tests/supervisor/test_start_missed.py)
    unstarted = states.get("o2")
    assert unstarted is not None and unstarted.process_state is ProcessState.PROCESSING
