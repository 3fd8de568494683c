"""Red team: an ``AgentReply`` external event whose data is not a reply (raised to the instance from outside the
relay: the Durable HTTP API's ``raiseEvent`` takes any JSON). The relay raises only replies the contract read
(``order_agents/reply_relay.py``). FINDING: data that is not an object (a string, null, a list), or this
request's id without an ``outcome`` (or with a ``result`` that is not an object: AttributeError at the step's
write), raised ``ProtocolError`` in ``invoke_agent`` (``reply_request_id`` /
``parse_agent_answer``): the orchestration failed and the supervisor retried the order, an attempt lost to a
forged event. The review wait skips a malformed answer and waits on (``orchestrators/scheduler.py``); the reply
wait now does the same, as it skips a reply to another request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.names import AGENT_REPLY_EVENT
from orchestrators import names
from tests.orchestrators.test_scheduler_replay import CHARGED, RESERVED, Flow, reply


@pytest.fixture(scope="module")
def scheduler(functions: dict[str, Any]) -> Any:
    return functions[names.SCHEDULER].func


EVENTS: dict[str, Any] = {
    "a string": "garbage",
    "null": None,
    "a list": [reply("charge-payment", result=CHARGED)],
    "an object without requestId": {"outcome": "succeeded"},
    "requestId a list": {"requestId": ["x"], "outcome": "succeeded"},
    "this request's id without an outcome": {"requestId": reply("charge-payment")["requestId"]},
    "this request's id, result a string": {**reply("charge-payment"), "result": "garbage"},
    "this request's id, result a list": {**reply("charge-payment"), "result": [1]},
    "this request's id, outcome neither": {**reply("charge-payment", result=CHARGED), "outcome": "maybe"},
    "this request's id, error an object": {**reply("charge-payment", outcome="failed"), "error": {"a": 1}},
}


@pytest.mark.parametrize("case", sorted(EVENTS))
def test_a_malformed_reply_event_before_the_real_reply_does_not_end_the_attempt(scheduler: Any, case: str) -> None:
    f = Flow()
    f.in_process_reply(reply("reserve-inventory", result=RESERVED))
    f.remote_reply(EVENTS[case])  # the charge's wait gets the malformed event first
    f.h.event_raised(AGENT_REPLY_EVENT, reply("charge-payment", result=CHARGED))

    result = f.run(scheduler)

    assert result.error is None, result.error
    begun = [json.loads(a["input"]) for a in result.new_actions if a.get("functionName") == names.BEGIN_STEP]
    # the real reply taken: the shipment begins, with the charge's result
    assert [(b["request"]["step"], b["completes"]["result"]) for b in begun] == [("arrange-shipment", CHARGED)]


PAYMENT_EVENTS: dict[str, Any] = {
    "a string": "garbage",
    "null": None,  # taken as the deadline: the attempt ended at once, DeadlineExpired
    "an object without notificationId": {"providerReference": "psp-1"},
}


@pytest.mark.parametrize("case", sorted(PAYMENT_EVENTS))
def test_a_malformed_payment_notified_event_before_the_real_one_does_not_end_the_attempt(
    scheduler: Any, case: str
) -> None:
    """The same for a prepaid order's ``PaymentNotified`` wait (``orchestrators/payment_wait.py``): it took the
    first event whatever it held: ``capture_request`` failed on it (TypeError, KeyError), the attempt failed, and
    null was read as the deadline come (``DeadlineExpired``).
    Intake raises only notifications the contract read and the record took (``submission/payments.py``)."""
    from contracts.names import PAYMENT_NOTIFIED_EVENT
    from tests.orchestrators.early_histories import LATER, PAYMENT
    from tests.orchestrators.support import sample_order, started_attempt

    completed = {"reserve-inventory": {"reservationId": "R-1"}}
    h = started_attempt("p1:1", sample_order("p1", prepaid=True), 1, completed=completed, timer_per_round=False)
    begin = h.activity_scheduled(names.BEGIN_STEP)
    h.event_raised(PAYMENT_NOTIFIED_EVENT, PAYMENT_EVENTS[case], at=h.now + LATER)
    h.event_raised(PAYMENT_NOTIFIED_EVENT, PAYMENT, at=h.now + LATER)
    h.complete_activity(begin, {"owned": True}, at=h.now + LATER)

    result = h.run(scheduler)

    assert result.error is None, result.error
    sent = [json.loads(a["input"]) for a in result.new_actions if a.get("functionName") == names.SEND_AGENT_REQUEST]
    assert [(s["request"]["action"], s["request"]["payload"]["notificationId"]) for s in sent] == [("capture", "n-1")]
