"""Review answers on the record (domain.review) and when a cancellation's compensation is due
(domain.compensation ``cancellation_not_before``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation, review
from domain import transitions as t
from domain.errors import FencingLost, IllegalTransition
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


REVIEW_ID_OF = "{owner}:charge-payment:review:1"


def closing(record: StateRecord) -> tuple[str, str]:
    owner = str(record.locked_by)
    return owner, REVIEW_ID_OF.format(owner=owner)


def test_a_review_nobody_answered_closes_with_the_default_and_takes_no_answer_after():
    record = paused()
    owner, review_id = closing(record)
    closed = review.close_review(record, owner, review_id, "compensate", UNTIL)
    assert review.review_closed(closed, review_id) == review.ClosedReview(review_id, "compensate", None)
    assert closed.history[-1].event == review.REVIEW_CLOSED and closed.history[-1].by == owner
    assert review.pending_review(closed) is None
    with pytest.raises(IllegalTransition):  # an answer arriving after the close is not noted
        review.note_review_answer(closed, review_id, "ops-a", "fail", "late", UNTIL)
    assert closed.process_state is record.process_state and closed.locked_by == owner


def test_an_answer_noted_before_the_close_is_the_decision():
    record = paused()
    owner, review_id = closing(record)
    answered = review.note_review_answer(record, review_id, "ops-a", "retry", "try again: it was a blip", NOW)
    closed = review.close_review(answered, owner, review_id, "compensate", UNTIL)
    assert review.review_closed(closed, review_id) == review.ClosedReview(review_id, "retry", "ops-a")
    with pytest.raises(IllegalTransition):  # the note can no longer be taken back
        review.reopen_review(closed, review_id, "ops-a", UNTIL)


def test_an_answer_taken_back_before_the_close_is_not_the_decision():
    record = paused()
    owner, review_id = closing(record)
    answered = review.note_review_answer(record, review_id, "ops-a", "retry", "", NOW)
    reopened = review.reopen_review(answered, review_id, "ops-a", NOW)
    closed = review.close_review(reopened, owner, review_id, "compensate", UNTIL)
    assert review.review_closed(closed, review_id) == review.ClosedReview(review_id, "compensate", None)


def test_closing_again_leaves_the_close_as_it_is_and_another_review_is_not_the_same_close():
    record = paused()
    owner, review_id = closing(record)
    answered = review.note_review_answer(record, review_id, "ops@contoso.example", "fail", "a: b", NOW)
    closed = review.close_review(answered, owner, review_id, "compensate", UNTIL)
    again = review.close_review(closed, owner, review_id, "compensate", UNTIL + timedelta(seconds=5))
    assert again == closed  # the retry of a write whose response was lost finds it done
    assert review.review_closed(again, review_id) == review.ClosedReview(review_id, "fail", "ops@contoso.example")
    assert review.review_closed(again, f"{owner}:charge-payment:review:2") is None


def test_only_the_owner_closes_its_review():
    record = paused()
    owner, review_id = closing(record)
    with pytest.raises(FencingLost):
        review.close_review(record, "o-1:9", review_id, "compensate", UNTIL)
    failed = t.fail(record, owner, "charge-payment", "cancelled meanwhile", NOW)  # the record moved on, unowned
    with pytest.raises(FencingLost):
        review.close_review(failed, owner, review_id, "compensate", UNTIL)


def test_an_answer_is_acted_on_when_the_attempts_next_write_follows_the_note_and_is_not_its_close():
    record = paused()
    owner, review_id = closing(record)
    answered = review.note_review_answer(record, review_id, "ops-a", "fail", "stolen", NOW)
    assert review.answer_acted_on(answered, review_id) is None  # the note is the last word: nothing acted yet
    failed = t.fail(answered, owner, "charge-payment", "operator review chose fail", NOW)
    assert review.answer_acted_on(failed, review_id) == review.ActedOnAnswer("ops-a", "fail", owner)
    closed = review.close_review(answered, owner, review_id, "compensate", UNTIL)  # the timer won
    assert review.answer_acted_on(closed, review_id) is None
    reopened = review.reopen_review(answered, review_id, "ops-a", NOW)  # taken back
    assert review.answer_acted_on(reopened, review_id) is None
    by_someone_else = answered.with_changes(NOW, "PaymentNotified", "payments", "n-1")
    assert review.answer_acted_on(by_someone_else, review_id) is None
    assert review.answer_acted_on(failed, f"{owner}:charge-payment:review:2") is None
