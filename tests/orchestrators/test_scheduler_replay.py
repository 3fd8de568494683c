"""The scheduler orchestration replayed by the Durable SDK's own engine over synthetic histories,
one test per branch. Assertions are on the actions it asks the host for and on its output.

The lean scheduler (``process_order_v3``, issue 15): a step's result rides on the next fenced write
(the next ``begin_step``'s ``completes``, or ``mark_processed``'s), ``begin_step`` sends a Service
Bus agent's request itself, the attempt's plan is its input (no ``load_order``), its first
``begin_step`` sends ``Processing`` and ``mark_processed`` ``Completed``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT
from domain.timefmt import to_text
from localrun.durable.history import parse_timestamp
from orchestrators import names
from orchestrators.state_activity import HAND_OVER_RETRY_DELAYS
from orchestrators.status import FINAL_RETRY_DELAYS
from tests.durable_history import History, ReplayResult
from tests.orchestrators.support import AGENT_OF, STEP, T0, sample_order, started_attempt

ORDER = sample_order()
ME = "o1:2"
RESERVED = {"reservationId": "R-1"}
CHARGED = {"chargeId": "C-1", "amountCents": 1000}
SHIPPED = {"shipmentId": "S-1"}
# The happy attempt, activity by activity: five, none of them a load, a separate result write, request send or status.
HAPPY = [
    names.BEGIN_STEP,
    names.in_process_agent("inventory"),
    names.BEGIN_STEP,
    names.BEGIN_STEP,
    names.MARK_PROCESSED,
]


def called(result: ReplayResult, function: str) -> list[dict[str, Any]]:
    """The inputs of every call of ``function`` the orchestrator made since the start."""
    return [json.loads(a["input"]) for a in result.actions if a.get("functionName") == function]


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

    def __init__(self, completed: dict[str, Any] | None = None, *, loaded: History | None = None) -> None:
        self.h = loaded or started_attempt(ME, ORDER, 2, completed=completed)

    def begin(self, owned: bool = True) -> datetime:
        self.h.activity_completed(names.BEGIN_STEP, {"owned": owned}, at=self.h.now)
        return self.h.now + STEP

    def in_process_reply(self, value: dict[str, Any] | None, after: timedelta = timedelta(seconds=1)) -> None:
        deadline = self.begin()
        call = self.h.activity_scheduled(names.in_process_agent("inventory"))
        self.timer = self.h.timer_created_not_fired(deadline)
        self.h.complete_activity(call, value, at=self.h.now + after)

    def remote_reply(self, value: dict[str, Any], after: timedelta = timedelta(seconds=2)) -> None:
        """begin_step (which also sent the request), the deadline timer, the reply event."""
        deadline = self.begin()
        self.timer = self.h.timer_created_not_fired(deadline)
        self.h.event_raised(AGENT_REPLY_EVENT, value, at=self.h.now + after)

    def processed(self, answer: dict[str, Any]) -> None:
        self.h.activity_completed(names.MARK_PROCESSED, answer, at=self.h.now)

    def run(self, scheduler: Any) -> ReplayResult:
        return self.h.run(scheduler)


def test_first_episode_begins_the_first_step_from_the_plan_in_its_input_and_announces_the_attempt(scheduler):
    result = Flow().run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.BEGIN_STEP]
    [begin] = called(result, names.BEGIN_STEP)
    # no load activity, no status activity: the first write tells the submitter "Processing" itself
    assert begin["announce"] is True
    assert begin["request"]["attempt"] == 2
    assert called(result, names.PUBLISH_STATUS) == []


def test_only_the_attempts_first_write_announces_it(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    result = f.run(scheduler)
    [first, second] = called(result, names.BEGIN_STEP)
    assert first["announce"] is True and "announce" not in second


@pytest.mark.parametrize("say_received", [True, False])
def test_only_the_first_write_of_an_attempt_started_unsure_of_received_says_it(scheduler, say_received):
    """``sayReceived`` in the attempt's input (the starter's attempt 1, or a fast-path claim whose ``receivedOwed``
    mark could not be written) goes to its first ``begin_step`` only; an input without it (every instance started
    before it, and the happy path) asks no write for it."""
    f = Flow(loaded=started_attempt(ME, ORDER, 1, say_received=say_received))
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    result = f.run(scheduler)
    [first, second] = called(result, names.BEGIN_STEP)
    assert first.get("sayReceived") is (True if say_received else None)
    assert "sayReceived" not in second


def test_an_input_without_a_plan_fails_the_attempt_by_name(scheduler):
    """A ``_v2``-shaped input (no plan) reaching ``_v3`` is a bug, not a replay: it fails loudly,
    and the supervisor recovers the record after the start grace."""
    result = History(ME, {"orderId": "o1", "attempt": 2}, start=T0, name=names.SCHEDULER).run(scheduler)
    assert result.error is not None and "plan" in result.error
    assert result.new_actions == []


def test_step_start_is_a_fenced_write_of_the_deadline_then_the_agent_races_a_timer(scheduler):
    f = Flow()
    f.h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=T0)
    result = f.run(scheduler)
    [begin] = called(result, names.BEGIN_STEP)
    assert begin["agent"] == "inventory"
    assert "completes" not in begin  # the first step: no earlier result to record
    assert "queue" not in begin  # an in-process agent: nothing to send, its activity runs it
    assert begin["request"]["deadline"] == "2026-03-01T08:01:00.000000Z"
    assert begin["request"]["idempotencyKey"] == "o1:reserve-inventory"  # the same for every attempt
    assert begin["request"]["requestId"] == "o1:2:reserve-inventory:inventory"
    assert result.new_action_types() == ["CallActivity", "CreateTimer"]
    assert result.new_actions[0]["functionName"] == "agent_inventory"
    assert result.new_actions[1]["fireAt"] == "2026-03-01T08:01:00.000000Z"
    assert result.action_types()[-3] == "WhenAny"


def test_reply_first_cancels_the_timer_and_the_result_is_recorded_by_the_next_steps_start(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    result = f.run(scheduler)
    timers = [a for a in result.actions if a["type"] == "CreateTimer"]
    assert timers[-1]["isCanceled"] is True
    assert result.new_action_types() == ["CallActivity"]
    assert result.new_actions[0]["functionName"] == names.BEGIN_STEP  # no write of the result alone
    begin = json.loads(result.new_actions[0]["input"])
    assert begin["request"]["step"] == "charge-payment"
    assert begin["completes"] == {"step": "reserve-inventory", "result": RESERVED}
    assert begin["queue"] == "payment-requests"


def test_remote_step_begins_with_its_request_then_waits_for_the_reply_event_or_the_deadline(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.begin()
    result = f.run(scheduler)
    [_, begin] = called(result, names.BEGIN_STEP)
    # the start, the deadline and the request are one activity: begin_step sends it onto the queue
    assert begin["queue"] == "payment-requests"
    assert begin["request"]["payload"] == {"amountCents": 1000, "currency": "EUR", "customerId": "c1", "prepaid": False}
    assert result.new_action_types() == ["CreateTimer"]  # no send_agent_request: straight to the wait
    assert result.action_types()[-3:] == ["WhenAny", "WaitForExternalEvent", "CreateTimer"]
    assert result.actions[-2]["externalEventName"] == AGENT_REPLY_EVENT
    assert called(result, names.SEND_AGENT_REQUEST) == []


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
    assert call == 1  # begin_step, then the agent: nothing scheduled in between


def test_a_late_reply_after_the_timer_changes_nothing(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    deadline = f.begin()
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


def test_a_failed_order_found_failed_and_moved_on_since_tells_the_submitter_nothing(scheduler):
    """``fail_order`` run again found its write made and the record moved on (an operator resubmitted the order;
    ``activities.fencing.moved_on``): the attempt still ends ``Failed``, with no ``Failed`` status for a submitter
    whose order is being processed again."""
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", outcome="failed", error="SKU A discontinued"))
    f.h.activity_completed(names.FAIL_ORDER, {"owned": True, "movedOn": True}, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.new_actions == []
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
    stale = reply("charge-payment", result={"chargeId": "OLD"}, request_id="o1:1:charge-payment:payment")
    f.remote_reply(stale)
    result = f.run(scheduler)
    assert not result.is_done
    # no write; the next wait races a timer of its own, for the same deadline (the extension would not
    # see the first one in the next when-any: orchestrators.timers.next_round_timer)
    [own] = result.new_actions
    assert own["type"] == "CreateTimer"
    waits = [a for a in result.actions if a["type"] == "WaitForExternalEvent"]
    assert len(waits) == 2
    timers = [a for a in result.actions if a["type"] == "CreateTimer"]
    assert [(t["fireAt"], t["isCanceled"]) for t in timers[-2:]] == [(own["fireAt"], False), (own["fireAt"], False)]
    f.h.timer_created_not_fired(parse_timestamp(own["fireAt"]))
    # the right reply then arrives before the deadline
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED), at=f.h.now + timedelta(seconds=5))
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.BEGIN_STEP]
    begin = json.loads(result.new_actions[0]["input"])
    assert [t["isCanceled"] for t in result.actions if t["type"] == "CreateTimer"][-2:] == [True, True]  # both rounds'
    assert begin["completes"] == {"step": "charge-payment", "result": CHARGED}  # the right reply's, not the stale one's
    assert begin["request"]["step"] == "arrange-shipment"


def test_a_duplicate_reply_of_a_completed_step_is_ignored(scheduler):
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.begin()
    deadline = f.h.now + STEP
    f.h.timer_created_not_fired(deadline)
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED), at=f.h.now + timedelta(seconds=1))
    result = f.run(scheduler)
    assert not result.is_done
    [own] = result.new_actions  # the wait goes on against a timer of its own, for the same deadline
    assert (own["type"], parse_timestamp(own["fireAt"])) == ("CreateTimer", deadline)


def test_fencing_lost_at_a_step_start_ends_quietly(scheduler):
    f = Flow()
    f.begin(owned=False)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "reserve-inventory"}
    assert result.new_actions == []


def test_fencing_lost_when_recording_a_result_ends_quietly(scheduler):
    """The result is recorded by the next step's begin_step: fenced out there, the attempt ends
    (the result and the next start are one write: neither is on the record)."""
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.begin(owned=False)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "charge-payment"}
    assert result.new_actions == []
    assert called(result, names.BEGIN_STEP)[-1]["completes"] == {"step": "reserve-inventory", "result": RESERVED}


def test_not_owning_the_record_at_the_first_write_ends_before_anything_else(scheduler):
    """No load checks the claim: the first fenced write does, and fenced out there the attempt ends
    before any agent is asked."""
    f = Flow()
    f.begin(owned=False)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "reserve-inventory"}
    assert result.new_actions == []
    assert [a["functionName"] for a in result.actions if a["type"] == "CallActivity"] == [names.BEGIN_STEP]


def all_steps_replied() -> Flow:
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.remote_reply(reply("arrange-shipment", result=SHIPPED))
    return f


def test_all_steps_succeed_then_the_order_is_processed(scheduler):
    f = all_steps_replied()
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.MARK_PROCESSED]
    # the last step's result and Processed are one write
    assert json.loads(result.new_actions[0]["input"]) == {
        "orderId": "o1",
        "instanceId": ME,
        "attempt": 2,
        "completes": {"step": "arrange-shipment", "result": SHIPPED},
        "writeNumber": 4,  # after the three begin_step writes
    }
    begins = called(result, names.BEGIN_STEP)
    assert [b.get("completes") for b in begins] == [
        None,
        {"step": "reserve-inventory", "result": RESERVED},
        {"step": "charge-payment", "result": CHARGED},
    ]
    assert [b.get("queue") for b in begins] == [None, "payment-requests", "shipping-requests"]
    assert begins[2]["request"]["payload"] == {"shipTo": "1 Main St", "reservationId": "R-1"}
    f.processed({"owned": True, "statusSent": True})
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "Processed"}
    assert result.new_actions == []  # mark_processed sent Completed: no status activity
    # the whole attempt: six activities, no result write, no request send, no status activity
    assert [a["functionName"] for a in result.actions if "functionName" in a] == HAPPY
    assert called(result, names.SEND_AGENT_REQUEST) == called(result, names.PUBLISH_STATUS) == []


def test_a_completed_status_mark_processed_could_not_send_is_sent_by_the_status_activity(scheduler):
    f = all_steps_replied()
    f.processed({"owned": True, "statusSent": False})
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.PUBLISH_STATUS]
    assert json.loads(result.new_actions[0]["input"])["status"] == "Completed"
    f.h.activity_completed(names.PUBLISH_STATUS, None, at=f.h.now)
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "Processed"}


def processed_flow() -> Flow:
    """Every step done; mark_processed wrote Processed but its one try at Completed failed."""
    f = all_steps_replied()
    f.processed({"owned": True, "statusSent": False})
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
    sends = called(result, names.PUBLISH_STATUS)
    # Processing went with the first begin_step, Completed's first try with mark_processed;
    # then Completed until the delays run out
    assert len(sends) == len(FINAL_RETRY_DELAYS) + 1
    assert {s["status"] for s in sends} == {"Completed"}
    assert sum(FINAL_RETRY_DELAYS, timedelta()) > timedelta(hours=5)  # the final status outlasts a long outage


def test_a_processing_status_is_not_waited_for_the_first_step_begins_at_once(scheduler):
    """Finding 2: retrying Processing on durable timers (5 s, 30 s, 2 min) outlasted the start grace,
    so the supervisor expired the attempt again and again until Error. Now the first begin_step tries
    it once, after its write: the first step begins at once."""
    result = _loaded("submitter-7").run(scheduler)
    assert [a.get("functionName") for a in result.new_actions] == [names.BEGIN_STEP]
    assert result.new_action_types() == ["CallActivity"]  # no timer before the step either


def test_steps_done_by_an_earlier_attempt_are_not_run_again(scheduler):
    f = Flow(completed={"reserve-inventory": RESERVED})
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.BEGIN_STEP]
    begin = json.loads(result.new_actions[0]["input"])
    assert begin["request"]["step"] == "charge-payment"
    assert "completes" not in begin  # an earlier attempt's result is on the record already
    assert begin["queue"] == "payment-requests"


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


def test_a_begin_step_that_carries_a_result_and_fails_is_retried_with_the_same_result_and_request(scheduler):
    """The retry is the same fenced write (the previous result and this start) and the same send:
    the result is not lost with the failed try, and the request keeps its MessageId."""
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.h.activity_failed(names.BEGIN_STEP, "Cosmos DB 503 on replace", at=f.h.now)
    f.h.timer_fired(f.h.now + timedelta(seconds=2))
    result = f.run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.BEGIN_STEP]
    first, again = called(result, names.BEGIN_STEP)[1:]
    assert first == again
    assert again["completes"] == {"step": "reserve-inventory", "result": RESERVED}
    assert again["queue"] == "payment-requests"


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
    plan = {"order": ORDER, "completed": {}, "stepTimeoutSeconds": 60.0, "replyTo": reply_to}
    return History(ME, {"orderId": "o1", "attempt": 2, "plan": plan}, start=T0, name=names.SCHEDULER)


def _failed_at_the_first_step(reply_to: str | None) -> History:
    """Started (its plan with the record's ``replyTo``), the inventory agent refused, the order Failed."""
    h = _loaded(reply_to)
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=h.now)
    call = h.activity_scheduled(names.in_process_agent("inventory"))
    h.timer_created_not_fired(h.now + STEP)
    h.complete_activity(call, reply("reserve-inventory", outcome="failed", error="gone"), at=h.now)
    h.activity_completed(names.FAIL_ORDER, {"owned": True}, at=h.now)
    return h


