"""The order waiting for review says what its attempt takes if nobody answers by ``decideBy``
(``review.defaultAction`` of GET /api/ops/orders/{id}): the default the attempt passed to ``await_review``,
which keeps it on the record (``reviewDefault``). Before, the operator read only "it takes its default".
A record written before it was kept says null (not known)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.records import ReviewDefault
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-dflt", "600", REVIEW_DEFAULT_ACTION="retry")
    yield made
    made.close()


def test_the_review_says_which_default_the_attempt_takes(paused: OpsHarness) -> None:
    assert paused.ctx is not None
    record = paused.ctx.states.get("o-dflt")
    assert record is not None
    # the attempt's await_review kept it: the configured default, which the charge's fallback can carry out
    assert record.review_default == ReviewDefault(review_id=first_review("o-dflt"), action="retry")

    status, body = paused.get("/api/ops/orders/o-dflt")

    assert status == 200, body
    assert body["review"]["reviewId"] == first_review("o-dflt"), body["review"]
    assert body["review"]["defaultAction"] == "retry", body["review"]


def test_a_record_without_the_default_says_none(ops: OpsHarness) -> None:
    ops.awaiting_review("o-old")  # as written before the default was kept

    status, body = ops.get("/api/ops/orders/o-old")

    assert status == 200, body
    assert body["review"] is not None and body["review"]["defaultAction"] is None, body["review"]


def test_the_summary_row_of_a_waiting_order_says_its_default(paused: OpsHarness) -> None:
    """The overview's "Waiting for review" list carries the default too (it showed only the deadline, so
    an operator scanning it could not tell which reviews fail the order if left alone)."""
    status, body = paused.get("/api/ops/summary")

    assert status == 200, body
    rows = [row for row in body["waitingForReview"] if row["orderId"] == "o-dflt"]
    assert len(rows) == 1, body["waitingForReview"]
    assert rows[0]["defaultAction"] == "retry", rows[0]
    assert rows[0]["decideBy"] is not None, rows[0]


def test_a_summary_row_without_a_kept_default_says_none(ops: OpsHarness) -> None:
    ops.awaiting_review("o-old")  # as written before the default was kept

    status, body = ops.get("/api/ops/summary")

    assert status == 200, body
    rows = [row for row in body["waitingForReview"] if row["orderId"] == "o-old"]
    assert len(rows) == 1 and rows[0]["defaultAction"] is None, body["waitingForReview"]
