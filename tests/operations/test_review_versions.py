"""The ops API's review answer and the scheduler version that runs the paused attempt (its Durable
status names it): only a version that takes answers is answered 200; an attempt of ``_v3``, which
takes its default at the deadline without closing the review, gets no answer in its last minute; an
answer posted again after the attempt acted on its event is answered as taken. Found by a red team
over the review close; through the real runtime where the order of events allows it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import pytest

from domain.review import ActedOnAnswer, answer_acted_on, pending_review, review_answer
from domain.states import ProcessState
from operations import actions, instances
from orchestrators import starter
from orchestrators.names import DRAINING_SCHEDULER, RETIRED_SCHEDULERS, SCHEDULER
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize("version", RETIRED_SCHEDULERS)
def test_an_answer_to_an_attempt_of_a_retired_version_is_not_told_200(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    """A paused attempt of a retired scheduler (Running, waiting for its event when the app was
    upgraded) never takes an answer: the event makes it replay, and a retired version's replay releases
    the record to the supervisor and ends ``Superseded`` (orchestrators/retired.py). Refused, nothing
    noted, nothing raised."""
    assert ops.ctx is not None
    ops.awaiting_review("o-old")

    async def paused_attempt(client: Any, instance: str) -> instances.AttemptState:
        return instances.AttemptState(takes_events=True, name=version)

    raised: list[str] = []

    async def accepted(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        raised.append(instance_id)

    monkeypatch.setattr(instances, "attempt_state", paused_attempt)
    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", accepted)
    status, body = ops.post(
        "/api/ops/orders/o-old/review", {"reviewId": first_review("o-old"), "action": "fail", "reason": "stolen"}
    )
    assert status == 409 and "no longer takes answers" in body["error"] and raised == [], (status, body, raised)
    record = ops.ctx.states.get("o-old")
    assert record is not None and record.history[-1].event == "ReviewRequested"  # nothing noted


@pytest.fixture
def paused_v3(cosmos_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpsHarness]:
    """A real attempt of ``process_order_v3`` (started before the upgrade, still draining) paused for
    review through the real runtime: the starter is made to start the draining version."""
    with monkeypatch.context() as started_as_v3:
        started_as_v3.setattr(starter, "SCHEDULER", DRAINING_SCHEDULER)
        started_as_v3.setitem(starter.START_EVENTS, DRAINING_SCHEDULER, starter.START_EVENTS[SCHEDULER])
        made = paused_for_review(cosmos_db, "o-v3", "600")
    yield made
    made.close()


def test_an_answer_in_the_last_minute_of_a_v3_attempt_is_refused_and_the_default_is_taken(
    paused_v3: OpsHarness,
) -> None:
    """``_v3`` has no close: an event raised in its last minute may reach it after its timer, which takes
    the default. The answer is refused with a clear reason and nothing is noted; the order goes on with
    the default. (Before, the operator was told 200 ``fail`` and the order was compensated.)"""
    paused = paused_v3
    assert paused.ctx is not None
    attempt = paused.host.engine.instance("o-v3:1")
    assert attempt is not None and attempt.name == DRAINING_SCHEDULER
    pending, deadline = paused.waiting_review("o-v3")
    paused.host.run_until(deadline - timedelta(seconds=1))
    answer = {"reviewId": first_review("o-v3"), "action": "fail", "reason": "card stolen"}
    status, body = paused.post("/api/ops/orders/o-v3/review", answer)
    assert status == 409 and "cannot be sure to take an answer" in body["error"], body
    record = paused.ctx.states.get("o-v3")
    assert record is not None and review_answer(record, pending.review_id) is None
    paused.host.run_until(deadline + timedelta(seconds=2))
    paused.run_until_idle()
    record = paused.ctx.states.get("o-v3")
    assert record is not None and record.process_state is ProcessState.COMPENSATING  # the default


def test_an_answer_to_a_v3_attempt_with_time_left_is_taken(paused_v3: OpsHarness) -> None:
    paused = paused_v3
    assert paused.ctx is not None
    answer = {"reviewId": first_review("o-v3"), "action": "fail", "reason": "card stolen"}
    status, body = paused.post("/api/ops/orders/o-v3/review", answer)
    assert status == 200 and body["decision"] == "fail", body
    paused.run_until_idle()
    record = paused.ctx.states.get("o-v3")
    assert record is not None and record.process_state is ProcessState.ERROR


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-lost", "600")
    yield made
    made.close()


@pytest.mark.parametrize("action", ["fail", "retry"])
def test_the_same_answer_posted_again_after_the_attempt_took_its_event_is_not_refused(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    assert paused.ctx is not None
    waiting = paused.ctx.states.get("o-lost")
    assert waiting is not None
    pending = pending_review(waiting)
    assert pending is not None

    queued: list[tuple[str, Any]] = []

    async def queued_but_response_lost(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        queued.append((event_name, event_data))
        raise Exception("timed out waiting for the raise-event response")  # ambiguous: not 404/410

    answer = {"reviewId": first_review("o-lost"), "action": action, "reason": "card stolen"}
    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", queued_but_response_lost)
    status, body = paused.post("/api/ops/orders/o-lost/review", answer)
    monkeypatch.undo()
    assert status == 503 and body["noted"] is True, body
    [(event_name, data)] = queued
    paused.host.engine.raise_event(pending.instance_id, event_name, json.dumps(data))  # it was queued
    paused.run_until_idle()

    record = paused.ctx.states.get("o-lost")
    assert record is not None
    if action == "fail":
        assert record.process_state is ProcessState.ERROR  # the attempt took the answer
    else:  # it took the retry: the step failed again and the attempt waits for review 2
        again = pending_review(record)
        assert again is not None and again.review_id.endswith(":review:2"), [h.event for h in record.history]

    acted = answer_acted_on(record, pending.review_id)
    assert acted is not None and (acted.action, acted.instance_id) == (action, pending.instance_id)
    status, body = paused.post("/api/ops/orders/o-lost/review", answer)  # as the 503 said
    assert status == 200 and body["decision"] == action, (status, body)
    if action == "retry":  # review 2 still waits for its own answer
        after = paused.ctx.states.get("o-lost")
        assert after is not None and pending_review(after) == again


def test_an_answer_acted_on_by_a_v3_attempt_is_not_said_taken(ops: OpsHarness) -> None:
    """``_v3`` writes its default's first write after the note when its timer wins: which came first
    cannot be read from the record, so the repost is 409 saying so, not 200."""
    record = ops.awaiting_review("o-v3-acted")
    acted = ActedOnAnswer("ops@contoso.example", "fail", "o-v3-acted:1")
    taken = actions.AnswerActedOn(record, first_review("o-v3-acted"), acted)
    reply = actions.acted_on("o-v3-acted", taken, version_closes_reviews=False)
    assert reply.status == 409 and "reload the order" in json.loads(reply.body)["error"]
    assert actions.acted_on("o-v3-acted", taken, version_closes_reviews=True).status == 200
