"""Alerts and statuses are side channels: whatever a valid order id, queue name or error text holds,
they fit Service Bus's limits (the in-process broker refuses what the service refuses) and never
crash the handler that raises them."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.ids import alert_id, bounded, instance_id, status_message_id
from localrun.servicebus import InProcessBroker
from notifications.alerts import raise_alert, raise_alert_after_write
from notifications.status import Delivery, publish_status

AT = datetime(2026, 1, 1, tzinfo=UTC)
LONGEST_ORDER_ID = "o" * 64  # the longest id the contract accepts


def broker(*queues: str) -> InProcessBroker:
    b = InProcessBroker(ManualClock(AT))
    for q in (OPERATOR_ALERTS_QUEUE, *queues):
        b.declare_queue(q)
    return b


def test_bounded_keeps_short_ids_and_hashes_long_ones_to_128_characters_deterministically() -> None:
    assert bounded("ord-1:Received:0") == "ord-1:Received:0"
    long_a, long_b = "a" * 200, "a" * 199 + "b"
    assert len(bounded(long_a)) == 128
    assert bounded(long_a) == bounded(long_a)
    assert bounded(long_a) != bounded(long_b)


def test_a_review_alert_for_the_longest_valid_order_id_is_accepted_by_service_bus() -> None:
    """Finding 5: the review id holds the order id twice, so the alert id passed 128 characters for
    any order id over 40 and the send was refused."""
    b = broker()
    review_id = f"{instance_id(LONGEST_ORDER_ID, 3)}:charge-payment:review:1"
    raise_alert(b, kind="ReviewRequired", summary="decide", at=AT, order_id=LONGEST_ORDER_ID, discriminator=review_id)
    (sent,) = b.peek(OPERATOR_ALERTS_QUEUE, 10)
    assert len(sent.message_id) <= 128
    assert json.loads(str(sent))["alertId"] == sent.message_id
    assert alert_id("ReviewRequired", LONGEST_ORDER_ID, review_id + "2") != sent.message_id


def test_every_status_message_id_of_the_longest_order_id_fits() -> None:
    assert len(status_message_id(LONGEST_ORDER_ID, "CancellationRejected", 10_000)) <= 128


def test_a_missing_reply_queue_with_a_210_character_name_is_alerted_and_never_raises() -> None:
    """Finding 5: the queue name is the alert's discriminator; 210 characters overflowed the alert
    id's 200-character field and crashed the caller (submit_order, a supervisor run)."""
    b = broker()
    queue = "q" * 210  # a valid queue name (up to 260), but no such queue
    assert publish_status(b, reply_to=queue, order_id="ord-1", status="Received", attempt=0, at=AT) is Delivery.REFUSED
    (alert,) = (json.loads(str(m)) for m in b.peek(OPERATOR_ALERTS_QUEUE, 10))
    assert alert["kind"] == "ReplyQueueUnavailable"
    assert alert["details"]["replyTo"] == queue


class Exploding:
    def send(self, queue: str, message: OutgoingMessage) -> None:
        raise ValueError("message_id cannot be longer than 128 characters.")


def test_an_alert_after_a_write_never_raises_whatever_goes_wrong() -> None:
    assert raise_alert_after_write(Exploding(), kind="X", summary="", at=AT, order_id="ord-1") is False
    unserialisable = {"when": object()}
    b = broker()
    assert raise_alert_after_write(b, kind="X", summary="s", at=AT, details=unserialisable) is True
    (alert,) = (json.loads(str(m)) for m in b.peek(OPERATOR_ALERTS_QUEUE, 10))
    assert "unserialisable" in alert["details"]


def test_a_plain_alert_still_reports_a_failed_send_to_its_caller() -> None:
    class Down:
        def send(self, queue: str, message: OutgoingMessage) -> None:
            raise SendError("unreachable")

    with pytest.raises(SendError):
        raise_alert(Down(), kind="X", summary="s", at=AT)


@pytest.mark.parametrize("queue", ["orders", "Operator-Alerts", "AGENT-REPLIES", "payment-requests"])
def test_a_stored_reply_to_naming_one_of_the_apps_own_queues_gets_no_status(queue: str) -> None:
    """The contract refuses such a ``replyTo``; a record written before it did still sends nothing there."""
    b = broker("orders", "agent-replies", "payment-requests")
    assert publish_status(b, reply_to=queue, order_id="ord-1", status="Received", attempt=0, at=AT) is Delivery.DROPPED
    for q in (OPERATOR_ALERTS_QUEUE, "orders", "agent-replies", "payment-requests"):
        assert b.peek(q, 10) == [], q
