"""An answer and the review deadline at the same moment, through the real runtime. The ops API notes an
answer (a conditional write), then raises its event; at the deadline the attempt's timer fires and
``process_order_v4`` closes the review with a fenced write (``close_review``) before it acts. Whichever
write is first decides, and the operator hears what the attempt does:

- noted first: the attempt takes the answer, even when its event arrives after the timer;
- closed first: the answer is refused 409 with what the attempt chose, and nothing is noted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import pytest

from activities import compensation_steps
from adapters.cosmos.state_store import CosmosStateStore
from contracts.activities import CloseReviewInput, ReviewClosed
from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from domain.compensation_policy import REVIEW_CHOICES
from domain.review import ClosedReview, decide_by_time, pending_review, review_answer, review_closed
from domain.states import ProcessState
from operations import actions
from operations.web import Reply
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos

OPERATOR = "ops@contoso.example"


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-edge", "600")  # the default (settings) is compensate
    yield made
    made.close()


def test_an_answer_noted_before_the_deadline_is_taken_though_its_event_arrives_after_the_timer(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is posted a second before the deadline; the extension accepts the raise (202) but the
    attempt gets the event only after its timer fired (a slow event queue). Before ``close_review`` the
    operator was told 200 ``fail`` and the attempt took its default, compensate."""
    assert paused.ctx is not None
    pending, deadline = paused.waiting_review("o-edge")
    paused.host.run_until(deadline - timedelta(seconds=1))

    held: list[tuple[str, str, Any]] = []

    async def accepted_not_yet_delivered(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        held.append((instance_id, event_name, event_data))

    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", accepted_not_yet_delivered)
    status, body = paused.post(
        "/api/ops/orders/o-edge/review", {"reviewId": first_review("o-edge"), "action": "fail", "reason": "card stolen"}
    )
    monkeypatch.undo()
    assert status == 200 and body["decision"] == "fail", body
    assert len(held) == 1

    paused.host.run_until(deadline + timedelta(seconds=2))  # the timer fires first
    instance, event_name, data = held[0]
    paused.host.engine.raise_event(instance, event_name, json.dumps(data))  # the event, late
    paused.run_until_idle()

    record = paused.ctx.states.get("o-edge")
    assert record is not None
    assert record.process_state is ProcessState.ERROR, (
        f"the operator was told 200 fail; the order is {record.process_state.value}: {record.last_error}"
    )
    assert review_closed(record, pending.review_id) == ClosedReview(pending.review_id, "fail", OPERATOR)
    status, detail = paused.get("/api/ops/orders/o-edge")
    assert detail["attempts"][0]["runtimeStatus"] == "Completed"


def test_an_answer_read_before_the_deadline_but_noted_after_the_close_is_refused_with_the_default(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's request read the review while it waited; the attempt closed it at the deadline
    before the request's note was written. The note's conditional write fails: 409 with the attempt's
    choice, and the record notes no answer."""
    assert paused.ctx is not None
    read_in_time = actions.review_to_answer(paused.ctx, "o-edge", first_review("o-edge"), "fail", OPERATOR)
    assert isinstance(read_in_time, actions.ReviewTarget)
    deadline = decide_by_time(read_in_time.pending)
    assert deadline is not None
    paused.host.run_until(deadline + timedelta(seconds=2))
    paused.run_until_idle()

    monkeypatch.setattr(actions, "review_to_answer", lambda *asked: read_in_time)
    status, body = paused.post(
        "/api/ops/orders/o-edge/review", {"reviewId": first_review("o-edge"), "action": "fail", "reason": "too late"}
    )
    monkeypatch.undo()

    record = paused.ctx.states.get("o-edge")
    assert record is not None
    assert status == 409, body
    assert record.process_state is ProcessState.COMPENSATING  # the default
    assert review_answer(record, read_in_time.pending.review_id) is None
    assert review_closed(record, read_in_time.pending.review_id) == ClosedReview(
        read_in_time.pending.review_id, "compensate", None
    )


def _close(ops: OpsHarness, order_id: str, review_id: str) -> Any:
    assert ops.ctx is not None
    owner = review_id.split(":charge-payment:", maxsplit=1)[0]
    closing = CloseReviewInput(
        order_id=order_id, instance_id=owner, attempt=1, review_id=review_id, default_action="compensate"
    )
    return compensation_steps.close_review(ops.ctx, closing)


@pytest.fixture
def ops(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=f"{OPERATOR}:Orders.Read,Orders.Operate")
    yield made
    made.close()


def test_a_close_between_the_read_and_the_note_refuses_the_note_with_what_the_attempt_chose(
    ops: OpsHarness, cosmos_db: Any
) -> None:
    """The window the runtime test above cannot hold open: the record is closed and the attempt has not
    acted yet. The ops API (another instance: a store of its own, with no cached version) reads the
    review in time; ``close_review`` lands; the note is refused 409 naming the default, and the
    answer, posted again, is refused the same way."""
    assert ops.ctx is not None
    paused = ops.awaiting_review("o-win")
    pending = pending_review(paused)
    assert pending is not None
    api = actions.review_to_answer(ops.ctx, "o-win", pending.review_id, "retry", OPERATOR)
    assert isinstance(api, actions.ReviewTarget)

    assert _close(ops, "o-win", pending.review_id) == ReviewClosed(action="compensate", operator=None)
    other_instance = CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER))
    ops_ctx = ops.change_context(states=other_instance)
    claimed = actions.claim_answer(ops_ctx, "o-win", api.pending, OPERATOR, "retry", "in time, I thought")
    assert isinstance(claimed, Reply), claimed
    refused = json.loads(claimed.body)
    assert claimed.status == 409 and refused["decision"] == "compensate" and refused["by"] is None, refused
    assert "closed at its deadline" in refused["error"]
    again = actions.review_to_answer(ops_ctx, "o-win", pending.review_id, "retry", OPERATOR)
    assert isinstance(again, Reply) and again.status == 409 and json.loads(again.body)["decision"] == "compensate"
    record = other_instance.get("o-win")
    assert record is not None and review_answer(record, pending.review_id) is None


def test_a_note_before_the_close_is_what_the_close_takes_though_the_attempt_read_the_record_before_it(
    ops: OpsHarness, cosmos_db: Any
) -> None:
    """The attempt's process last saw the record before the note (its cached version): the close's
    conditional write fails on the stale version, re-reads, and takes the noted answer."""
    assert ops.ctx is not None
    paused = ops.awaiting_review("o-note")
    pending = pending_review(paused)
    assert pending is not None
    attempt_store = ops.ctx.states
    assert attempt_store.recent("o-note") is not None  # the attempt's process has the paused version cached
    api_store = CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER))
    api_ctx = ops.change_context(states=api_store)
    claimed = actions.claim_answer(api_ctx, "o-note", pending, OPERATOR, "retry", "a blip")
    assert not isinstance(claimed, Reply), claimed
    ops.change_context(states=attempt_store)

    assert _close(ops, "o-note", pending.review_id) == ReviewClosed(action="retry", operator=OPERATOR)
    record = api_store.get("o-note")
    assert record is not None and review_closed(record, pending.review_id) == ClosedReview(
        pending.review_id, "retry", OPERATOR
    )


def test_the_review_alert_offers_every_answer_the_api_takes(paused: OpsHarness) -> None:
    alerts = [json.loads(m.body) for m in paused.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    [required] = [a for a in alerts if a["kind"] == "ReviewRequired"]
    assert required["details"]["options"] == list(REVIEW_CHOICES)
    assert all(choice in required["summary"] for choice in REVIEW_CHOICES), required["summary"]
    assert "|".join(REVIEW_CHOICES) in required["details"]["how"]
