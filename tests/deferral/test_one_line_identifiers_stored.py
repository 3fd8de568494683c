"""Identifiers a client sent with a line break before session 63 (``customerId``, ``notificationId``,
``providerReference`` were ``ClientText``, which keeps them) still read once they are one line only: the contract
refuses such a message where it comes off the ``orders`` queue, and nothing the app stored is read back through it.
The previous release is played by ``previous_release`` (the contracts as they were); the rest runs this one's code,
driven through the registered ``submit_order`` trigger, over the Cosmos protocol server."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import deferral.apply
import submission.intake
from adapters.cosmos.state_store import update_once
from contracts.messages import ClientText, OrderSubmitted, PaymentNotification
from contracts.names import ORDERS_QUEUE
from domain.text import has_line_break
from domain.transitions import release_untried
from operations.views import order_detail
from orchestrators.starter import try_claim
from tests.deferral.support import alerts, deliver_all, notification, order, send

pytestmark = pytest.mark.cosmos

CUSTOMER = "cust-1\nFAKE: order p1 refunded"
NOTIFICATION = "n-1\r\nn-2"
REFERENCE = "psp\t1"


class _OrderSubmittedBefore(OrderSubmitted):
    customer_id: ClientText  # type: ignore[assignment]


class _PaymentNotificationBefore(PaymentNotification):
    notification_id: ClientText  # type: ignore[assignment]
    provider_reference: ClientText  # type: ignore[assignment]


@pytest.fixture
def previous_release() -> Iterator[pytest.MonkeyPatch]:
    """The contracts of the release before: an identifier may hold tabs and line breaks. ``undo()`` upgrades."""
    with pytest.MonkeyPatch.context() as patch:
        handlers = submission.intake.HANDLERS
        patch.setitem(handlers, "OrderSubmitted", (_OrderSubmittedBefore, handlers["OrderSubmitted"][1]))
        patch.setitem(handlers, "PaymentNotification", (_PaymentNotificationBefore, handlers["PaymentNotification"][1]))
        patch.setitem(deferral.apply.DEFERRABLE, "PaymentNotification", _PaymentNotificationBefore)
        yield patch


def test_an_order_and_its_payment_stored_with_line_breaks_before_the_upgrade_still_read(
    functions: Any, ctx: Any, broker: Any, previous_release: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the release before: the notification waits for its order (a deferral entry), then both are recorded
    send(broker, notification(notification_id=NOTIFICATION, providerReference=REFERENCE), "n-1")
    deliver_all(functions, broker)
    send(broker, order(customerId=CUSTOMER), "order-p1")
    deliver_all(functions, broker)
    assert broker.dead_letters(ORDERS_QUEUE) == []
    previous_release.undo()  # the upgrade

    stored = ctx.orders.get("p1")
    assert stored is not None and stored["customerId"] == CUSTOMER
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.notification_id == NOTIFICATION
    record = ctx.states.get("p1")
    assert record is not None and record.payment is not None
    assert (record.payment.notification_id, record.payment.provider_reference) == (NOTIFICATION, REFERENCE)
    assert any(NOTIFICATION in h.detail for h in record.history), record.history

    # the starter plans an attempt from the order document as stored (the fast path's claim released untried first)
    owner = record.locked_by
    assert owner is not None
    pending = update_once(ctx.states, record, lambda r: release_untried(r, owner, ctx.clock.now(), "test"))
    claim = try_claim(ctx, pending)
    assert claim is not None and claim.attempt == 2 and claim.plan.order["customerId"] == CUSTOMER
    # the ops API's order page shows it
    detail = order_detail(ctx, "p1")
    assert detail is not None and detail["order"]["customerId"] == CUSTOMER

    # a later message of the order is decided against the stored payment: its alert and log lines on one line
    send(broker, notification(notification_id="n-3"), "n-3")
    with caplog.at_level(logging.INFO, logger="orders"):
        deliver_all(functions, broker)
    logged = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "OperatorAlert"]
    assert logged and all("notification n-1  n-2;" in m for m in logged), logged  # before: a forged line
    assert not [m for r in caplog.records if has_line_break(m := r.getMessage())], "a log line was forged"
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.message_id == "n-3", dead
    [alert] = alerts(broker)
    assert "\n" not in alert["summary"] and "\n" not in (dead.description or ""), (alert, dead.description)


def test_a_notification_deferred_with_a_line_break_before_the_upgrade_is_dead_lettered_and_its_order_accepted(
    functions: Any, ctx: Any, broker: Any, previous_release: pytest.MonkeyPatch
) -> None:
    """A message is not stored data: one deferred before the rule is dead-lettered ``InvalidFields`` when it is
    next tried, its entry resolved, as every message deferred before a contract rule it now breaks
    (``deferral.apply``); its order is accepted as any other."""
    send(broker, notification(notification_id=NOTIFICATION), "n-1")
    deliver_all(functions, broker)
    previous_release.undo()

    send(broker, order(), "order-p1")
    deliver_all(functions, broker)
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "InvalidFields" and "field 'notificationId'" in (dead.description or ""), dead
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status.value == "DeadLettered", entry
    record = ctx.states.get("p1")
    assert record is not None and record.payment is None
    assert ctx.orders.get("p1") is not None
