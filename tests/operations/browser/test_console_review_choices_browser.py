"""The console offers a review's answers as the ops API takes them (``review.choices``): a prepaid order's
payment step under review has no "Use the alternative agent" (no other provider can capture that
payment; the API refuses it, 409), a charged order's has. Chromium: see test_console_browser.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness
from tests.orchestrators.support import sample_order

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize("prepaid", [True, False])
def test_the_alternative_is_offered_only_where_a_fallback_can_take_over(
    ops: OpsHarness,
    browser: Any,
    prepaid: bool,
) -> None:
    from playwright.sync_api import expect

    assert ops.ctx is not None
    ops.ctx.orders.create_or_verify(sample_order("o-rv", total_cents=150000, prepaid=prepaid))
    ops.awaiting_review("o-rv")  # paused at charge-payment
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-rv")
    expect(page.locator("#btn-review")).to_be_visible()
    expect(page.get_by_label("Retry the step")).to_be_visible()
    expect(page.get_by_label("Fail the order")).to_be_visible()
    alternative = page.get_by_label("Use the alternative agent")
    if prepaid:
        expect(alternative).to_be_hidden()
        expect(alternative).to_be_disabled()
    else:
        expect(alternative).to_be_visible()
    expect(page.locator("input[name=decision]:checked")).to_have_count(1)
