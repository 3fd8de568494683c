"""A review decision the attempt never acted on (``domain.review.decision_left``) and what the supervisor
makes of it when it recovers the expired attempt (``domain.compensation.act_on_left_decision``): the
decision, carried out, instead of a retry as if nobody had decided."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import compensation, review
from domain import transitions as t
from domain.errors import IllegalTransition
from domain.records import StateRecord
from domain.states import ProcessState, StepStatus

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UNTIL = NOW + timedelta(hours=1)
LATER = UNTIL + timedelta(minutes=5)  # past the review deadline and the record's completeBy
STEP = "charge-payment"


def paused() -> StateRecord:
    claimed = t.claim(t.new_record("o-1", "replies", NOW), NOW, timedelta(seconds=60))
    owner = str(claimed.locked_by)
    begun = t.begin_step(claimed, owner, STEP, "payment", "req-1", NOW + timedelta(minutes=2), NOW)
    return compensation.await_review(begun, owner, STEP, review_id(begun), UNTIL, NOW)


def review_id(record: StateRecord) -> str:
    return f"{record.locked_by}:{STEP}:review:1"


def answered(action: str) -> StateRecord:
    record = paused()
    return review.note_review_answer(record, review_id(record), "ops-a", action, "why not", NOW)


def closed_by_attempt(noted: str | None, default: str = "compensate") -> StateRecord:
    record = answered(noted) if noted is not None else paused()
    return review.close_review(record, str(record.locked_by), review_id(record), default, UNTIL)


def test_a_noted_answer_that_is_the_last_write_is_a_decision_left():
    record = answered("fail")
    assert review.decision_left(record) == review.LeftDecision(review_id(record), STEP, "fail", "ops-a", closed=False)


def test_the_attempts_own_close_is_a_decision_left_with_or_without_an_operator():
    by_operator = closed_by_attempt("retry")
    assert review.decision_left(by_operator) == review.LeftDecision(
        review_id(by_operator), STEP, "retry", "ops-a", closed=True
    )
    default = closed_by_attempt(None, default="fail")
    assert review.decision_left(default) == review.LeftDecision(review_id(default), STEP, "fail", None, closed=True)


def test_no_decision_is_left_once_the_attempt_wrote_after_it_or_without_one():
    assert review.decision_left(paused()) is None  # still waiting: nobody decided
    record = closed_by_attempt("compensate")
    owner = str(record.locked_by)
    acted = t.begin_step(record, owner, STEP, "payment", "req-2", LATER, UNTIL)  # a retry's next write: acted on
    assert review.decision_left(acted) is None
    taken_back = review.reopen_review(answered("fail"), review_id(paused()), "ops-a", NOW)
    assert review.decision_left(taken_back) is None
    hostile = answered("delete-everything")  # a note the ops API would never write: not a decision
    assert review.decision_left(hostile) is None


def test_a_close_by_someone_else_than_the_owner_is_not_the_attempts_decision():
    record = closed_by_attempt("fail")
    last = record.history[-1]
    forged = replace(record, history=[*record.history[:-1], replace(last, by="someone-else")])
    assert review.decision_left(forged) is None


def test_compensate_left_hands_the_order_to_compensation_with_the_review_closed():
    record = answered("compensate")
    left = review.decision_left(record)
    assert left is not None
    moved = compensation.act_on_left_decision(record, str(record.locked_by), left, LATER, prepaid=False)
    assert moved.process_state is ProcessState.COMPENSATING and moved.locked_by is None
    assert review.review_closed(moved, left.review_id) == review.ClosedReview(left.review_id, "compensate", "ops-a")
    assert [(e.event, e.by) for e in moved.history[-2:]] == [
        (review.REVIEW_CLOSED, t.SUPERVISOR),
        ("CompensationRequested", t.SUPERVISOR),
    ]
    assert moved.steps[STEP].status is StepStatus.FAILED
    assert "operator review chose compensate (ops-a)" in (moved.last_error or "")


def test_fail_left_ends_in_error_written_by_the_supervisor():
    record = closed_by_attempt(None, default="fail")
    left = review.decision_left(record)
    assert left is not None
    moved = compensation.act_on_left_decision(record, str(record.locked_by), left, LATER, prepaid=False)
    assert moved.process_state is ProcessState.ERROR and moved.locked_by is None
    assert [(e.event, e.by) for e in moved.history[-2:]] == [
        (review.REVIEW_CLOSED, str(record.locked_by)),  # the attempt's own close, not written twice
        ("Failed", t.SUPERVISOR),
    ]
    assert "review not answered in time: default fail" in (moved.last_error or "")


@pytest.mark.parametrize("action", ["retry", "alternative"])
def test_retry_left_only_closes_the_review_for_the_usual_retry(action: str):
    record = answered(action)
    left = review.decision_left(record)
    assert left is not None
    moved = compensation.act_on_left_decision(record, str(record.locked_by), left, LATER, prepaid=False)
    assert moved.process_state is ProcessState.PROCESSING and moved.locked_by == record.locked_by
    assert review.review_closed(moved, left.review_id) == review.ClosedReview(left.review_id, action, "ops-a")
    retried = t.supervisor_retry(moved, record.locked_by, LATER, max_failures=5, backoff=timedelta(seconds=10))
    assert retried.process_state is ProcessState.PENDING


def test_a_decision_is_not_acted_on_before_the_attempt_expired_or_by_another_owner():
    record = answered("fail")
    left = review.decision_left(record)
    assert left is not None
    with pytest.raises(IllegalTransition):  # the review deadline has not passed: the attempt may still act
        compensation.act_on_left_decision(record, str(record.locked_by), left, NOW, prepaid=False)
    with pytest.raises(IllegalTransition):
        compensation.act_on_left_decision(record, "o-1:9", left, LATER, prepaid=False)


def test_compensate_past_the_pivot_ends_in_error_saying_why():
    record = answered("compensate")
    owner = str(record.locked_by)
    steps = dict(record.steps)
    steps["arrange-shipment"] = replace(steps[STEP], agent="shipping", status=StepStatus.SUCCEEDED)
    past_pivot = replace(record, steps=steps)
    left = review.decision_left(past_pivot)
    assert left is not None
    moved = compensation.act_on_left_decision(past_pivot, owner, left, LATER, prepaid=False)
    assert moved.process_state is ProcessState.ERROR
    assert "cannot be compensated" in (moved.last_error or "")
