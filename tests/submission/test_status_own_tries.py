"""A final status keeps its own tries once the ``Received`` owed before it is out.

Red team, runner profile p10 (submitter 1's status queue full from 10 s for 25 minutes, 25 % failed Service Bus
sends, a host restart every 150 s, two bare Durable outages), 200 orders, seed 2, ``ord-00107``: the order ended
``Processed`` while its queue was full, so its ``Completed`` went out on the scheduler's durable timers, each try
saying the ``Received`` the record owed first. Tries 1-6 (0 s to 17 min 35 s) failed on that ``Received``; try 7
(47 min 35 s) sent it and failed ``Completed`` (an injected send failure), and so did tries 8-10 (1 h 47, 3 h 47,
5 h 47 min): ``Completed`` was given up and alerted ``StatusUndelivered`` after four tries of its own, while the
queue took sends. Now the timers count the tries that failed on the ``Received`` apart from the status's own
(``orchestrators.status``): each gets ``FINAL_RETRY_DELAYS``. Each test replays the scheduler's ``Completed`` on
its timers through the SDK and runs each try's ``publish_status`` activity against the Cosmos DB protocol server,
the clock moved to each timer."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from activities.scheduler_steps import mark_processed, publish_status
from adapters.clock import ManualClock
from adapters.cosmos.errors import StoreUnavailable
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.activities import Processed
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from localrun.durable.history import parse_timestamp
from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS, call_publish_status
from tests.activity_calls import run
from tests.contexts import context_with
from tests.durable_history import History
from tests.fakes import RecordingSender
from tests.submission.test_received_owed import CLIENT, ORDER, _given_up, _heard, _processed_owing_received

pytestmark = pytest.mark.cosmos

# The Received sends that fail before the scheduler's timers begin: the delivery's, the first step's, and the two of
# the Processed write (tests/submission/test_received_owed.py, ``_processed_owing_received``)
BEFORE_THE_TIMERS = 4
SIX_HOURS = sum(FINAL_RETRY_DELAYS, timedelta(0))  # the waits of one count of tries


class QueueFullThenFailing(RecordingSender):
    """The submitter's queue fails the first ``received`` sends of ``Received`` (full), then the first ``completed``
    sends of ``Completed`` (Service Bus failing sends)."""

    def __init__(self, received: int, completed: int) -> None:
        super().__init__()
        self.failures = {"Received": received, "Completed": completed}

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == CLIENT:
            status = json.loads(message.body)["status"]
            if self.failures.get(status, 0) > 0:
                self.failures[status] -= 1
                raise SendError(f"send to {queue!r} failed ({status})")
        super().send(queue, message)


class Plan:
    reply_to = CLIENT
    reply_to_known = True


def _completed_on_timers(ctx: AppContext, attempt: int) -> tuple[Any, list[timedelta]]:
    """Plays the scheduler's ``Completed`` on its durable timers (``call_publish_status``) to its end: each try's
    ``publish_status`` run against the store, a failure recorded as the activity's, each timer fired when due with
    the clock moved to it. Its output (True: sent) and each try's time since the first."""

    def orchestrator(context: Any) -> Any:
        return (yield from call_publish_status(context, ORDER, "Completed", attempt, plan=Plan()))

    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    start = clock.now()
    h = History(f"{ORDER}:{attempt}", start=start)
    tries: list[timedelta] = []
    for _ in range(100):
        result = h.run(orchestrator)
        if result.is_done:
            return result.output, tries
        (action,) = result.new_actions
        if action["type"] == "CreateTimer":
            clock.set(parse_timestamp(action["fireAt"]))
            h.timer_fired(clock.now())
            continue
        assert action["functionName"] == names.PUBLISH_STATUS
        tries.append(clock.now() - start)
        try:
            answer = run(publish_status, ctx, json.loads(action["input"]))
        except Exception as exc:
            h.activity_failed(names.PUBLISH_STATUS, str(exc), at=h.now)
        else:
            h.activity_completed(names.PUBLISH_STATUS, answer, at=h.now)
    raise AssertionError("the orchestration never ended")


def _ended_owing_received(app_context: AppContext, sender: RecordingSender) -> tuple[AppContext, int]:
    """The order ended ``Processed`` owing ``Received`` (its queue full): the context, and the attempt."""
    ctx = context_with(app_context, sender=sender)
    done, completed = _processed_owing_received(ctx, 2)
    assert mark_processed(ctx, done) == Processed(status_sent=False)
    return ctx, completed.attempt


