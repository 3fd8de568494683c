"""The console in real headless Chromium, its requests answered by the ops API through the real Functions
runtime (``OpsHarness``), with markup everywhere text from outside reaches the page: a step's error
(``lastError``, from an agent or a client's cancel), an operator's reason and name (the principal's display
name is the platform's, not checked by it), an alert's kind and summary (``operator-alerts``). The console
shows each as text: no element of it is created, no handler runs (the page builds its DOM with
``textContent``; the Content-Security-Policy is a second line, not the one tested here). And links and
addresses a visitor may bring: an order link that does not decode, the console's address in another case.
Chromium: see test_console_browser.py."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import transitions
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos


def _markup(name: str) -> str:
    """An element the page must never create, whose handler would mark the page if it ran."""
    return f'<img src="x" id="pwn-{name}" onerror="window.pwned=\'{name}\'"><b id="pwn-{name}-b">{name}</b>'


NAME = _markup("name")  # no ':' in it: OPS_LOCAL_PRINCIPAL is name:roles


def _assert_shown_as_text(page: Any, errors: list[str]) -> None:
    assert page.locator("[id^=pwn-]").count() == 0, page.content()
    assert page.evaluate("window.pwned === undefined"), page.evaluate("window.pwned")
    assert errors == [], errors


def test_markup_in_errors_reasons_names_and_alerts_is_shown_as_text(cosmos_db: Any, browser: Any) -> None:
    from playwright.sync_api import expect

    ops = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=f"{NAME}:Orders.Read,Orders.Operate")
    try:
        assert ops.ctx is not None
        record = ops.processing("o-inj-err")
        failed = transitions.fail(record, str(record.locked_by), None, _markup("lasterror"), ops.clock.now())
        ops.ctx.states.replace(replace(failed, version=record.version))
        ops.pending("o-inj-cancel")
        status, answer = ops.post("/api/ops/orders/o-inj-cancel/cancel", {"reason": _markup("reason")})
        assert status == 200, answer
        alert_id = "alert:Injected:o-inj-err"
        alert = {
            "type": "OperatorAlert",
            "schemaVersion": 1,
            "alertId": alert_id,
            "kind": _markup("kind"),
            "severity": "error",
            "orderId": "o-inj-err",
            "summary": _markup("summary"),
            "details": {},
            "at": "2026-05-01T09:00:00Z",
        }
        ops.broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body=json.dumps(alert), message_id=alert_id))

        page = _console(ops, browser)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        expect(page.locator("#alerts")).to_contain_text('<img src="x" id="pwn-summary"')
        expect(page.locator("#alerts")).to_contain_text('<b id="pwn-kind-b">kind</b>')
        expect(page.locator("#errors")).to_contain_text('<img src="x" id="pwn-lasterror"')
        _assert_shown_as_text(page, errors)

        page.goto(f"{BASE}/api/ops/console#/order/o-inj-cancel")
        expect(page.get_by_role("heading", name="Order o-inj-cancel")).to_be_visible()
        expect(page.locator("#timeline")).to_contain_text(f"cancelled by operator {NAME}: {_markup('reason')}")
        expect(page.locator("#order-facts")).to_contain_text('<img src="x" id="pwn-reason"')
        _assert_shown_as_text(page, errors)
    finally:
        ops.close()


@pytest.mark.parametrize("fragment", ["#/order/%E0%A4%A", "#/order/%", "#/order/%3Cimg%20src%3Dx%3E"])
def test_an_order_link_that_does_not_decode_or_is_no_order_id_says_so(
    ops: OpsHarness,
    browser: Any,
    fragment: str,
) -> None:
    """Found by the red team (session 32) on 36c310f: ``route`` passed the fragment to
    ``decodeURIComponent`` unguarded, and a link whose escapes do not decode (``%E0%A4%A``, a lone ``%``)
    threw a URIError: the page showed nothing (neither the order nor the overview) until its next poll,
    and said nothing. An id that decodes but is not one is the API's 400, shown as it says."""
    from playwright.sync_api import expect

    ops.pending("o-link")
    page = _console(ops, browser)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    expect(page.locator("#tiles li")).to_have_count(7)
    page.goto(f"{BASE}/api/ops/console{fragment}")
    expect(page.get_by_role("status")).to_contain_text(
        "Not an order link" if "%3C" not in fragment else "malformed order id"
    )
    expect(page.locator("#list")).to_contain_text("o-link")  # the overview still shows
    assert errors == [], errors
    assert page.locator("img").count() == 0


def test_the_console_works_at_its_address_in_any_case(ops: OpsHarness, browser: Any) -> None:
    """Found by the red team (session 32) on 36c310f: the route matches ``/api/OPS/Console`` (routes are
    case-insensitive), but the page found the API's address by cutting ``/console`` off its own, case
    sensitively: it asked for ``/api/OPS/Console/summary`` (no such file: 404) and showed nothing."""
    from playwright.sync_api import expect

    ops.pending("o-case")
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/OPS/Console")
    expect(page.locator("#tiles li")).to_have_count(7)
    expect(page.locator("#list")).to_contain_text("o-case")
