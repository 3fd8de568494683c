"""Red team (clocks): a step's deadline was the orchestration's replay time (``context.current_utc_datetime``, when
its episode began) plus ``STEP_TIMEOUT_SECONDS``, written by the ``begin_step`` activity whenever that ran. An
activity queued behind a backlog for as long as the timeout wrote a deadline already past and sent the agent a
request it drops unread (``order_agents.runtime``: past its deadline, no call): the attempt failed without its
step ever being tried, and under a backlog every attempt did, until the order reached ``MAX_FAILURES``. An attempt
started with ``deadlineAtBegin`` sends its timeout (``BeginStepInput.timeoutSeconds``): the deadline is the
write's time plus it, sent with the request and answered (``StepBegun.deadline``) for the attempt's timer. An
instance started before runs as recorded (``test_scheduler_replay.py``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from activities import compensation_steps, scheduler_steps
from contracts.messages import AgentRequest
from domain import transitions
from domain.timefmt import parse, to_text
from tests.activity_calls import run
from tests.orchestrators.support import claimed_round
from tests.orchestrators.test_activity_protocol import REQUEST

pytestmark = pytest.mark.cosmos

TIMEOUT = timedelta(seconds=60)
QUEUED = timedelta(seconds=90)  # how long the begin_step activity waited for a worker


def _begun_late(ctx: Any, clock: Any, **more: Any) -> tuple[dict[str, Any], Any]:
    episode = clock.now()  # the orchestration's replay time when it scheduled the activity
    ctx.states.create(transitions.new_claimed_record("o1", None, episode, ctx.settings.start_grace))
    request = {**REQUEST, "deadline": to_text(episode + TIMEOUT)}  # as the old scheduler built it, its deadline
    clock.advance(QUEUED)
    answer = run(
        scheduler_steps.begin_step, ctx, {"request": request, "agent": "payment", "queue": "payment-requests", **more}
    )
    return answer, episode


def _sent_deadline(sender: Any) -> Any:
    [sent] = [m for q, m in sender.sent if q == "payment-requests"]
    return AgentRequest.model_validate_json(sent.body).deadline


def test_a_begin_step_run_late_gives_the_step_its_whole_timeout_from_its_write(app_context, clock, sender) -> None:
    answer, _ = _begun_late(app_context, clock, timeoutSeconds=TIMEOUT.total_seconds())
    record = app_context.states.get("o1")
    assert record is not None and record.complete_by == clock.now() + TIMEOUT
    assert _sent_deadline(sender) == clock.now() + TIMEOUT  # the agent gets a request it can still answer
    assert parse(answer["deadline"]) == clock.now() + TIMEOUT  # the attempt's timer races the same deadline


def test_an_instance_started_before_keeps_the_deadline_it_computed(app_context, clock, sender) -> None:
    answer, episode = _begun_late(app_context, clock)
    record = app_context.states.get("o1")
    assert record is not None and record.complete_by == episode + TIMEOUT
    assert _sent_deadline(sender) == episode + TIMEOUT
    assert "deadline" not in answer


def test_a_begin_undo_run_late_gives_the_undo_its_whole_timeout_from_its_write(app_context, clock) -> None:
    """The same for a compensation round's undo (a round started with ``deadlineAtBegin``); without it, as before."""
    start = clock.now()
    seq, undo = claimed_round(app_context, start, TIMEOUT, REQUEST)
    clock.advance(QUEUED)

    late = {"request": undo, "agent": "payment", "seq": seq}
    assert run(compensation_steps.begin_undo, app_context, late) == {"owned": True}  # a round started before
    stored = app_context.states.get("o1")
    assert stored is not None and stored.complete_by == start + TIMEOUT

    answer = run(compensation_steps.begin_undo, app_context, {**late, "timeoutSeconds": TIMEOUT.total_seconds()})
    assert parse(answer["deadline"]) == clock.now() + TIMEOUT
    stored = app_context.states.get("o1")
    assert stored is not None and stored.complete_by == clock.now() + TIMEOUT
