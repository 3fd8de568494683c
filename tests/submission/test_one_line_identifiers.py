"""An identifier a client sends on the ``orders`` queue is one line (session 63). ``customerId``, ``notificationId``
and ``providerReference`` were ``ClientText``, which keeps tabs and line breaks (an address may have lines). They go
into log lines, alert summaries and ids, the record's history and the ops API, where a line break forges a log line
(CWE-117) and splits one id into what looks like two. Such a message is now dead-lettered ``InvalidFields`` naming
the field, nothing written; before, the order was accepted (its document and record written) and the notification
deferred for its order (its deferral document written). A ``RetryDeferred``'s ``retryToken`` (the app's own, 32 hex
digits) is one line too. Through the real Functions runtime (``RuntimeHarness``), over the Cosmos protocol server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ORDER = "ord-id1"
BREAKS = {"line feed": "\n", "carriage return": "\r\n", "tab": "\t", "line separator": "\u2028"}


def _notification(**fields: Any) -> dict[str, Any]:
    body = {
        "type": "PaymentNotification",
        "schemaVersion": 1,
        "notificationId": "n-1",
        "orderId": ORDER,
        "amountCents": 2500,
        "currency": "EUR",
        "providerReference": "psp-1",
    }
    return body | fields


BODIES = {
    "customerId": lambda text: order(orderId=ORDER, customerId=text),
    "notificationId": lambda text: _notification(notificationId=text),
    "providerReference": lambda text: _notification(providerReference=text),
}


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


@pytest.mark.parametrize("field", sorted(BODIES))
@pytest.mark.parametrize("case", sorted(BREAKS))
def test_an_identifier_with_a_line_break_is_dead_lettered_naming_the_field_and_nothing_is_written(
    harness: RuntimeHarness, field: str, case: str
) -> None:
    body = BODIES[field](f"id-1{BREAKS[case]}FAKE: order {ORDER} refunded")
    harness.send(ORDERS_QUEUE, json.dumps(body), "hostile-id")
    harness.run_until_idle()

    dead = [d for d in harness.broker.dead_letters(ORDERS_QUEUE) if d.message_id == "hostile-id"]
    assert [(d.reason, d.delivery_count) for d in dead] == [("InvalidFields", 1)], dead
    description = dead[0].description or ""
    assert f"field '{field}'" in description and "one line" in description, description
    assert harness.ctx is not None
    assert harness.ctx.orders.get(ORDER) is None
    assert harness.ctx.states.get(ORDER) is None
    assert harness.ctx.deferrals.get(ORDER) is None


def test_the_same_identifiers_on_one_line_are_accepted(harness: RuntimeHarness) -> None:
    """The refusal is the line break's: the order and its notification, ids with spaces, are taken."""
    harness.send(ORDERS_QUEUE, json.dumps(_notification(notificationId="n 1", providerReference="psp 1")), "n")
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId=ORDER, customerId="cust 1", prepaid=True)), "o")
    harness.run_until_idle()

    assert harness.broker.dead_letters(ORDERS_QUEUE) == []
    assert harness.ctx is not None
    stored = harness.ctx.orders.get(ORDER)
    assert stored is not None and stored["customerId"] == "cust 1"
    record = harness.ctx.states.get(ORDER)
    assert record is not None and record.payment is not None and record.payment.notification_id == "n 1"


def test_a_retry_deferred_whose_token_has_a_line_break_is_dead_lettered_naming_the_field(
    harness: RuntimeHarness,
) -> None:
    retry = {
        "type": "RetryDeferred",
        "schemaVersion": 1,
        "sequenceNumber": 1,
        "orderId": ORDER,
        "messageId": "m-1",
        "round": 1,
        "retryToken": "0" * 16 + "\nFAKE: retry accepted",
    }
    harness.send(ORDERS_QUEUE, json.dumps(retry), "hostile-retry")
    harness.run_until_idle()

    dead = [d for d in harness.broker.dead_letters(ORDERS_QUEUE) if d.message_id == "hostile-retry"]
    assert [d.reason for d in dead] == ["InvalidFields"], dead
    assert "field 'retryToken'" in (dead[0].description or ""), dead[0].description
