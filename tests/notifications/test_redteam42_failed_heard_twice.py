"""Red team (notifications, session 42): a failure status that two senders owe, the orchestration's durable timers
and the supervisor's owed sweep, reached the submitter twice.

``fail_order`` owes ``Failed`` on the record (``completeBy``); the orchestration sends it on its timers (5 s ... 2 h
while the send fails) and the sweep sends it in the first duplicate window (10 minutes) of each hour since
``completeBy`` until it can acknowledge it. The docs (docs/supervisor.md) promise the sweep's repeat "collapses in
duplicate detection". A submitter's queue full for the sweep's whole first window that drains before the timers'
try at 17 minutes: that try delivered ``Failed``, the record still said it was owed, and the next hour's sweep sent
it again 43 minutes later, past the 10 minutes of duplicate detection: a second ``Failed`` message (and the same for
``CompensationFailed``). Now the activity's send of a status the record still owes is noted on it
(``OwedStatusSent``), and the sweep sends that status no more."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from activities import scheduler_steps
from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE, QUEUE_DUPLICATE_DETECTION_MINUTES
from dependencies import AppContext
from domain.records import OWED_STATUS_SENT
from supervisor import owed
from tests.activity_calls import run
from tests.compensation.support import submitted_and_claimed
from tests.contexts import context_with
from tests.notifications.test_failure_status_after_operator_acted import (
    CLIENT,
    _compensation_failed_while_the_queue_is_full,
    _failed_while_the_queue_is_full,
    _later,
    _queue_full,
    _status,
)
from tests.submission.test_statuses_after_received import FullQueue

pytestmark = pytest.mark.cosmos


class Broker(FullQueue):
    """``FullQueue`` that keeps what Service Bus's duplicate detection keeps: a MessageId sent again within
    ``QUEUE_DUPLICATE_DETECTION_MINUTES`` of its last accepted send is dropped."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        self.delivered: list[tuple[datetime, str]] = []

    def send(self, queue: str, message: OutgoingMessage) -> None:
        super().send(queue, message)  # raises while the queue is full
        if queue != CLIENT:
            return
        now = self.clock.now()
        window = timedelta(minutes=QUEUE_DUPLICATE_DETECTION_MINUTES)
        if any(mid == message.message_id and now - at < window for at, mid in self.delivered):
            return
        self.delivered.append((now, message.message_id))


def _compensation_failed(ctx: AppContext) -> dict[str, Any]:
    return _compensation_failed_while_the_queue_is_full(ctx)[1]


@pytest.mark.parametrize("fail", [_failed_while_the_queue_is_full, _compensation_failed])
def test_a_failure_status_sent_by_the_timers_after_the_sweeps_first_window_is_not_sent_again_by_the_next_hours(
    app_context: AppContext, fail: Callable[[AppContext], dict[str, Any]]
) -> None:
    ctx, _ = _queue_full(app_context)
    assert isinstance(ctx.clock, ManualClock)
    broker = Broker(ctx.clock)
    ctx = context_with(ctx, sender=broker)
    retried = fail(ctx)
    status = f"o1:{retried['status']}:{retried['attempt']}"
    for _ in range(6):  # the sweeps of the first window: the queue still full, the status stays owed
        _later(ctx, 2)
        owed.deliver_due(ctx)
    _later(ctx, 5)
    broker.full = False  # drained at 17 minutes: the orchestration's timer try sends it
    assert run(scheduler_steps.publish_status, ctx, retried) is None
    record = ctx.states.get("o1")
    assert record is not None and record.history[-1].event == OWED_STATUS_SENT
    for _ in range(30):  # the next hour's window
        _later(ctx, 2)
        owed.deliver_due(ctx)

    heard = [mid for _, mid in broker.delivered]
    assert heard.count(status) == 1, heard
    if retried["status"] == "Failed":  # no step began: the Received the record owed, said first
        assert heard.index("o1:Received:0") < heard.index(status)
    record = ctx.states.get("o1")
    assert record is not None and record.complete_by is None  # acknowledged by the sweep all the same


def test_a_failure_status_sent_at_once_is_noted_and_the_sweep_acknowledges_it(app_context: AppContext) -> None:
    """The common path: the queue takes the orchestration's first try; the sweep's next run sends the alert (the
    same id: collapsed) and acknowledges, without sending the status again."""
    ctx, _ = _queue_full(app_context)
    assert isinstance(ctx.clock, ManualClock)
    broker = Broker(ctx.clock)
    broker.full = False
    ctx = context_with(ctx, sender=broker)
    submitted_and_claimed(ctx)
    failed = {"orderId": "o1", "instanceId": "o1:1", "step": "reserve-inventory", "attempt": 1, "error": "gone"}
    assert run(scheduler_steps.fail_order, ctx, failed) == {"owned": True}
    assert run(scheduler_steps.publish_status, ctx, _status("Failed", 1)) is None
    sent = len(broker.sent)
    _later(ctx, 1)
    owed.deliver_due(ctx)
    assert [q for q, _ in broker.sent[sent:]] == [OPERATOR_ALERTS_QUEUE]
    record = ctx.states.get("o1")
    assert record is not None and record.complete_by is None
