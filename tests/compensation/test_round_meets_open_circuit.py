"""A compensation round whose undo meets an open circuit (the agent answers ``dependencyOpen``: no call was made) is
handed to the supervisor at once, as a forward attempt that meets one is (``release_for_retry``).

Before, the round ended ``DependencyOpen`` without a write: the record stayed held by it until the undo's deadline
(``completeBy``, ``STEP_TIMEOUT_SECONDS`` after ``begin_undo``), and the supervisor, which releases such a round to
wait the outage out (uncounted), took it only ``SUPERVISOR_GRACE_SECONDS`` after that: the order sat for a whole step
timeout plus the grace with nothing in flight, and its wait for the outage began that much later. A round started
with ``releasesOpenCircuit`` now releases its record (``release_undo``: ``completeBy`` = now less the grace,
``lockedBy`` kept, so the supervisor reads it as a round stuck on that dependency). The real orchestration (replayed
by the Durable SDK) drives the real activities, the real in-process agent behind its circuit gate and the real
supervisor over the Cosmos protocol server."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import update_once
from domain.compensation import enter_compensation
from domain.states import ProcessState
from domain.timefmt import parse as parse_time
from domain.transitions import due_at
from orchestrators import names
from settings import Settings
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.compensation.support import forward_step, stored_record, submitted_and_claimed
from tests.compensation.test_redteam42_undo_backoff_held import _run_activities
from tests.contexts import context_with
from tests.durable_history import History
from tests.supervisor.test_outage_wait import open_circuit

pytestmark = pytest.mark.cosmos

GRACE = Settings.from_env({"SUPERVISOR_GRACE_SECONDS": "15"}).supervisor_grace  # as the Bicep deploys it


def _round_meeting_an_open_circuit(
    ctx: Any, clock: Any, functions: Any, *, settings: dict[str, Any] | None = None, **started: Any
) -> Any:
    """o1 reserved (its undo: a release via the in-process inventory agent), then cancelled; the supervisor claims
    round 1; the inventory circuit opens; the round's undo is refused by the agent's gate. Returns the context the
    registered functions use, the round's history and the round's last replay."""
    compensate = functions[names.COMPENSATION].func
    submitted_and_claimed(ctx)
    forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", {})
    update_once(
        ctx.states,
        stored_record(ctx),
        lambda r: enter_compensation(r, "client", "cancelled by the customer", clock.now()),
    )
    # the context the registered functions use (the simulators' agents), with the supervisor's grace as deployed
    ctx = context_with(ctx, settings=replace(ctx.settings, supervisor_grace=GRACE, **(settings or {})))
    [start] = run_supervisor(ctx, ScanState()).compensations
    h = History(
        start.instance_id, {**start.orchestration_input(), **started}, start=clock.now(), name=names.COMPENSATION
    )

    open_circuit(ctx, "inventory")
    clock.advance(timedelta(seconds=ctx.settings.circuit_health_cache.total_seconds() + 1))  # the gate reads it
    waiting = _run_activities(h, compensate, functions, clock)  # load, Compensating, begin_undo
    agent_call, deadline_timer = waiting.new_actions
    assert agent_call["functionName"] == names.in_process_agent("inventory")
    call = h.activity_scheduled(agent_call["functionName"], None)
    h.timer_created_not_fired(parse_time(deadline_timer["fireAt"]))
    refused = functions[agent_call["functionName"]].func(json.loads(agent_call["input"]))
    assert refused["dependencyOpen"] is True  # the gate refused it: no call was made
    clock.advance(timedelta(seconds=1))
    h.complete_activity(call, refused, at=clock.now())
    return ctx, h, _run_activities(h, compensate, functions, clock)


def test_a_round_meeting_an_open_circuit_is_released_to_wait_the_outage_out_at_once(ctx, clock, functions) -> None:
    ctx, h, ended = _round_meeting_an_open_circuit(ctx, clock, functions)
    assert ended.is_done and ended.output["result"] == "DependencyOpen"
    released = stored_record(ctx)
    me = h.instance_id
    assert released.locked_by == me  # still the round's: the supervisor reads the undo it was running
    due = due_at(released, ctx.settings.supervisor_grace)
    assert due is not None and due <= clock.now(), f"held until {due}: {released.history[-1]}"

    report = run_supervisor(ctx, ScanState())  # the supervisor's next run, the same second
    waiting = stored_record(ctx)
    assert waiting.process_state is ProcessState.COMPENSATING
    assert (waiting.locked_by, waiting.failure_count) == (None, 0)  # released, not counted
    assert waiting.history[-1].event == "OutageWait"
    assert waiting.last_error == "waiting for inventory (circuit open)"
    assert me in report.to_terminate


def test_a_round_started_before_the_flag_ends_without_a_write_as_its_history_holds(ctx, clock, functions) -> None:
    """An instance started before ``releasesOpenCircuit`` replays as recorded: no write; the supervisor takes the
    round only once its undo's deadline passed ``SUPERVISOR_GRACE_SECONDS`` ago, then releases it uncounted."""
    ctx, h, ended = _round_meeting_an_open_circuit(ctx, clock, functions, releasesOpenCircuit=False)
    assert ended.is_done and ended.output["result"] == "DependencyOpen"
    assert ended.new_actions == []
    held = stored_record(ctx)
    due = due_at(held, ctx.settings.supervisor_grace)
    assert held.complete_by is not None and due == held.complete_by + ctx.settings.supervisor_grace
    clock.set(due - timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    assert stored_record(ctx).locked_by == h.instance_id  # not yet
    clock.set(due)
    run_supervisor(ctx, ScanState())
    waiting = stored_record(ctx)
    assert (waiting.locked_by, waiting.failure_count, waiting.history[-1].event) == (None, 0, "OutageWait")


def test_with_waiting_off_the_released_round_is_counted_at_once_saying_why(ctx, clock, functions) -> None:
    """``MAX_OUTAGE_WAIT_MINUTES`` 0: no outage is waited out, and the released round counts as a stuck one does
    (``CompensationRetryScheduled``), now rather than after the undo's deadline; the open circuit is its reason."""
    ctx, _h, ended = _round_meeting_an_open_circuit(ctx, clock, functions, settings={"max_outage_wait": timedelta(0)})
    assert ended.output["result"] == "DependencyOpen"
    run_supervisor(ctx, ScanState())
    counted = stored_record(ctx)
    assert (counted.locked_by, counted.failure_count) == (None, 1)
    assert counted.history[-1].event == "CompensationRetryScheduled"
    assert counted.last_error == "inventory unavailable (circuit open): not called"


def test_a_release_that_finds_the_round_taken_writes_nothing(ctx, clock, functions) -> None:
    """The supervisor took the round first (its deadline passed): ``release_undo`` answers not owned, the round ends
    ``FencingLost``, the supervisor's release stands."""
    ctx, h, _ = _round_meeting_an_open_circuit(ctx, clock, functions, releasesOpenCircuit=False)
    deadline = stored_record(ctx).complete_by
    assert deadline is not None
    clock.set(deadline + GRACE)
    run_supervisor(ctx, ScanState())
    taken = stored_record(ctx)
    assert taken.history[-1].event == "OutageWait"
    answer = functions[names.RELEASE_UNDO].func(
        {"orderId": "o1", "instanceId": h.instance_id, "seq": 1, "error": "circuit open", "writeNumber": 3}
    )
    assert answer == {"owned": False}
    assert stored_record(ctx) == taken
