"""Red team: an ``AgentRequest`` on an agent's request queue whose ``idempotencyKey`` cannot be an HTTP header
value, through the real runtime (``RuntimeHarness``) and the production remote adapter (``HttpRemoteService``).

The key travels as the ``Idempotency-Key`` header of the agent's call. The contract took any text of 1 to 200
characters, and ``http.client`` refuses a header value holding a line break (``ValueError``) or a character
outside Latin-1 (``UnicodeEncodeError``) when the request is built, before anything is sent. Neither is a
``RemoteError``: it escaped ``run_agent_request`` and the trigger, the host abandoned the message, and every
redelivery failed the same way until Service Bus dead-lettered it ``MaxDeliveryCountExceeded``, no reason given.
The app's own keys (``<orderId>:<step>``, ``...:undo``) are visible ASCII, which is now what the contract takes:
any other is dead-lettered ``InvalidFields`` on its first delivery, no call made."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest

from adapters.remote.http_service import HttpRemoteService
from domain.workflow import agent, request_queues
from tests.runtime.harness import RuntimeHarness

pytestmark = pytest.mark.cosmos


def _request(key: str) -> bytes:
    return json.dumps(
        {
            "type": "AgentRequest",
            "schemaVersion": 1,
            "requestId": "ord-k1:1:charge-payment:payment",
            "instanceId": "ord-k1:1",
            "orderId": "ord-k1",
            "step": "charge-payment",
            "action": "do",
            "attempt": 1,
            "deadline": "2026-05-01T09:05:00Z",
            "idempotencyKey": key,
            "payload": {},
        }
    ).encode()


@pytest.fixture
def harness(cosmos_db) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    # the production adapter; nothing listens on the discard port (a call that is sent is refused at once)
    made.change_context(remote={agent("payment").service: HttpRemoteService("http://127.0.0.1:9")})
    yield made
    made.close()


KEYS = {
    "CR LF and a forged header": "ord-k1:charge-payment\r\nX-Fencing-Token: 999",
    "a lone LF": "ord-k1:charge-payment\n",
    "an emoji (not Latin-1)": "ord-k1:\U0001f600",
    "CJK (not Latin-1)": "\u6ce8\u6587",
}


@pytest.mark.parametrize("case", sorted(KEYS))
def test_an_idempotency_key_that_cannot_be_a_header_is_dead_lettered_with_a_reason(harness, case):
    queue = request_queues()["payment"]
    harness.send(queue, _request(KEYS[case]), "bad-key")

    def gone() -> bool:
        dead = any(d.message_id == "bad-key" for d in harness.broker.dead_letters(queue))
        return dead or harness.broker.counters(queue).completed > 0

    harness.host.run_until(harness.clock.now() + timedelta(minutes=15), stop=gone)
    [letter] = [d for d in harness.broker.dead_letters(queue) if d.message_id == "bad-key"]
    assert (letter.reason, letter.delivery_count) == ("InvalidFields", 1), (
        letter.reason,
        letter.delivery_count,
        letter.description,
    )
    assert "idempotencyKey" in (letter.description or "")


def _with(**fields: object) -> bytes:
    body = json.loads(_request("ord-k1:charge-payment"))
    body.update(fields)
    return json.dumps(body).encode()


TEXT_CASES = {
    "requestId holding a lone surrogate": _with(requestId="ord-k1:1:charge-payment:payment\udc80"),
    "action holding a lone surrogate": _with(action="\udc80"),
    "requestId holding a control character": _with(requestId="ord-k1:1:charge-payment:payment\x1b[2J"),
}


@pytest.mark.parametrize("case", sorted(TEXT_CASES))
def test_a_request_whose_text_no_reply_can_carry_is_settled_on_its_first_delivery(harness, case):
    queue = request_queues()["payment"]
    harness.send(queue, TEXT_CASES[case], "odd-text")

    def gone() -> bool:
        dead = any(d.message_id == "odd-text" for d in harness.broker.dead_letters(queue))
        return dead or harness.broker.counters(queue).completed > 0

    harness.host.run_until(harness.clock.now() + timedelta(minutes=15), stop=gone)
    dead = [d for d in harness.broker.dead_letters(queue) if d.message_id == "odd-text"]
    assert [(d.reason, d.delivery_count) for d in dead if d.reason == "MaxDeliveryCountExceeded"] == [], dead
