"""The console as an on-call operator uses it, in real headless Chromium at 1366x768 (``OpsHarness``):
the overview's tables stay in their columns, the order page says what the operator can do in its state
(and shows no reason box where nothing applies), its deadlines are read against the app's clock, an
action's answer is where the operator looks after Confirm, a refusal says it was refused, and an alert
links to its order. Chromium: see test_console_browser.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import compensation, transitions
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos

LONG_ERROR = "reserve-inventory: inventory rejected inventory.reserve order o-wide key o-wide:reserve-inventory-x"


def _laptop(ops: OpsHarness, browser: Any) -> Any:
    page = _console(ops, browser)
    page.set_viewport_size({"width": 1366, "height": 768})
    return page


def test_the_overview_tables_stay_in_their_columns_at_1366(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    assert ops.ctx is not None
    for n in range(3):
        record = ops.processing(f"o-wide-{n}")
        ops.ctx.states.replace(transitions.fail(record, str(record.locked_by), None, LONG_ERROR, ops.clock.now()))
    claimed, now = ops.processing("o-paused"), ops.clock.now()
    owner = str(claimed.locked_by)
    in_step = transitions.begin_step(claimed, owner, "charge-payment", "payment", "r-1", now, now)
    until = now + timedelta(minutes=10)  # as the app pauses: in the step it reviews
    ops.ctx.states.replace(compensation.await_review(in_step, owner, "charge-payment", f"{owner}:r", until, now))
    page = _laptop(ops, browser)
    expect(page.locator("#errors")).to_contain_text("o-wide-2")
    errors = page.locator("#errors").bounding_box()
    neighbour = page.locator("#compfailed").bounding_box()
    reviews = page.locator("#reviews").bounding_box()
    assert errors is not None and neighbour is not None and reviews is not None
    beside = [b for b in (neighbour, reviews) if abs(b["y"] - errors["y"]) < 5 and b["x"] > errors["x"]]
    for box in beside:  # before: the Error table ran over the Compensation failed one
        assert errors["x"] + errors["width"] <= box["x"], (errors, box)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # the review table names the paused step (its lastError is empty while it waits)
    expect(page.locator("#reviews")).to_contain_text("charge-payment")


def test_a_settled_order_says_no_action_applies_and_offers_no_reason_box(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.error("o-done")
    assert ops.post("/api/ops/orders/o-done/compensate", {"reason": "undo it"})[0] == 200
    page = _laptop(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-done")
    expect(page.locator("#order-facts")).to_contain_text("Compensating")
    expect(page.locator("#act-hint")).to_contain_text("no action applies")
    expect(page.locator("#reason")).to_be_hidden()  # before: a lone reason box with no button


def test_an_order_page_says_what_to_do_and_reads_deadlines_on_the_apps_clock(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.error("o-err")
    late = ops.processing("o-late")
    assert ops.ctx is not None  # its completeBy passed (the supervisor has not recovered it yet)
    now, owner = ops.clock.now(), "o-late:1"
    begun = transitions.begin_step(late, owner, "reserve-inventory", "inventory", "r-1", now, now)
    ops.ctx.states.replace(replace(begun, complete_by=now - timedelta(minutes=1)))
    page = _laptop(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-err")
    expect(page.locator("#act-hint")).to_contain_text("Resubmit runs it again")
    page.goto(f"{BASE}/api/ops/console#/order/o-late")
    facts = page.locator("#order-facts")
    expect(facts).to_contain_text(" UTC (passed)")  # before: raw ISO text, nothing said about it passing
    expect(page.locator("#act-hint")).to_contain_text("completeBy has passed")
    expect(page.locator("#now")).to_contain_text(" UTC")  # before: "As of …" on an order opened by its link
    # who holds it, as an operator reads it (before: the raw instance id only)
    expect(page.locator("#order-facts dt:text-is('Locked by') + dd")).to_have_text("attempt 1 (o-late:1)")
    expect(page.locator("#timeline")).to_contain_text("by attempt 1 (o-late:1)")
    status, body = ops.get("/api/ops/orders/o-late")
    assert status == 200 and body["now"].startswith(ops.clock.now().isoformat()[:16])


def test_after_confirm_the_answer_has_focus_and_is_in_view(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.error("o-act")
    page = _laptop(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-act")
    page.locator("#reason").fill("customer asked")
    page.locator("#btn-resubmit").click()
    assert ops.post("/api/ops/orders/o-act/resubmit", {"reason": "a colleague was first"})[0] == 200
    page.locator("#confirm-yes").click()
    status = page.get_by_role("status")
    expect(status).to_contain_text("Not done: resubmit of o-act was refused: ")
    expect(status).to_be_focused()  # before: focus fell to <body>, the answer scrolled out of view
    expect(status).to_be_in_viewport()


def test_an_alert_links_to_its_order(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.error("o-alerted")
    alert = {"type": "OperatorAlert", "alertId": "a-9", "kind": "OrderFailed", "severity": "error",
             "orderId": "o-alerted", "summary": "order o-alerted failed"}  # fmt: skip
    ops.broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=json.dumps(alert), message_id="a-9"))
    page = _laptop(ops, browser)
    page.locator("#alerts a", has_text="o-alerted").click()
    expect(page.get_by_role("heading", name="Order o-alerted")).to_be_visible()


def test_a_stuck_compensation_is_listed_and_links_to_its_order(cosmos_db: Any, browser: Any) -> None:
    from playwright.sync_api import expect

    from tests.operations.test_summary_stuck_compensations import (
        GRACE,
        released_to_wait,
        round_running,
        rounds_harness,
    )

    ops = rounds_harness(cosmos_db)
    try:
        stuck = round_running(ops, "o-undo-stuck", failed_rounds=1)
        ops.clock.advance_to(ops.clock.now() + timedelta(seconds=5))
        round_running(ops, "o-undo-running")  # its undo is late 5 s after the other's
        released_to_wait(ops, "o-undo-waits", until=timedelta(minutes=10))
        assert stuck.complete_by is not None
        ops.clock.advance_to(stuck.complete_by + GRACE + timedelta(seconds=1))  # the other is not
        page = _laptop(ops, browser)
        expect(page.locator("#stuck-count")).to_have_text("(1)")
        row = page.locator("#stuck tbody tr")
        expect(row).to_have_count(1)  # before: no list of stuck rounds, only the Compensating count
        expect(row).to_contain_text("o-undo-stuck")
        expect(row).to_contain_text(f"1 of {ops.ctx.settings.max_failures if ops.ctx else '?'}")
        expect(row).to_contain_text("inventory")
        # released to wait the inventory outage out: not stuck, listed as waiting
        expect(page.locator("#outage-waits tbody tr")).to_have_count(1)
        expect(page.locator("#outage-waits")).to_contain_text("o-undo-waits")
        expect(page.locator("#outage-waits")).to_contain_text("waiting for inventory")
        page.locator("#stuck a", has_text="o-undo-stuck").click()
        expect(page.get_by_role("heading", name="Order o-undo-stuck")).to_be_visible()
        expect(page.locator("#act-hint")).to_contain_text("past its deadline (stuck)")  # before: "under way"
    finally:
        ops.close()