def test_the_status_activity_gets_the_reply_queue_the_record_named(scheduler):
    result = _failed_at_the_first_step("submitter-7").run(scheduler)
    assert [a["functionName"] for a in result.new_actions] == [names.PUBLISH_STATUS]
    assert json.loads(result.new_actions[0]["input"]) == {
        "orderId": "o1",
        "status": "Failed",
        "attempt": 2,
        "replyTo": "submitter-7",
        "reason": "reserve-inventory: gone",
    }


def test_an_order_without_a_reply_queue_costs_no_status_activity(scheduler):
    result = _failed_at_the_first_step(None).run(scheduler)
    assert result.is_done
    assert result.new_actions == []
    assert called(result, names.PUBLISH_STATUS) == []
    # nor for Completed when mark_processed had nowhere to send it
    f = Flow(loaded=_loaded(None))
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.remote_reply(reply("arrange-shipment", result=SHIPPED))
    f.processed({"owned": True, "statusSent": False})
    result = f.run(scheduler)
    assert result.is_done
    assert called(result, names.PUBLISH_STATUS) == []


def test_a_step_an_earlier_attempt_left_at_its_fallback_resumes_there(scheduler):
    plan = {
        "order": ORDER,
        "completed": {"reserve-inventory": RESERVED},
        "inFlight": {"charge-payment": "payment-backup"},
        "stepTimeoutSeconds": 60.0,
        "replyTo": None,
    }
    h = History(ME, {"orderId": "o1", "attempt": 2, "plan": plan}, start=T0, name=names.SCHEDULER)
    result = h.run(scheduler)
    [begin] = result.new_actions
    assert json.loads(begin["input"])["agent"] == "payment-backup"
    assert json.loads(begin["input"])["queue"] == "payment-backup-requests"  # sent with the start
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=T0)
    result = h.run(scheduler)
    assert result.new_action_types() == ["CreateTimer"]  # waits for the fallback's reply


