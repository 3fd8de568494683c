"""A lone surrogate anywhere in a body (a value or a key, at any depth, in a typed field or a free-form one) is
``InvalidFields`` naming where it is; in JSON from outside the app that it would carry (a service's answer:
``read_outside_json``), a ``ValueError`` naming where. tests/runtime/test_redteam_lone_surrogate_values.py shows
what it did before, past where it came in."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.messages import AgentReply, AgentRequest, OperatorAlert
from contracts.parsing import InvalidMessage, parse, read_outside_json
from tests.contracts.test_hostile_fields import _reply, _request

ACCEPTED: dict[str, Any] = {"AgentRequest": AgentRequest, "AgentReply": AgentReply, "OperatorAlert": OperatorAlert}
REQUEST = _request()
REPLY = _reply()
ALERT = {
    "type": "OperatorAlert",
    "schemaVersion": 1,
    "alertId": "a-1",
    "kind": "K",
    "severity": "warning",
    "summary": "s",
    "at": "2026-05-01T09:05:00Z",
}

CASES = {
    "a reply's result": (REPLY | {"result": {"chargeId": "c\udc80"}}, "result.chargeId"),
    "a key in a reply's result": (REPLY | {"result": {"ok": {"\ud800": 1}}}, "result.ok.\ufffd"),
    "an item of a list in a reply's result": (REPLY | {"result": {"refs": [1, "\udfff"]}}, "result.refs.1"),
    "a reply's error": (REPLY | {"outcome": "failed", "error": "no\udc80"}, "error"),
    "a request's payload": (REQUEST | {"payload": {"note": ["\ud83d"]}}, "payload.note.0"),
    "an alert's details": (ALERT | {"details": {"why": "\udc80"}}, "details.why"),
    "an alert's orderId": (ALERT | {"orderId": "o\udc80"}, "orderId"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_lone_surrogate_anywhere_is_invalid_fields_naming_where(case: str) -> None:
    body, where = CASES[case]
    with pytest.raises(InvalidMessage) as caught:
        parse(json.dumps(body), ACCEPTED)
    assert caught.value.reason == "InvalidFields"
    assert f"field '{where}'" in caught.value.description and "surrogate" in caught.value.description
    caught.value.description.encode("utf-8")  # the description itself is carriable


def test_an_escaped_surrogate_pair_is_text_and_kept() -> None:
    reply = parse(json.dumps(REPLY | {"result": {"\U0001f600": "\U0001f600"}}), ACCEPTED)
    assert isinstance(reply, AgentReply) and reply.result == {"\U0001f600": "\U0001f600"}
    assert read_outside_json('{"e": "\\ud83d\\ude00"}') == {"e": "\U0001f600"}


@pytest.mark.parametrize(
    ("text", "where"),
    [('{"chargeId": "\\udc80"}', "'chargeId'"), ('{"\\udc80": 1}', "'\ufffd'"), ('"\\udc80"', "the body")],
)
def test_a_service_answer_holding_a_lone_surrogate_cannot_be_carried(text: str, where: str) -> None:
    with pytest.raises(ValueError, match="lone surrogate") as caught:
        read_outside_json(text)
    assert where in str(caught.value)
    str(caught.value).encode("utf-8")  # carried on in the RemoteError, and from there in the agent's reply
