"""Red team (compensation, session 65): a round refused by an open circuit, the circuit closed moments later by an
agent whose clock runs behind the supervisor's.

A round whose undo meets an open circuit (``dependencyOpen``: no call made) hands its record to the supervisor
(``release_undo``, history ``UndoDependencyOpen``), which releases it to wait the outage out, uncounted. The supervisor
judged "outage" by the health document alone: the circuit open now, or closed since the round's claim
(``DependencyHealth.outage_overlaps``, ``lastClosedAt >= claim``). ``lastClosedAt`` is dated by the clock of the agent
whose probe closed the circuit, the claim by the supervisor's: hosts' clocks agree within seconds, not exactly
(docs/supervisor.md, Clocks). The supervisor claims the rounds waiting for a circuit at its next probe, so the probe
often closes it a second or two after those claims: with the closer's clock a few seconds behind, ``lastClosedAt``
came before the claim, the outage read as over before the round began, and the round that never called its service
was counted as failed (``CompensationRetryScheduled``). The local runner (cancellations, payment outages, agents' clocks
3 s behind, ``MAX_FAILURES`` 2): 4 rounds of one probe's burst counted, each order then ``CompensationFailed``
"did not finish in 2 rounds; last: payment unavailable (circuit open): not called".

The round's own ``UndoDependencyOpen`` proves that its service's circuit was open after its claim, whatever clock
dated the closing: the supervisor now waits it out, uncounted."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.cosmos.health_store import update_health
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.service import SimulatedService
from domain import transitions
from domain.circuit import CircuitState, record_success
from domain.compensation import ROUND_CLAIMED, UNDO_DEPENDENCY_OPEN
from domain.records import last_move
from domain.states import ProcessState
from orchestrators import names
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.compensation.support import ORDER, stored_record
from tests.compensation.test_redteam2_step_still_working import (
    _attempt,
    _reserve,
    _run_activities,
    released_attempt_waited_for,
)
from tests.compensation.test_redteam_undo_still_working import _another_order_reserves
from tests.compensation.test_round_meets_open_circuit import _round_meeting_an_open_circuit
from tests.supervisor.test_outage_wait import open_circuit

pytestmark = pytest.mark.cosmos


def _closed_by_a_clock_behind(ctx, behind: timedelta) -> None:
    """The probe that closes the circuit succeeds now, on an agent whose clock reads ``behind`` less."""
    closing = ctx.clock.now() - behind
    update_health(ctx.health, "inventory", lambda h: (record_success(h, closing)[0], None), closing)


def test_a_round_refused_by_an_open_circuit_is_not_counted_when_a_clock_behind_closes_it(ctx, clock, functions):
    ctx, _h, ended = _round_meeting_an_open_circuit(ctx, clock, functions)
    assert ended.output["result"] == "DependencyOpen"
    released = stored_record(ctx)
    assert released.history[-1].event == UNDO_DEPENDENCY_OPEN
    [claimed_at] = [e.at for e in released.history if e.event == ROUND_CLAIMED]
    # the probe closes the circuit a moment after the refusal; the closer's clock runs behind by more than the time
    # since the round's claim (a few seconds)
    behind = clock.now() - claimed_at + timedelta(seconds=1)
    assert behind <= timedelta(seconds=10)  # hosts' clocks agree within seconds
    _closed_by_a_clock_behind(ctx, behind)
    assert ctx.health.get("inventory").state is CircuitState.CLOSED

    run_supervisor(ctx, ScanState())
    waiting = stored_record(ctx)
    assert waiting.process_state is ProcessState.COMPENSATING
    # released to come back soon (the outage is over), not counted as a failed round
    assert (waiting.locked_by, waiting.failure_count) == (None, 0), waiting.history[-1]
    assert waiting.history[-1].event == "OutageWait"


def test_without_the_rounds_word_the_health_document_decides_as_before(ctx, clock, functions):
    """The evidence is the round's own ``UndoDependencyOpen``. A round started before ``releasesOpenCircuit`` writes
    none: taken at its undo's deadline, with the circuit's closing dated before its claim, it is counted as before."""
    ctx, _h, ended = _round_meeting_an_open_circuit(ctx, clock, functions, releasesOpenCircuit=False)
    assert ended.output["result"] == "DependencyOpen"
    held = stored_record(ctx)
    assert held.history[-1].event != UNDO_DEPENDENCY_OPEN  # a round started before the flag writes nothing
    [claimed_at] = [e.at for e in held.history if e.event == ROUND_CLAIMED]
    _closed_by_a_clock_behind(ctx, clock.now() - claimed_at + timedelta(seconds=1))
    assert held.complete_by is not None
    clock.set(held.complete_by + ctx.settings.supervisor_grace)
    run_supervisor(ctx, ScanState())
    counted = stored_record(ctx)
    assert (counted.locked_by, counted.failure_count) == (None, 1)
    assert counted.history[-1].event == "CompensationRetryScheduled"


def test_an_attempt_refused_by_an_open_circuit_is_not_counted_when_a_clock_behind_closes_it(
    app_context, ctx, clock, functions
):
    """The same on the forward path: the attempt's reservation is refused by the inventory circuit (no call made), the
    attempt releases the record for a retry (``StepTransientFailure``) saying so (``dependencyOpen``), and the probe
    closes the circuit a moment later on an agent whose clock runs behind (dated before the step began, the
    ``since`` the supervisor judged the outage by). Before, the attempt was counted against ``MAX_FAILURES``. The real
    scheduler orchestration (replayed by the Durable SDK), activities, in-process agent and supervisor."""
    scheduler = functions[names.SCHEDULER].func
    ctx.orders.create_or_verify(ORDER)
    ctx.states.create(transitions.new_record("o1", ORDER.get("replyTo"), clock.now()))
    open_circuit(ctx, "inventory")
    clock.advance(timedelta(seconds=ctx.settings.circuit_health_cache.total_seconds() + 1))  # the gate reads it

    h = _attempt(ctx, clock)
    reply = _reserve(ctx, h, scheduler, functions, clock, busy=False)
    assert reply["dependencyOpen"] is True, reply  # the gate refused it: no call was made
    ended = _run_activities(h, scheduler, functions, clock)  # release_for_retry
    assert ended.is_done, ended.new_action_types()
    released = stored_record(ctx)
    assert last_move(released).event == "StepTransientFailure"  # type: ignore[union-attr]
    began = released.steps["reserve-inventory"].started_at
    assert began is not None
    clock.advance(timedelta(seconds=1))
    _closed_by_a_clock_behind(ctx, clock.now() - began + timedelta(seconds=1))
    released_attempt_waited_for(app_context, ctx, clock)


def test_an_attempt_failing_transiently_on_a_closed_circuit_is_still_counted(app_context, ctx, clock, functions):
    """Without the circuit's refusal nothing changes: a reservation failing transiently (the service answered errors)
    while the circuit stayed closed and other orders succeeded is counted, as before."""
    scheduler = functions[names.SCHEDULER].func
    inventory = ctx.remote["inventory"]
    assert isinstance(inventory, SimulatedService)
    inventory.config = SimulatorConfig(transient_error_rate=1.0)
    ctx.orders.create_or_verify(ORDER)
    ctx.states.create(transitions.new_record("o1", ORDER.get("replyTo"), clock.now()))
    h = _attempt(ctx, clock)
    reply = _reserve(ctx, h, scheduler, functions, clock, busy=False)
    assert reply["transient"] and not reply.get("dependencyOpen"), reply
    inventory.config = SimulatorConfig()
    _another_order_reserves(ctx, clock)  # a success resets its failures in a row
    assert _run_activities(h, scheduler, functions, clock).is_done
    clock.advance(ctx.settings.supervisor_grace * 2)
    run_supervisor(app_context, ScanState())
    counted = stored_record(ctx)
    assert (counted.process_state, counted.failure_count) == (ProcessState.PENDING, 1), counted.last_error
    assert last_move(counted).event == "RetryScheduled"  # type: ignore[union-attr]
