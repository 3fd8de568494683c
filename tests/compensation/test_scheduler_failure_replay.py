"""The scheduler's failure path, replayed: the fallback agent is tried before compensation; a
non-transient failure before the pivot hands the order to compensation; a high-impact order pauses
for human review, resolved by each decision and by the timeout."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT
from localrun.durable.history import timestamp_text
from orchestrators import names
from tests.durable_history import ReplayResult
from tests.orchestrators.support import STEP, sample_order, started_attempt

REVIEW_TIMEOUT = timedelta(hours=1)
ME = "o1:1"


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def reply(
    step: str, request_id: str, *, ok: bool = True, error: str | None = None, result: Any = None
) -> dict[str, Any]:
    return {
        "requestId": request_id,
        "instanceId": ME,
        "orderId": "o1",
        "step": step,
        "outcome": "succeeded" if ok else "failed",
        "transient": False,
        "result": result,
        "error": error,
    }


class Attempt:
    def __init__(
        self,
        total: int = 1000,
        default_action: str = "compensate",
        review_timeout: timedelta = REVIEW_TIMEOUT,
        timer_per_round: bool = True,
    ) -> None:
        review = {
            "amountThresholdCents": 100_000,
            "timeoutSeconds": review_timeout.total_seconds(),
            "defaultAction": default_action,
        }
        self.h = started_attempt(ME, sample_order(total_cents=total), 1, review=review, timer_per_round=timer_per_round)

    def reserve(self) -> None:
        self.h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=self.h.now)
        call = self.h.activity_scheduled(names.in_process_agent("inventory"))
        self.h.timer_created_not_fired(self.h.now + STEP)
        value = reply("reserve-inventory", f"{ME}:reserve-inventory:inventory", result={"reservationId": "R-1"})
        self.h.complete_activity(call, value, at=self.h.now + timedelta(seconds=1))

    def remote(self, step: str, request_id: str, value: dict[str, Any]) -> None:
        """begin_step (its result recorded and its request sent in the one activity), the timer, the reply."""
        self.h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=self.h.now)
        self.h.timer_created_not_fired(self.h.now + STEP)
        self.h.event_raised(AGENT_REPLY_EVENT, value, at=self.h.now + timedelta(seconds=2))

    def charge_fails(self, agent: str, request_id: str, error: str) -> None:
        self.remote("charge-payment", request_id, reply("charge-payment", request_id, ok=False, error=error))

    def both_providers_fail(self) -> None:
        self.reserve()
        self.charge_fails("payment", f"{ME}:charge-payment:payment", "card declined")
        self.charge_fails("payment-backup", f"{ME}:charge-payment:payment-backup:2", "card declined again")

    def run(self, scheduler: Any) -> ReplayResult:
        return self.h.run(scheduler)


def new_inputs(result: ReplayResult) -> list[tuple[str, dict[str, Any]]]:
    return [(a.get("functionName", a["type"]), json.loads(a.get("input") or "null")) for a in result.new_actions]


def begins(result: ReplayResult) -> list[dict[str, Any]]:
    """Every begin_step input since the start of the attempt."""
    return [json.loads(a["input"]) for a in result.actions if a.get("functionName") == names.BEGIN_STEP]


def test_a_non_transient_failure_tries_the_fallback_agent_before_anything_else(scheduler):
    a = Attempt()
    a.reserve()
    a.charge_fails("payment", f"{ME}:charge-payment:payment", "card declined")
    result = a.run(scheduler)
    [(function, data)] = new_inputs(result)
    assert function == names.BEGIN_STEP
    assert data["agent"] == "payment-backup"
    assert data["request"]["requestId"] == f"{ME}:charge-payment:payment-backup:2"
    assert data["request"]["idempotencyKey"] == "o1:charge-payment"
    assert data["queue"] == "payment-backup-requests"  # the fallback's request goes out with its start
    assert "completes" not in data  # the reservation was recorded by the first try's begin_step
    a.h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=a.h.now)
    result = a.run(scheduler)
    assert result.new_action_types() == ["CreateTimer"]  # no send_agent_request: waits for the reply
    assert not any(a.get("functionName") == names.SEND_AGENT_REQUEST for a in result.actions)


def test_the_fallback_succeeding_records_the_step_and_goes_on(scheduler):
    a = Attempt()
    a.reserve()
    a.charge_fails("payment", f"{ME}:charge-payment:payment", "card declined")
    rid = f"{ME}:charge-payment:payment-backup:2"
    a.remote("charge-payment", rid, reply("charge-payment", rid, result={"chargeId": "B-1", "amountCents": 1000}))
    result = a.run(scheduler)
    [(function, data)] = new_inputs(result)
    assert function == names.BEGIN_STEP  # the fallback's result rides on the next step's start
    assert data["request"]["step"] == "arrange-shipment"
    assert data["completes"] == {"step": "charge-payment", "result": {"chargeId": "B-1", "amountCents": 1000}}


def test_when_the_fallback_also_fails_the_order_is_handed_to_compensation(scheduler):
    a = Attempt()
    a.both_providers_fail()
    result = a.run(scheduler)
    [(function, data)] = new_inputs(result)
    assert function == names.REQUEST_COMPENSATION
    assert data["step"] == "charge-payment"
    assert data["error"] == "card declined again"
    a.h.activity_completed(names.REQUEST_COMPENSATION, {"owned": True}, at=a.h.now)
    result = a.run(scheduler)
    assert result.is_done
    assert result.output == {
        "result": "CompensationRequested",
        "step": "charge-payment",
        "error": "card declined again",
    }
    assert [f for f, _ in new_inputs(result)] == []
    # compensation finds the reservation to undo on the record: the first charge's begin_step wrote it
    first, fallback = begins(result)[1:]
    assert first["completes"] == {"step": "reserve-inventory", "result": {"reservationId": "R-1"}}
    assert "completes" not in fallback


def test_a_failure_of_the_pivot_itself_is_still_before_the_point_of_no_return(scheduler):
    a = Attempt()
    a.reserve()
    rid = f"{ME}:charge-payment:payment"
    a.remote("charge-payment", rid, reply("charge-payment", rid, result={"chargeId": "C-1", "amountCents": 1000}))
    rid = f"{ME}:arrange-shipment:shipping"
    a.remote("arrange-shipment", rid, reply("arrange-shipment", rid, ok=False, error="address undeliverable"))
    result = a.run(scheduler)
    assert [f for f, _ in new_inputs(result)] == [names.REQUEST_COMPENSATION]
    # the charge to refund is on the record: the shipment's begin_step wrote it with the shipment's start
    assert begins(result)[2]["completes"] == {
        "step": "charge-payment",
        "result": {"chargeId": "C-1", "amountCents": 1000},
    }


def review_requested(
    scheduler: Any,
    default_action: str = "compensate",
    review_timeout: timedelta = REVIEW_TIMEOUT,
    timer_per_round: bool = True,
) -> tuple[Attempt, dict[str, Any]]:
    a = Attempt(
        total=250_000, default_action=default_action, review_timeout=review_timeout, timer_per_round=timer_per_round
    )
    a.both_providers_fail()
    result = a.run(scheduler)
    [(function, data)] = new_inputs(result)
    assert function == names.AWAIT_REVIEW
    a.h.activity_completed(names.AWAIT_REVIEW, {"owned": True}, at=a.h.now)
    return a, data


def test_a_high_impact_order_pauses_for_review_with_a_deadline(scheduler):
    a, data = review_requested(scheduler)
    assert data["reviewId"] == f"{ME}:charge-payment:review:1"
    assert data["until"] == "2026-03-01T09:00:05.000000Z"  # one hour after the fallback's reply
    assert data["defaultAction"] == "compensate"
    assert data["amountCents"] == 250_000
    assert data["writeNumber"] == 4  # after begin_step for reserve, charge and the fallback's charge
    result = a.run(scheduler)
    assert result.new_action_types() == ["CreateTimer"]
    assert result.action_types()[-3:] == ["WhenAny", "WaitForExternalEvent", "CreateTimer"]
    assert result.actions[-2]["externalEventName"] == names.REVIEW_DECISION_EVENT


def decide_review(a: Attempt, data: dict[str, Any], action: str, review_id: str | None = None) -> None:
    a.h.timer_created_not_fired(datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC))
    decision = {"reviewId": review_id or data["reviewId"], "action": action, "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, decision, at=a.h.now + timedelta(minutes=5))


def test_review_decision_compensate_hands_the_order_to_compensation(scheduler):
    a, data = review_requested(scheduler)
    decide_review(a, data, "compensate")
    result = a.run(scheduler)
    [(function, request)] = new_inputs(result)
    assert function == names.REQUEST_COMPENSATION
    assert request["reason"] == "operator review chose compensate"


def test_review_decision_retry_runs_the_step_again_with_its_own_agent(scheduler):
    a, data = review_requested(scheduler)
    decide_review(a, data, "retry")
    result = a.run(scheduler)
    [(function, begin)] = new_inputs(result)
    assert function == names.BEGIN_STEP
    assert begin["agent"] == "payment"
    assert begin["request"]["requestId"] == f"{ME}:charge-payment:payment:3"
    assert begin["queue"] == "payment-requests"  # the retry's request goes out with its start


def test_review_decision_alternative_runs_the_step_through_the_fallback(scheduler):
    a, data = review_requested(scheduler)
    decide_review(a, data, "alternative")
    result = a.run(scheduler)
    [(function, begin)] = new_inputs(result)
    assert function == names.BEGIN_STEP
    assert begin["agent"] == "payment-backup"


def test_a_decision_for_another_review_is_ignored(scheduler):
    a, data = review_requested(scheduler)
    decide_review(a, data, "retry", review_id="o1:1:charge-payment:review:9")
    result = a.run(scheduler)
    assert not result.is_done
    # the wait goes on until the same deadline, against a timer of its own (the extension leaves the
    # first one out of the next when-any: orchestrators.timers.next_round_timer)
    until = datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC)
    [own] = result.new_actions
    assert (own["type"], own["fireAt"], own["isCanceled"]) == ("CreateTimer", timestamp_text(until), False)

    a.h.fire_timer(a.h.timer_created_not_fired(until), until)
    # the extension schedules close_review (``new_actions``); before, it waited for another ReviewDecision
    closed_at_the_deadline(a, a.run(scheduler), {"owned": True, "action": "compensate", "operator": None})


def closed_at_the_deadline(a: Attempt, result: ReplayResult, closed: dict[str, Any]) -> dict[str, Any]:
    """The attempt's one new action after its review timer fired: ``close_review``; it answers ``closed``."""
    [(function, closing)] = new_inputs(result)
    assert function == names.CLOSE_REVIEW
    a.h.activity_completed(names.CLOSE_REVIEW, closed, at=a.h.now)
    return dict(closing)


