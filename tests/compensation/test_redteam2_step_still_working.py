"""Red team 2 (forward path): a step whose service answers every try "still working on an earlier call with this key".

The attempt's first call of the reservation is slow at the inventory service (minutes): the agent's call times out,
and every call after it under the step's idempotency key is answered "still working" (``RemoteError.in_progress``:
the service is up and doing it). The agent's tries run out on that answer, the attempt releases the record for a
retry (``StepTransientFailure``), and with other orders' reservations succeeding meanwhile (a busy service, no
outage: its failures in a row reset) the supervisor counted the attempt as a failure. Each retry met the same answer
while the first call was still running: after ``MAX_FAILURES`` attempts the order escalated (compensated, or ``Error``
for an operator, as the decision function says) while the service was completing its reservation.

Now the attempt tells ``release_for_retry`` that its last try was answered so (``stillWorking``), and the supervisor
waits as for an outage (``OutageWait``, ``SupervisorOutageWait`` with ``stillWorking``, not counted, bounded by
``MAX_OUTAGE_WAIT_MINUTES``); the next attempt is answered the reservation the service made and goes on. The real
scheduler orchestration (replayed by the Durable SDK) drives the real activities, the real in-process agent over the
simulators, the real starter's claim and the real supervisor, over the Cosmos protocol server."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.remote.interface import RemoteCall
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.service import SimulatedService
from domain import transitions
from domain.records import last_move
from domain.states import ProcessState, StepStatus
from domain.timefmt import parse as parse_time
from orchestrators import names
from orchestrators.starter import try_claim
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.compensation.support import ORDER, stored_record
from tests.compensation.test_redteam_undo_still_working import _another_order_reserves
from tests.durable_history import History, ReplayResult

pytestmark = pytest.mark.cosmos

SLOW = SimulatorConfig(slow_call_rate=1.0, slow_latency_ms=(400_000, 400_000))


class FirstReserveSlow:
    """The inventory service: the first reservation of order o1 takes minutes (it goes on after its caller's timeout),
    every other call as usual."""

    def __init__(self, inner: SimulatedService) -> None:
        self.inner = inner
        self.slowed = False

    def call(self, request: RemoteCall) -> dict[str, Any]:
        usual = self.inner.config
        if request.action == "reserve" and request.order_id == "o1" and not self.slowed:
            self.slowed, self.inner.config = True, SLOW
        try:
            return self.inner.call(request)
        finally:
            self.inner.config = usual


def _attempt(ctx: Any, clock: Any) -> History:
    """The starter's claim of the Pending order and the history its scheduler starts with."""
    record = stored_record(ctx)
    claim = try_claim(ctx, record)
    assert claim is not None, record
    return History(claim.instance_id, claim.orchestration_input(), start=clock.now(), name=names.SCHEDULER)


def _run_activities(h: History, scheduler: Any, functions: dict[str, Any], clock: Any) -> ReplayResult:
    """Replays the attempt and runs each activity it schedules alone (the real one) until it waits on more."""
    while True:
        result = h.run(scheduler)
        if result.new_action_types() != ["CallActivity"]:
            return result
        [call] = result.new_actions
        answer = functions[call["functionName"]].func(json.loads(call["input"]))
        h.activity_completed(call["functionName"], answer, at=clock.now())


def _reserve(
    ctx: Any, h: History, scheduler: Any, functions: dict[str, Any], clock: Any, *, busy: bool
) -> dict[str, Any]:
    """begin_step, then the real in-process inventory agent's reply to the reservation; ``busy``: another order's
    reservation succeeds at the service before the reply comes back (its failures in a row reset)."""
    waiting = _run_activities(h, scheduler, functions, clock)
    assert waiting.new_action_types() == ["CallActivity", "CreateTimer"], waiting.new_action_types()
    agent_call, deadline_timer = waiting.new_actions
    assert agent_call["functionName"] == names.in_process_agent("inventory")
    call = h.activity_scheduled(agent_call["functionName"], None)
    h.timer_created_not_fired(parse_time(deadline_timer["fireAt"]))
    reply: dict[str, Any] = functions[agent_call["functionName"]].func(json.loads(agent_call["input"]))
    if busy:
        _another_order_reserves(ctx, clock)
    h.complete_activity(call, reply, at=clock.now())
    return reply


def released_attempt_waited_for(app_context: Any, ctx: Any, clock: Any) -> Any:
    """The supervisor's run a grace after the attempt released its record: the order waits (``OutageWait``), back in
    ``Pending`` with ``failureCount`` 0 (not counted). Returns the record."""
    clock.advance(ctx.settings.supervisor_grace * 2)
    run_supervisor(app_context, ScanState())
    waited = stored_record(ctx)
    assert waited.process_state is ProcessState.PENDING, waited.last_error
    assert waited.failure_count == 0, (waited.failure_count, waited.last_error)  # not counted
    assert last_move(waited).event == "OutageWait"  # type: ignore[union-attr]
    return waited


def test_a_step_the_service_is_still_working_on_is_waited_for_not_counted(app_context, ctx, clock, functions, ledger):
    scheduler = functions[names.SCHEDULER].func
    inventory = ctx.remote["inventory"]
    assert isinstance(inventory, SimulatedService)
    ctx.remote["inventory"] = FirstReserveSlow(inventory)
    ctx.orders.create_or_verify(ORDER)
    ctx.states.create(transitions.new_record("o1", ORDER.get("replyTo"), clock.now()))

    h = _attempt(ctx, clock)
    reply = _reserve(ctx, h, scheduler, functions, clock, busy=True)
    assert reply["outcome"] == "failed" and reply["transient"], reply
    assert "still working on an earlier call" in reply["error"] and reply["inProgress"] is True, reply
    ended = _run_activities(h, scheduler, functions, clock)  # release_for_retry
    assert ended.is_done, ended.new_action_types()
    released = stored_record(ctx)
    assert last_move(released).event == "StepTransientFailure"  # type: ignore[union-attr]

    waited = released_attempt_waited_for(app_context, ctx, clock)
    assert waited.outage_wait_since is not None and waited.complete_by is not None

    # the service finishes the slow reservation; the next attempt is answered what it did and goes on
    clock.set(max(clock.now() + timedelta(minutes=7), waited.complete_by))
    h2 = _attempt(ctx, clock)
    reply = _reserve(ctx, h2, scheduler, functions, clock, busy=False)
    assert reply["outcome"] == "succeeded", reply
    going_on = _run_activities(h2, scheduler, functions, clock)  # the next step's begin_step records it
    assert not going_on.is_done
    after = stored_record(ctx)
    assert after.steps["reserve-inventory"].status is StepStatus.SUCCEEDED
    assert (after.failure_count, after.outage_wait_since) == (0, None)
    assert len(ledger.effects("o1", "reserve")) == 1
