"""The ops API's review answer is noted before the event is raised: an event that cannot be raised
takes the note back, so the record notes no decision and the supervisor retries the order."""

from __future__ import annotations

from typing import Any

import pytest

from domain.review import pending_review
from operations import instances
from orchestrators.names import SCHEDULER
from tests.operations.harness import first_review

pytestmark = pytest.mark.cosmos


def test_an_answer_to_an_attempt_that_is_gone_is_409_and_writes_nothing(ops):
    assert ops.ctx is not None
    before = ops.awaiting_review("o-gone")  # written only: no orchestration waits for it
    status, body = ops.post(
        "/api/ops/orders/o-gone/review", {"reviewId": first_review("o-gone"), "action": "fail", "reason": "too risky"}
    )
    assert status == 409 and "not running" in body["error"], body
    assert ops.ctx.states.get("o-gone") == before


def test_an_answer_the_event_could_not_carry_is_taken_back_and_the_review_waits_again(ops, monkeypatch):
    assert ops.ctx is not None
    before = ops.awaiting_review("o-lost")

    async def running(client: Any, instance: str) -> instances.AttemptState:  # it runs, but no event can be raised
        return instances.AttemptState(takes_events=True, name=SCHEDULER)

    monkeypatch.setattr(instances, "attempt_state", running)
    status, body = ops.post(
        "/api/ops/orders/o-lost/review", {"reviewId": first_review("o-lost"), "action": "fail", "reason": "too risky"}
    )
    assert status == 409 and "did not take the answer" in body["error"], body
    after = ops.ctx.states.get("o-lost")
    assert pending_review(after) == pending_review(before)  # answerable again
    assert [e.event for e in after.history[-2:]] == ["ReviewAnswered", "ReviewRequested"]
