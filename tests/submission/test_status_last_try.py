"""A final status whose last try dies before its code runs is still alerted.

Before: the last try of a final status on its durable timers (``lastTry``) gives it up and alerts it
``StatusUndelivered`` when it fails (``publish_status``, ``_give_up``), then raises; a last try that failed without
running that code (its worker killed at host.json's ``functionTimeout``, a crash the extension reports as the
activity's failure, an unexpected error before it) ended the timers with the status dropped: no
``StatusUndelivered``, no page. Now an attempt started with ``answersGiveUp`` asks its last try to answer its give-up
(``StatusGivenUp``), repeats a last try that fails (``LAST_TRY_REPEATS``), and logs ``LastTryLost`` itself (once,
not on replay) when every repeat failed too (``orchestrators.status``). Each test replays the scheduler's
``Completed`` on its timers through the SDK and runs each try that is not killed with the real ``publish_status``
activity against the Cosmos DB protocol server, the clock moved to each timer."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from activities.scheduler_steps import publish_status
from adapters.clock import ManualClock
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from orchestrators import names
from orchestrators.status import ANSWERS_GIVE_UP_INPUT, FINAL_RETRY_DELAYS, LAST_TRY_REPEATS, call_publish_status
from tests.activity_calls import run
from tests.durable_history import History
from tests.submission.test_received_owed import ORDER, _given_up, _heard
from tests.submission.test_status_own_tries import BEFORE_THE_TIMERS, Plan, QueueFullThenFailing, _ended_owing_received

pytestmark = pytest.mark.cosmos

KILLED = "Timeout value of 00:30:00 was exceeded by function: Functions.publish_status"
TRIES = len(FINAL_RETRY_DELAYS) + 1  # a status's own tries: the last is the tenth


def _completed_on_timers(
    ctx: AppContext, attempt: int, killed: Callable[[int], bool], *, started: dict[str, Any] | None
) -> tuple[History, Any, list[dict[str, Any]]]:
    """Plays the scheduler's ``Completed`` on its durable timers to its end, in an attempt started with ``started``:
    each try (numbered from 1) killed (``killed``: failed with the host's timeout, its code never run) or run against
    the store; each timer fired when due, the clock moved to it. The history, the output (True: sent) and each try's
    input."""

    def orchestrator(context: Any) -> Any:
        return (yield from call_publish_status(context, ORDER, "Completed", attempt, plan=Plan()))

    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    h = History(f"{ORDER}:{attempt}", started, start=clock.now())
    inputs: list[dict[str, Any]] = []

    def activity(name: str, data: dict[str, Any]) -> Any:
        assert name == names.PUBLISH_STATUS
        inputs.append(data)
        if killed(len(inputs)):
            raise RuntimeError(KILLED)
        return run(publish_status, ctx, data)

    return h, h.play(orchestrator, activity, moved_to=clock.set), inputs


STARTED = {ANSWERS_GIVE_UP_INPUT: True}  # as every attempt started now says (``Claim.orchestration_input``)


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "event", "") for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_killed_last_try_is_repeated_and_the_repeat_sends_the_status(
    app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """``Completed`` fails its first nine tries (``Received`` goes out at the first); the tenth, its last, is killed
    before its code runs. Before, the attempt ended there with the status neither sent nor alerted. Now the last try
    is tried again ``LAST_TRY_REPEATS[0]`` later and sends it."""
    sender = QueueFullThenFailing(received=BEFORE_THE_TIMERS, completed=TRIES - 1)
    ctx, attempt = _ended_owing_received(app_context, sender)

    with caplog.at_level(logging.INFO):
        _, sent, inputs = _completed_on_timers(ctx, attempt, lambda n: n == TRIES, started=STARTED)

    assert sent is True
    assert _heard(ctx) == ["Received", "Completed"]
    assert len(inputs) == TRIES + 1
    assert [i.get("lastTry") for i in inputs[-2:]] == [True, True]
    assert [i.get("answersGiveUp") for i in inputs] == [None] * (TRIES - 1) + [True, True]  # only the last asks
    assert _given_up(caplog) == [] and "LastTryLost" not in _errors(caplog)


def test_every_repeat_of_a_killed_last_try_killed_too_is_logged_last_try_lost_once(
    app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """The last try and each of its repeats killed: the attempt logs ``LastTryLost`` itself (ERROR, the event the
    alertsUndelivered rule pages on) with the order, status, attempt and instance, once: not again when its history
    is replayed."""
    sender = QueueFullThenFailing(received=BEFORE_THE_TIMERS, completed=1_000)
    ctx, attempt = _ended_owing_received(app_context, sender)

    with caplog.at_level(logging.INFO):
        h, sent, inputs = _completed_on_timers(ctx, attempt, lambda n: n >= TRIES, started=STARTED)

    assert sent is False
    assert len(inputs) == TRIES + len(LAST_TRY_REPEATS)
    (lost,) = [r for r in caplog.records if getattr(r, "event", None) == "LastTryLost"]
    fields = {k: getattr(lost, k) for k in ("orderId", "status", "attempt", "instanceId", "activity", "alertKind")}
    assert fields == {
        "orderId": ORDER,
        "status": "Completed",
        "attempt": attempt,
        "instanceId": f"{ORDER}:{attempt}",
        "activity": names.PUBLISH_STATUS,
        "alertKind": "StatusUndelivered",
    }
    assert lost.levelno == logging.ERROR
    # the alertsUndelivered rule sends the operator to the event's summary, as for its other events (red team rt62b)
    assert vars(lost)["summary"].startswith(f"order {ORDER}: status Completed (nor the Received before it")
    assert _given_up(caplog) == []  # the give-up never ran: LastTryLost is the only trace
    assert sender.bodies(OPERATOR_ALERTS_QUEUE) == []

    caplog.clear()
    h.new_episode(h.now + timedelta(seconds=1))  # the same history, every event played: a replay

    def orchestrator(context: Any) -> Any:
        return (yield from call_publish_status(context, ORDER, "Completed", attempt, plan=Plan()))

    with caplog.at_level(logging.INFO):
        assert h.run(orchestrator).output is False
    assert _errors(caplog) == []


def test_a_last_try_that_gave_up_answers_so_and_is_not_repeated(
    app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """The last try runs and its send fails: given up and alerted once by the activity, answered ``StatusGivenUp``;
    the timers end with no repeat, no second ``StatusUndelivered``, no ``LastTryLost``."""
    sender = QueueFullThenFailing(received=BEFORE_THE_TIMERS, completed=1_000)
    ctx, attempt = _ended_owing_received(app_context, sender)

    with caplog.at_level(logging.INFO):
        _, sent, inputs = _completed_on_timers(ctx, attempt, lambda n: False, started=STARTED)

    assert sent is False
    assert len(inputs) == TRIES
    assert _given_up(caplog) == [("Completed", attempt)]
    assert "LastTryLost" not in _errors(caplog)
    (alert,) = sender.bodies(OPERATOR_ALERTS_QUEUE)
    assert alert["kind"] == "StatusUndelivered"


def test_an_attempt_started_before_ends_its_timers_at_its_last_try_as_recorded(app_context: AppContext) -> None:
    """An attempt whose input lacks ``answersGiveUp`` (started before the change) replays as its history holds: its
    last try does not ask to answer, and a killed one ends the timers (the defect kept for the instance's life)."""
    sender = QueueFullThenFailing(received=BEFORE_THE_TIMERS, completed=TRIES - 1)
    ctx, attempt = _ended_owing_received(app_context, sender)

    _, sent, inputs = _completed_on_timers(ctx, attempt, lambda n: n == TRIES, started=None)

    assert sent is False
    assert len(inputs) == TRIES and "answersGiveUp" not in inputs[-1]