def _waited(counts: list[int]) -> list[timedelta]:
    """The time of each try since the first, the waits after each failed try taken from the count it belongs to
    (``counts``: the count of each try but the last, 0 for the ``Received``'s, 1 for the status's own)."""
    used = [0, 0]
    at, times = timedelta(0), [timedelta(0)]
    for count in counts:
        at += FINAL_RETRY_DELAYS[used[count]]
        used[count] += 1
        times.append(at)
    return times


def test_a_status_whose_received_spent_most_tries_gets_its_own_once_received_is_out(
    app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """``ord-00107``'s tries: 6 fail on ``Received``, the 7th sends it and fails ``Completed``, and so do the next 3.
    ``Completed`` has six tries of its own left: the 11th try sends it, nothing is given up."""
    sender = QueueFullThenFailing(received=BEFORE_THE_TIMERS + 6, completed=4)
    ctx, attempt = _ended_owing_received(app_context, sender)

    with caplog.at_level(logging.INFO):
        sent, tries = _completed_on_timers(ctx, attempt)

    assert sent is True
    assert _heard(ctx) == ["Received", "Completed"]
    assert tries == _waited([0] * 6 + [1] * 4)  # its own count begins at 5 s again once Received is out
    assert _given_up(caplog) == []
    assert sender.bodies(OPERATOR_ALERTS_QUEUE) == []


def test_a_status_failing_after_its_received_went_out_is_given_up_alone_after_its_own_count(
    app_context: AppContext, caplog: pytest.LogCaptureFixture
) -> None:
    """Bounded: ``Completed`` failing for good after ``Received`` went out at the 7th try is given up (and alerted,
    ``Received`` not named: the submitter heard it) at its own tenth try, about twelve hours after the first."""
    sender = QueueFullThenFailing(received=BEFORE_THE_TIMERS + 6, completed=1_000)
    ctx, attempt = _ended_owing_received(app_context, sender)

    with caplog.at_level(logging.INFO):
        sent, tries = _completed_on_timers(ctx, attempt)

    assert sent is False
    assert tries == _waited([0] * 6 + [1] * 9)
    assert tries[-1] == sum(FINAL_RETRY_DELAYS[:6], SIX_HOURS)
    assert _heard(ctx) == ["Received"]
    assert _given_up(caplog) == [("Completed", attempt)]
    (alert,) = sender.bodies(OPERATOR_ALERTS_QUEUE)
    assert alert["kind"] == "StatusUndelivered" and "undeliveredBefore" not in alert["details"]


@pytest.mark.parametrize("own_failures", [0, 3], ids=["queue-full-for-good", "status-failed-first"])
def test_a_received_failing_for_good_gives_both_up_after_its_own_count(
    app_context: AppContext, caplog: pytest.LogCaptureFixture, own_failures: int
) -> None:
    """The queue never takes ``Received`` (full for good): ``Completed`` is never sent before it, and both are given
    up together at the tenth try that failed on ``Received``, about six hours in, as before. ``own_failures``: tries
    that failed first for a reason of the status's own (the record unreadable, on a host with no version of it):
    they count as the status's, and do not shorten the ``Received``'s count."""
    sender = QueueFullThenFailing(received=1_000, completed=0)
    ctx, attempt = _ended_owing_received(app_context, sender)
    unreadable = _StoreDownFor(ctx, own_failures)

    with caplog.at_level(logging.INFO):
        sent, tries = _completed_on_timers(context_with(ctx, states=unreadable), attempt)

    assert sent is False
    assert tries == _waited([1] * own_failures + [0] * 9)
    assert _heard(ctx) == []
    assert _given_up(caplog) == [("Received", 0), ("Completed", attempt)]
    (alert,) = sender.bodies(OPERATOR_ALERTS_QUEUE)
    assert alert["details"]["undeliveredBefore"] == ["Received"]


class _StoreDownFor:
    """The state store as a host with no version of the ended record cached sees it, its reads failing ``count``
    times first (a Cosmos DB outage): each such try of the status fails before it can tell whether ``Received``
    is owed."""

    def __init__(self, ctx: AppContext, count: int) -> None:
        self._store = ctx.states
        self.count = count

    def recent(self, order_id: str) -> Any:
        return None

    def get(self, order_id: str) -> Any:
        if self.count > 0:
            self.count -= 1
            raise StoreUnavailable("Cosmos DB 503")
        return self._store.get(order_id)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return getattr(self._store, name)  # type: ignore[no-any-return]
