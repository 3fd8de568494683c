"""The console tells the operator deciding a review which default the attempt takes if nobody answers in
time, next to the deadline ("if nobody answers by <time>: <default>"), and that a second review left
unanswered compensates when the default runs the step again; a record written before the default was
kept says nothing of it. The overview's reviews table marks a deadline the app's clock has passed
"(passed)". Chromium: see test_console_browser.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos


def test_the_order_page_says_which_default_is_taken_without_an_answer(
    ops: OpsHarness,
    browser: Any,
) -> None:
    from playwright.sync_api import expect

    ops.awaiting_review("o-rd", default_action="retry")
    ops.awaiting_review("o-old")  # written before the default was kept
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-rd")
    facts = page.locator("#order-facts")
    expect(facts).to_contain_text("if nobody answers by ")
    expect(facts).to_contain_text(": retry (if the step fails again, a second review left unanswered compensates)")
    expect(page.locator("#act-hint")).to_contain_text("without one it takes its default (retry)")

    page.goto(f"{BASE}/api/ops/console#/order/o-old")
    expect(page.locator("#order-title")).to_have_text("Order o-old")
    expect(page.locator("#order-facts")).to_contain_text("decide by")
    expect(page.locator("#order-facts")).not_to_contain_text("if nobody answers")
    expect(page.locator("#act-hint")).to_contain_text("without one it takes its default. Answer")


def test_the_reviews_table_marks_a_passed_deadline(
    ops: OpsHarness,
    browser: Any,
) -> None:
    from playwright.sync_api import expect

    # decide by: in 10 minutes; completeBy an hour later, so the supervisor leaves it alone meanwhile
    ops.awaiting_review("o-late", default_action="compensate", keep_for=timedelta(hours=1))
    page = _console(ops, browser)
    reviews = page.locator("#reviews")
    expect(reviews).to_contain_text("o-late")
    expect(reviews).not_to_contain_text("(passed)")

    ops.clock.advance_to(ops.clock.now() + timedelta(minutes=11))
    page.reload()
    expect(reviews).to_contain_text("(passed)")
