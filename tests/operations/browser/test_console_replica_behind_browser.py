"""Found by the red team on the ops API under stale reads (session 45): after an action's 200 the console reloads
the order, and that GET may be served by another instance whose Cosmos DB client has no session token for the
action's write (Session consistency): its replica may be a write behind for a moment, and the page showed the
order as it was before, a taken resubmit looking like nothing happened. Now the page reads again while the
order is older than the version the 200 answered with, and says so if it stays older. Here a replica behind is
played at the HTTP edge: the order page's GETs after the action are answered with the page as it was before.
Chromium: see test_console_browser.py."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos

ORDER = "o-behind"
CONSOLE_JS = Path(__file__).resolve().parents[3] / "operations" / "console" / "console.js"
REFRESH_MS = int(re.search(r"const REFRESH_MS = (\d+);", CONSOLE_JS.read_text()).group(1))  # type: ignore[union-attr]
PAGE = f"/api/ops/orders/{ORDER}"


def _console_behind(ops: OpsHarness, browser: Any, left: list[int], refresh: bool = False) -> Any:
    """The console on ``ORDER``'s page; after the first action POST, its next ``left[0]`` GETs of the order page
    (``left`` may be raised meanwhile) are answered with the page as the first GET found it (a replica without
    the action's write). ``refresh``: the page's periodic refresh (every REFRESH_MS) stays on."""
    from playwright.sync_api import Route

    first: list[Any] = []
    posted: list[bool] = []

    def through_the_runtime(route: Route) -> None:
        request = route.request
        url = urlsplit(request.url)
        path = url.path + (f"?{url.query}" if url.query else "")
        if request.method == "GET" and path == PAGE and posted and left[0] > 0:
            left[0] -= 1
            answer = first[0]
        else:
            answer = ops.request(request.method, path, request.post_data_buffer, dict(request.headers))
            if request.method == "GET" and path == PAGE and not first:
                first.append(answer)
            if request.method == "POST":
                posted.append(True)
        route.fulfill(status=answer.status, headers=answer.headers, body=answer.body)

    page = browser.new_page()
    if not refresh:  # the periodic refresh would read the order anew too: off, to see the reload after the action
        page.add_init_script("window.setInterval = () => 0;")
    page.route(re.compile(re.escape(BASE) + "/.*"), through_the_runtime)
    page.goto(f"{BASE}/api/ops/console#/order/{ORDER}")
    return page


def _resubmit(ops: OpsHarness, page: Any) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#order-facts")).to_contain_text("Error")
    ops.clock.advance_to(ops.clock.now() + timedelta(seconds=5))  # the resubmit's write is newer than the page
    page.locator("#reason").fill("fixed the stock")
    page.locator("#btn-resubmit").click()
    page.locator("#confirm-yes").click()


def test_a_page_read_a_write_behind_after_an_action_is_read_again(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.error(ORDER)
    page = _console_behind(ops, browser, [1])
    _resubmit(ops, page)
    expect(page.get_by_role("status")).to_contain_text("Done: resubmit")
    expect(page.locator("#order-facts")).to_contain_text("Pending")  # before: Error, and Resubmit offered again
    expect(page.locator("#btn-resubmit")).to_be_hidden()
    expect(page.get_by_role("status")).not_to_contain_text("does not have that yet")


def test_a_page_that_stays_a_write_behind_says_so(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    ops.error(ORDER)
    page = _console_behind(ops, browser, [10])
    _resubmit(ops, page)
    status = page.get_by_role("status")
    expect(status).to_contain_text("Done: resubmit")
    expect(status).to_contain_text("does not have that yet", timeout=10_000)  # before: "the order as it is now"
    expect(page.locator("#order-facts")).to_contain_text("Error")


def test_a_refresh_read_a_write_behind_leaves_the_newer_page_as_it_is(ops: OpsHarness, browser: Any) -> None:
    """Once the page shows the resubmit, a refresh served by a replica without it does not put it back to Error."""
    from playwright.sync_api import expect

    ops.error(ORDER)
    left = [0]
    page = _console_behind(ops, browser, left, refresh=True)
    _resubmit(ops, page)
    expect(page.locator("#order-facts")).to_contain_text("Pending")
    left[0] = 100  # from now on every GET of the page is a write behind
    page.wait_for_timeout(REFRESH_MS * 2 + 500)  # two refreshes at least
    assert left[0] < 100  # they read the page
    expect(page.locator("#order-facts")).to_contain_text("Pending")  # before: Error again, Resubmit offered
    expect(page.locator("#btn-resubmit")).to_be_hidden()
