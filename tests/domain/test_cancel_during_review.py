"""A cancellation (a client's ``CancelOrder``, an operator's cancel) while the attempt is paused for
review of a step its agents refused for good.

The reviewed step's state still says in progress (a retry or the fallback may run it again), but its
outcome is known: its agent refused it, so there is nothing to undo and nothing in flight. Before this
was taken into account, such a step was treated as "outcome unknown": the compensation queued a refund
for a payment both providers had declined (one undo per agent), and a cancel during the review of a
refused shipment was rejected as past the pivot although nothing had shipped.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation, review
from domain import transitions as t
from domain.records import StateRecord
from domain.states import ProcessState, StepStatus

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=10)


def _reserved() -> tuple[StateRecord, str]:
    claimed = t.claim(t.new_record("o-1", "replies", NOW), NOW, timedelta(seconds=60))
    owner = str(claimed.locked_by)
    begun = t.begin_step(claimed, owner, "reserve-inventory", "inventory", "req-1", NOW + timedelta(minutes=2), NOW)
    done = compensation.complete_step_logged(
        begun, owner, "reserve-inventory", {"reservationId": "r-1"}, NOW + timedelta(minutes=4), NOW
    )
    return done, owner


def _paused_on(step: str, agent: str) -> tuple[StateRecord, str]:
    """Inventory reserved, payment charged when ``step`` is the shipment, then ``step`` refused and paused."""
    record, owner = _reserved()
    if step == "arrange-shipment":
        record = t.begin_step(record, owner, "charge-payment", "payment", "req-2", NOW + timedelta(minutes=2), NOW)
        record = compensation.complete_step_logged(
            record,
            owner,
            "charge-payment",
            {"chargeId": "c-1", "amountCents": 1200},
            NOW + timedelta(minutes=4),
            NOW,
        )
    record = t.begin_step(record, owner, step, agent, "req-3", NOW + timedelta(minutes=2), NOW)
    review_id = f"{owner}:{step}:review:1"
    until = NOW + timedelta(hours=24)
    paused = compensation.await_review(record, owner, step, review_id, until, NOW, keep_until=until)
    return paused, review_id


def _undone_steps(record: StateRecord) -> list[tuple[str, str]]:
    return [(e.step, e.agent) for e in record.compensation]


def test_a_step_in_flight_is_still_undone_as_outcome_unknown():
    """The control: without a review, a started step may have happened, and both payment agents it went to
    (its own, which refused it, then the fallback) undo it."""
    record, owner = _reserved()
    tried = t.begin_step(record, owner, "charge-payment", "payment", "req-2", NOW + timedelta(minutes=2), NOW)
    begun = t.begin_step(tried, owner, "charge-payment", "payment-backup", "req-2:2", NOW + timedelta(minutes=2), NOW)
    entered = compensation.enter_compensation(begun, "ops-a", "cancel", LATER)
    assert _undone_steps(entered) == [  # the log: walked newest first, the fallback that last had it undone first
        ("reserve-inventory", "inventory"),
        ("charge-payment", "payment"),
        ("charge-payment", "payment-backup"),
    ]


@pytest.mark.parametrize("answered", [None, "retry", "compensate"])
def test_a_cancel_during_a_payment_review_refunds_nothing(answered: str | None):
    paused, review_id = _paused_on("charge-payment", "payment-backup")
    if answered is not None:  # an answer noted and not acted on yet: still nothing in flight
        paused = review.note_review_answer(paused, review_id, "ops-a", answered, "why", NOW + timedelta(minutes=5))
    assert compensation.failed_under_review(paused) == "charge-payment"
    assert compensation.unknown_outcome_steps(paused) == []
    entered = compensation.enter_compensation(paused, "ops-b", "cancel", LATER)
    assert entered.process_state is ProcessState.COMPENSATING
    assert _undone_steps(entered) == [("reserve-inventory", "inventory")]
    assert entered.steps["charge-payment"].status is StepStatus.FAILED
    assert entered.steps["charge-payment"].error == "refused by its agent, paused for review; then cancel"


def test_a_cancel_during_a_shipment_review_is_not_past_the_pivot():
    paused, _ = _paused_on("arrange-shipment", "shipping")
    assert not compensation.pivot_passed(paused)
    entered = compensation.enter_compensation(paused, "customer", "cancel", LATER)
    assert _undone_steps(entered) == [("reserve-inventory", "inventory"), ("charge-payment", "payment")]
    assert entered.steps["arrange-shipment"].status is StepStatus.FAILED


def test_once_the_retry_begins_the_step_is_in_flight_again():
    paused, review_id = _paused_on("charge-payment", "payment")
    owner = str(paused.locked_by)
    closed = review.close_review(paused, owner, review_id, "retry", NOW + timedelta(minutes=1))
    assert compensation.failed_under_review(closed) == "charge-payment"  # decided, not acted on yet
    retried = t.begin_step(closed, owner, "charge-payment", "payment", "req-4", LATER, NOW + timedelta(minutes=2))
    assert compensation.failed_under_review(retried) is None
    assert compensation.unknown_outcome_steps(retried) == ["charge-payment"]
