"""The 64-bit rule belongs to typed integer fields; free-form JSON values the app passes through
(``result``, ``payload``, ``details``) keep any integer within the digit guard, exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from contracts.messages import AgentReply, AgentRequest, OperatorAlert, StatusUpdate
from contracts.parsing import MAX_INT_DIGITS, InvalidMessage, parse

BIG = 2**64 - 1
AT = datetime(2026, 5, 1, 9, tzinfo=UTC)


def _request(payload: dict[str, Any]) -> AgentRequest:
    return AgentRequest(
        request_id="r-1",
        instance_id="o-1:1",
        order_id="o-1",
        step="charge-payment",
        action="undo",
        attempt=1,
        deadline=AT,
        idempotency_key="o-1:charge-payment:undo",
        payload=payload,
    )


def _reply(result: dict[str, Any]) -> AgentReply:
    return AgentReply(
        request_id="r-1", instance_id="o-1:1", order_id="o-1", step="charge-payment", outcome="succeeded", result=result
    )


@pytest.mark.parametrize("number", [BIG, -(2**70), 10**4299, -(10**4299)])
def test_free_form_integers_round_trip_exactly(number: int) -> None:
    reply = parse(_reply({"authorization": number, "nested": [{"n": number}]}).to_json(), {"AgentReply": AgentReply})
    assert reply.result == {"authorization": number, "nested": [{"n": number}]}
    undo = parse(_request({"charge": {"authorization": number}}).to_json(), {"AgentRequest": AgentRequest})
    assert undo.payload == {"charge": {"authorization": number}}
    alert = OperatorAlert(alert_id="a", kind="K", severity="error", summary="s", details={"n": number}, at=AT)
    assert parse(alert.to_json(), {"OperatorAlert": OperatorAlert}).details == {"n": number}


def test_the_digit_guard_still_holds_in_free_form_values() -> None:
    text = _reply({"n": 0}).to_json().replace('"n":0', '"n":' + "9" * (MAX_INT_DIGITS + 1))
    with pytest.raises(InvalidMessage) as caught:
        parse(text, {"AgentReply": AgentReply})
    assert caught.value.reason == "InvalidFields" and "'result.n'" in caught.value.description


@pytest.mark.parametrize("attempt", [2**63, 2**64, 10**30])
def test_typed_integers_keep_their_bound(attempt: int) -> None:
    body = json.loads(_request({}).to_json())
    with pytest.raises(InvalidMessage) as caught:
        parse(json.dumps({**body, "attempt": attempt}), {"AgentRequest": AgentRequest})
    assert caught.value.reason == "InvalidFields" and "attempt" in caught.value.description
    status = json.loads(StatusUpdate(order_id="o-1", status="Processing", attempt=1, at=AT).to_json())
    with pytest.raises(InvalidMessage) as caught:
        parse(json.dumps({**status, "attempt": attempt}), {"StatusUpdate": StatusUpdate})
    assert "attempt" in caught.value.description
