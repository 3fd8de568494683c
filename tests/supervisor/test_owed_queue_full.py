"""A failed order whose submitter's status queue is full for good (``QuotaExceeded``: a ``SendError``, which the
app retries, never ``ReplyQueueUnavailable``): the supervisor's owed sweep keeps the status owed, sends the
failure alert once (noted on the record, not again every hour), and alerts ``NotificationsStuck`` in the first
resend window after ``STUCK_ALERT_AFTER``: once for the queue while it stays full (rt-alert-noise: it was once an
hour per order, tests/supervisor/test_redteam47_alert_noise.py).

Found by a fuzzed runner profile (seed 4422: a status queue full from 5 s to the end): ``send_owed`` caught the
``SendError`` and answered "not sent" like a refusal, so ``deliver_owed`` never logged
``OwedNotificationsFailed`` nor alerted ``NotificationsStuck``; and with the stuck alert's hours counted from
``STUCK_ALERT_AFTER`` while sends are tried only in the first 10 minutes of each hour, a send failure could
never have met one. The report counted those orders in ``missing_statuses`` and ``silent_failures`` with
nothing telling an operator but a log line."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from dependencies import AppContext
from domain.records import OWED_ALERT_SENT
from domain.states import ProcessState
from submission.intake import handle_orders_message
from supervisor import owed
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

CLIENT = "client-statuses"
ORDER = "o-full"


class FullQueue(RecordingSender):
    """``CLIENT`` refuses every send as a full queue does, once ``full`` is set."""

    full = False

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if self.full and queue == CLIENT:
            raise SendError(f"send to {queue!r} failed: QuotaExceeded: the maximum entity size has been reached")
        super().send(queue, message)


def _escalated(app_context: AppContext) -> tuple[AppContext, FullQueue]:
    sender = FullQueue()
    ctx = context_with(app_context, sender=sender, settings=replace(app_context.settings, max_failures=1))
    body = json.dumps(order(orderId=ORDER)).encode()
    handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id=ORDER))
    assert [b["status"] for b in sender.bodies(CLIENT)] == ["Received"]
    sender.full = True
    assert isinstance(ctx.clock, ManualClock)
    ctx.clock.advance(ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())  # escalates: RetriesExhausted owed, Failed owed
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR and record.complete_by is not None
    return ctx, sender


def _sweep_every_two_minutes(ctx: AppContext, span: timedelta) -> None:
    assert isinstance(ctx.clock, ManualClock)
    end = ctx.clock.now() + span
    while ctx.clock.now() < end:
        ctx.clock.advance(timedelta(minutes=2))
        run_supervisor(ctx, ScanState())


def _alert_ids(sender: RecordingSender, kind: str) -> list[str]:
    return [m.message_id for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE and json.loads(m.body)["kind"] == kind]


def test_a_status_the_full_queue_keeps_refusing_is_alerted_stuck_once(app_context: AppContext) -> None:
    ctx, sender = _escalated(app_context)
    _sweep_every_two_minutes(ctx, owed.STUCK_ALERT_AFTER + timedelta(minutes=20))
    assert _alert_ids(sender, "NotificationsStuck") == []  # owed 35 minutes: sends tried, logged only

    _sweep_every_two_minutes(ctx, timedelta(hours=2))
    stuck = _alert_ids(sender, "NotificationsStuck")
    assert len(stuck) == 1  # hour 1's window; hour 2's finds the queue's problem paged and lasting

    record = ctx.states.get(ORDER)
    assert record is not None and record.complete_by is not None  # still owed: the queue may be drained
    sender.full = False
    _sweep_every_two_minutes(ctx, timedelta(hours=1))
    heard = [b["status"] for b in sender.bodies(CLIENT)]
    # Received again first: a failure of an order that never began a step owes it (notifications.received)
    assert heard[-2:] == ["Received", "Failed"] and set(heard) == {"Received", "Failed"}
    record = ctx.states.get(ORDER)
    assert record is not None and record.complete_by is None


def test_the_failure_alert_goes_out_once_while_the_status_stays_owed(app_context: AppContext) -> None:
    ctx, sender = _escalated(app_context)
    _sweep_every_two_minutes(ctx, timedelta(hours=3))
    # sent once, in the first sweep; noted on the record so the later hours send the status alone
    assert len(_alert_ids(sender, "RetriesExhausted")) == 1
    record = ctx.states.get(ORDER)
    assert record is not None and [e.event for e in record.history].count(OWED_ALERT_SENT) == 1


class BrokenSender(FullQueue):
    """``CLIENT`` fails every send with an error the app does not map (not a ``SendError``), once ``broken`` is set."""

    broken = False

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if self.broken and queue == CLIENT:
            raise RuntimeError("the SDK failed in a way nobody mapped")
        super().send(queue, message)


def test_a_send_that_keeps_failing_with_any_error_is_alerted_stuck(app_context: AppContext) -> None:
    """Red team: anything other than a ``SendError`` raised only while sending was alerted on the hours of a
    build failure (from ``STUCK_ALERT_AFTER``), which never meet a resend window: never ``NotificationsStuck``.
    Escalated while the queue is full (the status owed), then every send of it fails another way."""
    sender = BrokenSender()
    ctx = context_with(app_context, sender=sender, settings=replace(app_context.settings, max_failures=1))
    handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(order(orderId=ORDER)).encode(), message_id=ORDER))
    sender.full = True
    assert isinstance(ctx.clock, ManualClock)
    ctx.clock.advance(ctx.settings.start_grace + timedelta(seconds=1))
    run_supervisor(ctx, ScanState())
    record = ctx.states.get(ORDER)
    assert record is not None and record.process_state is ProcessState.ERROR and record.complete_by is not None
    sender.broken = True
    _sweep_every_two_minutes(ctx, timedelta(hours=2))
    assert len(_alert_ids(sender, "NotificationsStuck")) == 1  # hour 1; hour 2's is the same problem