@pytest.mark.parametrize(
    ("default_action", "expected"),
    [("compensate", names.REQUEST_COMPENSATION), ("retry", names.BEGIN_STEP), ("alternative", names.BEGIN_STEP)],
)
def test_a_review_nobody_answers_takes_the_configured_default_at_the_deadline(scheduler, default_action, expected):
    a, _ = review_requested(scheduler, default_action)
    until = datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC)
    a.h.timer_fired(until)
    closing = closed_at_the_deadline(a, a.run(scheduler), {"owned": True, "action": default_action, "operator": None})
    assert closing == {
        "orderId": "o1",
        "instanceId": ME,
        "attempt": 1,
        "reviewId": f"{ME}:charge-payment:review:1",
        "defaultAction": default_action,
        "writeNumber": 5,  # its fifth fenced write: begin_step x3 (reserve, charge, fallback), await_review
    }
    result = a.run(scheduler)
    [(function, request)] = new_inputs(result)
    assert function == expected
    if default_action != "compensate":
        assert request["agent"] == ("payment" if default_action == "retry" else "payment-backup")
    else:
        assert request["reason"] == "review not answered in time: default compensate"


def test_an_answer_noted_before_the_deadline_is_taken_though_its_event_came_after_the_timer(scheduler):
    """The operator's answer was noted on the record (and they were told it was taken) a moment before
    the deadline; its event reached the attempt after the timer. ``close_review`` finds the note: the
    attempt acts on the answer, not on the default."""
    a, data = review_requested(scheduler, "compensate")
    a.h.timer_fired(datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC))
    closed_at_the_deadline(a, a.run(scheduler), {"owned": True, "action": "retry", "operator": "ana"})
    late = {"reviewId": data["reviewId"], "action": "retry", "operator": "ana"}
    a.h.event_raised(names.REVIEW_DECISION_EVENT, late, at=a.h.now + timedelta(seconds=1))
    result = a.run(scheduler)
    [(function, begin)] = new_inputs(result)
    assert function == names.BEGIN_STEP
    assert begin["agent"] == "payment" and begin["request"]["requestId"] == f"{ME}:charge-payment:payment:3"


