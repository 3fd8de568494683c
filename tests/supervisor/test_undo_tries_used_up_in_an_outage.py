"""An undo that used up its tries on transient failures while its service had an outage waits the outage out
instead of failing the compensation (``activities.compensation_steps.fail_compensation``). Red team: all-faults
with an inventory outage and ``MAX_FAILURES`` 1 ended orders ``CompensationFailed`` because of the outage
alone (``outage_only_failures`` 1 at seeds 1 and 2): the one try was the failed call that opened the
circuit, and the round failed the compensation without asking about the outage, where the forward path and
a stuck round both wait."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from activities.compensation_steps import fail_compensation
from adapters.cosmos.health_store import update_health
from adapters.cosmos.state_store import update_once
from contracts.activities import NOT_OWNED, OWNED, FailCompensationInput, tries_used_up
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.circuit import CircuitState, record_failure, record_in_progress, record_success
from domain.compensation import begin_undo
from domain.records import StateRecord
from domain.states import ProcessState
from tests.supervisor.test_outage_wait import (
    STEP_TIMEOUT,
    compensation_round_after_a_charge,
    health,
    open_circuit,
    with_health,
)

pytestmark = pytest.mark.cosmos
__all__ = ["health"]  # the fixture, used by the tests below


def _undoing_the_charge(ctx: Any, states: Any, clock: Any) -> StateRecord:
    """o1 charged, then cancelled: compensation round 2 owns the record and its refund is in flight."""
    record = compensation_round_after_a_charge(ctx, states, clock)
    round_owner = record.locked_by
    assert round_owner is not None
    return update_once(
        states,
        record,
        lambda r: begin_undo(r, round_owner, 1, "o1:charge-payment:undo", clock.now() + STEP_TIMEOUT, clock.now()),
    )


def _fail(ctx: Any, record: StateRecord, error: str, used_up_tries: bool | None = True) -> Any:
    assert record.locked_by is not None
    failed = FailCompensationInput("o1", record.locked_by, 1, error, write_number=3, used_up_tries=used_up_tries)
    return fail_compensation(ctx, failed)


def _alerts(sender: Any) -> list[str]:
    return [a["kind"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE)]


def test_tries_used_up_during_an_outage_wait_it_out(make_ctx, health, states, clock, sender) -> None:
    ctx = with_health(make_ctx, health, MAX_FAILURES="1")
    record = _undoing_the_charge(ctx, states, clock)
    open_circuit(ctx, "payment")

    assert _fail(ctx, record, tries_used_up("payment unavailable (503)", 1)) == NOT_OWNED

    waiting = states.get("o1")
    assert waiting.process_state is ProcessState.COMPENSATING
    assert (waiting.locked_by, waiting.failure_count) == (None, 0)
    assert waiting.history[-1].event == "OutageWait" and waiting.last_error == "waiting for payment (circuit open)"
    assert waiting.complete_by is not None and waiting.complete_by > clock.now()
    assert "CompensationFailed" not in _alerts(sender)
    # a retry of the activity (its first run answered nothing) finds the round released: still not owned
    assert _fail(ctx, record, tries_used_up("payment unavailable (503)", 1)) == NOT_OWNED
    assert states.get("o1").process_state is ProcessState.COMPENSATING


def test_a_refusal_for_good_during_an_outage_still_fails(make_ctx, health, states, clock, sender) -> None:
    ctx = with_health(make_ctx, health, MAX_FAILURES="1")
    record = _undoing_the_charge(ctx, states, clock)
    open_circuit(ctx, "payment")
    assert _fail(ctx, record, "refund refused: charge disputed", used_up_tries=False) == OWNED
    assert states.get("o1").process_state is ProcessState.COMPENSATION_FAILED
    assert "CompensationFailed" in _alerts(sender)


def test_a_failure_for_good_worded_as_used_up_tries_fails_in_an_outage(make_ctx, health, states, clock, sender) -> None:
    """The agent's own error text does not decide: an undo refused for good during the service's outage fails the
    compensation at once (before ``usedUpTries``, its wording alone made the round wait the outage out)."""
    ctx = with_health(make_ctx, health, MAX_FAILURES="1")
    record = _undoing_the_charge(ctx, states, clock)
    open_circuit(ctx, "payment")
    assert _fail(ctx, record, tries_used_up("refund refused", 1), used_up_tries=False) == OWNED
    assert states.get("o1").process_state is ProcessState.COMPENSATION_FAILED
    assert "CompensationFailed" in _alerts(sender)


def test_an_input_from_before_the_field_still_waits_the_outage_out(make_ctx, health, states, clock, sender) -> None:
    ctx = with_health(make_ctx, health, MAX_FAILURES="1")
    record = _undoing_the_charge(ctx, states, clock)
    open_circuit(ctx, "payment")
    assert _fail(ctx, record, tries_used_up("payment unavailable (503)", 1), used_up_tries=None) == NOT_OWNED
    assert states.get("o1").process_state is ProcessState.COMPENSATING


def test_tries_used_up_on_a_healthy_service_fail_as_before(make_ctx, health, states, clock, sender) -> None:
    ctx = with_health(make_ctx, health, MAX_FAILURES="1")
    record = _undoing_the_charge(ctx, states, clock)
    assert _fail(ctx, record, tries_used_up("503", 1)) == OWNED
    failed = states.get("o1")
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    assert failed.last_error is not None and "tries used up" in failed.last_error


def test_waiting_off_fails_as_before(make_ctx, health, states, clock, sender) -> None:
    ctx = with_health(make_ctx, health, MAX_FAILURES="1", MAX_OUTAGE_WAIT_MINUTES="0")
    record = _undoing_the_charge(ctx, states, clock)
    open_circuit(ctx, "payment")
    assert _fail(ctx, record, tries_used_up("503", 1)) == OWNED
    assert states.get("o1").process_state is ProcessState.COMPENSATION_FAILED


def test_the_orchestration_says_whether_the_tries_were_used_up() -> None:
    """Said in a field of its own: an agent's permanent error that happens to be worded as the orchestration words
    used-up tries is not mistaken for one (it would have waited an outage out)."""
    assert FailCompensationInput("o", "i", 1, tries_used_up("503", 3), used_up_tries=True).transient
    assert not FailCompensationInput("o", "i", 1, tries_used_up("503", 3), used_up_tries=False).transient
    assert not FailCompensationInput("o", "i", 1, None, used_up_tries=False).transient


def test_an_input_recorded_before_the_field_is_read_by_its_words() -> None:
    """An orchestration recorded before ``usedUpTries`` (its activity run after an upgrade) said it in the error."""
    assert FailCompensationInput("o", "i", 1, tries_used_up("503", 3)).transient
    assert not FailCompensationInput("o", "i", 1, "503").transient
    assert not FailCompensationInput("o", "i", 1, None).transient


def _failed_calls(ctx: Any, dependency: str, calls: int) -> None:
    """``calls`` failed calls to ``dependency`` counted on its health document (under the threshold: closed)."""
    now = ctx.clock.now()
    policy = ctx.settings.circuit_policy
    for _ in range(calls):
        update_health(ctx.health, dependency, lambda h: (record_failure(h, now, policy)[0], None), now)


def test_an_undo_alone_failing_transiently_on_a_closed_circuit_waits_uncounted(
    make_ctx, health, states, clock, sender
) -> None:
    """An undo alone in an outage: its own failed calls are fewer than CIRCUIT_FAILURE_THRESHOLD, so the circuit never
    opens; the round failed the compensation (``CompensationFailed`` and an operator's page) with only the outage
    to blame. As on the forward path (``supervisor.outage.outage_verdict``), tries used up with no success of the
    service since wait it out, uncounted."""
    ctx = with_health(make_ctx, health, MAX_FAILURES="1", CIRCUIT_FAILURE_THRESHOLD="8")
    record = _undoing_the_charge(ctx, states, clock)
    _failed_calls(ctx, "payment", 3)
    assert health.get("payment").state is CircuitState.CLOSED

    assert _fail(ctx, record, tries_used_up("payment unavailable (503)", 3)) == NOT_OWNED

    waiting = states.get("o1")
    assert waiting.process_state is ProcessState.COMPENSATING
    assert (waiting.locked_by, waiting.history[-1].event) == (None, "OutageWait")
    assert "CompensationFailed" not in _alerts(sender)


def test_an_undo_failing_transiently_after_the_service_answered_another_order_still_fails(
    make_ctx, health, states, clock, sender
) -> None:
    ctx = with_health(make_ctx, health, MAX_FAILURES="1", CIRCUIT_FAILURE_THRESHOLD="8")
    record = _undoing_the_charge(ctx, states, clock)
    _failed_calls(ctx, "payment", 3)
    now = clock.now()
    update_health(ctx.health, "payment", lambda h: (record_success(h, now)[0], None), now)  # another order's call

    assert _fail(ctx, record, tries_used_up("payment unavailable (503)", 3)) == OWNED
    assert states.get("o1").process_state is ProcessState.COMPENSATION_FAILED


def test_the_submitter_hears_the_round_waiting_once_per_wait(make_ctx, health, states, clock, sender) -> None:
    """The round's own release tells the submitter what the order waits for, as the supervisor's release of a stuck
    round does (``supervisor.outage.tell_waiting``): once, when the wait begins. Before, a round that released itself
    said nothing, and the submitter's last word stayed ``Compensating`` for the whole outage."""
    ctx = with_health(make_ctx, health, MAX_FAILURES="1")
    record = _undoing_the_charge(ctx, states, clock)
    record = update_once(states, record, lambda r: dataclasses.replace(r, reply_to="replies-1"))
    open_circuit(ctx, "payment")

    assert _fail(ctx, record, tries_used_up("payment unavailable (503)", 1)) == NOT_OWNED
    assert _fail(ctx, record, tries_used_up("payment unavailable (503)", 1)) == NOT_OWNED  # its retry: said once

    told = [(m.message_id, json.loads(m.body)) for q, m in sender.sent if q == "replies-1"]
    assert [(s["status"], s["attempt"], s.get("reason")) for _id, s in told] == [
        ("Compensating", record.attempt, "waiting for payment (circuit open)")
    ]
    assert told[0][0] == f"o1:Compensating:{record.attempt}:waiting"


def test_an_undo_still_working_past_the_bound_warns_the_operator_before_undoing_it_by_hand(
    make_ctx, health, states, clock, sender
) -> None:
    """Red team 2: an undo whose service kept answering "still working" waited MAX_OUTAGE_WAIT_MINUTES, then failed the
    compensation with the alert's usual advice: undo the entry by hand and compensate with it in undoneByHand. The
    service may still do it (a refund the operator then makes twice); the alert named no such risk. The reason (so
    ``lastError``, and any resend of the alert the record owes) and the alert's details now say so."""
    ctx = with_health(make_ctx, health, MAX_FAILURES="1", MAX_OUTAGE_WAIT_MINUTES="5")
    record = _undoing_the_charge(ctx, states, clock)
    now = clock.now()
    update_health(ctx.health, "payment", lambda h: (record_in_progress(h, now)[0], None), now)
    record = update_once(states, record, lambda r: dataclasses.replace(r, outage_wait_since=now - timedelta(hours=1)))
    assert record.locked_by is not None
    error = tries_used_up("payment is still working on an earlier call", 3)
    failed = FailCompensationInput("o1", record.locked_by, 1, error, write_number=3, used_up_tries=True)
    assert fail_compensation(ctx, dataclasses.replace(failed, still_working=True)) == OWNED

    ended = states.get("o1")
    assert ended.process_state is ProcessState.COMPENSATION_FAILED
    assert "MAX_OUTAGE_WAIT_MINUTES=5" in ended.last_error
    assert "ask the provider whether it was done before undoing it by hand" in ended.last_error, ended.last_error
    [alert] = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "CompensationFailed"]
    assert alert["details"]["stillWorking"] is True
    assert "ask the provider whether it was done" in alert["details"]["nextStep"]
