"""Text a client sends on the ``orders`` queue that the app records and logs (``customerId``, ``shipTo``,
``notificationId``, ``providerReference``, a cancellation's ``reason``) follows the operator API's rule
for an operator's reason. Found by the red team on 3737d51: a ``CancelOrder`` reason of
``"ok\\x00\\x1b[2J\\r\\nFAKE: order o9 refunded"`` went verbatim into the record's ``lastError``, its history
and the ``CancellationAccepted`` log line, while the same text posted to the ops API was a 400."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.activities import SendAlertInput
from contracts.messages import (
    CancelOrder,
    Contract,
    OrderSubmitted,
    PaymentNotification,
    RetryDeferred,
)
from contracts.names import OPERATOR_ALERTS_QUEUE
from contracts.parsing import InvalidMessage, parse
from domain.ids import alert_id
from notifications.alerts import send_owed_alert
from tests.fakes import RecordingSender
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


# Session 63: identifiers are one line (tests/submission/test_one_line_identifiers.py, through the runtime),
# named without backslashes (a test id holding one is printed escaped twice when named on the command line)
LINE_BREAKS = {
    "line feed": "id\n1",
    "carriage return": "id\r1",
    "tab": "id\t1",
    "line separator": "id\u20281",
    "paragraph separator": "id\u20291",
    "leading tab": "\tid",
}


@pytest.mark.parametrize("field", ["customerId", "notificationId", "providerReference"])
@pytest.mark.parametrize("case", sorted(LINE_BREAKS))
def test_an_identifier_is_one_line(field: str, case: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse(json.dumps(BODIES[field](LINE_BREAKS[case])), ACCEPTED)
    assert caught.value.reason == "InvalidFields"
    assert f"field '{field}'" in caught.value.description and "one line" in caught.value.description


def test_a_retry_deferred_reads_an_older_entrys_message_id_on_one_line() -> None:
    """Its ``messageId`` is for the reader (an entry an older version recorded may hold a client's id with a line
    break); its ``retryToken``, the app's own, is an identifier."""
    retry = {"type": "RetryDeferred", "schemaVersion": 1, "sequenceNumber": 3, "orderId": "o1", "round": 1}
    read = parse(json.dumps(retry | {"messageId": "m\n1", "retryToken": "ab12"}), {"RetryDeferred": RetryDeferred})
    assert isinstance(read, RetryDeferred) and (read.message_id, read.retry_token) == ("m 1", "ab12")
    with pytest.raises(InvalidMessage, match="field 'retryToken'"):
        parse(json.dumps(retry | {"messageId": "m1", "retryToken": "ab\n12"}), {"RetryDeferred": RetryDeferred})


def test_an_alert_built_from_a_stored_id_with_a_line_break_is_on_one_line_and_an_owed_one_still_sends() -> None:
    """A payment a record holds from before (its ``notificationId`` with a line break) names the alerts about it: the
    alert's id (its MessageId) is built on one line, the same for every one-line id; an alert owed since before, in
    its courier's input as it was built, is still read and sent as it is."""
    assert alert_id("PaymentNotRefunded", "o1", "n-1\nFAKE") == "alert:PaymentNotRefunded:o1:n-1 FAKE"
    assert alert_id("PaymentNotRefunded", "o1", "n 1") == "alert:PaymentNotRefunded:o1:n 1"
    owed = {  # the courier's input as an older version built it
        "type": "OperatorAlert",
        "schemaVersion": 1,
        "alertId": "alert:PaymentNotRefunded:o1:n-1\nFAKE",
        **{"kind": "PaymentNotRefunded", "severity": "error", "orderId": "o1", "summary": "s"},
        "at": "2026-12-07T10:00:00.000000Z",
    }
    sender = RecordingSender()
    assert send_owed_alert(sender, SendAlertInput(alert=owed)) is None
    assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == [owed["alertId"]]
