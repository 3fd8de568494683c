"""Found walking through the console as a new operator (session 43): the order page's timeline wrote its
own times as "2026-01-01 08:00:03 UTC" but the times inside a history entry's detail as the record keeps
them ("deadline 2026-01-01T08:01:03.428681+00:00", "decide by ..."), and a claim's detail as a bare
instance id where every other place names it ("attempt 1 (o-1:1)"). Chromium: see test_console_browser.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from domain import transitions
from domain.timefmt import to_text
from tests.operations.browser.test_console_unreadable_browser import _console
from tests.operations.harness import BASE, OpsHarness

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize("written", ["timefmt", "isoformat"])
def test_the_timeline_reads_its_details_times_and_instances_as_the_page_does(
    ops: OpsHarness, browser: Any, written: str
) -> None:
    """``written``: the detail's deadline as the app writes it, or as a release before session 63 did (``+00:00``)."""
    from playwright.sync_api import expect

    assert ops.ctx is not None
    record = ops.processing("o-tl")
    now, owner = ops.clock.now(), str(record.locked_by)
    deadline = now + timedelta(seconds=60)
    begun = transitions.begin_step(record, owner, "reserve-inventory", "inventory", "r-1", deadline, now)
    step = begun.history[-1]
    assert step.detail.endswith(f", deadline {to_text(deadline)}"), step
    if written == "isoformat":
        step = replace(step, detail=step.detail.replace(to_text(deadline), deadline.isoformat()))
        begun = replace(begun, history=[*begun.history[:-1], step])
        assert step.detail.endswith("+00:00"), step
    ops.ctx.states.replace(replace(begun, version=record.version))
    shown = deadline.strftime("%Y-%m-%d %H:%M:%S UTC")
    page = _console(ops, browser)
    page.goto(f"{BASE}/api/ops/console#/order/o-tl")
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text(f"reserve-inventory via inventory, deadline {shown}")
    expect(timeline).to_contain_text(f"Claimed by starter: attempt 1 ({owner})")
    expect(timeline).not_to_contain_text("+00:00")
