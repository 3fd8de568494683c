"""An operator's answer to an attempt's SECOND review, raised before the orchestration sees
``await_review`` #2 complete (an early event). The first review's wait lost to its timer; left open in
the SDK (``open_tasks``) it took the answer, unseen, and the second review waited out its whole
timeout (``process_order_v4``) or took its default, compensate, though the operator answered ``fail``
and was told 200 (``process_order_v3``). ``orchestrators.external_events.abandon_wait`` closes a wait
its timer beat, so the answer is kept for the wait that follows (a red team's finding)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrators import names
from tests.compensation.test_scheduler_failure_replay import (
    ME,
    REVIEW_TIMEOUT,
    closed_at_the_deadline,
    new_inputs,
    review_requested,
)


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def _second_review_requested(scheduler: Any) -> Any:
    a, _ = review_requested(scheduler, "retry")
    a.h.timer_fired(datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC))  # review 1: nobody answered, default retry
    closed_at_the_deadline(a, a.run(scheduler), {"owned": True, "action": "retry", "operator": None})
    a.charge_fails("payment", f"{ME}:charge-payment:payment:3", "card declined")
    a.charge_fails("payment-backup", f"{ME}:charge-payment:payment-backup:4", "card declined again")
    result = a.run(scheduler)
    [(function, second)] = new_inputs(result)
    assert function == names.AWAIT_REVIEW
    assert second["reviewId"] == f"{ME}:charge-payment:review:2"
    return a, second


def test_an_answer_to_the_second_review_raised_after_its_wait_opened_is_taken(scheduler):
    a, second = _second_review_requested(scheduler)
    a.h.activity_completed(names.AWAIT_REVIEW, {"owned": True}, at=a.h.now)
    a.h.timer_created_not_fired(a.h.now + REVIEW_TIMEOUT)
    answer = {"reviewId": second["reviewId"], "action": "fail", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, answer, at=a.h.now + timedelta(seconds=1))
    result = a.run(scheduler)
    assert [f for f, _ in new_inputs(result)] == [names.FAIL_ORDER]


def test_an_early_answer_to_the_second_review_is_taken_when_its_wait_opens(scheduler):
    """The same answer, raised one second before await_review #2's completion reached the
    orchestration (the ops API read the record's ReviewRequested as soon as the write landed): taken at
    once, as an early answer to a first review is."""
    a, second = _second_review_requested(scheduler)
    pause = a.h.activity_scheduled(names.AWAIT_REVIEW)
    answer = {"reviewId": second["reviewId"], "action": "fail", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, answer, at=a.h.now + timedelta(seconds=1))
    a.h.complete_activity(pause, {"owned": True}, at=a.h.now + timedelta(seconds=1))
    result = a.run(scheduler)
    # the second review's timer is created in this very episode, and the answer taken in it
    assert [f for f, _ in new_inputs(result)] == ["CreateTimer", names.FAIL_ORDER], result.new_action_types()


def test_v3_takes_an_early_answer_to_the_second_review_at_once_too(functions):
    """process_order_v3 (still running for its in-flight instances) never closes its reviews, so a
    swallowed answer was not read back from the record either: at the deadline it compensated (the
    second unanswered review's default) although ana answered "fail" at once."""
    draining = functions[names.DRAINING_SCHEDULER].func
    a, _ = review_requested(draining, "retry")
    a.h.timer_fired(datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC))  # review 1: nobody answered: default retry
    a.charge_fails("payment", f"{ME}:charge-payment:payment:3", "card declined")
    a.charge_fails("payment-backup", f"{ME}:charge-payment:payment-backup:4", "card declined again")
    [(function, second)] = new_inputs(a.run(draining))
    assert function == names.AWAIT_REVIEW
    pause = a.h.activity_scheduled(names.AWAIT_REVIEW)
    answer = {"reviewId": second["reviewId"], "action": "fail", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, answer, at=a.h.now + timedelta(seconds=1))
    a.h.complete_activity(pause, {"owned": True}, at=a.h.now + timedelta(seconds=1))
    waiting = a.run(draining)
    a.h.timer_fired(a.h.now + REVIEW_TIMEOUT)
    done = a.run(draining)
    assert [f for f, _ in new_inputs(waiting)] == ["CreateTimer", names.FAIL_ORDER], (
        f"took nothing at once ({waiting.new_action_types()}); at the deadline: {[f for f, _ in new_inputs(done)]}"
    )
