"""The scheduler's prepaid payment step, replayed by the Durable SDK's own engine over synthetic
histories: the notification already on the record, the PaymentNotified event winning, the deadline
winning, and an ordinary order that never waits. The capture waits for the payment, so a prepaid
payment step's ``begin_step`` sends nothing (no ``queue``) and the capture request goes out with
``send_agent_request``; an ordinary order's charge goes out with its ``begin_step``."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT, PAYMENT_NOTIFIED_EVENT
from orchestrators import names
from tests.durable_history import History, ReplayResult
from tests.orchestrators.support import STEP, T0, sample_order, started_attempt

ME = "p1:1"
PAYMENT = {
    "notificationId": "n-1",
    "amountCents": 1000,
    "currency": "EUR",
    "providerReference": "psp-n-1",
    "receivedAt": "2026-03-01T07:59:00.000000Z",
    "sequenceNumber": 7,
}


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


def at_payment_step(began: dict[str, Any], prepaid: bool = True) -> History:
    """History up to BEGIN_STEP of charge-payment (inventory was reserved by an earlier attempt)."""
    completed = {"reserve-inventory": {"reservationId": "R-1"}}
    h = started_attempt(ME, sample_order("p1", prepaid=prepaid), 1, completed=completed)
    h.activity_completed(names.BEGIN_STEP, began, at=T0)
    return h


def sent_request(result: ReplayResult) -> dict[str, Any]:
    [send] = [a for a in result.new_actions if a.get("functionName") == names.SEND_AGENT_REQUEST]
    sent = json.loads(send["input"])
    assert sent["queue"] == "payment-requests"
    request: dict[str, Any] = sent["request"]
    return request


def began(result: ReplayResult) -> dict[str, Any]:
    """The payment step's begin_step input."""
    [begin] = [a for a in result.actions if a.get("functionName") == names.BEGIN_STEP]
    data: dict[str, Any] = json.loads(begin["input"])
    return data


def test_a_prepaid_payment_step_begins_without_sending_anything(scheduler):
    result = at_payment_step({"owned": True}).run(scheduler)
    begin = began(result)
    assert begin["request"]["step"] == "charge-payment"
    assert "queue" not in begin  # the capture needs the notification first
    assert "completes" not in begin  # the reservation was an earlier attempt's: on the record already


def test_a_prepaid_payment_step_after_a_reservation_in_the_same_attempt_records_it_and_still_sends_nothing(
    scheduler,
):
    h = started_attempt(ME, sample_order("p1", prepaid=True), 1)
    h.activity_completed(names.BEGIN_STEP, {"owned": True}, at=T0)
    call = h.activity_scheduled(names.in_process_agent("inventory"))
    h.timer_created_not_fired(T0 + STEP)
    reserved = {
        "requestId": f"{ME}:reserve-inventory:inventory",
        "instanceId": ME,
        "orderId": "p1",
        "step": "reserve-inventory",
        "outcome": "succeeded",
        "transient": False,
        "result": {"reservationId": "R-1"},
        "error": None,
    }
    h.complete_activity(call, reserved, at=T0 + timedelta(seconds=1))
    result = h.run(scheduler)
    [begin] = [json.loads(a["input"]) for a in result.new_actions]
    assert begin["request"]["step"] == "charge-payment"
    assert begin["completes"] == {"step": "reserve-inventory", "result": {"reservationId": "R-1"}}
    assert "queue" not in begin


def test_a_payment_already_on_the_record_is_captured_without_waiting(scheduler):
    result = at_payment_step({"owned": True, "payment": PAYMENT}).run(scheduler)
    assert "WaitForExternalEvent" not in result.action_types()
    request = sent_request(result)
    assert request["action"] == "capture"
    assert request["payload"]["providerReference"] == "psp-n-1"
    assert request["payload"]["amountCents"] == 1000
    assert request["idempotencyKey"] == "p1:charge-payment"


def test_without_a_payment_the_step_waits_for_the_event_or_its_deadline(scheduler):
    result = at_payment_step({"owned": True}).run(scheduler)
    assert result.new_action_types() == ["CreateTimer"]
    assert result.new_actions[0]["fireAt"] == "2026-03-01T08:01:00.000000Z"  # the step's deadline
    waits = [a for a in result.actions if a["type"] == "WaitForExternalEvent"]
    assert [w.get("externalEventName") or w.get("ExternalEventName") for w in waits] == [PAYMENT_NOTIFIED_EVENT]
    assert not result.is_done


def test_the_payment_event_wins_then_the_capture_is_requested_before_the_same_deadline(scheduler):
    h = at_payment_step({"owned": True})
    h.timer_created_not_fired(T0 + STEP)
    h.event_raised(PAYMENT_NOTIFIED_EVENT, PAYMENT, at=T0 + timedelta(seconds=20))
    result = h.run(scheduler)
    request = sent_request(result)
    assert request["action"] == "capture"
    assert request["payload"]["notificationId"] == "n-1"
    assert request["deadline"] == "2026-03-01T08:01:00.000000Z"  # waiting does not extend the step
    h.activity_completed(names.SEND_AGENT_REQUEST, None, at=h.now)
    after_send = h.run(scheduler)
    timers = [a for a in after_send.new_actions if a["type"] == "CreateTimer"]
    assert [t["fireAt"] for t in timers] == ["2026-03-01T08:01:00.000000Z"]  # the reply races the same deadline
    assert after_send.actions[-2]["externalEventName"] == AGENT_REPLY_EVENT


def test_the_deadline_winning_ends_the_attempt_without_touching_the_record(scheduler):
    h = at_payment_step({"owned": True})
    h.timer_fired(T0 + STEP)
    result = h.run(scheduler)
    assert result.is_done
    assert result.output == {
        "result": "DeadlineExpired",
        "step": "charge-payment",
        "waitingFor": "PaymentNotification",
    }
    assert result.new_actions == []  # no activity: the supervisor recovers it


def test_an_ordinary_order_charges_and_never_waits_for_a_payment(scheduler):
    result = at_payment_step({"owned": True}, prepaid=False).run(scheduler)
    assert [w.get("externalEventName") for w in result.actions if w["type"] == "WaitForExternalEvent"] == [
        AGENT_REPLY_EVENT  # the agent's reply, never a payment
    ]
    begin = began(result)
    assert begin["queue"] == "payment-requests"  # the charge went out with the step's start
    assert begin["request"]["action"] == "do"
    assert "providerReference" not in begin["request"]["payload"]
    assert result.new_action_types() == ["CreateTimer"]  # and no send_agent_request after it
    assert not any(a.get("functionName") == names.SEND_AGENT_REQUEST for a in result.actions)
