"""A wait because the service is still working on the order's call (its circuit closed: ``domain.outage.still_working``,
an undo's ``stillWorking``) said "waiting for <service> (circuit open)" in ``lastError`` and in the submitter's
status, as a wait for an outage does: the operator and the submitter read an outage that was not there. It now says
"waiting for <service> (still working on the order's call)". Every reader of the reason takes both wordings
(``domain.circuit.is_waiting_reason``: a round claimed clears either, as records and older versions keep writing
the first); the outage alert's count of orders waiting for the outage counts the first only, as those waits are for
the outage. Over the real Cosmos SDK (the local protocol server)."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest

from activities.compensation_steps import fail_compensation
from adapters.cosmos.health_store import update_health
from adapters.cosmos.state_store import update_once
from contracts.activities import NOT_OWNED, FailCompensationInput, tries_used_up
from domain import compensation, transitions
from domain.circuit import is_waiting_reason, record_in_progress, waiting_reason
from domain.states import ProcessState
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.supervisor.conftest import claimed
from tests.supervisor.test_outage_wait import (
    STEP_TIMEOUT,
    _begin_shipping,
    health,
    open_circuit,
    shipping_in_flight,
    still_working_at_a_busy_service,
    with_health,
)
from tests.supervisor.test_undo_tries_used_up_in_an_outage import _undoing_the_charge

pytestmark = pytest.mark.cosmos
__all__ = ["health"]  # the fixture, used below
STILL = "waiting for {} (still working on the order's call)"


def test_a_step_its_service_is_still_working_on_waits_saying_so(make_ctx, health, states, clock, sender) -> None:
    ctx = with_health(make_ctx, health)
    record = claimed(states, "o1", clock.now(), clock.now() + STEP_TIMEOUT)
    update_once(states, record, lambda r: dataclasses.replace(r, reply_to="replies-1"))
    _begin_shipping(states, clock, states.get("o1"))
    still_working_at_a_busy_service(ctx, states, clock)
    run_supervisor(ctx, ScanState())
    waiting = states.get("o1")
    assert (waiting.process_state, waiting.history[-1].event) == (ProcessState.PENDING, "OutageWait")
    assert waiting.last_error == STILL.format("shipping")  # before: "waiting for shipping (circuit open)"
    told = [json.loads(m.body) for q, m in sender.sent if q == "replies-1"]
    assert [s.get("reason") for s in told if s["status"] == "Processing"] == [STILL.format("shipping")]


def test_an_outage_wait_still_says_circuit_open(make_ctx, health, states, clock) -> None:
    ctx = with_health(make_ctx, health)
    open_circuit(ctx)
    shipping_in_flight(states, clock)
    clock.advance(STEP_TIMEOUT + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    assert states.get("o1").last_error == "waiting for shipping (circuit open)"


def test_an_undo_its_service_is_still_working_on_waits_saying_so(make_ctx, health, states, clock, sender) -> None:
    ctx = with_health(make_ctx, health, MAX_FAILURES="1")
    record = _undoing_the_charge(ctx, states, clock)
    record = update_once(states, record, lambda r: dataclasses.replace(r, reply_to="replies-1"))
    now = clock.now()
    update_health(ctx.health, "payment", lambda h: (record_in_progress(h, now)[0], None), now)
    assert record.locked_by is not None
    error = tries_used_up("payment is still working on an earlier call", 3)
    failed = FailCompensationInput("o1", record.locked_by, 1, error, write_number=3, used_up_tries=True)
    assert fail_compensation(ctx, dataclasses.replace(failed, still_working=True)) == NOT_OWNED
    waiting = states.get("o1")
    assert waiting.last_error == STILL.format("payment")  # before: "waiting for payment (circuit open)"
    told = [json.loads(m.body) for q, m in sender.sent if q == "replies-1"]
    assert [s.get("reason") for s in told] == [STILL.format("payment")]


@pytest.mark.parametrize("stored", ["waiting for payment (circuit open)", STILL.format("payment")])
def test_a_round_claimed_clears_either_wording_of_a_wait(stored: str, clock) -> None:
    """A record keeps the wording it was written with (by this version, an older one, or before the change)."""
    assert is_waiting_reason(stored)
    assert waiting_reason("payment", still_working=True) == STILL.format("payment")
    record = transitions.new_record("o1", None, clock.now())
    record = compensation.enter_compensation(record, "ops", "cancelled", clock.now())
    record = dataclasses.replace(record, last_error=stored, outage_wait_since=clock.now())
    claimed_round = compensation.claim_compensation(record, clock.now(), timedelta(minutes=1), 3, "supervisor")
    assert claimed_round.last_error == "cancelled"  # the wait's wording cleared: why the order is compensated
