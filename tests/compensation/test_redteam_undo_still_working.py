"""Red team (compensation): an undo whose service answers every try "still working on an earlier call with this key".

The round's first call of the release is slow at the service (minutes): the agent's call times out, and every call
after it under the same undo key is answered "still working" (``RemoteError.in_progress``: the service is up and
the undo is being done). The round's tries run out on that answer, and with other orders' calls to the service
succeeding meanwhile (no outage: its failures in a row reset), ``fail_compensation`` failed the compensation:
``CompensationFailed``, a critical alert, the entry ``Failed``, while the service went on and released the
reservation minutes later. An operator following the alert would undo by hand what the service had undone: a
refund, twice.

Now the agent's reply says so (``inProgress``), the round hands it to ``fail_compensation`` (``stillWorking``), and
the round waits it out as for an outage (``OutageWait``, not counted, ``MAX_OUTAGE_WAIT_MINUTES`` its bound); the
next round is answered the undo's recorded result and the order ends ``Compensated``. The real orchestration
(replayed by the Durable SDK) drives the real activities, the real in-process agent over the simulators and the
real supervisor, over the Cosmos protocol server."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import update_once
from adapters.remote.interface import RemoteCall
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import NetEffect
from adapters.remote.simulators.service import SimulatedService
from domain.compensation import enter_compensation
from domain.ids import idempotency_key, request_id
from domain.payloads import step_payload
from domain.states import ProcessState
from domain.timefmt import parse as parse_time
from domain.timefmt import to_text
from orchestrators import names
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.compensation.support import ORDER, call_agent, forward_step, stored_record, submitted_and_claimed
from tests.durable_history import History, ReplayResult

pytestmark = pytest.mark.cosmos

SLOW = SimulatorConfig(slow_call_rate=1.0, slow_latency_ms=(400_000, 400_000))


class FirstUndoSlow:
    """The inventory service: its first release takes minutes (it goes on after its caller's timeout), every other
    call as usual."""

    def __init__(self, inner: SimulatedService) -> None:
        self.inner = inner
        self.slowed = False

    def call(self, request: RemoteCall) -> dict[str, Any]:
        usual = self.inner.config
        if request.action == "release" and not self.slowed:
            self.slowed, self.inner.config = True, SLOW
        try:
            return self.inner.call(request)
        finally:
            self.inner.config = usual


def _run_activities(h: History, compensate: Any, functions: dict[str, Any], clock: Any) -> ReplayResult:
    """Replays the round and runs each activity it schedules (the real one) until it waits on something else."""
    while True:
        result = h.run(compensate)
        if result.new_action_types() != ["CallActivity"]:
            return result
        [call] = result.new_actions
        answer = functions[call["functionName"]].func(json.loads(call["input"]))
        h.activity_completed(call["functionName"], answer, at=clock.now())


def _another_order_reserves(ctx: Any, clock: Any) -> None:
    """Another order's reservation succeeds at the same service: no outage (its failures in a row reset)."""
    request = {
        "requestId": request_id("o2:1", "reserve-inventory", "inventory"),
        "instanceId": "o2:1",
        "orderId": "o2",
        "step": "reserve-inventory",
        "action": "do",
        "attempt": 1,
        "deadline": to_text(clock.now() + timedelta(seconds=60)),
        "idempotencyKey": idempotency_key("o2", "reserve-inventory"),
        "payload": step_payload("reserve-inventory", {**ORDER, "orderId": "o2"}, {}),
    }
    reply = call_agent(ctx, "inventory", request)
    assert reply is not None and reply["outcome"] == "succeeded", reply


def test_an_undo_the_service_is_still_working_on_is_waited_for_not_failed(app_context, ctx, clock, functions, ledger):
    compensate = functions[names.COMPENSATION].func
    inventory = ctx.remote["inventory"]
    assert isinstance(inventory, SimulatedService)
    ctx.remote["inventory"] = FirstUndoSlow(inventory)
    submitted_and_claimed(ctx)
    forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", {})  # reserved; the attempt never records it
    update_once(
        ctx.states,
        stored_record(ctx),
        lambda r: enter_compensation(r, "client", "cancelled by the customer", clock.now()),
    )
    [start] = run_supervisor(app_context, ScanState()).compensations
    h = History(start.instance_id, start.orchestration_input(), start=clock.now(), name=names.COMPENSATION)

    replies = []
    for number in range(1, ctx.settings.max_failures + 1):
        waiting = _run_activities(h, compensate, functions, clock)  # (load,) begin_undo
        assert waiting.new_action_types() == ["CallActivity", "CreateTimer"], waiting.new_action_types()
        agent_call, deadline_timer = waiting.new_actions
        call = h.activity_scheduled(agent_call["functionName"], None)
        h.timer_created_not_fired(parse_time(deadline_timer["fireAt"]))
        reply = functions[agent_call["functionName"]].func(json.loads(agent_call["input"]))  # the real agent
        replies.append(reply)
        if number == ctx.settings.max_failures:
            _another_order_reserves(ctx, clock)
        h.complete_activity(call, reply, at=clock.now())
        if number < ctx.settings.max_failures:
            backing_off = _run_activities(h, compensate, functions, clock)  # hold_undo, then its backoff
            assert backing_off.new_action_types() == ["CreateTimer"]
            fire_at = parse_time(backing_off.new_actions[0]["fireAt"])
            h.timer_fired(fire_at)
            clock.set(fire_at)
    assert all(r["outcome"] == "failed" and r["transient"] for r in replies)
    assert all("still working on an earlier call" in r["error"] for r in replies[1:]), replies
    assert replies[-1]["inProgress"] is True
    ended = _run_activities(h, compensate, functions, clock)  # fail_compensation
    assert ended.is_done, ended.new_action_types()

    waited = stored_record(ctx)
    assert waited.process_state is ProcessState.COMPENSATING, waited.last_error  # not CompensationFailed
    assert (waited.locked_by, waited.failure_count) == (None, 0)
    assert waited.history[-1].event == "OutageWait"
    assert waited.compensation[0].outcome is None

    # the service finishes the slow release; the next round is answered what it did
    clock.set(max(clock.now() + timedelta(minutes=7), waited.complete_by or clock.now()))
    [again] = run_supervisor(app_context, ScanState()).compensations
    h2 = History(again.instance_id, again.orchestration_input(), start=clock.now(), name=names.COMPENSATION)
    waiting = _run_activities(h2, compensate, functions, clock)
    agent_call, deadline_timer = waiting.new_actions
    call = h2.activity_scheduled(agent_call["functionName"], None)
    h2.timer_created_not_fired(parse_time(deadline_timer["fireAt"]))
    reply = functions[agent_call["functionName"]].func(json.loads(agent_call["input"]))
    assert reply["outcome"] == "succeeded", reply
    h2.complete_activity(call, reply, at=clock.now())
    _run_activities(h2, compensate, functions, clock)  # record_undo, finish, Compensated
    assert stored_record(ctx).process_state is ProcessState.COMPENSATED
    assert ledger.net("o1") == NetEffect()
    assert len(ledger.effects("o1", "release")) == 1
