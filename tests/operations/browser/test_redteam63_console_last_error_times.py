"""Red team of session 63's one time form (times63): the console showed a ``lastError`` as the record keeps it.

A ``lastError`` may hold a time: an order the payment wait gave up says "(waited 30 min since <time>)"
(``domain.payment_wait.PaymentWait.gave_up``). times63 writes it ``Z`` (``...08:00:00.000000Z``); the release before
wrote ``+00:00``. The console read the times inside a history entry's detail as it writes its own ("2026-01-01
08:00:00 UTC", whichever form) but showed a ``lastError`` raw, in the Error list and on the order page: the same
kind of value in three forms, by which release wrote the record. Chromium: see test_console_browser.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from domain.payment_wait import PaymentWait
from domain.timefmt import to_text
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize("written", ["timefmt", "isoformat"])
def test_a_last_errors_time_is_shown_as_the_console_writes_times(ops: OpsHarness, browser: Any, written: str) -> None:
    """``written``: the time as the app writes it, or as a release before session 63 did (``+00:00``)."""
    from playwright.sync_api import expect

    assert ops.ctx is not None
    record = ops.error("o-le")
    since = ops.clock.now() - timedelta(minutes=30)
    why = PaymentWait(since, ops.clock.now(), timedelta(minutes=30), paid=False, exceeded=True).gave_up(ops.clock.now())
    assert to_text(since) in why, why
    if written == "isoformat":
        why = why.replace(to_text(since), since.isoformat())
        assert "+00:00" in why, why
    ops.ctx.states.replace(replace(record, last_error=why))
    shown = f"since {since.strftime('%Y-%m-%d %H:%M:%S UTC')})"

    page = _console(ops, browser)
    errors = page.locator("#errors")
    expect(errors).to_contain_text(shown)
    expect(errors).not_to_contain_text("+00:00")
    expect(errors).not_to_contain_text(to_text(since))

    page.goto(f"{BASE}/api/ops/console#/order/o-le")
    facts = page.locator("#order-facts")
    expect(facts).to_contain_text(shown)
    expect(facts).not_to_contain_text("+00:00")
    expect(facts).not_to_contain_text(to_text(since))
