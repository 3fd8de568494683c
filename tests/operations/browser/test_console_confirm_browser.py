"""The console's confirmation is what gets posted (red team): the action, the order, the review
decision and the reason the operator confirmed, whatever happens on the page between "Confirm: ...?"
and the click. Before, ``act`` read them when Confirm was clicked: the order shown then (the search box
and the browser's Back stay usable while a confirmation is open) and the decision and reason as the
form held them then, so a cancel confirmed "for order o-first" was posted to o-second. Chromium: see
test_console_browser.py."""

from __future__ import annotations

from typing import Any

import pytest

from domain.states import ProcessState
from orchestrators.names import SCHEDULER
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness, first_review

pytestmark = pytest.mark.cosmos


def _state(ops: OpsHarness, order_id: str) -> ProcessState:
    assert ops.ctx is not None
    record = ops.ctx.states.get(order_id)
    assert record is not None
    return record.process_state


def test_a_confirmation_left_open_never_acts_on_the_next_order_shown(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.error("o-first")
    ops.error("o-second")
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-first")
    expect(page.locator("#btn-cancel")).to_be_visible()
    page.locator("#reason").fill("customer asked to cancel o-first")
    page.locator("#btn-cancel").click()
    expect(page.locator("#confirm-text")).to_contain_text("cancel for order o-first")

    page.locator("#search-id").fill("o-second")  # the header's search stays usable
    page.locator("#search-id").press("Enter")
    expect(page.get_by_role("heading", name="Order o-second")).to_be_visible()
    if page.locator("#confirm").is_visible():  # before the fix it still said "for order o-first"
        page.locator("#confirm-yes").click()
        expect(page.get_by_role("status")).to_contain_text("cancel")
    assert _state(ops, "o-second") is ProcessState.ERROR, "the cancel confirmed for o-first was posted to o-second"
    expect(page.locator("#confirm")).to_be_hidden()

    page.go_back()  # back on o-first: the operator confirms again, and that order is cancelled
    expect(page.get_by_role("heading", name="Order o-first")).to_be_visible()
    page.locator("#reason").fill("customer asked to cancel o-first")
    page.locator("#btn-cancel").click()
    page.locator("#confirm-yes").click()
    expect(page.get_by_role("status")).to_contain_text("Done: cancel of o-first")
    # the state the action left, said as then (the page below shows the order as it is now)
    expect(page.get_by_role("status")).to_contain_text("recorded while the order was Compensating")
    assert (_state(ops, "o-first"), _state(ops, "o-second")) == (ProcessState.COMPENSATING, ProcessState.ERROR)


def test_the_review_answer_posted_is_the_one_confirmed(
    ops: OpsHarness,
    browser: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decision and the reason are taken when the operator asks to confirm: a radio button or the
    reason changed while "answer review ... with “retry”" is on screen does not change what is sent."""
    import azure.durable_functions as df
    from playwright.sync_api import expect

    from operations import instances

    ops.awaiting_review("o-rev")

    async def paused_attempt(client: Any, instance: str) -> instances.AttemptState:
        return instances.AttemptState(takes_events=True, name=SCHEDULER)

    delivered: list[Any] = []

    async def accepted(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        delivered.append(event_data)

    monkeypatch.setattr(instances, "attempt_state", paused_attempt)
    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", accepted)
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-rev")
    expect(page.locator("#btn-review")).to_be_visible()
    page.locator("input[name=decision][value=retry]").check()
    page.locator("#reason").fill("provider is back")
    page.locator("#btn-review").click()
    expect(page.locator("#confirm-text")).to_contain_text("with “retry”")
    page.locator("input[name=decision][value=fail]").check()  # changed while the confirmation is open
    page.locator("#reason").fill("something else")
    page.locator("#confirm-yes").click()
    expect(page.get_by_role("status")).to_contain_text("Done: review of o-rev")
    assert [(d["reviewId"], d["action"], d["reason"]) for d in delivered] == [
        (first_review("o-rev"), "retry", "provider is back")
    ], delivered