def test_fencing_lost_when_closing_a_review_ends_quietly(scheduler):
    a, _ = review_requested(scheduler)
    a.h.timer_fired(datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC))
    closed_at_the_deadline(a, a.run(scheduler), {"owned": False})
    result = a.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "review"}
    assert result.new_actions == []


def test_the_draining_version_takes_the_default_at_the_deadline_without_closing(functions):
    """``process_order_v3`` stays registered so its instances in flight at the upgrade finish as they
    began: its history after a review timer has no ``close_review``, and its replay must not add one."""
    draining = functions[names.DRAINING_SCHEDULER].func
    a, _ = review_requested(draining, "retry")
    a.h.timer_fired(datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC))
    result = a.run(draining)
    [(function, begin)] = new_inputs(result)
    assert function == names.BEGIN_STEP and begin["agent"] == "payment"


def test_a_timed_out_review_applies_the_default_once_then_a_second_one_compensates(scheduler):
    a, _ = review_requested(scheduler, "retry")
    a.h.timer_fired(datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC))  # nobody answered: the default, retry
    closed_at_the_deadline(a, a.run(scheduler), {"owned": True, "action": "retry", "operator": None})
    a.charge_fails("payment", f"{ME}:charge-payment:payment:3", "card declined")
    a.charge_fails("payment-backup", f"{ME}:charge-payment:payment-backup:4", "card declined again")
    result = a.run(scheduler)
    [(function, second)] = new_inputs(result)
    assert function == names.AWAIT_REVIEW
    assert second["reviewId"] == f"{ME}:charge-payment:review:2"
    a.h.activity_completed(names.AWAIT_REVIEW, {"owned": True}, at=a.h.now)
    a.h.timer_fired(a.h.now + REVIEW_TIMEOUT)  # unanswered again: no second retry, compensation
    closed_at_the_deadline(a, a.run(scheduler), {"owned": True, "action": "retry", "operator": None})
    result = a.run(scheduler)
    [(function, request)] = new_inputs(result)
    assert function == names.REQUEST_COMPENSATION
    assert request["reason"] == "reviews not answered in time twice: compensating"


