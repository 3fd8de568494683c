"""The attempt's ``Processing`` whatever lands first: its first ``begin_step`` or submission's ``Received`` mark.

The attempt's first ``begin_step`` sends ``Processing`` after its write (tried once, docs/deferral.md "Status
messages"), not while that write left ``Received`` owed. Found by the two-writers scenes
(tests/supervisor/two_writers.py, ``late_start`` beside ``received_mark``): the write commits and its answer is
lost (a timeout, a reset connection), a redelivery of the order whose ``Received`` send failed marks the record
owing ``Received`` right then, and Durable runs the activity again, which finds its write made and the record
owing ``Received``: it took the mark for its own write's and went on without ``Processing``; the next write said
``Received``, and the submitter never heard its attempt begin. Now a run that finds its write made says the owed
``Received`` first (the mark left to the record's next writer), then ``Processing``; with the mark before the
write, the write says it and clears the mark (as always). Either way the submitter hears ``Received``, then
``Processing``. The scheduler is replayed by the Durable SDK's own engine (tests/durable_history.py) and its
activity is the registered one, over the Cosmos protocol server."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from adapters.servicebus.sender import OutgoingMessage, QueueNotFound, SendError
from dependencies import AppContext, use_context
from domain.timefmt import parse as parse_time
from orchestrators import names
from submission.intake import _owe_received
from tests.compensation.support import ORDER, stored_record, submitted_and_claimed
from tests.durable_history import History
from tests.fakes import RecordingSender
from tests.lost_writes import FlakyStates
from tests.orchestrators.support import T0, started_attempt

pytestmark = pytest.mark.cosmos

CLIENT = str(ORDER["replyTo"])
ORDER_ID = str(ORDER["orderId"])


def _mark_received_owed(ctx: AppContext) -> None:
    """A redelivery of the creating message whose ``Received`` send failed: the record marked owing it."""
    marked = _owe_received(ctx, stored_record(ctx))
    assert marked.received_owed is not None


def _scheduled(history: History, scheduler: Any) -> dict[str, Any]:
    """The one activity the scheduler schedules next (the first step's ``begin_step``)."""
    result = history.run(scheduler)
    [call] = result.new_actions
    assert call["functionName"] == names.BEGIN_STEP, call
    return call


class QueueFailing:
    """The recording sender, but every send to ``queue`` fails (``SendError``: after the SDK's retries) or is refused
    (``QueueNotFound``: the queue missing, or this app not allowed); ``tried``: the MessageIds tried there."""

    def __init__(self, inner: RecordingSender, queue: str, error: type[SendError]) -> None:
        self.inner, self.queue, self.error = inner, queue, error
        self.tried: list[str] = []

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == self.queue:
            self.tried.append(message.message_id)
            raise self.error(f"send to {queue!r} failed")
        self.inner.send(queue, message)


def _begun(ctx: AppContext, functions: dict[str, Any], clock: Any, mark: str, again: AppContext) -> History:
    """The attempt's history up to its first ``begin_step``'s answer: the ``Received`` mark landed before the write,
    or after it with the write's answer lost, then the scheduler's retry after its durable timer, run in ``again``."""
    clock.set(T0)  # the time the attempt's history starts at
    owner = str(submitted_and_claimed(ctx).locked_by)
    scheduler = functions[names.SCHEDULER].func
    begin = functions[names.BEGIN_STEP].func
    history = started_attempt(owner, ORDER, 1)
    call = _scheduled(history, scheduler)
    assert json.loads(call["input"])["announce"] is True
    if mark == "before the write":
        _mark_received_owed(ctx)
        answer = begin(json.loads(call["input"]))
        history.activity_completed(names.BEGIN_STEP, answer, at=clock.now())
        return history
    lossy = FlakyStates(ctx.states)
    lossy.lose[ORDER_ID] = 1
    use_context(replace(ctx, states=lossy))  # type: ignore[arg-type]
    try:
        with pytest.raises(StoreUnavailable):
            begin(json.loads(call["input"]))  # the write commits, its answer is lost: the activity fails
    finally:
        use_context(ctx)
    _mark_received_owed(ctx)  # in between, the mark lands
    history.activity_failed(names.BEGIN_STEP, "StoreUnavailable", at=clock.now())
    [timer] = history.run(scheduler).new_actions  # the scheduler retries it after a durable timer
    fire_at = parse_time(timer["fireAt"])
    clock.set(fire_at)
    history.timer_fired(fire_at)
    retried = _scheduled(history, scheduler)
    assert json.loads(retried["input"]) == json.loads(call["input"])  # the same input, the same write number
    use_context(again)
    try:
        answer = begin(json.loads(retried["input"]))
    finally:
        use_context(ctx)
    history.activity_completed(names.BEGIN_STEP, answer, at=clock.now())
    return history


@pytest.mark.parametrize("mark", ["before the write", "after the write, its answer lost"])
def test_the_first_begin_step_says_processing_after_received_whichever_lands_first(
    app_context: AppContext, functions: dict[str, Any], clock: Any, sender: RecordingSender, mark: str
) -> None:
    ctx = app_context
    history = _begun(ctx, functions, clock, mark, ctx)

    assert sender.message_ids(CLIENT) == [f"{ORDER_ID}:Received:0", f"{ORDER_ID}:Processing:1"]
    # said, its mark cleared by the write; or said by the run again, its mark left for the next writer (no write)
    assert (stored_record(ctx).received_owed is None) is (mark == "before the write")
    waiting = history.run(functions[names.SCHEDULER].func)  # the attempt goes on: the agent's call and its deadline
    assert waiting.new_action_types() == ["CallActivity", "CreateTimer"]


@pytest.mark.parametrize("queue", ["failing", "refusing"])
def test_no_processing_while_the_received_owed_cannot_be_said(
    app_context: AppContext, functions: dict[str, Any], clock: Any, sender: RecordingSender, queue: str
) -> None:
    """The run again cannot say the ``Received`` marked since (its send fails, or the queue refuses the app): no
    ``Processing`` either (tried once, as a progress status is), the activity answers all the same (a status never
    fails the write before it), and the mark stays for the record's next writer."""
    ctx = app_context
    cannot = QueueFailing(sender, CLIENT, SendError if queue == "failing" else QueueNotFound)
    history = _begun(ctx, functions, clock, "after the write, its answer lost", replace(ctx, sender=cannot))

    assert cannot.tried == [f"{ORDER_ID}:Received:0"]  # and no Processing after it
    assert sender.message_ids(CLIENT) == []
    assert stored_record(ctx).received_owed is not None
    waiting = history.run(functions[names.SCHEDULER].func)
    assert waiting.new_action_types() == ["CallActivity", "CreateTimer"]
