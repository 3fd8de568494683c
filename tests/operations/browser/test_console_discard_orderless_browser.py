"""The console offers the discard of a payment notification deferred for an order nobody submitted (the
``PaymentWithoutOrder`` alert's) on the order's page, under "Deferred payment notifications": a "Discard" button on
each entry still waiting for its order, behind the reason and a confirmation naming the notification. Posted, the
message is dead-lettered ``DiscardedByOperator`` and the entry shows as resolved, with no button. An order's page
whose notification was applied offers none. Chromium: see test_console_browser.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.deferral import DISCARDED
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness
from tests.operations.test_discard_orderless_payment import GHOST, NOTIFICATION

pytestmark = pytest.mark.cosmos


def test_an_orderless_payment_is_discarded_from_its_order_page(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.send(ORDERS_QUEUE, json.dumps(NOTIFICATION), "n-ghost")
    ops.run_until_idle()
    [seq] = [m.sequence_number for m in ops.broker.peek(ORDERS_QUEUE, 10) if m.state.name == "DEFERRED"]
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/{GHOST}")
    expect(page.locator("#act-hint")).to_contain_text("nobody submitted the order")
    discard = page.get_by_role("button", name=f"Discard payment notification {seq} (n-ghost)")
    expect(discard).to_be_visible()
    expect(page.locator("#btn-resubmit")).to_be_hidden()

    discard.click()  # no reason yet: nothing is asked, nothing posted
    expect(page.get_by_role("status")).to_contain_text("Give a reason first")
    expect(page.locator("#confirm")).to_be_hidden()

    page.locator("#reason").fill("refunded at the provider, ticket 4711")
    discard.click()
    expect(page.locator("#confirm-text")).to_have_text(
        f"Confirm: discard payment notification {seq} (dead-lettered, never applied) for order {GHOST}?"
    )
    assert ops.broker.dead_letters(ORDERS_QUEUE) == []
    page.locator("#confirm-yes").click()

    expect(page.get_by_role("status")).to_contain_text(
        f"Done: discard of payment notification {seq} of {GHOST}: dead-lettered DiscardedByOperator now."
    )
    [dead] = ops.broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, DISCARDED)
    assert "refunded at the provider, ticket 4711" in str(dead.description)
    expect(page.locator("#deferred")).to_contain_text("DiscardedByOperator: discarded by operator ops@contoso.example")
    expect(page.locator("#deferred button.discard")).to_have_count(0)
    expect(page.locator("#action-form")).to_be_hidden()


def test_an_applied_payment_offers_no_discard(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    from tests.submission.corpus import order

    ops.send(ORDERS_QUEUE, json.dumps(NOTIFICATION), "n-ghost")
    ops.run_until_idle()
    ops.send(ORDERS_QUEUE, json.dumps(order(orderId=GHOST, prepaid=True)), GHOST)
    ops.run_until_idle()
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/{GHOST}")
    expect(page.locator("#deferred")).to_contain_text("Applied")
    expect(page.locator("#deferred button.discard")).to_have_count(0)
