"""Found walking through the console as a new operator (session 43): every 3 s the overview's counts were
read anew but the list of orders below them was not. Chromium: see test_console_browser.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos


def test_the_overview_list_is_as_current_as_the_counts_beside_it(ops: OpsHarness, browser: Any) -> None:
    """Before: Error 0 above a list still showing the order as Error, until the page was reloaded."""
    from playwright.sync_api import expect

    ops.error("o-list")
    page = _console(ops, browser)
    page.select_option("#list-state", "Error")
    list_ = page.locator("#list")
    expect(list_).to_contain_text("o-list")
    assert ops.post("/api/ops/orders/o-list/resubmit", {"reason": "fixed the stock"})[0] == 200
    expect(page.locator(".tile-Error .n")).to_have_text("0")
    expect(list_).to_contain_text("no order")  # before: the list still showed o-list as Error
