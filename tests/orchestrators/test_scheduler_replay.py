"""The scheduler orchestration replayed by the Durable SDK's own engine over synthetic histories,
one test per branch. Assertions are on the actions it asks the host for and on its output."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT
from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS
from tests.durable_history import History, ReplayResult
from tests.orchestrators.support import AGENT_OF, STEP, T0, sample_order, started_attempt

ORDER = sample_order()
ME = "o1:2"
RESERVED = {"reservationId": "R-1"}
CHARGED = {"chargeId": "C-1", "amountCents": 1000}
SHIPPED = {"shipmentId": "S-1"}


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    """The registered orchestrator function, exactly as the host calls it."""
    return functions[names.SCHEDULER].func


def reply(
    step: str,
    *,
    outcome: str = "succeeded",
    transient: bool = False,
    result: Any = None,
    error: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    return {
        "requestId": request_id or f"{ME}:{step}:{AGENT_OF[step]}",
        "instanceId": ME,
        "orderId": "o1",
        "step": step,
        "outcome": outcome,
        "transient": transient,
        "result": result,
        "error": error,
    }


class Flow:
    """Builds the history of one attempt step by step, in the order the scheduler yields."""

    def __init__(self, completed: dict[str, Any] | None = None) -> None:
        self.h = started_attempt(ME, ORDER, 2, completed=completed)

    def begin(self, owned: bool = True) -> datetime:
        self.h.activity_completed(names.BEGIN_STEP, {"owned": owned}, at=self.h.now)
        return self.h.now + STEP

    def in_process_reply(self, value: dict[str, Any] | None, after: timedelta = timedelta(seconds=1)) -> None:
        deadline = self.begin()
        call = self.h.activity_scheduled(names.in_process_agent("inventory"))
        self.timer = self.h.timer_created_not_fired(deadline)
        self.h.complete_activity(call, value, at=self.h.now + after)

    def remote_reply(self, value: dict[str, Any], after: timedelta = timedelta(seconds=2)) -> None:
        deadline = self.begin()
        self.h.activity_completed(names.SEND_AGENT_REQUEST, None, at=self.h.now)
        self.timer = self.h.timer_created_not_fired(deadline)
        self.h.event_raised(AGENT_REPLY_EVENT, value, at=self.h.now + after)

    def step_recorded(self, owned: bool = True) -> None:
        self.h.activity_completed(names.COMPLETE_STEP, {"owned": owned}, at=self.h.now)

    def run(self, scheduler: Any) -> ReplayResult:
        return self.h.run(scheduler)


def test_first_episode_loads_the_order(scheduler):
    result = History(ME, {"orderId": "o1", "attempt": 2}, start=T0).run(scheduler)
    assert result.new_action_types() == ["CallActivity"]
    assert result.new_actions[0]["functionName"] == names.LOAD_ORDER
    assert json.loads(result.new_actions[0]["input"]) == {"orderId": "o1", "instanceId": ME}


def test_step_start_is_a_fenced_write_of_the_deadline_then_the_agent_races_a_timer(scheduler):
    f = Flow()
    f.h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=T0)
    result = f.run(scheduler)
    begin = json.loads(result.actions[2]["input"])
    assert begin["request"]["deadline"] == "2026-03-01T08:01:00.000000Z"
    assert begin["request"]["idempotencyKey"] == "o1:reserve-inventory"  # the same for every attempt
    assert begin["request"]["requestId"] == "o1:2:reserve-inventory:inventory"
    assert result.new_action_types() == ["CallActivity", "CreateTimer"]
    assert result.new_actions[0]["functionName"] == "agent_inventory"
    assert result.new_actions[1]["fireAt"] == "2026-03-01T08:01:00.000000Z"
    assert result.action_types()[-3] == "WhenAny"


def test_reply_first_cancels_the_timer_and_records_the_step_result(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    result = f.run(scheduler)
    timers = [a for a in result.actions if a["type"] == "CreateTimer"]
    assert timers[-1]["isCanceled"] is True
    assert result.new_action_types() == ["CallActivity"]
    assert result.new_actions[0]["functionName"] == names.COMPLETE_STEP
    assert json.loads(result.new_actions[0]["input"]) == {
        "orderId": "o1",
        "instanceId": ME,
        "step": "reserve-inventory",
        "attempt": 2,
        "result": RESERVED,
    }


def test_remote_step_sends_a_request_then_waits_for_the_reply_event_or_the_deadline(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.step_recorded()
    f.begin()
    result = f.run(scheduler)
    assert result.new_action_types() == ["CallActivity"]
    sent = json.loads(result.new_actions[0]["input"])
    assert sent["queue"] == "payment-requests"
    assert sent["request"]["payload"] == {"amountCents": 1000, "currency": "EUR", "customerId": "c1", "prepaid": False}
    f.h.activity_completed(names.SEND_AGENT_REQUEST, None, at=f.h.now)
    result = f.run(scheduler)
    assert result.new_action_types() == ["CreateTimer"]
    assert result.action_types()[-3:] == ["WhenAny", "WaitForExternalEvent", "CreateTimer"]
    assert result.actions[-2]["externalEventName"] == AGENT_REPLY_EVENT


def test_timer_first_ends_without_touching_the_record(scheduler):
    f = Flow()
    deadline = f.begin()
    call = f.h.activity_scheduled(names.in_process_agent("inventory"))
    timer = f.h.timer_created_not_fired(deadline)
    f.h.fire_timer(timer, deadline)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "DeadlineExpired", "step": "reserve-inventory"}
    assert result.new_actions == []  # no fenced write, no status: recovery is the supervisor's
    assert call == 3


def test_a_late_reply_after_the_timer_changes_nothing(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.step_recorded()
    deadline = f.begin()
    f.h.activity_completed(names.SEND_AGENT_REQUEST, None, at=f.h.now)
    timer = f.h.timer_created_not_fired(deadline)
    f.h.fire_timer(timer, deadline)
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED), at=deadline + timedelta(seconds=1))
    result = f.run(scheduler)
    assert result.is_done
    assert result.output["result"] == "DeadlineExpired"
    assert result.new_actions == []


def test_non_transient_error_reply_fails_the_order(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", outcome="failed", error="SKU A discontinued"))
    result = f.run(scheduler)
    assert result.new_action_types() == ["CallActivity"]
    assert result.new_actions[0]["functionName"] == names.FAIL_ORDER
    assert json.loads(result.new_actions[0]["input"])["error"] == "SKU A discontinued"
    f.h.activity_completed(names.FAIL_ORDER, {"owned": True}, at=f.h.now)
    result = f.run(scheduler)
    # the submitter hears it after the fenced write, from its own activity
    assert [a["functionName"] for a in result.new_actions] == [names.PUBLISH_STATUS]
    assert json.loads(result.new_actions[0]["input"]) == {
        "orderId": "o1",
        "status": "Failed",
        "attempt": 2,
        "reason": "reserve-inventory: SKU A discontinued",
    }
    f.h.activity_completed(names.PUBLISH_STATUS, None, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "Failed", "step": "reserve-inventory", "error": "SKU A discontinued"}


def test_transient_error_reply_releases_the_record_to_the_supervisor(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", outcome="failed", transient=True, error="503 x4"))
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.RELEASE_FOR_RETRY]
    f.h.activity_completed(names.RELEASE_FOR_RETRY, {"owned": True}, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output["result"] == "TransientFailure"


def test_a_faulted_in_process_agent_activity_counts_as_transient(scheduler):
    f = Flow()
    deadline = f.begin()
    call = f.h.activity_scheduled(names.in_process_agent("inventory"))
    f.h.timer_created_not_fired(deadline)
    f.h.fail_activity(call, "worker crashed", at=f.h.now + timedelta(seconds=1))
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.RELEASE_FOR_RETRY]


def test_a_mismatched_reply_is_ignored_and_the_wait_goes_on_until_the_same_deadline(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.step_recorded()
    stale = reply("charge-payment", result={"chargeId": "OLD"}, request_id="o1:1:charge-payment:payment")
    f.remote_reply(stale)
    result = f.run(scheduler)
    assert not result.is_done
    assert result.new_actions == []  # no write, no new timer: still waiting
    waits = [a for a in result.actions if a["type"] == "WaitForExternalEvent"]
    assert len(waits) == 2
    timers = [a for a in result.actions if a["type"] == "CreateTimer"]
    assert timers[-1]["isCanceled"] is False
    # the right reply then arrives before the deadline
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED), at=f.h.now + timedelta(seconds=5))
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.COMPLETE_STEP]
    assert json.loads(result.new_actions[0]["input"])["result"] == CHARGED


def test_a_duplicate_reply_of_a_completed_step_is_ignored(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.step_recorded()
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.step_recorded()
    f.begin()
    f.h.activity_completed(names.SEND_AGENT_REQUEST, None, at=f.h.now)
    deadline = f.h.now + STEP
    f.h.timer_created_not_fired(deadline)
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED), at=f.h.now + timedelta(seconds=1))
    result = f.run(scheduler)
    assert not result.is_done
    assert result.new_actions == []


def test_fencing_lost_at_a_step_start_ends_quietly(scheduler):
    f = Flow()
    f.begin(owned=False)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "reserve-inventory"}
    assert result.new_actions == []


def test_fencing_lost_when_recording_a_result_ends_quietly(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.step_recorded(owned=False)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "reserve-inventory"}


def test_not_owning_the_record_at_load_ends_before_anything_else(scheduler):
    h = History(ME, {"orderId": "o1", "attempt": 2}, start=T0)
    h.activity_completed(names.LOAD_ORDER, {"owned": False}, at=T0)
    result = h.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "load"}
    assert result.new_actions == []


def test_all_steps_succeed_then_the_order_is_processed(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.step_recorded()
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.step_recorded()
    f.remote_reply(reply("arrange-shipment", result=SHIPPED))
    f.step_recorded()
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.MARK_PROCESSED]
    shipment = [a for a in result.actions if a.get("functionName") == names.SEND_AGENT_REQUEST][-1]
    assert json.loads(shipment["input"])["request"]["payload"] == {"shipTo": "1 Main St", "reservationId": "R-1"}
    f.h.activity_completed(names.MARK_PROCESSED, {"owned": True}, at=f.h.now)
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.PUBLISH_STATUS]
    assert json.loads(result.new_actions[0]["input"])["status"] == "Completed"
    f.h.activity_completed(names.PUBLISH_STATUS, None, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "Processed"}


def processed_flow() -> Flow:
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.step_recorded()
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.step_recorded()
    f.remote_reply(reply("arrange-shipment", result=SHIPPED))
    f.step_recorded()
    f.h.activity_completed(names.MARK_PROCESSED, {"owned": True}, at=f.h.now)
    return f


def test_a_failed_status_send_is_retried_on_a_durable_timer_and_never_undoes_the_write(scheduler):
    f = processed_flow()
    f.h.activity_failed(names.PUBLISH_STATUS, "send to 'client-statuses' failed", at=f.h.now)
    result = f.run(scheduler)
    assert result.new_action_types() == ["CreateTimer"]
    fire_at = f.h.now + timedelta(seconds=5)
    assert result.new_actions[0]["fireAt"] == fire_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    f.h.timer_fired(fire_at)
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.PUBLISH_STATUS]
    f.h.activity_completed(names.PUBLISH_STATUS, None, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "Processed"}


def test_a_status_that_cannot_be_sent_at_all_still_ends_the_attempt_with_its_outcome(scheduler):
    f = processed_flow()
    for delay in FINAL_RETRY_DELAYS:
        f.h.activity_failed(names.PUBLISH_STATUS, "Service Bus unreachable", at=f.h.now)
        f.h.timer_fired(f.h.now + delay)
    f.h.activity_failed(names.PUBLISH_STATUS, "Service Bus unreachable", at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "Processed"}
    sends = [a for a in result.actions if a.get("functionName") == names.PUBLISH_STATUS]
    assert len(sends) == 1 + len(FINAL_RETRY_DELAYS) + 1  # Processing once, then Completed until the delays run out
    assert sum(FINAL_RETRY_DELAYS, timedelta()) > timedelta(hours=5)  # the final status outlasts a long outage


def test_a_processing_status_that_fails_is_not_waited_for_the_first_step_begins_at_once(scheduler):
    """Finding 2: retrying Processing on durable timers (5 s, 30 s, 2 min) outlasted the start grace,
    so the supervisor expired the attempt again and again until Error."""
    h = _loaded("submitter-7")
    result = h.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.PUBLISH_STATUS]
    h.activity_failed(names.PUBLISH_STATUS, "QuotaExceeded", at=h.now)
    result = h.run(scheduler)
    assert [a.get("functionName") for a in result.new_actions] == [names.BEGIN_STEP]


def test_steps_done_by_an_earlier_attempt_are_not_run_again(scheduler):
    f = Flow(completed={"reserve-inventory": RESERVED})
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.BEGIN_STEP]
    assert json.loads(result.new_actions[0]["input"])["request"]["step"] == "charge-payment"


def test_a_state_activity_that_fails_is_retried_on_a_durable_timer_within_the_attempt(scheduler):
    f = Flow()
    f.h.activity_failed(names.BEGIN_STEP, "Cosmos DB 503 on replace", at=f.h.now)
    result = f.run(scheduler)
    assert result.new_action_types() == ["CreateTimer"]  # not the end of the attempt
    retry_at = f.h.now + timedelta(seconds=2)
    assert result.new_actions[0]["fireAt"] == retry_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    f.h.timer_fired(retry_at)
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.BEGIN_STEP]
    first, again = [json.loads(a["input"]) for a in result.actions if a.get("functionName") == names.BEGIN_STEP]
    assert first == again  # the same fenced write, the same deadline and request id
    f.h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=f.h.now)
    result = f.run(scheduler)
    assert result.new_action_types() == ["CallActivity", "CreateTimer"]
    assert result.new_actions[0]["functionName"] == names.in_process_agent("inventory")


def test_a_state_activity_that_keeps_failing_fails_the_attempt_for_the_supervisor(scheduler):
    f = Flow()
    f.h.activity_failed(names.BEGIN_STEP, "Cosmos DB 503", at=f.h.now)
    f.h.timer_fired(f.h.now + timedelta(seconds=2))
    f.h.activity_failed(names.BEGIN_STEP, "Cosmos DB 503", at=f.h.now)
    f.h.timer_fired(f.h.now + timedelta(seconds=10))
    f.h.activity_failed(names.BEGIN_STEP, "Cosmos DB 503", at=f.h.now)
    result = f.run(scheduler)
    # the orchestrator raised: the host marks the instance Failed; the record keeps its completeBy
    assert result.error is not None and "Cosmos DB 503" in result.error
    assert result.new_actions == []


def _loaded(reply_to: str | None) -> History:
    h = History(ME, {"orderId": "o1", "attempt": 2}, start=T0, name=names.SCHEDULER)
    plan = {"owned": True, "order": ORDER, "completed": {}, "stepTimeoutSeconds": 60.0, "replyTo": reply_to}
    h.activity_completed(names.LOAD_ORDER, plan, at=T0)
    return h


def test_the_status_activity_gets_the_reply_queue_the_record_named(scheduler):
    result = _loaded("submitter-7").run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.PUBLISH_STATUS]
    assert json.loads(result.new_actions[0]["input"]) == {
        "orderId": "o1",
        "status": "Processing",
        "attempt": 2,
        "replyTo": "submitter-7",
    }


def test_an_order_without_a_reply_queue_costs_no_status_activity(scheduler):
    result = _loaded(None).run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.BEGIN_STEP]


def test_a_step_an_earlier_attempt_left_at_its_fallback_resumes_there(scheduler):
    h = History(ME, {"orderId": "o1", "attempt": 2}, start=T0, name=names.SCHEDULER)
    plan = {
        "owned": True,
        "order": ORDER,
        "completed": {"reserve-inventory": RESERVED},
        "inFlight": {"charge-payment": "payment-backup"},
        "stepTimeoutSeconds": 60.0,
        "replyTo": None,
    }
    h.activity_completed(names.LOAD_ORDER, plan, at=T0)
    result = h.run(scheduler)
    [begin] = result.new_actions
    assert json.loads(begin["input"])["agent"] == "payment-backup"
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=T0)
    result = h.run(scheduler)
    assert json.loads(result.new_actions[0]["input"])["queue"] == "payment-backup-requests"


def test_fencing_lost_at_processed_ends_quietly_without_a_completed_status(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.step_recorded()
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.step_recorded()
    f.remote_reply(reply("arrange-shipment", result=SHIPPED))
    f.step_recorded()
    f.h.activity_completed(names.MARK_PROCESSED, {"owned": False}, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "processed"}
    assert result.new_actions == []


def test_fencing_lost_when_failing_the_order_ends_quietly_without_a_failed_status(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", outcome="failed", error="SKU A discontinued"))
    f.h.activity_completed(names.FAIL_ORDER, {"owned": False}, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "fail"}
    assert result.new_actions == []


def test_a_release_for_retry_that_lost_the_record_still_ends_as_a_transient_failure(scheduler):
    """Its answer is not read (as before the typed protocol): the attempt ends either way."""
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", outcome="failed", transient=True, error="503 x4"))
    f.h.activity_completed(names.RELEASE_FOR_RETRY, {"owned": False}, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "TransientFailure", "step": "reserve-inventory", "error": "503 x4"}
