"""An order id the ops API knows only from its deferral document has a page (red team). An order refused
by admission control (``MAX_PENDING``) has no order and no state record, only its deferral document
(``rejectedAt``, the refused message, the payment notifications dead-lettered ``OrderRejected``); a
payment notification that arrived before its order waits on that document too. The operator who looks
the order up after its ``OrderRejected`` or ``NotificationForRejectedOrder`` alert, or a submitter's
"my payment went through but nothing happened", was told 404 "no order": the order page now shows the
refusal and the notifications."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from domain.deferral import (
    DeferralDocument,
    DeferralReason,
    DeferredEntry,
    RefusedNotification,
    document_id,
    rejected,
)
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos


def _entry(seq: int, now: Any) -> DeferredEntry:
    return DeferredEntry(
        sequence_number=seq,
        message_id=f"pay-{seq}",
        message_type="PaymentNotification",
        reason=DeferralReason.ORDER_NOT_SUBMITTED,
        deferred_at=now,
        recorded_by="submission",
        updated_at=now,
        notification_id=f"pay-{seq}",
    )


def _refused(ops: OpsHarness, order_id: str) -> None:
    """``order_id`` refused as message 17, and payment notification 42 dead-lettered ``OrderRejected``."""
    assert ops.ctx is not None
    now = ops.clock.now()
    doc = rejected(DeferralDocument(id=document_id(order_id), order_id=order_id, updated_at=now), now, 17)
    dead = RefusedNotification(sequence_number=42, notification_id="pay-42", dead_lettered_at=now)
    ops.ctx.deferrals.save(replace(doc, refused_notifications=[dead]))


def test_an_order_refused_by_admission_control_has_a_page_with_its_refusal(ops: OpsHarness) -> None:
    _refused(ops, "o-refused")

    status, body = ops.get("/api/ops/orders/o-refused")
    assert status == 200, body
    assert (body["order"], body["state"], body["instances"], body["attempts"]) == (None, None, [], [])
    refusal = body["refusal"]
    assert refusal["rejectedAt"] is not None and refusal["rejectedSequenceNumber"] == 17
    assert [n["sequenceNumber"] for n in refusal["refusedNotifications"]] == [42]
    assert refusal["refusedNotificationsUnlisted"] == 0


def test_a_notification_waiting_for_its_order_has_a_page(ops: OpsHarness) -> None:
    assert ops.ctx is not None
    now = ops.clock.now()
    ops.ctx.deferrals.save(
        DeferralDocument(id=document_id("o-early"), order_id="o-early", entries=[_entry(5, now)], updated_at=now)
    )
    status, body = ops.get("/api/ops/orders/o-early")
    assert status == 200, body
    assert [e["sequenceNumber"] for e in body["deferredNotifications"]] == [5]
    assert body["refusal"] is None  # never refused


def test_an_order_with_a_record_and_no_refusal_says_none(ops: OpsHarness) -> None:
    ops.error("o-plain")
    status, body = ops.get("/api/ops/orders/o-plain")
    assert status == 200 and body["refusal"] is None, body


def test_an_id_nothing_knows_is_still_404(ops: OpsHarness) -> None:
    assert ops.get("/api/ops/orders/o-nothing")[0] == 404


def test_the_console_shows_the_refusal(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    _refused(ops, "o-refused")
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-refused")
    expect(page.get_by_role("heading", name="Order o-refused")).to_be_visible()
    expect(page.locator("#order-facts")).to_contain_text("no state record")
    expect(page.locator("#order-facts")).to_contain_text("refused by admission control at ")
    expect(page.locator("#order-facts")).to_contain_text(
        "1 payment notification(s) dead-lettered OrderRejected (sequence numbers 42)"
    )
