"""An event about one order names it (``orderId``), the dimension an operator finds an order's telemetry by (red
team, observability). Before: an order dead-lettered as invalid (a field out of its contract) was logged
``DeadLettered`` under its message id only, and so was a deferred payment notification dead-lettered as invalid
on a later look and an orders message sent again for later (``IntakeRetryScheduled``); a status not sent named no
attempt. A query for the order's id found none of them."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, SendError
from submission.intake import handle_orders_message
from submission.store_outage import retry_later
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_an_order_dead_lettered_as_invalid_is_logged_under_its_order_id(app_context, caplog):
    invalid = order(orderId="ord-9", lines=[{"sku": "SKU-1", "quantity": 0, "unitPriceCents": 1250}])
    with caplog.at_level(logging.INFO):
        handle_orders_message(app_context, FakeReceivedMessage.of(invalid, message_id="client-message-1"))
    [dead] = events(caplog, "DeadLettered")
    assert (dead.orderId, dead.reason) == ("ord-9", "InvalidFields")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xfe not text",
        b"[" * 100_000,  # deeper than json.loads recurses: the body is dead-lettered, not the trigger failed
        json.dumps({"orderId": "not an id!", "type": "OrderSubmitted"}).encode(),
        b'{"orderId": 1e999999, "type": "OrderSubmitted"}',
    ],
)
def test_a_body_that_names_no_valid_order_is_dead_lettered_without_one(app_context, caplog, body: bytes):
    with caplog.at_level(logging.INFO):
        result = handle_orders_message(app_context, FakeReceivedMessage.of(body, message_id="m"))
    assert result.settlement.kind == "deadletter"
    [dead] = events(caplog, "DeadLettered")
    assert dead.orderId is None  # type: ignore[attr-defined]


def test_an_orders_message_sent_again_for_later_is_logged_under_its_order_id(app_context, caplog):
    with caplog.at_level(logging.INFO):
        retry_later(
            app_context, FakeReceivedMessage.of(order(orderId="ord-4"), message_id="m-4"), "OrderSubmitted", "503"
        )
    [retry] = events(caplog, "IntakeRetryScheduled")
    assert retry.orderId == "ord-4"  # type: ignore[attr-defined]


class RefusingSender(RecordingSender):
    def send(self, queue: str, message: OutgoingMessage) -> None:
        raise SendError(f"send to {queue!r} failed (test)")


def test_a_status_not_sent_names_its_attempt(app_context, caplog):
    from activities.scheduler_steps import _tell_once

    ctx: Any = context_with(app_context, sender=RefusingSender())
    with caplog.at_level(logging.INFO):
        assert _tell_once(ctx, "client-statuses", "ord-5", "Completed", 3) is False
    [not_sent] = events(caplog, "StatusNotSent")
    assert (not_sent.orderId, not_sent.attempt, not_sent.status) == ("ord-5", 3, "Completed")  # type: ignore[attr-defined]
