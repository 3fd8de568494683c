"""Found walking through the console as a new operator (session 43): the ``ReviewRequired`` alert's
summary, the line the console's recent alerts show, put the step's error (an agent's message, often long)
before what to decide, by when and what happens otherwise; the summary is cut at 200 characters, so the
demo's alert read "... decide compensate, retry or fail by 2026-01-01T0". Now the decision, its deadline
and its default come first and the error last (all of it stays in ``details`` and the order's lastError)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from tests.operations.harness import OpsHarness
from tests.operations.test_prepaid_review_alternative import _paused

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made, _ = _paused(cosmos_db)
    yield made
    made.close()


def test_the_review_alert_summary_keeps_the_deadline_and_the_default(paused: OpsHarness) -> None:
    alerts = [json.loads(m.body) for m in paused.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    [required] = [a for a in alerts if a["kind"] == "ReviewRequired"]
    details, summary = required["details"], required["summary"]
    assert len(summary) <= 200 and details["error"][:20] in summary, summary
    assert details["decideBy"] in summary, summary
    assert f"else {details['defaultAction']}" in summary, summary
    assert "compensate, retry or fail" in summary, summary
