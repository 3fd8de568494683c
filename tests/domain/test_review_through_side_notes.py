"""A review pause and the answer noted to it stay the attempt's last word through the side notes
submission writes beside it (``domain.records.SIDE_NOTES``): a prepaid order's payment notification
applied while an earlier step is under review, a ``Received`` owed or said.

Before, the review was pending only while ``ReviewRequested`` was the record's very last entry: one
payment notification applied during the pause hid the review from the ops API (no answer could be
noted: 409), made a cancellation wait for the review deadline (up to a day) as if a call were in flight,
and made the reviewed step's outcome unknown again (undone at every agent); a noted answer stopped being
a decision the supervisor acts on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation, payments, review
from domain import transitions as t
from domain.records import RECEIVED_OWED, RECEIVED_SAID, PaymentReceived, StateRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UNTIL = NOW + timedelta(hours=24)
STEP = "reserve-inventory"


def _paused() -> tuple[StateRecord, str]:
    claimed = t.claim(t.new_record("o-1", "replies", NOW), NOW, timedelta(seconds=60))
    owner = str(claimed.locked_by)
    begun = t.begin_step(claimed, owner, STEP, "inventory", "req-1", NOW + timedelta(minutes=2), NOW)
    review_id = f"{owner}:{STEP}:review:1"
    return compensation.await_review(begun, owner, STEP, review_id, UNTIL, NOW, keep_until=UNTIL), review_id


def _payment_applied(record: StateRecord) -> StateRecord:
    paid = PaymentReceived(
        notification_id="n-1", amount_cents=1200, currency="EUR", provider_reference="p-1", received_at=NOW
    )
    return payments.with_payment(record, paid, NOW + timedelta(minutes=1))


def _received_noted(record: StateRecord) -> StateRecord:
    owed = record.with_changes(NOW, RECEIVED_OWED, t.SUBMISSION, "not sent", received_owed=NOW)
    return owed.with_changes(NOW, RECEIVED_SAID, t.SUBMISSION, "said", received_owed=None)


SIDE_NOTES = [pytest.param(_payment_applied, id="payment-notified"), pytest.param(_received_noted, id="received")]


@pytest.mark.parametrize("side_note", SIDE_NOTES)
def test_the_review_stays_pending_and_answerable(side_note):
    paused, review_id = _paused()
    noted = side_note(paused)
    assert review.pending_review(noted) == review.pending_review(paused)
    assert compensation.cancellation_not_before(noted) is None  # nothing in flight: due now
    assert compensation.unknown_outcome_steps(noted) == []  # the refused step is not undone
    answered = review.note_review_answer(noted, review_id, "ops-a", "retry", "try again", NOW + timedelta(minutes=2))
    assert review.pending_review(answered) is None


@pytest.mark.parametrize("side_note", SIDE_NOTES)
def test_an_answer_noted_before_a_side_note_is_still_the_decision_left(side_note):
    paused, review_id = _paused()
    answered = review.note_review_answer(paused, review_id, "ops-a", "compensate", "refund", NOW)
    noted = side_note(answered)
    assert review.decision_left(noted) == review.LeftDecision(review_id, STEP, "compensate", "ops-a", closed=False)
    # the operator can still take it back (its event could not be delivered)
    assert review.pending_review(review.reopen_review(noted, review_id, "ops-a", NOW)) is not None
    # and the attempt's next write after the note (past the side note) means it acted on it
    owner = str(paused.locked_by)
    failed = t.fail(noted, owner, STEP, "operator review chose compensate", NOW)
    assert review.answer_acted_on(failed, review_id) == review.ActedOnAnswer("ops-a", "compensate", owner)


def test_a_move_of_the_attempt_after_the_pause_still_ends_it():
    paused, _ = _paused()
    owner = str(paused.locked_by)
    moved = t.begin_step(_payment_applied(paused), owner, STEP, "inventory", "req-2", UNTIL, NOW)
    assert review.pending_review(moved) is None and review.decision_left(moved) is None
