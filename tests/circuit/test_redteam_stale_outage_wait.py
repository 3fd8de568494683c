"""Red team: ``outageWaitSince`` must not outlive the wait it measures.

It was cleared only by a step or an undo that succeeded. A wait can also end without either: the
order's next attempt fails on its own on a healthy dependency (a counted failure,
``supervisor_retry``), or the order goes to compensation (a permanent refusal after the wait, or the
bound itself). A stale ``outageWaitSince`` then (a) makes the next, unrelated outage escalate at once
(its bound measured from the old wait), and (b) makes the load activities report ``outageWait``, so
the orchestrations skip the Processing / Compensating status the submitter was never told about."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from domain import transitions
from domain.compensation import claim_compensation, complete_step_logged, enter_compensation, escalate_or_compensate
from domain.compensation_policy import ReviewPolicy
from domain.records import StateRecord
from domain.states import ProcessState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GRACE = timedelta(seconds=60)
MAX_FAILURES = 3


def _reserved_then_waiting_for_payment() -> StateRecord:
    """reserve-inventory succeeded (something to undo), then charge-payment's attempt waited for an
    open payment circuit and the next attempt is claimed and calling payment again."""
    record = transitions.claim(transitions.new_record("o1", "replies", T0), T0, GRACE)
    owner = record.locked_by or ""
    record = transitions.begin_step(record, owner, "reserve-inventory", "inventory", "r1", T0 + GRACE, T0)
    record = complete_step_logged(record, owner, "reserve-inventory", {"reservationId": "res-1"}, T0 + GRACE, T0)
    record = transitions.begin_step(record, owner, "charge-payment", "payment", "p1", T0 + GRACE, T0)
    expired_at = T0 + GRACE + timedelta(seconds=1)
    record = transitions.wait_out_outage(
        record, owner, expired_at, expired_at + timedelta(seconds=30), "payment", expired_at
    )
    assert record.outage_wait_since == expired_at
    again = expired_at + timedelta(seconds=30)
    record = transitions.claim(record, again, GRACE)
    owner = record.locked_by or ""
    return transitions.begin_step(record, owner, "charge-payment", "payment", "p2", again + GRACE, again)


def test_a_counted_failure_after_the_wait_ends_it() -> None:
    """The payment circuit closed; the next attempt then missed its deadline on its own (counted):
    the wait is over, a later outage is a new wait with its own bound."""
    record = _reserved_then_waiting_for_payment()
    now = (record.complete_by or T0) + timedelta(seconds=1)
    retried = transitions.supervisor_retry(record, record.locked_by, now, MAX_FAILURES, timedelta(seconds=10))
    assert retried.process_state is ProcessState.PENDING and retried.failure_count == 1
    assert retried.outage_wait_since is None


def test_a_permanent_refusal_after_the_wait_starts_compensation_with_no_wait() -> None:
    """Payment came back and refused the order for good: the compensation is not a retry of the wait
    (its first round's Compensating status must go out; its own waits get their own bound)."""
    record = _reserved_then_waiting_for_payment()
    owner = record.locked_by or ""
    now = record.updated_at + timedelta(seconds=2)
    compensating = enter_compensation(record, owner, "payment refused", now, owner=owner, failed_step="charge-payment")
    assert compensating.process_state is ProcessState.COMPENSATING
    assert compensating.outage_wait_since is None
    claimed = claim_compensation(compensating, now, GRACE, MAX_FAILURES, "supervisor")
    assert claimed.outage_wait_since is None  # load_compensation reports outageWait False


def test_the_bound_sending_an_order_to_compensation_leaves_no_wait_behind() -> None:
    """MAX_OUTAGE_WAIT_MINUTES passed: the order escalates into compensation (before the pivot).
    Its rounds must not inherit the forward wait: an undo stuck on another outage would otherwise
    fail the compensation at its first stuck round."""
    record = _reserved_then_waiting_for_payment()
    now = (record.complete_by or T0) + timedelta(seconds=1)
    failures = record.failure_count + 1  # the bound: escalate now (supervisor/recovery.py)
    moved = escalate_or_compensate(record, record.locked_by, now, failures, timedelta(seconds=10), ReviewPolicy(0), 0)
    assert moved.process_state is ProcessState.COMPENSATING
    assert moved.outage_wait_since is None


def test_a_stuck_round_counted_as_a_failure_ends_the_rounds_wait() -> None:
    """A round released to wait (lockedBy null) keeps its wait when claimed again; a round that got
    stuck on a healthy dependency (still owned when claimed again: counted) ends it."""
    record = _reserved_then_waiting_for_payment()
    owner = record.locked_by or ""
    now = record.updated_at + timedelta(seconds=2)
    record = enter_compensation(record, owner, "payment refused", now, owner=owner, failed_step="charge-payment")
    record = claim_compensation(record, now, GRACE, MAX_FAILURES, "supervisor")
    waiting_since = now + GRACE  # the round waited for inventory (domain.outage.wait_compensation_out)
    record = replace(record, outage_wait_since=waiting_since, locked_by=None)
    later = now + 2 * GRACE
    reclaimed = claim_compensation(record, later, GRACE, MAX_FAILURES, "supervisor")
    assert reclaimed.outage_wait_since == waiting_since and reclaimed.failure_count == 0
    stuck_later = later + 2 * GRACE  # this round never finished, on a healthy dependency
    counted = claim_compensation(reclaimed, stuck_later, GRACE, MAX_FAILURES, "supervisor")
    assert counted.failure_count == 1
    assert counted.outage_wait_since is None


def test_an_operator_resubmitting_an_order_that_failed_after_a_wait_starts_it_afresh() -> None:
    """Payment came back from its outage and refused the order for good (Error, no compensation
    decided yet); the operator resubmits it. Its failure count starts again, and so must its wait:
    otherwise the next outage escalates it at once, measured from the old wait."""
    record = _reserved_then_waiting_for_payment()
    owner = record.locked_by or ""
    now = record.updated_at + timedelta(seconds=2)
    failed = transitions.fail(record, owner, "charge-payment", "payment refused", now)
    assert failed.process_state is ProcessState.ERROR
    resubmitted = transitions.resubmit(failed, "operator", "customer updated the card", now + timedelta(hours=1))
    assert resubmitted.failure_count == 0
    assert resubmitted.outage_wait_since is None


def test_an_attempt_after_the_wait_that_missed_its_deadline_is_not_reported_as_waiting() -> None:
    """The retry after the wait ran on a closed circuit and missed its deadline without an error of
    its own: the counted failure says the deadline was missed, not "waiting for payment" (which
    would count the order as waiting in the next payment outage's alert and mislead the operator
    reading the escalation)."""
    record = _reserved_then_waiting_for_payment()
    now = (record.complete_by or T0) + timedelta(seconds=1)
    retried = transitions.supervisor_retry(record, record.locked_by, now, MAX_FAILURES, timedelta(seconds=10))
    assert retried.last_error is not None and "waiting for" not in retried.last_error
    assert "missed its deadline" in retried.last_error
