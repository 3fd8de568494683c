"""The console in real headless Chromium, its requests answered by the ops API through the real
Functions runtime (``OpsHarness``): a state document that does not map is named on the overview with
what is wrong, and its order page says so instead of failing. Chromium: see test_console_browser.py."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest

from orchestrators.names import SCHEDULER
from tests.operations.harness import BASE, OpsHarness, first_review
from tests.operations.test_unreadable_documents import poison

pytestmark = pytest.mark.cosmos


def _console(ops: OpsHarness, browser: Any) -> Any:
    """A page on the console whose every request is answered by the ops API through the runtime."""
    from playwright.sync_api import Route

    def through_the_runtime(route: Route) -> None:
        request = route.request
        url = urlsplit(request.url)
        path = url.path + (f"?{url.query}" if url.query else "")
        answer = ops.request(request.method, path, request.post_data_buffer, dict(request.headers))
        route.fulfill(status=answer.status, headers=answer.headers, body=answer.body)

    page = browser.new_page()
    page.route(re.compile(re.escape(BASE) + "/.*"), through_the_runtime)
    page.goto(f"{BASE}/api/ops/console")
    return page


def test_the_console_names_an_unreadable_state_document_and_shows_its_order(
    ops: OpsHarness, cosmos_db: Any, browser: Any
) -> None:
    from playwright.sync_api import expect

    ops.processing("o-good")
    ops.processing("o-bad")
    poison(cosmos_db, "o-bad", failureCount="several")
    page = _console(ops, browser)
    expect(page.locator("#unreadable-section")).to_be_visible()
    expect(page.locator("#unreadable")).to_contain_text("o-bad")
    expect(page.locator("#unreadable")).to_contain_text("failureCount")
    expect(page.locator("#list")).to_contain_text("o-good")  # the list shows the others, and says what it left out
    expect(page.get_by_role("status")).to_contain_text("do not map to a record and are not listed: o-bad")

    page.locator("#unreadable a", has_text="o-bad").click()
    expect(page.get_by_role("heading", name="Order o-bad")).to_be_visible()
    expect(page.locator("#order-facts")).to_contain_text("does not map to a record")
    expect(page.locator("#order-facts")).to_contain_text("failureCount")


def test_the_unreadable_section_stays_hidden_when_every_document_maps(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.processing("o-good")
    page = _console(ops, browser)
    expect(page.locator("#tiles li")).to_have_count(7)  # the overview loaded
    expect(page.locator("#unreadable-section")).to_have_count(1)
    expect(page.locator("#unreadable-section")).to_be_hidden()


def test_the_overview_names_an_unreadable_error_document(
    ops: OpsHarness,
    cosmos_db: Any,
    browser: Any,
) -> None:
    """An Error document that does not map is named in the "Unreadable state documents" section, not
    only counted in its tile (found by a red team)."""
    from playwright.sync_api import expect

    ops.error("o-err-bad")
    poison(cosmos_db, "o-err-bad", failureCount="several")
    page = _console(ops, browser)
    expect(page.locator("#tiles li")).to_have_count(7)  # the overview loaded
    expect(page.locator("#errors")).to_contain_text("none")  # the Error table was filled
    expect(page.locator("#unreadable-section")).to_be_visible()
    expect(page.locator("#unreadable")).to_contain_text("o-err-bad")


def test_after_a_delivery_uncertain_503_the_console_still_lets_the_operator_post_the_same_answer_again(
    ops: OpsHarness,
    browser: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The 503 (the answer is noted, the raise failed ambiguously) says "post the same answer again to
    deliver it": the reloaded order page still offers the review (with the noted answer), and the
    repost it sends names the review (found by a red team)."""
    import azure.durable_functions as df
    from playwright.sync_api import expect

    from operations import instances

    ops.awaiting_review("o-503")

    async def paused_attempt(client: Any, instance: str) -> instances.AttemptState:
        return instances.AttemptState(takes_events=True, name=SCHEDULER)

    async def timed_out(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        raise Exception("timed out waiting for the raise-event response")

    monkeypatch.setattr(instances, "attempt_state", paused_attempt)
    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", timed_out)
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-503")
    expect(page.locator("#btn-review")).to_be_visible()
    page.locator("input[name=decision][value=fail]").check()
    page.locator("#reason").fill("card stolen")
    page.locator("#btn-review").click()
    page.locator("#confirm-yes").click()
    expect(page.get_by_role("status")).to_contain_text("post the same answer again")
    expect(page.locator("#timeline")).to_contain_text("ReviewAnswered")  # the order was reloaded
    expect(page.locator("#order-facts")).to_contain_text("fail by ops@contoso.example")
    expect(page.locator("#btn-review")).to_be_visible()
    delivered: list[Any] = []

    async def accepted(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        delivered.append(event_data)

    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", accepted)
    page.locator("#reason").fill("card stolen")
    page.locator("#btn-review").click()
    page.locator("#confirm-yes").click()
    expect(page.get_by_role("status")).to_contain_text("Done: review")
    assert [d["reviewId"] for d in delivered] == [first_review("o-503")], delivered
