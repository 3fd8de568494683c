"""What a review's answer does to a prepaid order's payment step: no other provider can take the capture
over (the customer paid at the first one), as the decision function already holds when it decides by
itself (a prepaid order never falls back). ``alternative`` is not offered there, and when it comes all
the same (a decision noted before, the configured default) it is read as on a step without a fallback:
``fail``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation, review, transitions
from domain.compensation_policy import REVIEW_CHOICES, review_choices, review_outcome
from domain.records import StateRecord
from domain.states import ProcessState
from domain.workflow import STEPS

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=2)
PAYMENT = STEPS["charge-payment"]


def test_a_prepaid_order_has_no_fallback_for_its_payment_step() -> None:
    assert PAYMENT.fallback_for(prepaid=False) == "payment-backup"
    assert PAYMENT.fallback_for(prepaid=True) is None


def test_alternative_is_offered_only_where_a_fallback_can_take_over() -> None:
    assert review_choices(PAYMENT.fallback_for(prepaid=False)) == REVIEW_CHOICES
    assert review_choices(PAYMENT.fallback_for(prepaid=True)) == ("compensate", "retry", "fail")
    assert review_choices(STEPS["arrange-shipment"].fallback_for(prepaid=False)) == ("compensate", "retry", "fail")


@pytest.mark.parametrize(("prepaid", "outcome"), [(False, "alternative"), (True, "fail")])
def test_alternative_on_the_payment_step(prepaid: bool, outcome: str) -> None:
    assert review_outcome("alternative", PAYMENT.fallback_for(prepaid)) == outcome
    for choice in ("compensate", "retry", "fail"):
        assert review_outcome(choice, PAYMENT.fallback_for(prepaid)) == choice


def _left_alternative() -> tuple[StateRecord, review.LeftDecision]:
    """A paused payment step whose review was answered ``alternative``; the attempt expired before acting."""
    record = transitions.claim(transitions.new_record("o-1", None, NOW), NOW, timedelta(minutes=1))
    owner = str(record.locked_by)
    record = transitions.begin_step(
        record, owner, "charge-payment", "payment", "req-1", NOW + timedelta(minutes=1), NOW
    )
    review_id = f"{owner}:charge-payment:review:1"
    until = NOW + timedelta(minutes=30)
    record = compensation.await_review(record, owner, "charge-payment", review_id, until, NOW, keep_until=until)
    record = review.note_review_answer(record, review_id, "ana", "alternative", "use the backup", NOW)
    left = review.decision_left(record)
    assert left is not None and left.action == "alternative"
    return record, left


@pytest.mark.parametrize("prepaid", [False, True])
def test_the_supervisor_carries_out_a_left_alternative_as_the_attempt_would(prepaid: bool) -> None:
    record, left = _left_alternative()
    assert compensation.settled_by_decision(left, prepaid=prepaid) is prepaid
    moved = compensation.act_on_left_decision(record, str(record.locked_by), left, LATER, prepaid=prepaid)
    if prepaid:
        assert moved.process_state is ProcessState.ERROR
    else:
        assert moved.process_state is ProcessState.PROCESSING
        assert moved.steps["charge-payment"].agent == "payment-backup"
