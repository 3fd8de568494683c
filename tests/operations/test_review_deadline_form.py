"""A review's deadline is one text everywhere an operator meets it: the record's ``ReviewRequested`` detail, the
``ReviewRequired`` alert (its ``decideBy`` and summary), the order page's ``review.decideBy`` and the summary's
``waitingForReview``, all in ``timefmt``'s form (``...000000Z``). Before session 61 the record and the alert had
``...+00:00``; a record written so is still read (its deadline refuses a late answer) and shown in the one form."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import timefmt
from domain.review import REVIEW_REQUESTED
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos

ONE_FORM = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
DECIDE_BY = ", decide by "


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db)
    yield made
    made.close()


def _shown(ops: OpsHarness, order_id: str) -> tuple[str, str]:
    """The order page's ``review.decideBy`` and the summary's, for ``order_id``."""
    status, page = ops.get(f"/api/ops/orders/{order_id}")
    assert status == 200, page
    status, summary = ops.get("/api/ops/summary")
    assert status == 200, summary
    [waiting] = [row for row in summary["waitingForReview"] if row["orderId"] == order_id]
    return page["review"]["decideBy"], waiting["decideBy"]


def test_the_review_deadline_is_one_text_in_the_record_the_alert_and_the_ops_api(paused: OpsHarness) -> None:
    assert paused.ctx is not None
    record = paused.ctx.states.get("o-big")
    assert record is not None
    [requested] = [entry for entry in record.history if entry.event == REVIEW_REQUESTED]
    decide_by = requested.detail.rpartition(DECIDE_BY)[2]
    assert ONE_FORM.fullmatch(decide_by), requested.detail
    alerts = [json.loads(m.body) for m in paused.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    [alert] = [a for a in alerts if a["kind"] == "ReviewRequired"]
    assert alert["details"]["decideBy"] == decide_by and f"by {decide_by}," in alert["summary"], alert
    assert _shown(paused, "o-big") == (decide_by, decide_by)


def test_a_deadline_recorded_with_an_offset_is_shown_in_the_one_form_and_still_refuses_a_late_answer(
    ops: OpsHarness,
) -> None:
    assert ops.ctx is not None
    record = ops.awaiting_review("o-old")  # decide by now + 10 minutes
    until = ops.clock.now() + timedelta(minutes=10)
    last = record.history[-1]
    old = replace(last, detail=f"{last.detail.rpartition(DECIDE_BY)[0]}{DECIDE_BY}{until.isoformat()}")
    ops.ctx.states.replace(replace(record, history=[*record.history[:-1], old]))
    assert old.detail.endswith("+00:00"), old.detail  # as written before session 61
    assert _shown(ops, "o-old") == (timefmt.to_text(until), timefmt.to_text(until))
    ops.clock.advance_to(until)
    status, body = ops.post(
        "/api/ops/orders/o-old/review", {"reviewId": first_review("o-old"), "action": "fail", "reason": "late"}
    )
    assert status == 409 and body["error"].startswith("review deadline passed"), body
    assert body["decideBy"] == timefmt.to_text(until), body
