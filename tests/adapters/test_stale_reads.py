"""Session consistency across instances: an orchestration's activity runs on any instance, and reads the record
from whichever replica answers, which may not have the claim that started the orchestration yet (the starter's
or the supervisor's write, another client's session). Such a read is from before the instance existed: never a
verdict that the instance lost the record (found by ``localrun simulate --faults
examples/profiles/stale-reads.json``: compensation rounds ended quietly as "not owned" on their first read, three
in a row made the order ``CompensationFailed`` with a critical alert; forward attempts, the same at their first
write, were retried by the supervisor as failures)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from activities.compensation_steps import load_compensation
from activities.fencing import owned_record
from adapters.cosmos.errors import StaleRead
from adapters.cosmos.state_store import update_fenced, update_once
from contracts.activities import CompensationPlan, LoadCompensationInput
from domain import compensation, transitions
from domain.errors import FencingLost
from domain.states import ProcessState
from tests.contexts import context_with
from tests.fakes import StateStoreReadFromALaggingReplica

pytestmark = pytest.mark.cosmos
GRACE = timedelta(seconds=60)


def _begin_step(states, clock):
    """Attempt 1's first fenced write (``begin_step``), on ``states``."""
    return update_fenced(
        states,
        "o1",
        "o1:1",
        lambda r: transitions.begin_step(r, "o1:1", "reserve-inventory", "inventory", "q", clock.now(), clock.now()),
    )


def _claimed(app_context, clock):
    """A new record claimed for attempt 1 (``o1:1``), and the version before the claim."""
    states = app_context.states
    before = states.create(transitions.new_record("o1", None, clock.now()))
    return before, update_once(states, before, lambda r: transitions.claim(r, clock.now(), GRACE))


def test_a_compensation_round_that_reads_the_record_from_before_its_claim_is_not_told_it_lost_it(app_context, clock):
    states = app_context.states
    _, claimed = _claimed(app_context, clock)
    due = update_once(
        states, claimed, lambda r: compensation.enter_compensation(r, "cancellation", "cancel", clock.now())
    )
    update_once(states, due, lambda r: compensation.claim_compensation(r, clock.now(), GRACE, 3, "supervisor"))
    data = LoadCompensationInput(order_id="o1", instance_id="o1:compensate:2")
    lagging = context_with(app_context, states=StateStoreReadFromALaggingReplica(states, due))
    with pytest.raises(StaleRead):  # was NOT_OWNED: the round ended, and the supervisor counted it a failure
        load_compensation(lagging, data)
    assert isinstance(load_compensation(lagging, data), CompensationPlan)  # the replica caught up


def test_an_attempt_that_reads_no_record_or_one_from_before_its_claim_is_not_told_it_lost_it(app_context, clock):
    states = app_context.states
    before, _ = _claimed(app_context, clock)
    for older in (None, before):  # a 404 for the record just created, the Pending version before the claim
        lagging = StateStoreReadFromALaggingReplica(states, older)
        with pytest.raises(StaleRead):  # was FencingLost: the attempt ended, the supervisor retried it as failed
            _begin_step(lagging, clock)
        lagging_ctx = context_with(app_context, states=StateStoreReadFromALaggingReplica(states, older))
        with pytest.raises(StaleRead):  # was None: NotOwned
            owned_record(lagging_ctx, "o1", "o1:1", ProcessState.PROCESSING)


def test_a_record_taken_by_a_later_attempt_is_still_lost(app_context, clock):
    """A read showing a later attempt (or this one's, released) is at or after the claim: the verdict stands."""
    states = app_context.states
    _, claimed = _claimed(app_context, clock)
    clock.advance(GRACE * 2)
    retried = update_once(
        states, claimed, lambda r: transitions.supervisor_retry(r, "o1:1", clock.now(), 3, timedelta(0))
    )
    taken = update_once(states, retried, lambda r: transitions.claim(r, clock.now(), GRACE))
    assert taken.locked_by == "o1:2"
    for record in (retried, taken):
        lagging = StateStoreReadFromALaggingReplica(states, record)
        with pytest.raises(FencingLost):
            _begin_step(lagging, clock)
