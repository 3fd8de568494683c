"""Red team: hostile message bodies through the real runtime (``RuntimeHarness``). The guarantee: bad
input gets a dead-letter with a reason on its first delivery, never an exception that burns the
delivery count until Service Bus dead-letters it as ``MaxDeliveryCountExceeded`` with no word of why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest

from contracts.names import AGENT_REPLIES_QUEUE, ORDERS_QUEUE
from domain.workflow import request_queues
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

# An integer literal of more than 4,300 digits: ``json.loads`` raises a plain ValueError ("Exceeds the
# limit (4300 digits) for integer string conversion"), not JSONDecodeError. 4,401 bytes, far under 64 KiB.
HUGE_INT = "9" * 4400


def _request(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "type": "AgentRequest",
        "schemaVersion": 1,
        "requestId": "ord-h1:1:charge-payment:payment",
        "instanceId": "ord-h1:1",
        "orderId": "ord-h1",
        "step": "charge-payment",
        "action": "do",
        "attempt": 1,
        "deadline": "2026-05-01T09:05:00Z",
        "idempotencyKey": "ord-h1:charge-payment",
        "payload": {},
    }
    body.update(overrides)
    return body


def _reply(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "type": "AgentReply",
        "schemaVersion": 1,
        "requestId": "ord-h1:1:charge-payment:payment",
        "instanceId": "ord-h1:1",
        "orderId": "ord-h1",
        "step": "charge-payment",
        "outcome": "succeeded",
    }
    body.update(overrides)
    return body


def _with_huge_int(body: dict[str, object], field: str) -> bytes:
    text = json.dumps({**body, field: 0})
    return text.replace(f'"{field}": 0', f'"{field}": {HUGE_INT}').encode()


@pytest.fixture
def harness(cosmos_db) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


def _settle(harness: RuntimeHarness, queue: str, message_id: str) -> None:
    """Runs until the message left its queue (settled, or dead-lettered by Service Bus after
    ``QUEUE_MAX_DELIVERY_COUNT`` deliveries whose locks ran out), at most 15 simulated minutes."""

    def gone() -> bool:
        dead = any(d.message_id == message_id for d in harness.broker.dead_letters(queue))
        return dead or harness.broker.counters(queue).completed > 0

    harness.host.run_until(harness.clock.now() + timedelta(minutes=15), stop=gone)


def _assert_dead_lettered_once_with_reason(harness: RuntimeHarness, queue: str, message_id: str) -> None:
    _settle(harness, queue, message_id)
    dead = {d.message_id: d for d in harness.broker.dead_letters(queue)}
    letter = dead.get(message_id)
    assert letter is not None, f"{message_id} was not dead-lettered"
    assert letter.reason not in (None, "MaxDeliveryCountExceeded"), (
        f"{message_id}: dead-lettered as {letter.reason!r} after {letter.delivery_count} deliveries, "
        f"with no reason from the app ({letter.description!r})"
    )
    assert letter.delivery_count == 1, (message_id, letter.reason, letter.delivery_count)
    assert letter.description, message_id


ORDERS_CASES = {
    "amountCents of 4,400 digits": _with_huge_int(
        {
            "type": "PaymentNotification",
            "schemaVersion": 1,
            "notificationId": "n-1",
            "orderId": "ord-h1",
            "currency": "EUR",
            "providerReference": "p-1",
        },
        "amountCents",
    ),
    "unitPriceCents of 4,400 digits": json.dumps(order(orderId="ord-h2"))
    .replace('"unitPriceCents": 1250', f'"unitPriceCents": {HUGE_INT}')
    .encode(),
    "unknown field holding 4,400 digits": _with_huge_int(order(orderId="ord-h3"), "note"),
}


@pytest.mark.parametrize("case", sorted(ORDERS_CASES))
def test_an_orders_message_with_a_huge_integer_literal_is_dead_lettered_with_a_reason(harness, cosmos_db, case):
    harness.send(ORDERS_QUEUE, ORDERS_CASES[case], "huge-int")
    _assert_dead_lettered_once_with_reason(harness, ORDERS_QUEUE, "huge-int")
    assert list(cosmos_db.get_container_client("state").read_all_items()) == []


AGENT_CASES = {
    "attempt of 4,400 digits": _with_huge_int(_request(), "attempt"),
    "deadline year 1 with a positive offset": json.dumps(_request(deadline="0001-01-01T00:00:00+01:00")).encode(),
    "deadline year 9999 with a negative offset": json.dumps(_request(deadline="9999-12-31T23:59:59-01:00")).encode(),
}


@pytest.mark.parametrize("case", sorted(AGENT_CASES))
def test_an_agent_request_whose_number_or_deadline_overflows_is_dead_lettered_with_a_reason(harness, case):
    queue = request_queues()["payment"]
    harness.send(queue, AGENT_CASES[case], "bad-request")
    _assert_dead_lettered_once_with_reason(harness, queue, "bad-request")


REPLY_CASES = {
    "result holding 4,400 digits": json.dumps(_reply(result={"n": 0})).replace('"n": 0', f'"n": {HUGE_INT}').encode(),
}


@pytest.mark.parametrize("case", sorted(REPLY_CASES))
def test_an_agent_reply_with_a_huge_integer_literal_is_dead_lettered_with_a_reason(harness, case):
    harness.send(AGENT_REPLIES_QUEUE, REPLY_CASES[case], "bad-reply")
    _assert_dead_lettered_once_with_reason(harness, AGENT_REPLIES_QUEUE, "bad-reply")


def test_application_properties_of_any_type_do_not_change_how_an_order_is_handled(harness, cosmos_db):
    """The app reads no application property of a received message: odd ones (a huge integer, NaN, an
    empty or very long name, a value that looks like a type) leave the order to its body alone."""
    from adapters.servicebus.sender import OutgoingMessage

    odd: dict[str, str | int | float | bool] = {
        "type": "CancelOrder",
        "orderId": 12,
        "big": 2**62,
        "nan": float("nan"),
        "flag": True,
        "x" * 200: "y" * 1000,
    }
    body = json.dumps(order(orderId="ord-props"))
    # a client's message (a .NET client sends a 64-bit long; the Python SDK could not)
    harness.broker.send_from_client(
        ORDERS_QUEUE, OutgoingMessage(body=body, message_id="ord-props", application_properties=odd)
    )
    harness.run_until_idle()

    assert harness.broker.counters(ORDERS_QUEUE).completed >= 1
    assert harness.broker.dead_letters(ORDERS_QUEUE) == []
    assert harness.ctx is not None and harness.ctx.states.get("ord-props") is not None


def _with_lone_surrogate_key(body: dict[str, object]) -> bytes:
    """``body`` plus a field whose NAME is a lone surrogate (valid JSON: ``"\\udc80"``) holding a number no
    contract can hold: the dead-letter description names that field."""
    return json.dumps(body).removesuffix("}").encode() + b', "\\udc80\\u001b[2J": 1e400}'


SURROGATE_KEY_CASES = {
    "orders": (ORDERS_QUEUE, _with_lone_surrogate_key(order(orderId="ord-s1"))),
    "agent request": (request_queues()["payment"], _with_lone_surrogate_key(_request())),
    "agent reply": (AGENT_REPLIES_QUEUE, _with_lone_surrogate_key(_reply())),
}


@pytest.mark.parametrize("case", sorted(SURROGATE_KEY_CASES))
def test_a_field_name_no_utf8_encoder_takes_is_dead_lettered_with_a_carriable_reason(harness, case):
    """Found by the red team on 3737d51: the description quoted the field name, a lone surrogate, so the
    dead-letter settlement itself failed (protobuf refuses the text) on every delivery, and the message
    ended ``MaxDeliveryCountExceeded``. The description now carries U+FFFD and no control character."""
    queue, body = SURROGATE_KEY_CASES[case]
    harness.send(queue, body, "odd-key")
    _assert_dead_lettered_once_with_reason(harness, queue, "odd-key")
    [letter] = [d for d in harness.broker.dead_letters(queue) if d.message_id == "odd-key"]
    assert "\ufffd" in (letter.description or "") and "\x1b" not in (letter.description or "")
