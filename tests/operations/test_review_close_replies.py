"""What the ops API tells an operator around the review's close (``process_order_v4`` closes the
review at its deadline with a fenced write, taking an answer noted before it): never 409 for the
answer the attempt takes, never an answer to a review the operator did not name. Found by a red-team
pass over the close (aa957f3); through the real runtime where the order of events allows it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import pytest

from activities import compensation_steps
from adapters.clock import ManualClock
from contracts.activities import CloseReviewInput, ReviewClosed
from domain.review import decide_by_time, pending_review, review_answer, review_closed
from operations import actions, instances
from operations.web import Reply
from orchestrators.names import DRAINING_SCHEDULER, SCHEDULER
from tests.contexts import context_with
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos

OPERATOR = "ops@contoso.example"


def _close(ops: OpsHarness, order_id: str) -> Any:
    assert ops.ctx is not None
    closing = CloseReviewInput(
        order_id=order_id,
        instance_id=f"{order_id}:1",
        attempt=1,
        review_id=first_review(order_id),
        default_action="compensate",
    )
    return compensation_steps.close_review(ops.ctx, closing)


def _noted(ops: OpsHarness, order_id: str, action: str = "fail") -> Any:
    """A paused record whose answer ``action`` by ``OPERATOR`` is noted (its event's delivery uncertain)."""
    assert ops.ctx is not None
    pending = pending_review(ops.awaiting_review(order_id))
    assert pending is not None
    claimed = actions.claim_answer(ops.ctx, order_id, pending, OPERATOR, action, "card stolen")
    assert not isinstance(claimed, Reply), claimed
    return pending


def test_the_same_answer_posted_again_after_the_close_took_it_is_answered_200(ops: OpsHarness) -> None:
    _noted(ops, "o-again")
    assert _close(ops, "o-again") == ReviewClosed(action="fail", operator=OPERATOR)
    status, body = ops.post(
        "/api/ops/orders/o-again/review", {"reviewId": first_review("o-again"), "action": "fail", "reason": "again"}
    )
    assert status == 200 and body["decision"] == "fail" and body["takenAtDeadline"] is True, body
    # another operator, or another answer, is told what was decided: 409
    status, body = ops.post(
        "/api/ops/orders/o-again/review", {"reviewId": first_review("o-again"), "action": "retry", "reason": "no"}
    )
    assert status == 409 and body["decision"] == "fail" and body["by"] == OPERATOR, body


def test_a_raise_that_finds_the_attempt_gone_after_it_took_the_answer_is_answered_200(ops: OpsHarness) -> None:
    """The close took the note, the attempt acted and finished, then the (late) raise answered 410:
    nothing is taken back and the operator hears that their answer was taken."""
    assert ops.ctx is not None
    pending = _noted(ops, "o-gone")
    assert _close(ops, "o-gone") == ReviewClosed(action="fail", operator=OPERATOR)
    why = f"Instance with ID {pending.instance_id} is gone: either completed or failed"
    reply = actions.take_back_answer(ops.ctx, "o-gone", pending, OPERATOR, "fail", why)
    assert reply.status == 200 and json.loads(reply.body)["takenAtDeadline"] is True
    other = actions.take_back_answer(ops.ctx, "o-gone", pending, OPERATOR, "retry", why)  # not what was taken
    assert other.status == 409


@pytest.mark.parametrize(("version", "status"), [(SCHEDULER, 200), (DRAINING_SCHEDULER, 409)])
def test_a_noted_answer_posted_again_past_the_deadline_before_the_close_is_told_what_its_version_does(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch, version: str, status: int
) -> None:
    """The 503 said "post the same answer again"; the deadline passed meanwhile and the close (retried on
    durable timers) has not landed. ``_v4``'s close will take the note: 200, not "the attempt takes its
    default". ``_v3`` takes its default at the deadline: 409 says so."""
    assert ops.ctx is not None
    pending = _noted(ops, "o-late")
    deadline = decide_by_time(pending)
    assert deadline is not None
    late = context_with(ops.ctx, clock=ManualClock(deadline + timedelta(seconds=1)))
    target = actions.review_to_answer(late, "o-late", pending.review_id, "fail", OPERATOR)
    assert isinstance(target, actions.ReviewTarget) and target.late and target.noted is not None

    async def paused_attempt(client: Any, instance: str) -> instances.AttemptState:
        return instances.AttemptState(takes_events=True, name=version)

    async def accepted(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        return None

    monkeypatch.setattr(instances, "attempt_state", paused_attempt)
    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", accepted)
    ops.clock.advance_to(deadline + timedelta(seconds=1))
    answered, body = ops.post(
        "/api/ops/orders/o-late/review", {"reviewId": pending.review_id, "action": "fail", "reason": "again"}
    )
    assert answered == status, body
    if status == 409:
        assert body["error"].startswith("review deadline passed"), body
    else:
        assert body["decision"] == "fail", body


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-twice", "600")
    yield made
    made.close()


def test_an_answer_posted_again_after_its_review_closed_never_answers_the_next_review(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``retry`` is noted a second before the deadline and its raise fails ambiguously (503: "post the
    same answer again"). The close takes the retry, the step fails again, and the attempt pauses for
    review 2. The operator posts the same answer again, naming review 1: it is answered as taken, and
    review 2 still waits for someone to decide it."""
    assert paused.ctx is not None
    waiting = paused.ctx.states.get("o-twice")
    assert waiting is not None
    first = pending_review(waiting)
    assert first is not None and first.review_id == first_review("o-twice")
    deadline = decide_by_time(first)
    assert deadline is not None
    paused.host.run_until(deadline - timedelta(seconds=1))

    async def timed_out(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        raise Exception("timed out waiting for the raise-event response")  # ambiguous: not 404/410

    answer = {"reviewId": first.review_id, "action": "retry", "reason": "provider blip"}
    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", timed_out)
    status, body = paused.post("/api/ops/orders/o-twice/review", answer)
    monkeypatch.undo()
    assert status == 503 and body["noted"] is True and body["reviewId"] == first.review_id, body

    paused.host.run_until(deadline + timedelta(seconds=2))  # the close takes the noted retry
    paused.run_until_idle(timedelta(seconds=30))
    record = paused.ctx.states.get("o-twice")
    assert record is not None
    closed = review_closed(record, first.review_id)
    assert closed is not None and (closed.action, closed.operator) == ("retry", OPERATOR), closed
    second = pending_review(record)
    assert second is not None and second.review_id.endswith(":review:2"), [h.event for h in record.history]

    status, body = paused.post("/api/ops/orders/o-twice/review", answer)  # as the 503 said
    assert status == 200 and body["reviewId"] == first.review_id and body["takenAtDeadline"] is True, body
    record = paused.ctx.states.get("o-twice")
    assert record is not None and review_answer(record, second.review_id) is None
    assert pending_review(record) == second  # still waiting for a decision