def test_fencing_lost_at_processed_ends_quietly_without_a_completed_status(scheduler):
    f = all_steps_replied()
    f.processed({"owned": False})
    result = f.run(scheduler)
    assert result.is_done
    assert result.output == {"result": "FencingLost", "at": "processed"}
    assert result.new_actions == []
    assert called(result, names.PUBLISH_STATUS) == []


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


def test_the_processed_hand_over_is_retried_as_long_as_a_final_status(scheduler):
    """Once ``Processed`` may have landed the record is terminal and no supervisor looks at it again:
    a ``mark_processed`` that keeps failing (its first try committed unanswered, the store then down)
    is retried on durable timers far past the 2 s and 10 s of other state writes, until it answers."""
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.remote_reply(reply("arrange-shipment", result=SHIPPED))
    f.h.activity_failing(names.MARK_PROCESSED, "Cosmos DB 503", HAND_OVER_RETRY_DELAYS[:3])
    result = f.run(scheduler)
    assert result.error is None
    assert result.new_action_types() == ["CreateTimer"]  # a fourth wait, then a fifth try
    fire_at = result.new_actions[0]["fireAt"]
    assert str(f.h.now + HAND_OVER_RETRY_DELAYS[3])[:19].replace(" ", "T") in str(fire_at)

    f.h.timer_fired(f.h.now + HAND_OVER_RETRY_DELAYS[3])
    f.processed({"owned": True, "statusSent": True})  # the hand-over, found done by this instance
    done = f.run(scheduler)
    assert done.is_done and done.output == {"result": "Processed"}


