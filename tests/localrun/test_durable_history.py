"""The synthetic-history builder drives a real orchestrator through the Durable SDK's replay engine
down each branch: reply first, timer first, same-episode races, an event buffered before its wait,
activity failure caught and unhandled."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.durable_history import History
from tests.localrun.durable_samples import (
    DEADLINE,
    REPLY_EVENT,
    failing_activity,
    registered,
    reply_or_deadline,
    two_in_parallel,
)

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
ORDER = {"orderId": "order-1"}
PREPARED_AT = T0 + timedelta(seconds=2)
DEADLINE_AT = PREPARED_AT + DEADLINE


def waiting_for_reply() -> History:
    """prepare done at PREPARED_AT; the deadline timer (task 1) is pending; the wait is open."""
    h = History("order-1:1", ORDER, start=T0)
    h.activity_completed("prepare", "prepared", input=ORDER, at=PREPARED_AT)
    h.timer_created_not_fired(DEADLINE_AT)
    return h


def test_first_episode_schedules_the_first_activity_with_the_orchestration_input():
    result = History("order-1:1", ORDER, start=T0).run(reply_or_deadline)

    assert not result.is_done
    assert result.action_types() == ["CallActivity"]
    assert result.new_actions[0]["functionName"] == "prepare"
    assert json.loads(result.new_actions[0]["input"]) == ORDER


def test_after_the_activity_it_races_a_timer_at_the_episode_time_against_the_reply():
    h = History("order-1:1", ORDER, start=T0)
    h.activity_completed("prepare", "prepared", input=ORDER, at=PREPARED_AT)

    result = h.run(reply_or_deadline)

    assert result.action_types() == ["CallActivity", "WhenAny", "CreateTimer", "WaitForExternalEvent"]
    timer, wait = result.actions[2], result.actions[3]
    assert timer["fireAt"] == "2026-03-01T08:05:02.000000Z"
    assert timer["isCanceled"] is False
    assert wait["externalEventName"] == REPLY_EVENT
    assert result.new_action_types() == ["CreateTimer"]
    assert result.custom_status == {"waiting_since": PREPARED_AT.isoformat()}


def test_reply_first_cancels_the_timer_and_calls_the_next_activity_with_the_reply():
    h = waiting_for_reply()
    h.event_raised(REPLY_EVENT, {"outcome": "ok"}, at=PREPARED_AT + timedelta(seconds=30))

    result = h.run(reply_or_deadline)

    assert not result.is_done
    assert result.actions[2]["type"] == "CreateTimer"
    assert result.actions[2]["isCanceled"] is True
    assert result.new_action_types() == ["CallActivity"]
    assert result.new_actions[0]["functionName"] == "finish"
    assert json.loads(result.new_actions[0]["input"]) == {"prepared": "prepared", "reply": {"outcome": "ok"}}


def test_reply_first_then_the_last_activity_completes_the_orchestration():
    h = waiting_for_reply()
    h.event_raised(REPLY_EVENT, {"outcome": "ok"}, at=PREPARED_AT + timedelta(seconds=30))
    h.activity_completed("finish", {"done": True}, at=PREPARED_AT + timedelta(seconds=31))

    result = h.run(reply_or_deadline)

    assert result.is_done
    assert result.error is None
    assert result.output == {"outcome": "replied", "finished": {"done": True}}
    assert result.new_actions == []


def test_timer_first_ends_the_orchestration_at_the_deadline_without_more_work():
    h = waiting_for_reply()
    h.fire_timer(1, DEADLINE_AT)

    result = h.run(reply_or_deadline)

    assert result.is_done
    assert result.output == {"outcome": "timed_out", "at": DEADLINE_AT.isoformat()}
    assert result.new_actions == []
    assert result.actions[2]["isCanceled"] is False


@pytest.mark.parametrize(("first", "outcome"), [("timer", "timed_out"), ("reply", "replied")])
def test_when_both_arrive_in_one_episode_the_earlier_event_in_history_wins(first, outcome):
    h = waiting_for_reply()
    h.new_episode(DEADLINE_AT)
    if first == "timer":
        h.fire_timer(1, DEADLINE_AT)
        h.event_raised(REPLY_EVENT, {"outcome": "late"})
    else:
        h.event_raised(REPLY_EVENT, {"outcome": "ok"})
        h.fire_timer(1, DEADLINE_AT)
    assert sum(e.type == 12 for e in h.events) == 3  # both in the third episode

    result = h.run(reply_or_deadline)

    if outcome == "timed_out":
        assert result.is_done
        assert result.output["outcome"] == "timed_out"
    else:
        assert not result.is_done
        assert result.new_action_types() == ["CallActivity"]


def test_a_reply_raised_before_the_wait_is_buffered_and_wins_at_once():
    h = History("order-1:1", ORDER, start=T0)
    prepare = h.activity_scheduled("prepare", ORDER)
    h.event_raised(REPLY_EVENT, {"outcome": "early"}, at=T0 + timedelta(seconds=1))
    h.complete_activity(prepare, "prepared", at=PREPARED_AT)
    h.timer_created_not_fired(DEADLINE_AT)

    with pytest.warns(UserWarning, match="Potential duplicate Task completion"):
        result = h.run(reply_or_deadline)

    assert result.new_action_types() == ["CallActivity"]
    assert json.loads(result.new_actions[0]["input"])["reply"] == {"outcome": "early"}


def test_a_caught_activity_failure_reaches_the_orchestrator_as_reason_and_details():
    h = History("flaky:1", None, start=T0)
    h.activity_failed("flaky", "Boom", "the remote said no", at=T0 + timedelta(seconds=1))
    h.activity_completed("flaky", "second try", at=T0 + timedelta(seconds=2))

    result = h.run(failing_activity)

    assert result.is_done
    assert result.output == {"first_error": "Boom \n the remote said no", "second": "second try"}


def test_an_unhandled_activity_failure_fails_the_orchestration_with_its_message():
    h = History("flaky:1", None, start=T0)
    h.activity_failed("flaky", "Boom")
    h.activity_failed("flaky", "Boom again", at=T0 + timedelta(seconds=1))

    result = h.run(failing_activity)

    assert not result.is_done
    assert result.error is not None
    assert result.error.startswith("Boom again")


def test_task_all_schedules_both_activities_under_one_when_all_and_collects_results_in_order():
    h = History("fan:1", None, start=T0)
    assert h.run(two_in_parallel).action_types() == ["WhenAll", "CallActivity", "CallActivity"]

    first, second = h.activity_scheduled("echo", "a"), h.activity_scheduled("echo", "b")
    h.complete_activity(second, "B", at=T0 + timedelta(seconds=1))
    h.complete_activity(first, "A", at=T0 + timedelta(seconds=2))

    assert h.run(two_in_parallel).output == ["A", "B"]


def test_the_registered_function_replays_the_same_as_the_generator():
    h = waiting_for_reply()
    h.event_raised(REPLY_EVENT, {"outcome": "ok"}, at=PREPARED_AT + timedelta(seconds=30))

    via_registration = h.run(registered("reply_or_deadline_orchestrator"))

    assert via_registration.state.raw == h.run(reply_or_deadline).state.raw


def test_context_json_marks_earlier_episodes_played_and_writes_utc_timestamps_with_z():
    h = waiting_for_reply()
    context = json.loads(h.context_json())

    assert context["instanceId"] == "order-1:1"
    assert json.loads(context["input"]) == ORDER
    assert context["upperSchemaVersion"] == 1
    # the extension's other fields (OrchestrationContextToString), with the Azure Storage timer limits
    assert context["upperSchemaVersionNew"] == 2
    assert context["maximumShortTimerDuration"] == "6.00:00:00"
    assert context["longRunningTimerIntervalDuration"] == "3.00:00:00"
    assert context["isReplaying"] is True
    played = [(e["EventType"], e["IsPlayed"]) for e in context["history"]]
    # OrchestratorStarted, ExecutionStarted, TaskScheduled, OrchestratorCompleted | OrchestratorStarted, ...
    assert played == [(12, True), (0, True), (4, True), (13, True), (12, False), (5, False), (10, False)]
    assert all(e["Timestamp"].endswith("Z") for e in context["history"])
    assert [e["EventId"] for e in context["history"] if e["EventType"] in (4, 10)] == [0, 1]


def test_episodes_cannot_go_back_in_time():
    h = History("x", None, start=T0)
    with pytest.raises(ValueError, match="forward in time"):
        h.new_episode(T0 - timedelta(seconds=1))
