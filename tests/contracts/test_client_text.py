"""Text a client sends on the ``orders`` queue that the app records and logs (``customerId``, ``shipTo``,
``notificationId``, ``providerReference``, a cancellation's ``reason``) follows the operator API's rule
for an operator's reason. Found by the red team on 3737d51: a ``CancelOrder`` reason of
``"ok\\x00\\x1b[2J\\r\\nFAKE: order o9 refunded"`` went verbatim into the record's ``lastError``, its history
and the ``CancellationAccepted`` log line, while the same text posted to the ops API was a 400."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.messages import CancelOrder, Contract, OrderSubmitted, PaymentNotification
from contracts.parsing import InvalidMessage, parse
from tests.submission.corpus import order

ACCEPTED: dict[str, type[Contract]] = {
    "OrderSubmitted": OrderSubmitted,
    "PaymentNotification": PaymentNotification,
    "CancelOrder": CancelOrder,
}


def notification(**overrides: Any) -> dict[str, Any]:
    body = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": "n-1",
        "orderId": "o1",
        "amountCents": 100,
        "currency": "EUR",
        "providerReference": "psp-1",
    }
    return body | overrides


def cancel(reason: str) -> dict[str, Any]:
    return {"type": "CancelOrder", "schemaVersion": 1, "orderId": "o1", "reason": reason}


BODIES = {
    "customerId": lambda text: order(customerId=text),
    "shipTo": lambda text: order(shipTo=text),
    "notificationId": lambda text: notification(notificationId=text),
    "providerReference": lambda text: notification(providerReference=text),
    "reason": cancel,
}
REFUSED = {
    "a control character": "ok\x00",
    "a terminal escape": "ok\x1b[2J",
    "a lone surrogate": "ok\udc80",
    "only blanks": "   ",
    "only a line break": "\n",
}


@pytest.mark.parametrize("field", sorted(BODIES))
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_text_no_record_or_log_line_can_carry_is_refused_naming_the_field(field: str, case: str) -> None:
    body = json.dumps(BODIES[field](REFUSED[case]))
    with pytest.raises(InvalidMessage) as caught:
        parse(body, ACCEPTED)
    assert caught.value.reason == "InvalidFields"
    assert field in caught.value.description, caught.value.description


def test_an_address_keeps_its_lines_and_a_reason_goes_on_one_line() -> None:
    submitted = parse(json.dumps(order(shipTo="1 Main St\nSpringfield")), ACCEPTED)
    assert isinstance(submitted, OrderSubmitted) and submitted.ship_to == "1 Main St\nSpringfield"
    cancelled = parse(json.dumps(cancel("changed\r\nmy mind\u2028today ")), ACCEPTED)
    assert isinstance(cancelled, CancelOrder) and cancelled.reason == "changed my mind today"