def test_fencing_lost_when_handing_over_to_compensation_ends_quietly(scheduler):
    a = Attempt()
    a.both_providers_fail()
    a.h.activity_completed(names.REQUEST_COMPENSATION, {"owned": False}, at=a.h.now)
    result = a.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "compensate"}
    assert new_inputs(result) == []


def test_fencing_lost_when_pausing_for_review_ends_quietly_without_waiting(scheduler):
    a = Attempt(total=250_000)
    a.both_providers_fail()
    a.h.activity_completed(names.AWAIT_REVIEW, {"owned": False}, at=a.h.now)
    result = a.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "review"}
    assert result.new_actions == []


REVIEW_UNTIL = datetime(2026, 3, 1, 9, 0, 5, tzinfo=UTC)


def test_event_then_timer_in_one_episode_takes_the_event_without_closing(scheduler):
    a, data = review_requested(scheduler, "compensate")
    timer = a.h.timer_created_not_fired(REVIEW_UNTIL)
    a.h.new_episode(REVIEW_UNTIL)
    a.h.event_raised(names.REVIEW_DECISION_EVENT, {"reviewId": data["reviewId"], "action": "fail", "operator": "x"})
    a.h.fire_timer(timer, REVIEW_UNTIL)  # the timer's TimerFired in the same episode, after the event
    result = a.run(scheduler)
    assert [f for f, _ in new_inputs(result)] == [names.FAIL_ORDER]


def test_timer_then_event_in_one_episode_closes(scheduler):
    a, data = review_requested(scheduler, "compensate")
    a.h.timer_fired(REVIEW_UNTIL)
    a.h.event_raised(names.REVIEW_DECISION_EVENT, {"reviewId": data["reviewId"], "action": "fail", "operator": "x"})
    result = a.run(scheduler)
    assert [f for f, _ in new_inputs(result)] == [names.CLOSE_REVIEW]
    a.h.activity_completed(names.CLOSE_REVIEW, {"owned": True, "action": "fail", "operator": "x"}, at=a.h.now)
    assert [f for f, _ in new_inputs(a.run(scheduler))] == [names.FAIL_ORDER]


def test_close_failing_once_is_retried_then_acted_on(scheduler):
    a, _data = review_requested(scheduler, "compensate")
    a.h.timer_fired(REVIEW_UNTIL)
    a.h.activity_failed(names.CLOSE_REVIEW, "StoreUnavailable", at=a.h.now)
    a.h.timer_fired(a.h.now + timedelta(seconds=2))
    result = a.run(scheduler)
    assert [f for f, _ in new_inputs(result)] == [names.CLOSE_REVIEW]
    a.h.activity_completed(names.CLOSE_REVIEW, {"owned": True, "action": "retry", "operator": "ana"}, at=a.h.now)
    assert [f for f, _ in new_inputs(a.run(scheduler))] == [names.BEGIN_STEP]


def test_a_close_answering_an_action_outside_the_choices_takes_the_default(scheduler):
    a, _data = review_requested(scheduler, "compensate")
    a.h.timer_fired(REVIEW_UNTIL)
    a.run(scheduler)
    a.h.activity_completed(names.CLOSE_REVIEW, {"owned": True, "action": "ship-anyway", "operator": "x"}, at=a.h.now)
    assert [f for f, _ in new_inputs(a.run(scheduler))] == [names.REQUEST_COMPENSATION]
