"""The order page of an order whose Durable history the retention timer purged (``retention``, hourly,
``DURABLE_HISTORY_RETENTION_DAYS``): the extension answers its attempts' status reads 404, which the SDK reads
as an empty status, as for an instance that never started. The page lists each such attempt claimed before the
retention's cutoff as finished with its history purged (``historyPurged``, ``historiesPurged``: no status sent
is known any more), not as unknown to the backend; an attempt claimed since that the backend does not know is
still "unknown". Everything runs for real: the order through the app, the timer's purge through the SDK's
``purge_instance_history_by`` and the runner's extension API, the page through the ops API."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.remote.services import remote_services
from contracts.names import ORDERS_QUEUE
from tests.operations.harness import OPERATOR, OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


def _completed(harness: OpsHarness, order_id: str) -> None:
    """``order_id`` submitted and processed by the app, its services answering."""
    assert harness.ctx is not None
    harness.change_context(remote=remote_services(harness.ctx.settings, harness.clock, {}, seed=3))
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId=order_id)), order_id)
    harness.run_until_idle()


def test_a_two_month_old_order_whose_history_is_purged_has_a_clear_page(ops: OpsHarness) -> None:
    _completed(ops, "o-old")
    status, before = ops.get("/api/ops/orders/o-old")
    assert status == 200 and before["state"]["processState"] == "Processed", before
    assert [a["runtimeStatus"] for a in before["attempts"]] == ["Completed"], before
    assert before["statusesSent"] and before["historiesPurged"] == 0, before

    ops.clock.advance_to(ops.clock.now() + timedelta(days=60))  # two months on: every timer due fires once
    ops.run_until_idle(limit=timedelta(minutes=1))
    assert ops.host.engine.instance("o-old:1") is None  # the hourly timer purged it
    ops.error("o-new")  # claimed now; its instance never started

    status, after = ops.get("/api/ops/orders/o-old")
    assert status == 200 and "attemptsError" not in after, after
    assert after["state"]["processState"] == "Processed", after
    [attempt] = after["attempts"]
    assert attempt["runtimeStatus"] is None and attempt["historyPurged"] is True, attempt
    assert after["statusesSent"] == [] and after["historiesPurged"] == 1, after
    status, recent = ops.get("/api/ops/orders/o-new")
    assert status == 200 and [a["historyPurged"] for a in recent["attempts"]] == [False], recent


def test_an_attempt_that_never_started_is_not_said_purged(ops: OpsHarness) -> None:
    """An attempt claimed and never started (its ``start_new`` failed, or its order could not be read: claimed and
    not started, ``orchestrators.starter``) was never in the backend, before the cutoff or after it: no history of
    it was purged, and the page must not say it ran and finished. Its record says so: the claim is kept, and no
    move of the instance follows it."""
    ops.processing("o-stuck")  # claimed; its instance never started
    ops.clock.advance_to(ops.clock.now() + timedelta(days=60))
    ops.run_until_idle(limit=timedelta(minutes=1))

    status, page = ops.get("/api/ops/orders/o-stuck")
    assert status == 200 and "attemptsError" not in page, page
    stuck = next(a for a in page["attempts"] if a["instanceId"] == "o-stuck:1")
    assert stuck["runtimeStatus"] is None and stuck["historyPurged"] is False, page["attempts"]
    assert page["historiesPurged"] == 0, page


def test_with_retention_off_nothing_is_purged_nor_said_purged(cosmos_db) -> None:
    harness = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, DURABLE_HISTORY_RETENTION_DAYS="0")
    try:
        _completed(harness, "o-kept")
        harness.clock.advance_to(harness.clock.now() + timedelta(days=60))
        harness.run_until_idle(limit=timedelta(minutes=1))
        status, page = harness.get("/api/ops/orders/o-kept")
        assert status == 200 and [a["runtimeStatus"] for a in page["attempts"]] == ["Completed"], page
        assert page["historiesPurged"] == 0 and page["statusesSent"], page
    finally:
        harness.close()


def test_the_console_shows_the_attempt_finished_with_its_history_purged(ops: OpsHarness, browser: Any) -> None:
    """The same page in the console, in real headless Chromium (test_console_browser.py)."""
    from playwright.sync_api import expect

    from tests.operations.browser.test_console_unreadable_browser import _console

    _completed(ops, "o-old")
    ops.clock.advance_to(ops.clock.now() + timedelta(days=60))
    ops.run_until_idle(limit=timedelta(minutes=1))
    page = _console(ops, browser)
    page.evaluate("location.hash = '#/order/o-old'")
    expect(page.get_by_role("heading", name="Order o-old")).to_be_visible()
    expect(page.locator("#attempts")).to_contain_text("finished, history purged")
    expect(page.locator("#attempts")).not_to_contain_text("unknown to Durable")
    expect(page.locator("#statuses")).to_contain_text("1 purged (DURABLE_HISTORY_RETENTION_DAYS)")