def test_an_in_process_agent_that_dropped_the_request_leaves_the_deadline_to_its_timer(scheduler):
    """The in-process agent answers None (it dropped a request past its deadline): the attempt waits for
    the deadline timer, which must not be cancelled first. Cancelled, it completed only if its
    ``TimerFired`` still came (Azure sends it; the runner, where a cancelled timer never fires, left the
    attempt Running for good)."""
    f = Flow()
    deadline = f.begin()
    call = f.h.activity_scheduled(names.in_process_agent("inventory"))
    timer = f.h.timer_created_not_fired(deadline)
    f.h.complete_activity(call, None, at=f.h.now + timedelta(seconds=1))

    result = f.run(scheduler)
    assert not result.is_done and result.new_actions == []
    assert [a["isCanceled"] for a in result.actions if a["type"] == "CreateTimer"] == [False]
    assert result.extension.open_tasks  # the timer: it decides

    f.h.fire_timer(timer, deadline)
    result = f.run(scheduler)
    assert result.output == {"result": "DeadlineExpired", "step": "reserve-inventory"}
    assert result.extension.reached_end and not result.extension.open_tasks


def test_a_processed_hand_over_that_fails_on_every_try_is_alerted_before_the_attempt_fails(scheduler):
    """Found by fuzzing (Cosmos 36 % unavailable and 8 % of writes losing their answer, seed 3755, ord-00079): a
    ``mark_processed`` try committed unanswered and every later try met a 503 for the six hours of
    ``HAND_OVER_RETRY_DELAYS``. The attempt failed silently: the record said ``Processed`` (terminal, no
    supervisor looks at it again) and nobody, submitter or operator, heard of the order again."""
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(reply("charge-payment", result=CHARGED))
    f.remote_reply(reply("arrange-shipment", result=SHIPPED))
    f.h.activity_failing(names.MARK_PROCESSED, "Cosmos DB 503 on read", HAND_OVER_RETRY_DELAYS)
    result = f.run(scheduler)
    assert result.error is None  # not failed yet: first the alert
    assert [a["functionName"] for a in result.new_actions] == [names.SEND_ALERT]
    alert = called(result, names.SEND_ALERT)[0]["alert"]
    assert (alert["kind"], alert["orderId"], alert["severity"]) == ("HandOverUnconfirmed", "o1", "error")
    assert alert["details"]["state"] == "Processed" and "Cosmos DB 503 on read" in alert["details"]["error"]
    assert alert["alertId"] == "alert:HandOverUnconfirmed:o1:Processed:2"

    f.h.activity_completed(names.SEND_ALERT, None, at=f.h.now)
    failed = f.run(scheduler)
    assert failed.error is not None and "Cosmos DB 503 on read" in failed.error  # the instance Failed, as before
    assert failed.new_actions == []


