"""What ``contracts.parsing.parse`` makes of agent requests and replies with fields that must not get
through: each is an ``InvalidMessage`` (a dead-letter reason and a description naming the field),
never another exception."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.messages import AgentReply, AgentRequest, OwnMessage
from contracts.parsing import InvalidMessage, parse


def _request(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "AgentRequest",
        "schemaVersion": 1,
        "requestId": "o1:1:charge-payment:payment",
        "instanceId": "o1:1",
        "orderId": "o1",
        "step": "charge-payment",
        "attempt": 1,
        "deadline": "2026-05-01T09:05:00Z",
        "idempotencyKey": "o1:charge-payment",
        "payload": {},
    }
    return body | overrides


def _reply(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "AgentReply",
        "schemaVersion": 1,
        "requestId": "o1:1:charge-payment:payment",
        "instanceId": "o1:1",
        "orderId": "o1",
        "step": "charge-payment",
        "outcome": "succeeded",
    }
    return body | overrides


ACCEPTED: dict[str, type[OwnMessage]] = {"AgentRequest": AgentRequest, "AgentReply": AgentReply}


def _refused(body: dict[str, Any] | str) -> InvalidMessage:
    text = body if isinstance(body, str) else json.dumps(body)
    with pytest.raises(InvalidMessage) as caught:
        parse(text, ACCEPTED)
    return caught.value


def test_the_valid_ones_parse():
    assert parse(json.dumps(_request(instanceId="o1:compensate:4")), {"AgentRequest": AgentRequest})
    assert parse(json.dumps(_reply()), {"AgentReply": AgentReply}).instance_id == "o1:1"


@pytest.mark.parametrize("make", [_request, _reply])
@pytest.mark.parametrize("instance", ["o1:1/terminate?reason=x&x=", ".", "%2F", "o1:0", "x", "o1:1#"])
def test_an_instance_id_the_app_does_not_build_is_invalid_fields(make, instance):
    bad = _refused(make(instanceId=instance))
    assert bad.reason == "InvalidFields" and "instanceId" in bad.description, bad


@pytest.mark.parametrize("make", [_request, _reply])
def test_an_instance_of_another_order_is_invalid_fields(make):
    bad = _refused(make(instanceId="o2:1"))
    assert bad.reason == "InvalidFields" and "instanceId" in bad.description and "'o2:1'" in bad.description, bad


@pytest.mark.parametrize(
    ("deadline", "word"),
    [
        ("0001-01-01T00:00:00+01:00", "out of range"),
        ("9999-12-31T23:59:59-01:00", "out of range"),
        ("0500-01-01T00:00:00Z", "out of range"),
        ("2026-05-01T09:05:00", "offset"),
        # a JSON number: pydantic read it as Unix seconds or milliseconds, past the years the app writes
        (253402300799999, "offset"),
        (-62135596800000, "offset"),
        (1777626300, "offset"),
    ],
)
def test_a_deadline_out_of_range_is_invalid_fields(deadline, word):
    bad = _refused(_request(deadline=deadline))
    assert bad.reason == "InvalidFields" and "deadline" in bad.description and word in bad.description, bad


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (json.dumps(_request()).replace('"attempt": 1', '"attempt": ' + "9" * 4400), "attempt"),
        (json.dumps(_request(attempt=10**9)), "attempt"),
        (json.dumps(_request(payload={"n": 0})).replace('"n": 0', '"n": ' + "9" * 4400), "payload.n"),
        (json.dumps(_reply(result={"a": [0]})).replace("[0]", "[1e400]"), "result.a.0"),
    ],
)
def test_a_number_too_large_names_its_field(text, field):
    bad = _refused(text)
    assert bad.reason == "InvalidFields" and f"'{field}'" in bad.description, bad
