"""Issue 11, findings 2, 4 and 6, through the registered trigger, the in-process broker and Cosmos:
a notification handled concurrently with its order, orders rejected by admission control while
their notifications wait, the peek sweep's cursor, and a reply queue refusing the Received status."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from deferral.sweep import SweepCursor, peek_sweep
from domain.deferral import EntryStatus
from orchestrators.names import DELIVER_STATUS
from settings import Settings
from tests.contexts import context_with, while_using
from tests.deferral.support import DurableClientStub, deliver, notification, order, send
from tests.fakes import DeferralLogReadTooEarly


def alert_kinds(broker: Any) -> list[str]:
    return [json.loads(str(m))["kind"] for m in broker.peek(OPERATOR_ALERTS_QUEUE, 100)]


def deferred(broker: Any) -> list[int]:
    return [m.sequence_number for m in broker.peek(ORDERS_QUEUE, 1000) if int(m.state) == 1]


def test_a_notification_deferred_while_its_order_is_submitted_is_applied_by_its_look_again(
    functions, ctx, broker, clock
):
    """Finding 4: the order's submission looked for deferred messages before this one was deferred;
    before the fix only the peek sweep (10 minutes and more) could find it, after the payment step
    had waited out its retries."""
    send(broker, notification())
    assert deliver(functions, broker)
    [seq] = deferred(broker)
    send(broker, order())
    with while_using(ctx, deferrals=DeferralLogReadTooEarly(ctx.deferrals)):  # the concurrent submission
        assert deliver(functions, broker)
    assert ctx.states.get("p1").payment is None

    clock.advance(ctx.settings.defer_retry_delay)
    while deliver(functions, broker):  # the RetryDeferred the deferral scheduled
        pass
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred(broker) == []
    assert ctx.settings.defer_retry_delay < ctx.settings.peek_sweep_age  # well before the sweep could


def test_an_order_rejected_by_admission_releases_the_notifications_waiting_for_it(functions, ctx, broker, monkeypatch):
    """Finding 6: a rejected order left its deferred notification until the time to live (14 days)."""
    send(broker, notification())
    assert deliver(functions, broker)
    [seq] = deferred(broker)
    monkeypatch.setattr("submission.intake._pending_full", lambda ctx: True)  # admission control refuses it
    send(broker, order())
    assert deliver(functions, broker)
    assert ctx.states.get("p1") is None  # rejected

    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, "OrderRejected")
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert "NotificationForRejectedOrder" in alert_kinds(broker)

    # one that arrives after the rejection does not wait either
    send(broker, notification(notification_id="n-2"))
    assert deliver(functions, broker)
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["OrderRejected", "OrderRejected"]
    assert deferred(broker) == []


def test_the_peek_sweep_keeps_a_cursor_so_old_orphans_cannot_hide_newer_messages(functions, ctx, broker, clock):
    """Finding 6: each run restarted at sequence 0 and peeked at most PEEK_SWEEP_MAX_MESSAGES, so that
    many orphans (notifications whose order never came) hid every newer deferred message."""
    ctx = context_with(ctx, settings=Settings.from_env({}, PEEK_SWEEP_MAX_MESSAGES="4"))
    for n in range(6):
        send(broker, notification(f"orphan-{n}", notification_id=f"o-{n}"))
        assert deliver(functions, broker)
    send(broker, notification())
    assert deliver(functions, broker)
    send(broker, order())
    with while_using(ctx, deferrals=DeferralLogReadTooEarly(ctx.deferrals)):  # it missed the deferred message
        assert deliver(functions, broker)
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=1))
    cursor = SweepCursor()  # the look-again messages are not delivered: the sweep must find it alone
    for _ in range(6):
        peek_sweep(ctx, cursor)
    assert ctx.states.get("p1").payment is not None


class RefusingSender:
    """The broker, except that the submitter's status queue refuses every send (quota exceeded)."""

    def __init__(self, inner: Any, queue: str) -> None:
        self.inner, self.queue = inner, queue

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == self.queue:
            raise SendError(f"send to {queue!r} failed: QuotaExceeded")
        self.inner.send(queue, message)


def test_a_received_status_that_cannot_be_sent_never_abandons_the_accepted_order(functions, ctx, broker):
    """Finding 2: the failed Received send abandoned the order message again and again until
    MaxDeliveryCountExceeded; now the order is completed and the status handed to the courier."""
    ctx = context_with(ctx, sender=RefusingSender(broker, "client-statuses"))
    client = DurableClientStub()
    send(broker, order(prepaid=False))
    assert deliver(functions, broker, client)
    assert ctx.states.get("p1") is not None
    assert broker.peek(ORDERS_QUEUE, 10) == []  # completed, not abandoned
    couriers = [(name, data) for name, _, data in client.started if name == DELIVER_STATUS]
    assert couriers == [
        (
            DELIVER_STATUS,
            {"orderId": "p1", "status": "Received", "attempt": 0, "replyTo": "client-statuses", "answersGiveUp": True},
        )
    ]
