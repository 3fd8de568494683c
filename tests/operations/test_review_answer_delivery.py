"""The ops API's review answer when its event cannot be known delivered (operations/blueprint.py
``ops_review``): only an attempt that is definitely gone gets its note taken back; an ambiguous raise
keeps the note (503) and the same answer posted again delivers it; a take-back the store refuses
alerts and is retried by the same answer; no answer is noted after the review deadline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import azure.durable_functions as df
import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.review import REVIEW_ANSWERED, REVIEW_REQUESTED, pending_review, review_answer
from domain.states import ProcessState
from domain.timefmt import text_or_none
from operations import instances
from orchestrators.names import SCHEDULER
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-big", "600")
    yield made
    made.close()


def test_an_ambiguous_raise_keeps_the_note_and_the_same_answer_posted_again_delivers_it(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert paused.ctx is not None
    original = df.DurableOrchestrationClient.raise_event
    raised: list[str] = []

    async def times_out_once(self: Any, instance_id: str, event_name: str, event_data: Any = None, **kw: Any) -> None:
        if not raised:  # a timeout before the extension queued anything
            raised.append("lost")
            raise Exception("Webhook returned unrecognized status code 504")
        raised.append(str(event_data["action"]))
        await original(self, instance_id, event_name, event_data, **kw)

    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", times_out_once)
    status, body = paused.post(
        "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": "fail", "reason": "card blocked"}
    )
    assert status == 503 and body["noted"] is True and body["decision"] == "fail", body
    assert "post the same answer again" in body["error"], body
    record = paused.ctx.states.get("o-big")
    assert record is not None and record.history[-1].event == REVIEW_ANSWERED  # kept, not taken back

    other_status, other = paused.post(
        "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": "compensate", "reason": "x"}
    )
    assert other_status == 409 and other["decision"] == "fail", other  # a different answer is refused

    again_status, again = paused.post(
        "/api/ops/orders/o-big/review", {"reviewId": first_review("o-big"), "action": "fail", "reason": "card blocked"}
    )
    assert again_status == 200 and again["decision"] == "fail" and again["by"] == body["by"], again
    assert raised == ["lost", "fail"]
    paused.run_until_idle()
    record = paused.ctx.states.get("o-big")
    assert record is not None and record.process_state is ProcessState.ERROR
    reviews = [e for e in record.history if e.event == REVIEW_ANSWERED]
    assert len(reviews) == 1, reviews  # the repeat noted nothing


def test_a_take_back_the_store_refuses_alerts_and_then_the_note_stands_for_the_supervisor(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ops.ctx is not None
    before = ops.awaiting_review("o-gone")  # written only: raise_event answers 404
    ops.clock.advance_to(ops.clock.now() + timedelta(seconds=1))

    async def running(client: Any, instance: str) -> instances.AttemptState:
        return instances.AttemptState(takes_events=True, name=SCHEDULER)

    monkeypatch.setattr(instances, "attempt_state", running)
    store = ops.ctx.states
    replace_record = store.replace
    refused: list[str] = []

    def refuse_the_take_back(record: Any) -> Any:
        if not refused and record.history[-1].event == REVIEW_REQUESTED:
            refused.append(record.order_id)
            raise StoreUnavailable("Cosmos DB 503")
        return replace_record(record)

    monkeypatch.setattr(store, "replace", refuse_the_take_back)
    status, body = ops.post(
        "/api/ops/orders/o-gone/review", {"reviewId": first_review("o-gone"), "action": "fail", "reason": "too risky"}
    )
    assert refused and status == 503 and "the supervisor carries it out" in body["error"], body
    stuck = store.get("o-gone")
    assert stuck is not None and stuck.history[-1].event == REVIEW_ANSWERED
    alerts = [json.loads(m.body) for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    assert [a["kind"] for a in alerts] == ["ReviewAnswerUndelivered"], alerts

    monkeypatch.setattr(instances, "attempt_state", _not_running)  # the attempt is gone
    status, body = ops.post(
        "/api/ops/orders/o-gone/review", {"reviewId": first_review("o-gone"), "action": "fail", "reason": "too risky"}
    )
    assert status == 200 and body["carriedOutBy"] == "supervisor" and body["decision"] == "fail", body
    after = store.get("o-gone")
    assert after is not None and after.history[-1].event == REVIEW_ANSWERED  # not taken back: it stands
    assert pending_review(after) is None and pending_review(before) is not None
    assert body["notBefore"] == text_or_none(after.complete_by)


async def _not_running(client: Any, instance: str) -> instances.AttemptState:
    return instances.AttemptState(takes_events=False, name=SCHEDULER)


def test_an_answer_after_the_review_deadline_is_refused_and_notes_nothing(ops: OpsHarness) -> None:
    assert ops.ctx is not None
    before = ops.awaiting_review("o-late")  # decide by now + 10 minutes
    ops.clock.advance_to(ops.clock.now() + timedelta(minutes=10))
    status, body = ops.post(
        "/api/ops/orders/o-late/review", {"reviewId": first_review("o-late"), "action": "fail", "reason": "late"}
    )
    assert status == 409 and body["error"].startswith("review deadline passed"), body
    pending = pending_review(before)
    assert pending is not None and body["decideBy"] == pending.decide_by
    after = ops.ctx.states.get("o-late")
    assert after == before and review_answer(after, pending.review_id) is None


class _Client:
    def __init__(self, status: Any) -> None:
        self.status = status
        self.asked = 0

    async def get_status(self, instance_id: str) -> Any:
        self.asked += 1
        if isinstance(self.status, Exception):
            raise self.status
        return self.status


def _status(runtime: str | None) -> Any:
    return SimpleNamespace(runtime_status=SimpleNamespace(value=runtime))


@pytest.mark.parametrize(
    ("failure", "status", "gone"),
    [
        ("No instance with ID o:1 found.", Exception("unreachable"), True),
        ("Instance with ID o:1 is gone: either completed or failed", Exception("unreachable"), True),
        ("Webhook returned unrecognized status code 500", _status("Terminated"), True),
        ("Webhook returned unrecognized status code 500", _status("Running"), False),
        ("timed out", Exception("unreachable"), False),
        ("timed out", None, False),  # get_status says the same for a 404 and a 500: not definite
    ],
)
def test_only_a_definite_answer_says_the_attempt_is_gone(failure: str, status: Any, gone: bool) -> None:
    client = _Client(status)
    assert asyncio.run(instances.gone_after_failed_raise(client, "o:1", Exception(failure))) is gone


@pytest.mark.parametrize(
    ("runtime", "takes_events"),
    [("Running", True), ("Pending", True), ("Suspended", True), ("Completed", False), ("Terminated", False)],
)
def test_a_suspended_attempt_still_takes_the_answer_and_its_version_is_read(runtime: str, takes_events: bool) -> None:
    """A Suspended instance gets a raised event when it is resumed: its note is never taken back as if it
    were gone (the answer may already be queued for it)."""
    status = SimpleNamespace(runtime_status=SimpleNamespace(value=runtime), name=SCHEDULER)
    state = asyncio.run(instances.attempt_state(_Client(status), "o:1"))
    assert state == instances.AttemptState(takes_events=takes_events, name=SCHEDULER)
    assert asyncio.run(instances.attempt_state(_Client(None), "o:1")) == instances.AttemptState(False, None)