def test_an_attempt_started_with_deadline_at_begin_races_the_deadline_its_begin_step_wrote(scheduler):
    """Red team (clocks, ``tests/orchestrators/test_redteam_clocks_begin.py``): ``begin_step`` ran 90 s after the
    episode that scheduled it (a backlog); the step still gets its whole timeout from its write. The timer and the
    in-process agent's request use the deadline the activity answered, not the replay time plus the timeout."""
    f = Flow(loaded=started_attempt(ME, ORDER, 2, deadline_at_begin=True))
    written = T0 + timedelta(seconds=90) + STEP
    f.h.activity_completed(names.BEGIN_STEP, {"owned": True, "deadline": to_text(written)}, at=T0)
    result = f.run(scheduler)
    [begin] = called(result, names.BEGIN_STEP)
    assert begin["timeoutSeconds"] == STEP.total_seconds()
    assert begin["request"]["deadline"] == "2026-03-01T08:01:00.000000Z"  # the replay time's: the activity's floor
    [agent_call] = called(result, names.in_process_agent("inventory"))
    assert agent_call["deadline"] == "2026-03-01T08:02:30.000000Z"
    assert result.new_actions[1]["fireAt"] == "2026-03-01T08:02:30.000000Z"


def test_a_remote_step_of_a_deadline_at_begin_attempt_replays_with_the_written_deadline(scheduler):
    """The history such an attempt records (the timer at the deadline begin_step answered, the reply before it)
    replays to the next step's start, the result carried by it."""
    f = Flow(loaded=started_attempt(ME, ORDER, 2, completed={"reserve-inventory": RESERVED}, deadline_at_begin=True))
    written = T0 + timedelta(seconds=30) + STEP
    f.h.activity_completed(names.BEGIN_STEP, {"owned": True, "deadline": to_text(written)}, at=f.h.now)
    f.timer = f.h.timer_created_not_fired(written)
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED), at=f.h.now + timedelta(seconds=50))
    result = f.run(scheduler)
    assert result.error is None
    first, second = called(result, names.BEGIN_STEP)
    assert first["queue"] == "payment-requests" and first["timeoutSeconds"] == STEP.total_seconds()
    assert second["completes"] == {"step": "charge-payment", "result": CHARGED}
    assert second["request"]["step"] == "arrange-shipment"
