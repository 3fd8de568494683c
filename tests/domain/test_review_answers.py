"""Review answers on the record (domain.review) and when a cancellation's compensation is due
(domain.compensation ``cancellation_not_before``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation, review
from domain import transitions as t
from domain.errors import IllegalTransition
from domain.records import StateRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UNTIL = NOW + timedelta(hours=24)


def processing() -> StateRecord:
    claimed = t.claim(t.new_record("o-1", "replies", NOW), NOW, timedelta(seconds=60))
    return replace(claimed, current_step="charge-payment", complete_by=NOW + timedelta(minutes=2))


def paused() -> StateRecord:
    record = processing()
    owner = str(record.locked_by)
    return compensation.await_review(record, owner, "charge-payment", f"{owner}:charge-payment:review:1", UNTIL, NOW)


def test_an_answer_is_noted_once_and_says_who_chose_what():
    record = paused()
    pending = review.pending_review(record)
    assert pending is not None and review.review_answer(record, pending.review_id) is None
    answered = review.note_review_answer(record, pending.review_id, "ops-a", "fail", "too risky", NOW)
    assert review.pending_review(answered) is None
    assert review.review_answer(answered, pending.review_id) == review.ReviewAnswer("ops-a", "fail")
    with pytest.raises(IllegalTransition):  # the second answer to the same pause
        review.note_review_answer(answered, pending.review_id, "ops-b", "compensate", "refund", NOW)


def test_an_undelivered_answer_is_taken_back_and_the_review_waits_again():
    record = paused()
    pending = review.pending_review(record)
    assert pending is not None
    answered = review.note_review_answer(record, pending.review_id, "ops-a", "fail", "too risky", NOW)
    with pytest.raises(IllegalTransition):  # only the operator who answered takes it back
        review.reopen_review(answered, pending.review_id, "ops-b", NOW)
    reopened = review.reopen_review(answered, pending.review_id, "ops-a", NOW)
    assert review.pending_review(reopened) == pending
    with pytest.raises(IllegalTransition):  # nothing left to take back
        review.reopen_review(reopened, pending.review_id, "ops-a", NOW)


def test_a_cancellation_waits_for_a_step_in_flight_but_not_for_a_review_deadline():
    in_flight = processing()
    assert compensation.cancellation_not_before(in_flight) == in_flight.complete_by
    review_paused = paused()
    assert review_paused.complete_by == UNTIL
    assert compensation.cancellation_not_before(review_paused) is None
    assert compensation.cancellation_not_before(t.new_record("o-2", "replies", NOW)) is None
