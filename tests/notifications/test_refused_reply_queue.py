"""A final status whose reply queue refuses this app for a while (``QueueNotFound``: a role assignment still
propagating, a queue deleted and created again) is tried again for ``REFUSED_RETRY_WINDOW``, then dropped.

Red team: the ``publish_status`` activity caught the refusal, alerted ``ReplyQueueUnavailable`` and succeeded,
so the scheduler's, the compensation round's and the status courier's timers stopped at its first try: the
order's ``Completed``, ``Compensated``, ``CompensationFailed`` or ``Rejected`` was lost though the queue took
sends minutes later. Now the activity answers ``StatusRefused`` and the orchestration tries again on its
timers within the window. Replayed by the SDK over synthetic histories: the delays it asks for, the inputs of
its tries, and histories recorded before ``StatusRefused`` existed (the answer None) replaying as they did."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.scheduler_steps import publish_status
from contracts.messages import StatusName
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.states import ProcessState
from localrun.durable.history import parse_timestamp
from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS, REFUSED_RETRY_WINDOW, call_publish_status
from tests.activity_calls import run
from tests.durable_history import History, ReplayResult
from tests.fakes import RecordingSender
from tests.notifications.test_status_after_write import storeless_context

T0 = datetime(2026, 3, 1, tzinfo=UTC)
REFUSED = {"refused": True, "error": "'submitter-7' refuses this app"}
Answer = Callable[[int], Any]  # the answer of the n-th try (0-based): a JSON result, or an Exception to fail it


class Plan:
    reply_to = "submitter-7"
    reply_to_known = True


def _status_orchestrator(status: StatusName) -> Callable[[Any], Any]:
    def orchestrator(context: Any) -> Any:
        return (yield from call_publish_status(context, "o1", status, 2, plan=Plan()))

    return orchestrator


def _play(
    orchestrator: Any, answer: Answer, *, name: str = "orchestrator", given: Any = None
) -> tuple[ReplayResult, list[tuple[timedelta, dict[str, Any]]]]:
    """Runs ``orchestrator`` to its end, answering each ``publish_status`` it schedules with ``answer`` and firing
    each timer it asks for when it asks: its output, and each try's time since the first and its input."""
    h = History("o1:2", given, start=T0, name=name)
    tries: list[tuple[timedelta, dict[str, Any]]] = []
    for _ in range(50):
        result = h.run(orchestrator)
        if result.is_done:
            return result, tries
        (action,) = result.new_actions
        if action["type"] == "CreateTimer":
            h.timer_fired(parse_timestamp(action["fireAt"]))
            continue
        assert action["functionName"] == names.PUBLISH_STATUS
        tries.append((h.now - T0, json.loads(action["input"])))
        outcome = answer(len(tries) - 1)
        if isinstance(outcome, Exception):
            h.activity_failed(names.PUBLISH_STATUS, str(outcome), at=h.now)
        else:
            h.activity_completed(names.PUBLISH_STATUS, outcome, at=h.now)
    raise AssertionError("the orchestration never ended")


def _cumulative(delays: tuple[timedelta, ...]) -> list[timedelta]:
    total, out = timedelta(0), [timedelta(0)]
    for delay in delays:
        total += delay
        out.append(total)
    return out


@pytest.mark.parametrize("status", ["Completed", "Compensated"])
def test_a_final_status_its_queue_keeps_refusing_is_tried_again_for_the_window_then_dropped(status: StatusName):
    """Every try refused: tried again on the final status's timers while they stay within the window, the last
    delay cut so the last try falls on its end (45 minutes after the first), then dropped (False). No try says
    ``lastTry``: a refusal is never alerted ``StatusUndelivered`` (the queue's own alert stands for it)."""
    result, tries = _play(_status_orchestrator(status), lambda n: REFUSED)

    assert result.output is False
    within = [t for t in _cumulative(FINAL_RETRY_DELAYS) if t < REFUSED_RETRY_WINDOW]
    assert [at for at, _ in tries] == [*within, REFUSED_RETRY_WINDOW]
    assert all("lastTry" not in given for _, given in tries)


def test_a_final_status_is_sent_at_the_first_try_after_the_queue_takes_sends_again():
    """The submitter's role propagates 10 minutes in: the try after that sends the status and the
    orchestration ends (True)."""
    result, tries = _play(_status_orchestrator("Completed"), lambda n: REFUSED if n < 5 else None)

    assert result.output is True  # tried at 0, 5 s, 35 s, 2:35 and 7:35 (refused), then at 17:35: sent
    assert [at for at, _ in tries] == _cumulative(FINAL_RETRY_DELAYS[:5])


