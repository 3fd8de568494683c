"""Red team: an action's fields sent as query parameters instead of in its JSON body. The actions read their body
only, and a query parameter was ignored: ``POST .../compensate?undoneByHand=2`` with ``{"reason": ...}`` compensated
the ``CompensationFailed`` order as if nothing had been undone by hand, so its next round sends the refund the
operator already made by hand once more (a second refund), and answered 200."""

from __future__ import annotations

import pytest

from tests.operations.harness import OpsHarness, first_review
from tests.operations.test_redteam_compensate_undone_by_hand import _refund_refused

pytestmark = pytest.mark.cosmos


def test_a_compensate_naming_undone_by_hand_in_the_query_is_400_and_writes_nothing(ops: OpsHarness) -> None:
    """FINDING: 200, the order Compensating with its refund (entry 2) to be sent again."""
    assert ops.ctx is not None
    before = _refund_refused(ops, "o-query")
    status, body = ops.post("/api/ops/orders/o-query/compensate?undoneByHand=2", {"reason": "refunded at the provider"})
    assert status == 400, (status, body)
    assert "query parameter" in body["error"] and "undoneByHand" in body["error"], body
    assert ops.ctx.states.get("o-query") == before


@pytest.mark.parametrize("action", ["resubmit", "cancel", "compensate", "review", "deferred/1/discard"])
def test_any_query_parameter_on_an_action_is_400_and_changes_nothing(ops: OpsHarness, action: str) -> None:
    """FINDING: every action ignored its query (``?reason=other``, ``?dryRun=true``) and was applied."""
    assert ops.ctx is not None
    order_id = f"o-q-{action.partition('/')[0]}"
    before = ops.awaiting_review(order_id) if action in ("review", "cancel") else ops.error(order_id)
    body = {"reason": "r"}
    if action == "review":
        body.update(action="fail", reviewId=first_review(order_id))
    status, answer = ops.post(f"/api/ops/orders/{order_id}/{action}?dryRun=true", body)
    assert status == 400, (status, answer)
    assert "query parameter" in answer["error"], answer
    assert ops.ctx.states.get(order_id) == before
