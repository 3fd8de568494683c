"""Identifiers a client sent with a line break before session 63 (``customerId``, ``notificationId``,
``providerReference`` were ``ClientText``, which keeps them) still read once they are one line only: the contract
refuses such a message where it comes off the ``orders`` queue, and nothing the app stored is read back through it.
The previous release is played by ``previous_release`` (tests/deferral/conftest.py: the contracts as they were); the
rest runs this one's code, driven through the registered ``submit_order`` trigger, over the Cosmos protocol server."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import update_once
from contracts.names import ORDERS_QUEUE
from deferral.sweep import peek_sweep
from domain.text import has_line_break
from domain.transitions import release_untried
from operations.views import order_detail
from orchestrators.starter import try_claim
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver_all, notification, order, send

pytestmark = pytest.mark.cosmos

CUSTOMER = "cust-1\nFAKE: order p1 refunded"
NOTIFICATION = "n-1\r\nn-2"
REFERENCE = "psp\t1"


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


def test_a_notification_deferred_with_a_line_break_before_the_upgrade_is_applied_when_its_order_comes(
    functions: Any, ctx: Any, broker: Any, previous_release: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the app defers a message, after its trigger read it: one deferred before the rule was read by the release
    that deferred it, and its entry holds the same ids. It is applied to its order as the entry and the record keep
    such ids (``DeferredPaymentNotification``), its log lines on one line. Before (red team ids63): dead-lettered
    ``InvalidFields`` when its order came, the prepaid order left without its payment, given up after
    ``PAYMENT_WAIT_MINUTES``, the customer's payment never captured."""
    send(broker, notification(notification_id=NOTIFICATION, providerReference=REFERENCE), "n-1")
    deliver_all(functions, broker)
    previous_release.undo()

    send(broker, order(), "order-p1")
    with caplog.at_level(logging.INFO):
        deliver_all(functions, broker)
    assert broker.dead_letters(ORDERS_QUEUE) == []
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status.value == "Applied", entry
    record = ctx.states.get("p1")
    assert record is not None and record.payment is not None
    assert (record.payment.notification_id, record.payment.provider_reference) == (NOTIFICATION, REFERENCE)
    app_lines = [r.getMessage() for r in caplog.records if not r.name.startswith("azure.")]  # the SDK's are its own
    assert any(NOTIFICATION.replace("\r\n", "  ") in m for m in app_lines), app_lines  # it was applied, on one line
    assert not [m for m in app_lines if has_line_break(m)], "a log line was forged"
    # a new message with such an id is refused all the same (a resend of the one applied is a repeat:
    # tests/deferral/test_one_line_identifiers_copies.py)
    send(broker, notification(notification_id="n-9\nn-10", providerReference=REFERENCE), "n-new")
    deliver_all(functions, broker)
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "InvalidFields" and "field 'notificationId'" in (dead.description or ""), dead


def test_a_notification_deferred_with_a_line_break_before_the_upgrade_waits_for_its_order_through_the_peek_sweep(
    functions: Any, ctx: Any, broker: Any, clock: Any, previous_release: pytest.MonkeyPatch
) -> None:
    """The peek sweep reads a deferred notification as its order's submission does: one deferred before the rule
    waits for its order. Before: the sweep dead-lettered it ``InvalidFields`` at once, its order not yet submitted."""
    send(broker, notification(notification_id=NOTIFICATION, providerReference=REFERENCE), "n-1")
    deliver_all(functions, broker)
    previous_release.undo()
    [seq] = deferred_sequence_numbers(broker)

    clock.advance(timedelta(minutes=15))  # old enough for the sweep (PEEK_SWEEP_AGE_MINUTES), not for its alert
    report = peek_sweep(ctx)
    assert (report.waiting, report.dead_lettered) == (1, 0), report
    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert deferred_sequence_numbers(broker) == [seq]
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status.value == "Deferred", entry
