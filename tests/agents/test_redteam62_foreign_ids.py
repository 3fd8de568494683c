"""Red team (hostile62): an agent request or reply whose ids name another request than its own. The contract checked
that ``instanceId`` is one of ``orderId``'s, not that ``requestId`` is one of that instance's (for its step), nor that a
request's ``idempotencyKey`` is its order's. So:

- a reply naming another attempt's request (an old attempt's, resent) or another order's, under an instance of this
  order, was raised to the instance, which skipped it unheard: completed, no dead letter, no reason;
- a request carrying another order's key was run: the service deduplicates on the key, so it answered that order's
  call (its charge) as this order's, and the reply took it onto this order's record.

Both are now dead-lettered ``InvalidFields`` where they come off their queue, naming the field (``foreign_ids``), the
service never called, nothing raised. The app's own ids (a step's first try, a retry's numbered id, an undo's)
pass as before. The requests' side is in tests/agents/test_service_bus_agent.py (its fixtures)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.messages import AgentReply
from tests.agents.test_reply_relay import REPLY, FakeDurableClient, relay


@pytest.mark.parametrize(
    "request_id",
    ["order-1:1:charge-payment:payment", "order-9:2:charge-payment:payment", "order-1:2:arrange-shipment:shipping"],
)
def test_a_reply_naming_another_request_is_dead_lettered_not_raised(functions: Any, request_id: str) -> None:
    client = FakeDurableClient({"order-1:2": "Running"})
    body = {**REPLY.model_dump(mode="json", by_alias=True), "requestId": request_id}  # REPLY is order-1:2's
    kind, details = relay(functions, client, body).only
    assert (kind, details["reason"]) == ("deadletter", "InvalidFields")  # before: raised, skipped unheard
    assert "field 'requestId'" in details["description"]
    assert client.raised == []


def test_a_reply_to_its_own_request_or_a_retry_of_it_is_raised(functions: Any) -> None:
    client = FakeDurableClient({"order-1:2": "Running"})
    for request_id in (REPLY.request_id, f"{REPLY.request_id}:2"):
        reply = AgentReply.model_validate({**REPLY.model_dump(mode="json", by_alias=True), "requestId": request_id})
        assert relay(functions, client, reply.to_json()).only == ("complete", {})
    assert len(client.raised) == 2


# Session 63: a reply's identifiers are one line; one with a line break is dead-lettered naming the field, not raised.
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"requestId": "order-1:2:charge-payment:payment\nFAKE: order-1 refunded"}, "requestId"),
        ({"step": "charge-payment\t", "requestId": "order-1:2:charge-payment\t:payment"}, "step"),
    ],
)
def test_a_reply_whose_identifier_has_a_line_break_is_dead_lettered_not_raised(
    functions: Any, changes: dict[str, Any], field: str
) -> None:
    client = FakeDurableClient({"order-1:2": "Running"})
    kind, details = relay(functions, client, {**REPLY.model_dump(mode="json", by_alias=True), **changes}).only
    assert (kind, details["reason"]) == ("deadletter", "InvalidFields")
    assert f"field '{field}'" in details["description"] and "one line" in details["description"], details
    assert client.raised == []
