"""The console offers what the ops API's compensate takes for a ``CompensationFailed`` order: the log entries the
operator undid by hand (``undoneByHand``). Before, only the API took them: an operator on the console could only post
a compensate that was refused again at the same entry (its undo key is the same in every round), the older entries
never undone. Now each entry not undone has an "undone by hand" tick; the confirmation names the ticked entries and
the compensate posts them. A tick survives the page's refreshes, is the order's own (never posted for another order),
and an entry undone already has none. Chromium: see test_console_browser.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness
from tests.operations.test_redteam_compensate_undone_by_hand import OPERATOR_NAME, _refund_refused

pytestmark = pytest.mark.cosmos


def _log(ops: OpsHarness, order_id: str) -> list[tuple[int, str | None, str | None]]:
    status, page = ops.get(f"/api/ops/orders/{order_id}")
    assert status == 200, page
    return [(e["seq"], e["outcome"], e.get("undoneBy")) for e in page["compensation"]]


def _compensate(page: Any, order_id: str, reason: str, confirmation: str) -> None:
    """Compensate with ``reason``: the confirmation reads ``confirmation``, and the answer says it was done."""
    from playwright.sync_api import expect

    page.locator("#reason").fill(reason)
    page.locator("#btn-compensate").click()
    expect(page.locator("#confirm-text")).to_have_text(confirmation)
    page.locator("#confirm-yes").click()
    expect(page.get_by_role("status")).to_contain_text(f"Done: compensate of {order_id}")


def test_the_entries_ticked_undone_by_hand_are_posted_with_the_compensate(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    _refund_refused(ops, "o-hand")
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-hand")
    expect(page.locator("#act-hint")).to_contain_text("tick it in the compensation log")
    refund = page.get_by_label("Entry 2 (refund of charge-payment) undone by hand")
    expect(refund).to_be_visible()
    expect(page.locator("#complog input.by-hand")).to_have_count(2)  # neither entry is undone yet
    refund.check()
    page.wait_for_timeout(3500)  # the page refreshes (REFRESH_MS) and redraws the log: the tick stays
    expect(page.get_by_label("Entry 2 (refund of charge-payment) undone by hand")).to_be_checked()
    _compensate(
        page, "o-hand", "refunded at the provider", "Confirm: compensate for order o-hand, entry 2 undone by hand?"
    )
    assert _log(ops, "o-hand") == [(1, None, None), (2, "Undone", OPERATOR_NAME)]
    # the log as it is now: entry 2 undone by the operator, the order Compensating (no ticks offered)
    expect(page.locator("#complog")).to_contain_text(f"Undone by hand ({OPERATOR_NAME})")
    expect(page.locator("#complog input.by-hand")).to_have_count(0)


def test_a_tick_is_the_order_s_own_and_a_plain_compensate_names_none(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    _refund_refused(ops, "o-ticked")
    _refund_refused(ops, "o-other")
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-ticked")
    page.get_by_label("Entry 2 (refund of charge-payment) undone by hand").check()
    page.locator("#search-id").fill("o-other")
    page.locator("#search-id").press("Enter")
    expect(page.get_by_role("heading", name="Order o-other")).to_be_visible()
    expect(page.get_by_label("Entry 2 (refund of charge-payment) undone by hand")).not_to_be_checked()
    _compensate(page, "o-other", "the provider is back", "Confirm: compensate for order o-other?")
    assert _log(ops, "o-other") == [(1, None, None), (2, "Failed", None)]  # nothing undone by hand
    assert _log(ops, "o-ticked") == [(1, None, None), (2, "Failed", None)]  # nor on the order ticked
