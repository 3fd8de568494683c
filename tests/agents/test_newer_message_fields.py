"""The app's own messages to itself (``AgentRequest`` on a request queue and as an activity input, ``AgentReply``
on ``agent-replies``, an ``OperatorAlert`` handed to the alert courier) as a newer version writes them, read by
this one after a rollback: a field this version does not know is ignored, not a dead-letter (``InvalidFields``)
or a failed activity that costs the order a step deadline and a counted retry. A field an older reader must not
ignore comes with a new ``schemaVersion``, which it refuses. The ``orders`` queue, whose senders are outside the
app, still refuses an unknown field (``tests/submission/corpus.py``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.clock import ManualClock
from contracts.activities import SendAgentRequestInput, SendAlertInput
from contracts.messages import AgentRequest, OrderSubmitted
from contracts.names import AGENT_REPLIES_QUEUE, AGENT_REPLY_EVENT, OPERATOR_ALERTS_QUEUE
from contracts.parsing import InvalidMessage, parse
from dependencies import use_context
from notifications.alerts import OwedAlert, build_alert, send_owed_alert
from tests.agents.support import START, make_context, make_request
from tests.agents.test_reply_relay import REPLY, FakeDurableClient, relay
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingSender

NEWER = {"futureHint": {"by": "v9"}, "futureFlag": True}


def _with_newer_fields(body: str) -> str:
    return json.dumps({**json.loads(body), **NEWER})


def test_an_agent_request_with_a_newer_field_is_served(functions):
    sender = RecordingSender()
    use_context(make_context(ManualClock(START), sender=sender))
    try:
        request = make_request()
        actions = RecordingActions()
        body = _with_newer_fields(request.to_json())
        functions["agent_payment"].func(message=FakeReceivedMessage.of(body), message_actions=actions)
    finally:
        use_context(None)
    assert actions.only == ("complete", {})
    [reply] = [json.loads(b) if isinstance(b, str) else b for b in sender.bodies(AGENT_REPLIES_QUEUE)]
    assert (reply["requestId"], reply["outcome"]) == (request.request_id, "succeeded")


def test_an_in_process_agent_s_input_with_a_newer_field_is_served(functions):
    use_context(make_context(ManualClock(START)))
    try:
        request = make_request("reserve-inventory")
        data = {**request.model_dump(mode="json", by_alias=True), **NEWER}
        output = functions["agent_inventory"].func(request=data)
    finally:
        use_context(None)
    assert (output["requestId"], output["outcome"]) == (request.request_id, "succeeded")


def test_an_activity_input_s_request_with_a_newer_field_is_read():
    request = make_request()
    data = SendAgentRequestInput(queue="payment-requests", request=request).to_json()
    data["request"] = {**data["request"], **NEWER}
    assert SendAgentRequestInput.from_json(data).request == request


def test_an_agent_reply_with_a_newer_field_is_raised_without_it(functions):
    client = FakeDurableClient({"order-1:2": "Running"})
    actions = relay(functions, client, _with_newer_fields(REPLY.to_json()))
    assert actions.only == ("complete", {})
    [(instance, event, data)] = client.raised
    assert (instance, event) == ("order-1:2", AGENT_REPLY_EVENT)
    assert data == REPLY.model_dump(mode="json", by_alias=True)


def test_a_newer_schema_version_is_still_refused():
    body = json.loads(make_request().to_json())
    with pytest.raises(InvalidMessage) as refused:
        parse(json.dumps({**body, "schemaVersion": 2}), {"AgentRequest": AgentRequest})
    assert refused.value.reason == "UnsupportedSchemaVersion"


def test_an_order_with_an_unknown_field_is_still_refused():
    order: dict[str, Any] = {
        "type": "OrderSubmitted",
        "schemaVersion": 1,
        "orderId": "o1",
        "customerId": "c1",
        "lines": [{"sku": "SKU-1", "quantity": 1, "unitPriceCents": 100}],
        "currency": "EUR",
        "shipTo": "somewhere",
    }
    assert parse(json.dumps(order), {"OrderSubmitted": OrderSubmitted}).order_id == "o1"
    with pytest.raises(InvalidMessage) as refused:
        parse(json.dumps({**order, **NEWER}), {"OrderSubmitted": OrderSubmitted})
    assert refused.value.reason == "InvalidFields"


def test_an_owed_alert_with_a_newer_field_is_sent_by_the_courier():
    """The alert courier's activity input holds the alert as a newer version built it: sent, not failed on every
    try for about six hours and given up ``AlertUndelivered``."""
    at = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    given = OwedAlert(build_alert("OrderRejected", "order p1 rejected", at, "p1", "warning", 42, {})).courier_input()
    sender = RecordingSender()
    send_owed_alert(sender, SendAlertInput.from_json({**given, "alert": {**given["alert"], **NEWER}}))
    assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == ["alert:OrderRejected:p1:42"]
