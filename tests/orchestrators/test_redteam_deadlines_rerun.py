"""Red team (deadlines): Durable activities are at least once (``host.activity_rerun_rate``: a run after its result
was used). A ``begin_step`` run again later (with ``timeoutSeconds``, an attempt started with ``deadlineAtBegin``)
must not move the step's deadline (its attempt's timer races the first run's answer) nor send the request with
another one; a run after the attempt's next write must neither write nor send. The same for ``begin_undo``."""

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
LATER = timedelta(seconds=40)


def _sent(sender: Any, queue: str) -> list[Any]:
    return [AgentRequest.model_validate_json(m.body).deadline for q, m in sender.sent if q == queue]


def test_a_begin_step_run_again_later_keeps_the_deadline_and_resends_it(app_context, clock, sender) -> None:
    start = clock.now()
    app_context.states.create(transitions.new_claimed_record("o1", None, start, app_context.settings.start_grace))
    begin = {
        "request": {**REQUEST, "deadline": to_text(start + TIMEOUT)},
        "agent": "payment",
        "queue": "payment-requests",
        "writeNumber": 1,
        "timeoutSeconds": TIMEOUT.total_seconds(),
    }
    first = run(scheduler_steps.begin_step, app_context, begin)
    clock.advance(LATER)
    again = run(scheduler_steps.begin_step, app_context, begin)

    assert parse(again["deadline"]) == parse(first["deadline"]) == start + TIMEOUT
    record = app_context.states.get("o1")
    assert record is not None and record.complete_by == start + TIMEOUT
    assert _sent(sender, "payment-requests") == [start + TIMEOUT, start + TIMEOUT]  # one MessageId, one deadline

    # the attempt's next write made, a later run of the first is refused: nothing written, nothing sent
    nxt = {**REQUEST, "step": "ship", "requestId": "o1:1:ship:shipping", "deadline": to_text(clock.now() + TIMEOUT)}
    run(
        scheduler_steps.begin_step,
        app_context,
        {**begin, "request": nxt, "agent": "shipping", "queue": "shipping-requests", "writeNumber": 2},
    )
    clock.advance(LATER)
    assert run(scheduler_steps.begin_step, app_context, begin) == {"owned": False}
    record = app_context.states.get("o1")
    assert record is not None and record.current_step == "ship" and record.complete_by == start + LATER + TIMEOUT
    assert len(_sent(sender, "payment-requests")) == 2


def test_a_begin_undo_run_again_later_keeps_the_deadline(app_context, clock) -> None:
    start = clock.now()
    seq, undo = claimed_round(app_context, start, TIMEOUT, REQUEST)
    began = {"request": undo, "agent": "payment", "seq": seq, "writeNumber": 1, "timeoutSeconds": 60.0}

    first = run(compensation_steps.begin_undo, app_context, began)
    clock.advance(LATER)
    again = run(compensation_steps.begin_undo, app_context, began)

    assert parse(again["deadline"]) == parse(first["deadline"]) == start + TIMEOUT
    stored = app_context.states.get("o1")
    assert stored is not None and stored.complete_by == start + TIMEOUT
