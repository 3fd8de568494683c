"""A review timeout over 6 days (``REVIEW_TIMEOUT_SECONDS`` has no upper bound), replayed with the
context the extension sends on the Azure Storage provider: schema V3, a 6-day maximum timer and a
3-day interval (``localrun.durable.history.ContextFields``). The SDK splits the review timer: the
pause takes the first 3-day timer, then the one to the deadline; an answer in between, or an answer
to another review, is handled as with one timer, and the review closes at the deadline itself."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from localrun.durable import history as ev
from orchestrators import names
from tests.compensation.test_scheduler_failure_replay import (
    ME,
    Attempt,
    closed_at_the_deadline,
    new_inputs,
    review_requested,
)
from tests.durable_history import ReplayResult

WEEK = timedelta(days=7)
INTERVAL = timedelta(days=3)  # longRunningTimerIntervalDuration


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def _new_timers(result: ReplayResult) -> list[str]:
    return [a["fireAt"] for a in result.new_actions if a["type"] == "CreateTimer"]


def _paused_a_week(scheduler: Any, *, timer_per_round: bool = True) -> tuple[Attempt, dict[str, Any], datetime]:
    a, data = review_requested(scheduler, "retry", review_timeout=WEEK, timer_per_round=timer_per_round)
    paused_at = a.h.now
    result = a.run(scheduler)
    assert _new_timers(result) == [ev.timestamp_text(paused_at + INTERVAL)]
    assert data["until"] == ev.timestamp_text(paused_at + WEEK)
    return a, data, paused_at


def test_the_review_timer_is_split_and_the_review_closes_at_the_deadline(scheduler):
    a, _, paused_at = _paused_a_week(scheduler)
    a.h.timer_fired(paused_at + INTERVAL)

    result = a.run(scheduler)
    assert result.new_action_types() == ["CreateTimer"]  # nothing decided after 3 days
    assert _new_timers(result) == [ev.timestamp_text(paused_at + WEEK)]
    a.h.timer_fired(paused_at + WEEK)

    closed_at_the_deadline(a, a.run(scheduler), {"owned": True, "action": "retry", "operator": None})
    [(function, begin)] = new_inputs(a.run(scheduler))
    assert function == names.BEGIN_STEP and begin["agent"] == "payment"


def test_an_answer_between_the_split_timers_is_taken(scheduler):
    a, data, paused_at = _paused_a_week(scheduler)
    a.h.timer_fired(paused_at + INTERVAL)
    a.h.timer_created_not_fired(paused_at + WEEK)
    answer = {"reviewId": data["reviewId"], "action": "compensate", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, answer, at=paused_at + timedelta(days=4))

    result = a.run(scheduler)
    [(function, request)] = new_inputs(result)
    assert function == names.REQUEST_COMPENSATION
    assert request["reason"] == "operator review chose compensate"
    # the pending 3-day timer is cancelled too (orchestrators.timers.cancel_timer), not only the long
    # timer: else it would hold the instance Running until the deadline (SDK issue 573)
    review_timers = [a for a in result.actions if a["type"] == "CreateTimer"][-2:]
    assert [(t["fireAt"], t["isCanceled"]) for t in review_timers] == [
        (ev.timestamp_text(paused_at + INTERVAL), False),  # fired on day 3
        (ev.timestamp_text(paused_at + WEEK), True),
    ]


def test_an_answer_to_another_review_keeps_the_same_deadline(scheduler):
    a, _, paused_at = _paused_a_week(scheduler)
    first = a.h.timer_created_not_fired(paused_at + INTERVAL)
    other = {"reviewId": "o1:1:charge-payment:review:9", "action": "compensate", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, other, at=paused_at + timedelta(days=1))
    result = a.run(scheduler)
    # still waiting, until the same deadline, on a timer of its own (6 days away now: one timer;
    # orchestrators.timers.next_round_timer); the first round's stays until the wait ends
    assert _new_timers(result) == [ev.timestamp_text(paused_at + WEEK)]
    own = a.h.timer_created_not_fired(paused_at + WEEK)

    # the first round's 3-day timer fires: the SDK goes on with its timer to the deadline, which the
    # extension reaches only once its replay gets past this round (at the deadline)
    a.h.fire_timer(first, paused_at + INTERVAL)
    assert a.run(scheduler).new_actions == []

    a.h.fire_timer(own, paused_at + WEEK)
    result = a.run(scheduler)
    # the first round's timer to the deadline, cancelled (the wait is over), then close_review
    [rest, closing] = result.new_actions
    week = ev.timestamp_text(paused_at + WEEK)
    assert (rest["type"], rest["fireAt"], rest["isCanceled"]) == ("CreateTimer", week, True)
    assert closing["functionName"] == names.CLOSE_REVIEW
    assert result.extension.invoked == a.h.scheduled_task_count + 2


def _second_review_answered_after_the_first_cancelled_timer_fired(
    scheduler: Any, *, timer_per_round: bool
) -> tuple[ReplayResult, datetime]:
    """Red team (s30): an answered long review cancels its pending 3-day timer, but Azure still delivers
    that timer's ``TimerFired`` to an instance still running (a second review in the attempt). The SDK's
    ``LongTimerTask`` read it as its next interval and scheduled a new one, uncancelled, to the first
    review's deadline; the extension, replaying the actions one by one, waited on it before anything the
    attempt did after the second review: the hand-over to compensation waited until then (days)."""
    a, data, paused_at = _paused_a_week(scheduler, timer_per_round=timer_per_round)
    first = a.h.timer_created_not_fired(paused_at + INTERVAL)
    answer = {"reviewId": data["reviewId"], "action": "retry", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, answer, at=paused_at + timedelta(days=1))
    [(function, _)] = new_inputs(a.run(scheduler))
    assert function == names.BEGIN_STEP
    a.charge_fails("payment", f"{ME}:charge-payment:payment:3", "card declined")
    a.charge_fails("payment-backup", f"{ME}:charge-payment:payment-backup:4", "card declined again")
    [(function, second)] = new_inputs(a.run(scheduler))
    assert function == names.AWAIT_REVIEW
    a.h.activity_completed(names.AWAIT_REVIEW, {"owned": True}, at=a.h.now)
    a.h.timer_created_not_fired(a.h.now + INTERVAL)

    a.h.fire_timer(first, paused_at + INTERVAL)  # the first review's cancelled timer: Azure still sends it
    assert a.run(scheduler).new_actions == []
    answer = {"reviewId": second["reviewId"], "action": "compensate", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, answer, at=paused_at + timedelta(days=3, hours=12))
    return a.run(scheduler), paused_at


def test_a_cancelled_review_timer_firing_later_does_not_hold_up_the_attempt(scheduler):
    """The fix: on an instance started with ``timerPerRound``, ``cancel_timer`` takes the cancelled
    timers out of the SDK's open tasks, as DurableTask.Core does: the late ``TimerFired`` changes
    nothing, and the hand-over follows the answer."""
    result, _ = _second_review_answered_after_the_first_cancelled_timer_fired(scheduler, timer_per_round=True)
    [(function, request)] = new_inputs(result)
    assert function == names.REQUEST_COMPENSATION
    assert request["reason"] == "operator review chose compensate"


def test_an_instance_started_before_replays_the_late_timer_as_it_was_recorded(scheduler):
    """Without ``timerPerRound`` (started before), the SDK still takes the late ``TimerFired`` as the
    long timer's next interval: the timer to the first review's deadline its history may hold."""
    result, paused_at = _second_review_answered_after_the_first_cancelled_timer_fired(scheduler, timer_per_round=False)
    [timer] = result.new_actions
    assert (timer["type"], timer["fireAt"], timer["isCanceled"]) == (
        "CreateTimer",
        ev.timestamp_text(paused_at + WEEK),
        False,
    )
