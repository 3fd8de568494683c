"""A continuation token resumes the list it came from, never another (red team). Cosmos DB's token for
the newest-first query holds where the last page stopped (its ``updatedAt``), not which filter it was
for: the token of "every order", sent with ``state=Error``, was answered 200 with the Error orders
older than that point, the newer ones silently left out. The console sent just that when the state was
changed in its list filter and "Next page" clicked before "Show". The API's token now names its list
(``state``) and one for another list is 400."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest

from domain import transitions
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos


def _tick(ops: OpsHarness) -> None:
    ops.clock.advance_to(ops.clock.now() + timedelta(seconds=1))


def _processed(ops: OpsHarness, order_id: str) -> None:
    """A Processed record: nothing the app runs touches it again (a Pending one, the starter claims)."""
    assert ops.ctx is not None
    record = ops.processing(order_id)
    done = transitions.mark_processed(record, str(record.locked_by), ops.clock.now())
    ops.ctx.states.replace(replace(done, version=record.version))


def _orders(ops: OpsHarness, processed_after: int) -> None:
    """o-p0..o-p2 (Processed), then o-e0..o-e2 (Error), then ``processed_after`` more Processed orders
    o-q0..: newest last."""
    for i in range(3):
        _processed(ops, f"o-p{i}")
        _tick(ops)
    for i in range(3):
        ops.error(f"o-e{i}")
        _tick(ops)
    for i in range(processed_after):
        _processed(ops, f"o-q{i}")
        _tick(ops)


def _ids(body: dict[str, Any]) -> list[str]:
    return [o["orderId"] for o in body["orders"]]


def test_a_token_of_another_list_is_400_and_each_list_pages_through_itself(ops: OpsHarness) -> None:
    _orders(ops, processed_after=3)
    status, first = ops.get("/api/ops/orders?pageSize=4")
    assert status == 200 and _ids(first) == ["o-q2", "o-q1", "o-q0", "o-e2"], first
    token = quote(first["continuation"])

    status, body = ops.get(f"/api/ops/orders?state=Error&pageSize=4&continuation={token}")
    assert status == 400 and "continuation" in body["error"], body  # was 200 [o-e1, o-e0]: o-e2 left out

    status, rest = ops.get(f"/api/ops/orders?pageSize=4&continuation={token}")
    assert status == 200 and _ids(rest) == ["o-e1", "o-e0", "o-p2", "o-p1"], rest
    status, errors = ops.get("/api/ops/orders?state=Error&pageSize=2")
    assert status == 200 and _ids(errors) == ["o-e2", "o-e1"], errors
    status, more = ops.get(f"/api/ops/orders?state=Error&pageSize=2&continuation={quote(errors['continuation'])}")
    assert status == 200 and _ids(more) == ["o-e0"] and more["continuation"] is None, more
    status, body = ops.get(f"/api/ops/orders?pageSize=2&continuation={quote(errors['continuation'])}")
    assert status == 400, body  # and an Error token for every order's list


def test_the_console_never_pages_one_list_with_another_lists_token(ops: OpsHarness, browser: Any) -> None:
    from playwright.sync_api import expect

    _orders(ops, processed_after=24)  # every order's first page (25) ends at o-e2; the Error list has one page
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/")
    expect(page.locator("#list-more")).to_be_visible()
    page.locator("#list-state").select_option("Error")  # changed, "Show" not clicked
    page.locator("#list-more").evaluate("button => button.click()")  # at once, as a quick operator does
    expect(page.locator("#list")).not_to_contain_text("o-q")  # the first page is gone
    expect(page.locator("#list tbody tr")).to_have_text([re.compile(f"^o-e{i}") for i in (2, 1, 0)])


def test_the_token_is_the_apis_own_and_a_token_of_an_earlier_version_is_400(ops: OpsHarness) -> None:
    """The list's token is the API's own keyset cursor (``k1.``: where the page ended), never Cosmos DB's
    continuation token, which the SDK cannot resume a cross-partition ORDER BY from on Azure. A token the
    earlier version handed out (Cosmos DB's after the list's name) and one altered are 400: start over."""
    _orders(ops, processed_after=0)
    status, first = ops.get("/api/ops/orders?pageSize=2")
    assert status == 200 and _ids(first) == ["o-e2", "o-e1"], first
    token = first["continuation"]
    assert re.fullmatch(r"any:k1\.[A-Za-z0-9_=-]+", token), token
    status, rest = ops.get(f"/api/ops/orders?pageSize=10&continuation={quote(token)}")
    assert status == 200 and _ids(rest) == ["o-e0", "o-p2", "o-p1", "o-p0"] and rest["continuation"] is None

    earlier = [
        'any:{"token":"-RID:~x#RT:1#TRC:2#ISV:2#IEO:65567#QCF:8","range":{"min":"","max":"FF"}}',  # Azure's
        'any:{"RID":"x","RT":1,"SRC":0,"TRC":2}',  # the local server's
        "any:k1.!!!",  # not base64
        "any:k1.eyJhIjoxfQ==",  # base64 of {"a":1}: not [updatedAt, id]
        "any:k1.WzEsMl0=",  # [1,2]: not text
        "any:k0.WyJhIiwiYiJd",  # another version
    ]
    for sent in earlier:
        status, body = ops.get(f"/api/ops/orders?pageSize=2&continuation={quote(sent, safe='')}")
        assert status == 400 and "start from the first page" in body["error"], (sent, body)


def test_the_400_for_another_lists_token_names_both_lists_as_the_client_writes_them(ops: OpsHarness) -> None:
    """The message named the list asked for as the Python enum (``<ProcessState.ERROR: 'Error'>``), not
    as the ``state`` the client sent (found following the README's ops API by hand)."""
    _orders(ops, processed_after=0)
    status, first = ops.get("/api/ops/orders?pageSize=1")
    assert status == 200 and first["continuation"], first
    status, body = ops.get(f"/api/ops/orders?state=Error&pageSize=1&continuation={quote(first['continuation'])}")
    assert status == 400, body
    assert "the list of 'any' orders, not of 'Error'" in body["error"], body
    assert "ProcessState" not in body["error"], body


@pytest.mark.parametrize("key", [["2026-05-01T09:00:00.000000Z", "o-e1\nFAKE"], ["2026-05-01T09:00:00\t", "o-e1"]])
def test_a_token_whose_key_is_not_one_line_is_400(ops: OpsHarness, key: list[str]) -> None:
    """Session 63: a value from outside that the API reads as an id is one line. The token's key (where the page
    ended: an updatedAt and an order id) passed with a tab or a line break in it (only other control characters were
    refused), and was served as a cursor."""
    _orders(ops, processed_after=0)
    packed = base64.urlsafe_b64encode(json.dumps(key).encode()).decode()
    status, body = ops.get(f"/api/ops/orders?pageSize=2&continuation={quote(f'any:k1.{packed}', safe='')}")
    assert status == 400 and "start from the first page" in body["error"], body
