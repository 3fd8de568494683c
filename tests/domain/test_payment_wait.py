"""A prepaid order's wait for its payment notification, as pure code: which expired attempts waited for
it (``domain.payment_wait.awaited_payment``), when the order comes back and when the wait is over
(``payment_wait``), the supervisor's uncounted release (``transitions.wait_for_payment``), the give-up
through the usual escalation, what ends a wait, and a notification making a waiting order claimable.

Found by a red team (m03 seed 1, ``ord-00182``): the notification met a 240 s Cosmos DB outage, waited in
store-retry copies behind the ``orders`` backlog, and the order's three attempts each waited their 60 s
deadline for it, each counted as a failure: ``Error`` with the customer paid minutes later."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import transitions as t
from domain.compensation import complete_step_logged, enter_compensation, escalate_or_compensate
from domain.compensation_policy import ReviewPolicy
from domain.errors import IllegalTransition
from domain.payment_wait import (
    PAYMENT_NOT_RECEIVED,
    WAITING_FOR_PAYMENT,
    PaymentWait,
    awaited_payment,
    payment_wait,
)
from domain.payments import with_payment
from domain.records import PaymentReceived, StateRecord
from domain.states import ProcessState, StepStatus
from domain.workflow import WORKFLOW, prepaid_step

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
STEP = timedelta(seconds=60)
BOUND = timedelta(minutes=60)
BASE, CAP = timedelta(seconds=10), timedelta(seconds=300)
PAYMENT_STEP = prepaid_step().name
FIRST_STEP = WORKFLOW[0].name
PAID = PaymentReceived(
    notification_id="pay-o-1", amount_cents=1000, currency="EUR", provider_reference="psp-1", received_at=T0
)


def at_payment_step(record: StateRecord | None = None, started: datetime = T0) -> StateRecord:
    """Claimed for its next attempt, the first step done by an earlier attempt or this one, and the
    payment step begun at ``started`` (its deadline a step timeout later)."""
    record = t.claim(record or t.new_record("o-1", "replies", started), started, GRACE)
    owner = str(record.locked_by)
    if FIRST_STEP not in record.steps:
        record = t.begin_step(record, owner, FIRST_STEP, "inventory", f"{owner}:{FIRST_STEP}", started + STEP, started)
        record = complete_step_logged(record, owner, FIRST_STEP, {"reservationId": "r-1"}, started + STEP, started)
    return t.begin_step(record, owner, PAYMENT_STEP, "payment", f"{owner}:{PAYMENT_STEP}", started + STEP, started)


def expired(record: StateRecord) -> datetime:
    assert record.complete_by is not None
    return record.complete_by + timedelta(seconds=1)


def verdict(record: StateRecord, now: datetime, bound: timedelta = BOUND, jitter: float = 1.0) -> PaymentWait:
    return payment_wait(record, now, bound, BASE, CAP, jitter)


def test_an_attempt_that_began_the_payment_step_without_the_notification_waited_for_it() -> None:
    assert awaited_payment(at_payment_step())


def test_a_notification_applied_after_the_step_began_still_means_the_attempt_waited() -> None:
    """Its event reached the attempt after the deadline, or never (a handler stalled past its lock:
    m03 seed 1, ord-00111): the order waited for its notification, and the next attempt captures."""
    record = with_payment(at_payment_step(), PAID, T0 + timedelta(seconds=5))
    assert awaited_payment(record)


def test_a_notification_on_the_record_when_the_step_began_means_the_capture_itself_failed() -> None:
    record = with_payment(t.new_record("o-1", "replies", T0), PAID, T0)
    assert not awaited_payment(at_payment_step(record))


def test_an_attempt_that_reported_a_failure_or_stopped_at_another_step_did_not_wait() -> None:
    waiting = at_payment_step()
    owner = str(waiting.locked_by)
    released = t.release_for_retry(waiting, owner, PAYMENT_STEP, "capture: retries used up", T0 + timedelta(seconds=9))
    assert not awaited_payment(released)
    claimed = t.claim(t.new_record("o-1", "replies", T0), T0, GRACE)
    first = t.begin_step(claimed, "o-1:1", FIRST_STEP, "inventory", "o-1:1:r", T0 + STEP, T0)
    assert not awaited_payment(first)
    assert not awaited_payment(claimed)


def test_the_payment_step_begun_by_an_earlier_attempt_is_not_this_attempts_wait() -> None:
    waiting = at_payment_step()
    again = t.claim(
        t.wait_for_payment(waiting, "o-1:1", expired(waiting), T0, T0, WAITING_FOR_PAYMENT), T0 + STEP * 3, GRACE
    )
    assert again.current_step is None and again.steps[PAYMENT_STEP].status is StepStatus.IN_PROGRESS
    assert not awaited_payment(again)


def test_the_wait_begins_when_the_step_first_waited_and_is_kept_across_attempts() -> None:
    first = at_payment_step()
    now = expired(first)
    wait = verdict(first, now)
    assert (wait.since, wait.paid, wait.exceeded, wait.reason) == (T0, False, False, WAITING_FOR_PAYMENT)
    released = t.wait_for_payment(first, "o-1:1", now, wait.until, wait.since, wait.reason)
    later = T0 + timedelta(minutes=10)
    second = at_payment_step(released, later)
    assert verdict(second, expired(second)).since == T0  # paymentWaitSince, not the new step's start


def test_released_orders_come_back_after_half_the_time_waited_between_the_backoffs_bounds() -> None:
    record = at_payment_step()
    assert verdict(record, T0 + timedelta(seconds=61)).until == T0 + timedelta(seconds=61 + 30.5)
    assert verdict(record, T0 + timedelta(seconds=61), jitter=0.5).until == T0 + timedelta(seconds=61 + 15.25)
    assert verdict(record, T0 + timedelta(seconds=12)).until == T0 + timedelta(seconds=12 + 10)  # at least the base
    assert verdict(record, T0 + timedelta(minutes=30)).until == T0 + timedelta(minutes=30, seconds=300)  # the cap


def test_the_last_release_comes_back_at_the_bounds_end_and_the_wait_is_over_after_it() -> None:
    record = at_payment_step()
    near = T0 + BOUND - timedelta(seconds=100)
    wait = verdict(record, near)
    assert (wait.until, wait.exceeded) == (T0 + BOUND, False)
    over = verdict(record, T0 + BOUND + STEP)
    assert over.exceeded
    assert over.gave_up(T0 + BOUND + STEP).startswith(f"{PAYMENT_NOT_RECEIVED}: no payment notification within")
    assert "PAYMENT_WAIT_MINUTES=60 (waited 61 min" in over.gave_up(T0 + BOUND + STEP)


def test_a_notification_on_the_record_is_retried_at_once_and_never_given_up() -> None:
    record = with_payment(at_payment_step(), PAID, T0 + timedelta(seconds=30))
    now = T0 + BOUND * 2
    wait = verdict(record, now)
    assert (wait.until, wait.paid, wait.exceeded) == (now, True, False)
    assert wait.reason != WAITING_FOR_PAYMENT


def test_the_release_leaves_the_retry_budget_untouched_and_records_when_the_wait_began() -> None:
    record = replace(at_payment_step(), failure_count=2)  # two failures of its own before
    now = expired(record)
    released = t.wait_for_payment(record, "o-1:1", now, now + timedelta(seconds=30), T0, WAITING_FOR_PAYMENT)
    assert released.process_state is ProcessState.PENDING
    assert (released.failure_count, released.locked_by, released.current_step) == (2, None, None)
    assert (released.complete_by, released.payment_wait_since) == (now + timedelta(seconds=30), T0)
    assert released.last_error == WAITING_FOR_PAYMENT
    assert released.history[-1].event == t.PAYMENT_WAIT and released.history[-1].by == t.SUPERVISOR
    assert released.steps[PAYMENT_STEP].status is StepStatus.IN_PROGRESS  # resumed by the next attempt
    assert t.is_claimable(released, now + timedelta(seconds=30))


def test_the_release_is_fenced_like_any_recovery() -> None:
    record = at_payment_step()
    with pytest.raises(IllegalTransition):  # not expired yet
        t.wait_for_payment(record, "o-1:1", T0 + timedelta(seconds=5), T0 + STEP * 2, T0, WAITING_FOR_PAYMENT)
    with pytest.raises(IllegalTransition):  # another attempt holds it
        t.wait_for_payment(record, "o-1:2", expired(record), T0 + STEP * 2, T0, WAITING_FOR_PAYMENT)


def test_the_bound_gives_the_order_up_saying_so_whatever_its_count_compensating_before_the_pivot() -> None:
    record = at_payment_step()
    now = T0 + BOUND + STEP
    reason = verdict(record, now).gave_up(now)
    small = escalate_or_compensate(record, "o-1:1", now, 3, BASE, ReviewPolicy(100_000), 1_000, gave_up=reason)
    assert small.process_state is ProcessState.COMPENSATING  # the reservation is released
    assert small.last_error is not None and small.last_error.startswith(reason)
    assert small.payment_wait_since is None
    large = escalate_or_compensate(record, "o-1:1", now, 3, BASE, ReviewPolicy(100_000), 200_000, gave_up=reason)
    assert (large.process_state, large.last_error, large.failure_count) == (ProcessState.ERROR, reason, 1)
    assert large.history[-1].event == "Escalated"  # owes the RetriesExhausted alert and the Failed status


def test_what_ends_a_wait_clears_paymentwaitsince() -> None:
    waiting = at_payment_step()
    released = t.wait_for_payment(waiting, "o-1:1", expired(waiting), T0 + STEP * 2, T0, WAITING_FOR_PAYMENT)
    again = at_payment_step(with_payment(released, PAID, T0 + STEP * 2), T0 + STEP * 3)
    assert again.payment_wait_since == T0  # still waiting until the step succeeds
    owner = str(again.locked_by)
    assert t.complete_step(again, owner, PAYMENT_STEP, {"captureId": "c"}, T0 + STEP * 4, T0).payment_wait_since is None
    counted = t.supervisor_retry(again, owner, expired(again), 3, BASE)
    assert counted.payment_wait_since is None
    assert enter_compensation(released, "client", "changed my mind", T0).payment_wait_since is None
    failed = replace(released, process_state=ProcessState.ERROR)
    assert t.resubmit(failed, "op", "paid after all", T0).payment_wait_since is None


def test_a_notification_makes_a_waiting_order_claimable_at_once() -> None:
    waiting = at_payment_step()
    released = t.wait_for_payment(
        waiting, "o-1:1", expired(waiting), T0 + timedelta(minutes=5), T0, WAITING_FOR_PAYMENT
    )
    now = T0 + timedelta(minutes=2)
    paid = with_payment(released, PAID, now)
    assert (paid.complete_by, paid.payment) == (now, PAID)
    assert t.is_claimable(paid, now)
    # a record not waiting keeps its not-before time: an ordinary retry's backoff
    retried = t.supervisor_retry(waiting, "o-1:1", expired(waiting), 3, timedelta(minutes=5))
    assert with_payment(retried, PAID, now).complete_by == retried.complete_by
