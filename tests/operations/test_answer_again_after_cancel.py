"""An operator posts an answer to a review, a cancel compensates the order before the paused attempt
acts on it, and the operator posts the same answer again: the 409 says the order moved on (it is
``Compensating``), not only that the review "was already answered" (by that same operator)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.states import ProcessState
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-again", "86400")
    yield made
    made.close()


def test_an_answer_posted_again_after_a_cancel_says_the_order_is_compensating(paused):
    assert paused.ctx is not None
    answer = {"reviewId": first_review("o-again"), "action": "retry", "reason": "provider fixed"}
    status, body = paused.post("/api/ops/orders/o-again/review", answer)
    assert status in (200, 202), body
    # the cancel lands before the paused attempt runs again (it has not acted on the answer)
    status, body = paused.post("/api/ops/orders/o-again/cancel", {"reason": "customer withdrew"})
    assert status == 200, body
    assert paused.ctx.states.get("o-again").process_state is ProcessState.COMPENSATING

    status, body = paused.post("/api/ops/orders/o-again/review", answer)

    assert status == 409, body
    assert body["processState"] == "Compensating", body
    assert "Compensating" in body["error"], body
