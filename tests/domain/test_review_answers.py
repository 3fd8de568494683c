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


def test_the_review_detail_holds_the_deadline_the_attempt_decides_at_and_completeby_the_grace_past_it():
    record = processing()
    owner = str(record.locked_by)
    keep = UNTIL + timedelta(minutes=5)
    held = compensation.await_review(record, owner, "charge-payment", f"{owner}:r:1", UNTIL, NOW, keep_until=keep)
    pending = review.pending_review(held)
    assert pending is not None and review.decide_by_time(pending) == UNTIL
    assert held.complete_by == keep
    assert review.decide_by_time(replace(pending, decide_by="tomorrow")) is None
    assert review.decide_by_time(replace(pending, decide_by="2026-03-02T12:00:00")) is None  # no zone: not trusted


def test_a_noted_answer_is_found_while_it_is_the_records_last_word_only():
    record = paused()
    pending = review.pending_review(record)
    assert pending is not None and review.noted_answer(record) is None
    answered = review.note_review_answer(record, pending.review_id, "ops-a", "fail", "card: blocked", NOW)
    noted = review.noted_answer(answered)
    assert noted == review.NotedAnswer(pending, "ops-a", "fail", "card: blocked")
    taken_back = review.reopen_review(answered, pending.review_id, "ops-a", NOW + timedelta(seconds=1))
    assert review.noted_answer(taken_back) is None and review.pending_review(taken_back) == pending
    moved_on = t.fail(answered, str(answered.locked_by), None, "declined", NOW)
    assert review.noted_answer(moved_on) is None