@pytest.mark.parametrize("status", ["Processing", "Compensating", "Failed", "CompensationFailed"])
def test_a_progress_or_owed_status_its_queue_refuses_is_not_tried_again(status: StatusName):
    """A failure status owed by the record is tried again by the owed sweep instead (Received first, nothing after
    an operator acted: tests/submission/test_redteam_refused_queue.py)."""
    result, tries = _play(_status_orchestrator(status), lambda n: REFUSED)
    assert result.output is False and len(tries) == 1


def test_the_window_counts_from_the_first_try_whatever_failed_before_the_refusals():
    """Failed sends first (Service Bus unreachable), refusals after: the window still ends 45 minutes after the
    first try; a failure after the window goes on with the timers as before (the six hours of a failed send)."""
    answers = [RuntimeError("send failed")] * 3 + [REFUSED] * 10

    result, tries = _play(_status_orchestrator("Completed"), lambda n: answers[n])

    assert result.output is False
    assert [at for at, _ in tries][-1] == REFUSED_RETRY_WINDOW


def test_a_failure_at_the_windows_end_goes_on_with_the_timers_of_a_failed_send():
    """The try at the window's end fails (not refused): a failed send is tried on the remaining delays, and a
    refusal after the window ends the tries."""
    answers: list[Any] = [REFUSED] * 6 + [RuntimeError("send failed"), REFUSED]

    result, tries = _play(_status_orchestrator("Completed"), lambda n: answers[n])

    assert result.output is False and len(tries) == 8
    assert tries[-1][0] == REFUSED_RETRY_WINDOW + FINAL_RETRY_DELAYS[6]


def test_a_history_recorded_before_refusals_were_answered_replays_as_recorded(functions):
    """A ``publish_status`` answer recorded before ``StatusRefused`` existed is None, whether it sent the status
    or its queue refused it: the orchestration (and the courier) end at it, as the code that recorded it did."""
    result, tries = _play(_status_orchestrator("Completed"), lambda n: None)
    assert (result.output, len(tries)) == (True, 1)

    courier_input = {"orderId": "o1", "status": "Rejected", "attempt": 0, "replyTo": "submitter-7", "variant": "42"}
    courier = functions[names.DELIVER_STATUS].func
    h = History("status:o1:Rejected:0:42", courier_input, start=T0, name=names.DELIVER_STATUS)
    h.activity_completed(names.PUBLISH_STATUS, None, input=courier_input)
    assert h.run(courier).output == {"result": "Sent", "status": "Rejected"}


def test_the_status_courier_tries_a_refused_status_for_the_window_and_says_refused(functions):
    """The intake's ``Rejected`` (or ``Received``) handed to the courier because the queue refused it: the
    courier tries it for the window and ends ``Refused``; one the queue takes meanwhile ends ``Sent``."""
    courier = functions[names.DELIVER_STATUS].func
    given = {"orderId": "o1", "status": "Rejected", "attempt": 0, "replyTo": "submitter-7", "variant": "42"}

    refused, tries = _play(courier, lambda n: REFUSED, name=names.DELIVER_STATUS, given=given)
    assert refused.output == {"result": "Refused", "status": "Rejected"}
    assert tries[-1][0] == REFUSED_RETRY_WINDOW and all(t == given for _, t in tries)

    sent, tries = _play(courier, lambda n: REFUSED if n < 2 else None, name=names.DELIVER_STATUS, given=given)
    assert sent.output == {"result": "Sent", "status": "Rejected"} and len(tries) == 3


def test_the_activity_answers_a_refusal_and_alerts_the_queue_not_the_status():
    """The activity: a queue that refuses this app answers ``StatusRefused`` (it does not fail: the orchestration
    cannot tell one exception from another), alerted ``ReplyQueueUnavailable`` (once per queue), and never
    ``StatusUndelivered``, not even on the last try of the timers."""
    given = {"orderId": "o1", "status": "Completed", "attempt": 2, "replyTo": "submitter-7"}
    for extra in ({}, {"lastTry": True}):
        sender = RecordingSender(missing={"submitter-7"})
        answer = run(publish_status, storeless_context(sender, ended=ProcessState.PROCESSED), {**given, **extra})
        assert answer == {"refused": True, "error": "'submitter-7' refuses this app"}
        assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == ["alert:ReplyQueueUnavailable:-:submitter-7"]

    sent = storeless_context(RecordingSender(), ended=ProcessState.PROCESSED)
    assert run(publish_status, sent, given) is None  # sent: nothing to say
