"""A compensation round that waits out its own backoff after an undo's transient failure is alive, not
stuck: the supervisor must not take its record away in that wait.

The round records each try's deadline (``begin_undo``: ``completeBy`` = the request's deadline). A transient
failure reply comes in before that deadline (else the round ends on its deadline), and the round then waits a
durable backoff (``RETRY_BACKOFF_BASE_SECONDS``, doubling) before its next try, writing nothing. A reply late in
the try (a slow service: the agent's own retries used most of the deadline) puts the end of that wait past
``completeBy``. Before, a supervisor run in that gap read the live round as stuck: it counted a failed round,
released the record (``CompensationRetryScheduled``) and terminated the round, whose next try then found the
record gone. So a round's tries ("a transient error reply is tried again after a durable backoff, up to
``MAX_FAILURES`` tries", docs/compensation.md) were cut to one, every such round counted as failed, and after
``MAX_FAILURES`` of them the order was ``CompensationFailed`` "did not finish in N rounds; last: deadline missed"
with an undo that had only failed transiently a few times.

Now the round holds its record before the wait (``hold_undo``: ``completeBy`` = the next try + start grace).
The real orchestration (replayed by the Durable SDK) drives the real activities and the real supervisor over
the Cosmos protocol server."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import update_once
from domain.compensation import enter_compensation, undo_request_id
from domain.timefmt import parse as parse_time
from orchestrators import names
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.compensation.support import forward_step, stored_record, submitted_and_claimed
from tests.durable_history import History, ReplayResult

pytestmark = pytest.mark.cosmos


def _run_activities(h: History, compensate: Any, functions: dict[str, Any], clock: Any) -> ReplayResult:
    """Replays the round and runs each activity it schedules (the real one) until it waits on something else."""
    while True:
        result = h.run(compensate)
        if result.new_action_types() != ["CallActivity"]:
            return result  # an agent's call raced against its deadline, a timer, the end
        [call] = result.new_actions
        answer = functions[call["functionName"]].func(json.loads(call["input"]))
        h.activity_completed(call["functionName"], answer, at=clock.now())


def test_a_round_waiting_out_its_backoff_is_not_taken_for_stuck(app_context, ctx, clock, functions):
    compensate = functions[names.COMPENSATION].func
    submitted_and_claimed(ctx)
    forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", {})  # reserved; the attempt never records it
    update_once(  # the customer cancels; the reservation's outcome is unknown: one entry, by its forward key
        ctx.states,
        stored_record(ctx),
        lambda r: enter_compensation(r, "client", "cancelled by the customer", clock.now()),
    )
    ctx = app_context  # the registered activities' context (the same store)
    report = run_supervisor(ctx, ScanState())
    [start] = report.compensations
    me = start.instance_id
    h = History(me, start.orchestration_input(), start=clock.now(), name=names.COMPENSATION)

    waiting = _run_activities(h, compensate, functions, clock)  # load, Compensating, begin_undo 1
    assert waiting.new_action_types() == ["CallActivity", "CreateTimer"]  # the in-process agent races its deadline
    agent_call, deadline_timer = waiting.new_actions
    assert agent_call["functionName"] == names.in_process_agent("inventory")
    deadline = parse_time(deadline_timer["fireAt"])
    assert stored_record(ctx).complete_by == deadline  # the try's deadline: a lost reply is found by it
    call = h.activity_scheduled(agent_call["functionName"], None)
    h.timer_created_not_fired(deadline)

    # the agent's retries used most of the deadline: its transient failure comes in 2 s before it
    clock.set(deadline - timedelta(seconds=2))
    failed = {
        "requestId": undo_request_id(me, "reserve-inventory", "inventory", 1),
        "instanceId": me,
        "orderId": "o1",
        "step": "reserve-inventory",
        "outcome": "failed",
        "transient": True,
        "error": "inventory 503 (4 calls)",
    }
    h.complete_activity(call, failed, at=clock.now())
    backing_off = _run_activities(h, compensate, functions, clock)  # hold_undo: the record held through the wait
    assert backing_off.new_action_types() == ["CreateTimer"]
    fire_at = parse_time(backing_off.new_actions[0]["fireAt"])
    assert fire_at > deadline  # the round's own wait ends after the try's deadline

    clock.set(deadline + (fire_at - deadline) / 2)  # a supervisor run inside that wait
    during = run_supervisor(ctx, ScanState())
    assert me not in during.to_terminate
    held = stored_record(ctx)
    assert (held.locked_by, held.failure_count) == (me, 0), held.history[-1]

    h.timer_fired(fire_at)
    clock.set(fire_at)
    second = h.run(compensate)
    [begin] = second.new_actions
    assert begin["functionName"] == names.BEGIN_UNDO
    assert json.loads(begin["input"])["request"]["requestId"].endswith(":undo:2")
    assert functions[names.BEGIN_UNDO].func(json.loads(begin["input"]))["owned"]  # the round still holds it
