"""Session consistency across instances: an orchestration's activity runs on any instance, and reads the record
from whichever replica answers, which may not have the claim that started the orchestration yet (the starter's
or the supervisor's write, another client's session). Such a read is from before the instance existed: never a
verdict that the instance lost the record (found by ``localrun simulate --faults
examples/profiles/stale-reads.json``: compensation rounds ended quietly as "not owned" on their first read, three
in a row made the order ``CompensationFailed`` with a critical alert; forward attempts, the same at their first
write, were retried by the supervisor as failures)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from activities import scheduler_steps
from activities.compensation_steps import load_compensation
from activities.fencing import owned_record
from adapters.cosmos.errors import StaleRead, StoreOutcomeUnknown
from adapters.cosmos.state_store import STALE_READ_PAUSES_S, update_fenced, update_once, update_once_or_reread
from contracts.activities import CompensationPlan, LoadCompensationInput
from domain import compensation, transitions
from domain.errors import FencingLost, IllegalTransition
from domain.states import ProcessState
from orchestrators import starter
from tests.activity_calls import run
from tests.compensation.support import stored_record, submitted_and_claimed
from tests.contexts import context_with
from tests.fakes import (
    OrderStoreReadFromALaggingReplica,
    StateStoreReadFromALaggingReplica,
    StateStoreWithAConcurrentWriter,
)
from tests.orchestrators.support import sample_order

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
    # was NOT_OWNED: the round ended, and the supervisor counted it a failure. Now read again after a pause:
    lagging = context_with(app_context, states=StateStoreReadFromALaggingReplica(states, due))
    assert isinstance(load_compensation(lagging, data), CompensationPlan)
    # a replica that lags through every pause: the try fails (StaleRead), the orchestration tries again later
    slow = StateStoreReadFromALaggingReplica(states, due, reads=len(STALE_READ_PAUSES_S) + 1)
    with pytest.raises(StaleRead):
        load_compensation(context_with(app_context, states=slow), data)
    assert isinstance(load_compensation(context_with(app_context, states=slow), data), CompensationPlan)


def test_an_attempt_that_reads_no_record_or_one_from_before_its_claim_is_not_told_it_lost_it(app_context, clock):
    states = app_context.states
    before, _ = _claimed(app_context, clock)
    for older in (None, before):  # a 404 for the record just created, the Pending version before the claim
        lagging = StateStoreReadFromALaggingReplica(states, older)
        with pytest.raises(StaleRead):  # was FencingLost: the attempt ended, the supervisor retried it as failed
            _begin_step(lagging, clock)
        lagging_ctx = context_with(app_context, states=StateStoreReadFromALaggingReplica(states, older))
        owned = owned_record(lagging_ctx, "o1", "o1:1", ProcessState.PROCESSING)  # was None: NotOwned
        assert owned is not None and owned.locked_by == "o1:1"


def test_a_stale_read_caught_up_within_the_pauses_costs_the_activity_no_try(app_context, clock):
    """Each try an orchestration's state activity loses is one of its three (``RETRY_DELAYS``): with 20 % of Cosmos
    requests failing besides (outage-under-cosmos-errors with stale reads, 200 orders, seed 1), attempts failed
    outright and the supervisor counted them (101 retries, 3 orders in Error; 12 and none without stale reads). So
    the fenced write reads again after short pauses (``STALE_READ_PAUSES_S``) before it gives up its try."""
    states = app_context.states
    before, _ = _claimed(app_context, clock)
    started = clock.now()
    lagging = StateStoreReadFromALaggingReplica(states, before, reads=3)
    written = update_fenced(
        lagging,
        "o1",
        "o1:1",
        lambda r: transitions.begin_step(r, "o1:1", "reserve-inventory", "inventory", "q", started, started),
        pause=clock.sleep,
    )
    assert written.current_step == "reserve-inventory"
    assert clock.now() - started == timedelta(seconds=sum(STALE_READ_PAUSES_S[:3]))


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


def test_a_failed_status_whose_read_is_from_before_the_failure_is_tried_again_not_dropped_as_moved_on(
    app_context, caplog
):
    """The orchestration sends ``Failed`` right after ``fail_order`` wrote it; the status activity, on another
    instance, read the record still ``Processing`` under the attempt that failed. ``failure_moved_on`` took that as
    "an operator moved the order on": nothing sent, the timers stopped (``StatusMovedOn``), and the submitter heard
    ``Failed`` only when the supervisor's owed sweep delivered it, minutes later. A version of the failed attempt
    still held is from before the failure (the failure write releases it; only a claim, with the next attempt's
    number, holds it again): a stale read, tried again."""
    states = app_context.states
    submitted_and_claimed(app_context)
    before = stored_record(app_context)
    failed = {"orderId": "o1", "instanceId": "o1:1", "step": "reserve-inventory", "attempt": 1, "error": "gone"}
    assert run(scheduler_steps.fail_order, app_context, failed) == {"owned": True}
    status = {"orderId": "o1", "status": "Failed", "attempt": 1, "replyTo": "client-statuses", "replyToKnown": True}
    lagging = context_with(app_context, states=StateStoreReadFromALaggingReplica(states, before))
    with pytest.raises(StaleRead):  # was None, StatusMovedOn: nothing sent, nothing tried again
        run(scheduler_steps.publish_status, lagging, status)
    assert "StatusMovedOn" not in caplog.text
    assert run(scheduler_steps.publish_status, lagging, status) is None  # the next try: sent
    assert [s["status"] for s in app_context.sender.bodies("client-statuses")][-1] == "Failed"


def test_a_new_records_order_read_as_404_by_the_starter_postpones_the_claim(app_context, clock, caplog):
    """Submission writes the order, then its record ``Pending`` (over ``MAX_IN_FLIGHT``); the starter's sweep, on
    another instance, found the record and read the order from a replica without it: "the state record has no order
    document", claimed and not started, so the supervisor counted a failed attempt after the start grace. The order is
    written before its record: a 404 for the order of a record never claimed, written moments ago, is a stale read;
    the claim waits for the next sweep, as for an order store unavailable for now."""
    app_context.orders.create_or_verify(sample_order("o1"))
    app_context.states.create(transitions.new_record("o1", None, clock.now()))
    lagging = context_with(app_context, orders=OrderStoreReadFromALaggingReplica(app_context.orders))
    [record] = lagging.states.claimable(clock.now(), 10)
    assert starter.try_claim(lagging, record) is None
    assert "supervisor will retry" not in caplog.text  # was: claimed for o1:1 and not started
    pending = stored_record(app_context)
    assert (pending.process_state, pending.locked_by, pending.attempt) == (ProcessState.PENDING, None, 0)
    [claim] = starter.sweep(lagging)  # the next sweep: the replica caught up
    assert (claim.order_id, claim.attempt) == ("o1", 1)


class _LosesTheAnswerOnce:
    """The state store whose next replace commits and loses its answer (``StoreOutcomeUnknown``, as a timeout)."""

    def __init__(self, store):
        self._store = store
        self.lost = False

    def replace(self, record):
        written = self._store.replace(record)
        if not self.lost:
            self.lost = True
            raise StoreOutcomeUnknown(f"no response to the replace of {record.order_id} (it committed)")
        return written

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_claim_whose_answer_was_lost_and_whose_read_back_is_from_before_it_is_settled_not_dropped(app_context, clock):
    """The starter's claim committed and its answer was lost, so its client never got the session token of that
    write; its read-back came from a replica without it, showing the version the claim replaced. It was taken as "not
    written": the starter started nothing, the record stayed claimed for ``o1:1``, and the supervisor counted a failed
    attempt after the start grace (stale-reads on operator-actions, 200 orders, seed 1: 4 ``StartFailed``). The same
    conditional write once more settles it: 412, the claim is there."""
    states = app_context.states
    record = states.create(transitions.new_record("o1", None, clock.now()))
    lagging = StateStoreReadFromALaggingReplica(_LosesTheAnswerOnce(states), record)
    claimed = update_once_or_reread(lagging, record, lambda r: transitions.claim(r, clock.now(), GRACE))
    assert (claimed.locked_by, claimed.attempt) == ("o1:1", 1)  # was StoreOutcomeUnknown
    assert [h.event for h in stored_record(app_context).history] == ["Received", "Claimed"]  # claimed once


def test_a_write_whose_answer_was_lost_and_that_did_not_land_is_made_by_the_second_try(app_context, clock):
    states = app_context.states
    record = states.create(transitions.new_record("o1", None, clock.now()))

    class NotLanded(_LosesTheAnswerOnce):
        def replace(self, record):
            if not self.lost:
                self.lost = True
                raise StoreOutcomeUnknown("timed out before it reached the primary")
            return self._store.replace(record)

    claimed = update_once_or_reread(NotLanded(states), record, lambda r: transitions.claim(r, clock.now(), GRACE))
    assert claimed.locked_by == "o1:1" and stored_record(app_context).locked_by == "o1:1"


def test_a_step_completed_on_a_read_from_before_the_instances_own_last_write_is_read_again(app_context, clock):
    """``begin_step`` of the next step records the previous one's result; the activity, on another instance than
    the one that began that step, read the version before it: ``IllegalTransition`` ("step ... was never started"),
    the activity's try lost (with Cosmos 503s besides, the attempt failed outright and the supervisor counted it).
    No record can take a transition it has moved past, so a fresh read that cannot is read again after a pause."""
    states = app_context.states
    _, claimed = _claimed(app_context, clock)
    _begin_step(states, clock)  # the instance's write 1, from another invocation
    lagging = StateStoreReadFromALaggingReplica(states, claimed)  # its next activity reads the claim's version
    written = update_fenced(
        lagging,
        "o1",
        "o1:1",
        lambda r: transitions.complete_step(r, "o1:1", "reserve-inventory", {}, clock.now(), clock.now()),
        pause=clock.sleep,
    )
    assert written.steps["reserve-inventory"].result == {}  # was IllegalTransition
    # a transition the record truly cannot take still fails, once the pauses are spent
    with pytest.raises(IllegalTransition):
        update_fenced(
            states,
            "o1",
            "o1:1",
            lambda r: transitions.complete_step(r, "o1:1", "charge-payment", {}, clock.now(), clock.now()),
            pause=clock.sleep,
        )


def test_a_re_read_after_a_412_that_shows_the_refused_version_is_not_counted_a_race(app_context, clock):
    """After a 412 the fenced write reads the record again; a replica without the write that won serves the very
    version the 412 refused, and the write lost the same race again: five such reads were ``ConcurrencyExhausted``,
    a lost try. That version is known replaced: read again after a pause, not counted."""
    states = app_context.states
    _, claimed = _claimed(app_context, clock)
    racing = StateStoreWithAConcurrentWriter(states, lambda current: replace(current, last_error="touched"))
    lagging = StateStoreReadFromALaggingReplica(racing, claimed, reads=5)  # every re-read before the pauses: stale
    written = update_fenced(
        lagging,
        "o1",
        "o1:1",
        lambda r: transitions.begin_step(r, "o1:1", "reserve-inventory", "inventory", "q", clock.now(), clock.now()),
        attempts=2,
        pause=clock.sleep,
    )
    assert written.current_step == "reserve-inventory" and written.last_error == "touched"
