"""A review answered through the ops API reaches the paused orchestration: a high-value order whose
payment fails for good (both providers) pauses for review; the operator's answer is raised on the
waiting instance by the app's own durable client (over the Durable HTTP API, no system key), and the
attempt acts on it. Everything runs through the real Functions runtime."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.states import ProcessState
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-big", "600")
    yield made
    made.close()


@pytest.mark.parametrize(("action", "final"), [("fail", ProcessState.ERROR), ("compensate", ProcessState.COMPENSATING)])
def test_an_answered_review_moves_the_paused_attempt_on(paused, action, final):
    assert paused.ctx is not None
    status, summary = paused.get("/api/ops/summary")
    assert status == 200 and [r["orderId"] for r in summary["waitingForReview"]] == ["o-big"]
    status, detail = paused.get("/api/ops/orders/o-big")
    assert status == 200 and detail["review"]["reviewId"] == "o-big:1:charge-payment:review:1"
    assert detail["attempts"][0] | {"instanceId": "o-big:1", "runtimeStatus": "Running"} == detail["attempts"][0]
    assert [s["status"] for s in detail["statusesSent"]] == ["Processing"]
    requests_before = paused.host.durable_api.requests

    status, body = paused.post(
        "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": action, "reason": "card blocked"}
    )
    assert status == 200 and body["decision"] == action and body["by"] == "ops@contoso.example"
    assert paused.host.durable_api.requests > requests_before  # raised through the extension's HTTP API
    # a second answer to the same review is refused: the record no longer waits for it
    assert (
        paused.post(
            "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": "retry", "reason": "again"}
        )[0]
        == 409
    )

    paused.run_until_idle()
    record = paused.ctx.states.get("o-big")
    assert record.process_state is final
    answered = next(h for h in record.history if h.event == "ReviewAnswered")
    assert answered.by == "ops@contoso.example" and f": {action}: card blocked" in answered.detail
    status, detail = paused.get("/api/ops/orders/o-big")
    assert detail["attempts"][0]["runtimeStatus"] == "Completed"


def test_an_unanswered_review_keeps_waiting(paused):
    """The control: without the answer the attempt stays paused (nothing else moves it on)."""
    paused.run_until_idle()
    assert paused.ctx is not None
    status, detail = paused.get("/api/ops/orders/o-big")
    assert status == 200 and detail["state"]["processState"] == "Processing" and detail["review"] is not None
    assert detail["attempts"][0]["runtimeStatus"] == "Running"
