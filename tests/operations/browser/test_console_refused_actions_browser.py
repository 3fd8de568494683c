"""Found walking through the console as a new operator (session 43): it offered actions the ops API then
refused with 409. Cancel and Compensate were offered on an order past the pivot (its shipment under way:
nothing may be undone), "Answer review" once the review's deadline had passed with no answer ("review
deadline passed"), and every answer to a review whose answer was already noted (another answer is 409
with the first). Now the order page carries ``pastPivot`` and the console offers only what the API takes,
saying why. Chromium: see test_console_browser.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from domain import compensation, review, transitions
from domain.compensation import complete_step_logged
from domain.records import StateRecord
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos

REASON = {"reason": "the customer asked"}


def _shipping(ops: OpsHarness, order_id: str) -> StateRecord:
    """An order whose inventory and payment steps succeeded and whose shipment is in flight (the pivot)."""
    assert ops.ctx is not None
    record = ops.processing(order_id)
    now, owner = ops.clock.now(), str(record.locked_by)
    for step, agent in (("reserve-inventory", "inventory"), ("charge-payment", "payment")):
        started = transitions.begin_step(record, owner, step, agent, f"{owner}:{step}", now, now)
        record = ops.ctx.states.replace(replace(started, version=record.version))
        done = complete_step_logged(record, owner, step, {"ref": step}, now, now)
        record = ops.ctx.states.replace(replace(done, version=record.version))
    shipping = transitions.begin_step(record, owner, "arrange-shipment", "shipping", f"{owner}:ship", now, now)
    return ops.ctx.states.replace(replace(shipping, version=record.version))


def test_past_the_pivot_the_console_offers_no_cancel_or_compensate(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    assert ops.ctx is not None
    _shipping(ops, "o-shipping")
    shipped = _shipping(ops, "o-ship-error")
    # its attempts kept missing the shipment's deadline: Error with the shipment's outcome unknown (in flight)
    why = "arrange-shipment: deadline missed 3 times"
    failed = transitions.fail(shipped, str(shipped.locked_by), None, why, ops.clock.now())
    ops.ctx.states.replace(replace(failed, version=shipped.version))
    for order_id, action in (("o-ship-error", "cancel"), ("o-ship-error", "compensate"), ("o-shipping", "cancel")):
        assert ops.post(f"/api/ops/orders/{order_id}/{action}", REASON)[0] == 409, (order_id, action)
    assert ops.get("/api/ops/orders/o-ship-error")[1]["pastPivot"] is True

    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-ship-error")
    expect(page.locator("#order-facts")).to_contain_text("Error")
    expect(page.locator("#btn-resubmit")).to_be_visible()
    expect(page.locator("#btn-cancel")).to_be_hidden()  # before: offered, then refused 409
    expect(page.locator("#btn-compensate")).to_be_hidden()
    expect(page.locator("#act-hint")).to_contain_text("past the pivot")
    page.goto(f"{BASE}/api/ops/console#/order/o-shipping")
    expect(page.locator("#order-facts")).to_contain_text("Processing")
    expect(page.locator("#act-hint")).to_contain_text("past the pivot")
    expect(page.locator("#btn-cancel")).to_be_hidden()
    expect(page.locator("#reason")).to_be_hidden()  # no action applies: no reason box


def test_a_review_past_its_deadline_is_not_offered_an_answer(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    assert ops.ctx is not None
    claimed, now = ops.processing("o-late"), ops.clock.now()
    owner, deadline = str(claimed.locked_by), now + timedelta(minutes=10)
    paused = compensation.await_review(  # as the app pauses: completeBy a minute past the deadline
        claimed, owner, "charge-payment", f"{owner}:r", deadline, now, keep_until=deadline + timedelta(minutes=1)
    )
    ops.ctx.states.replace(replace(paused, version=claimed.version))
    pending, _ = ops.waiting_review("o-late")
    ops.clock.advance_to(deadline + timedelta(seconds=1))  # the attempt has not closed the review yet
    answer = {"reviewId": pending.review_id, "action": "retry", **REASON}
    status, body = ops.post("/api/ops/orders/o-late/review", answer)
    assert status == 409 and "review deadline passed" in body["error"]

    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-late")
    expect(page.locator("#order-facts")).to_contain_text("waiting for review")
    expect(page.locator("#act-hint")).to_contain_text("has passed")
    expect(page.locator("#btn-review")).to_be_hidden()  # before: offered, then refused 409
    expect(page.locator("#review-choice")).to_be_hidden()
    expect(page.locator("#btn-cancel")).to_be_visible()  # a cancel is still taken during the pause


def test_a_noted_answer_is_the_only_one_offered_again(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    assert ops.ctx is not None
    record = ops.awaiting_review("o-noted")
    pending, _ = ops.waiting_review("o-noted")
    noted = review.note_review_answer(
        record, pending.review_id, "ops@contoso.example", "compensate", "undo it", ops.clock.now()
    )
    ops.ctx.states.replace(replace(noted, version=record.version))
    other = {"reviewId": pending.review_id, "action": "retry", **REASON}
    assert ops.post("/api/ops/orders/o-noted/review", other)[0] == 409  # a second, different answer

    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-noted")
    expect(page.locator("#btn-review")).to_be_visible()
    expect(page.get_by_label("Compensate (undo completed steps)")).to_be_checked()
    for refused in ("Retry the step", "Fail the order"):  # before: offered, "Retry" checked: 409
        expect(page.get_by_label(refused)).to_be_hidden()


def test_an_answer_left_to_the_supervisor_says_so(ops: OpsHarness, browser: Any) -> None:
    """The noted answer posted again once its attempt is gone is 200 ``carriedOutBy: "supervisor"``: the
    console said only "Done", above a page still inviting the operator to answer the same again."""
    from playwright.sync_api import expect

    assert ops.ctx is not None
    record = ops.awaiting_review("o-left")  # no orchestration runs it here: the attempt is gone
    pending, _ = ops.waiting_review("o-left")
    noted = review.note_review_answer(record, pending.review_id, "ops@contoso.example", "fail", "stop", ops.clock.now())
    ops.ctx.states.replace(replace(noted, version=record.version))
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-left")
    page.locator("#reason").fill("stop")
    page.locator("#btn-review").click()
    page.locator("#confirm-yes").click()
    expect(page.locator("#status")).to_contain_text("the supervisor carries the answer out")
