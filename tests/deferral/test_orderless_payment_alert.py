"""A payment notification whose order never comes (a submitter that never sent it, a submission dead-lettered
after an hour of store failures, a mistyped order id): it waited deferred, untold, until its 14-day time to
live. The peek sweep now tells an operator once it has waited ``ORDERLESS_PAYMENT_ALERT_MINUTES``
(``PaymentWithoutOrder``), once, and leaves it deferred: the order, should it come, still gets it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from deferral.sweep import ORDERLESS_ALERT, peek_sweep
from domain.deferral import EntryStatus
from settings import Settings
from tests.contexts import context_with, while_using
from tests.deferral.support import TOTAL, alerts, deferred_sequence_numbers, deliver_all, notification, order, send


def orderless_alerts(broker: Any) -> list[dict[str, Any]]:
    return [a for a in alerts(broker) if a["kind"] == ORDERLESS_ALERT]


class AlertsRefused:
    """The broker, except that every send to the alert queue fails."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue == OPERATOR_ALERTS_QUEUE:
            raise SendError(f"send to {queue!r} failed: ServerBusy")
        self.inner.send(queue, message)


def waiting_notification(functions: Any, ctx: Any, broker: Any) -> tuple[Any, int]:
    """A notification for order p1, which has not been submitted: deferred, its look again delivered too; the
    sweep's context with a 20-minute bound (the tests' orders queue keeps a message an hour)."""
    send(broker, notification())
    deliver_all(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    return context_with(ctx, settings=Settings.from_env({}, ORDERLESS_PAYMENT_ALERT_MINUTES="20")), seq


def test_a_notification_waiting_past_the_bound_is_alerted_once_and_still_applied_when_its_order_comes(
    functions, ctx, broker, clock
):
    ctx, seq = waiting_notification(functions, ctx, broker)
    bound = ctx.settings.orderless_payment_alert

    clock.advance(bound - timedelta(minutes=1))  # old enough for the sweep, not for the alert
    assert peek_sweep(ctx).alerted == 0
    assert orderless_alerts(broker) == []

    clock.advance(timedelta(minutes=2))
    assert peek_sweep(ctx).alerted == 1
    [alert] = orderless_alerts(broker)
    assert alert["orderId"] == "p1"
    assert alert["details"]["sequenceNumber"] == seq
    assert alert["details"]["notificationId"] == "n-1"
    assert alert["details"]["amountCents"] == TOTAL
    assert "refund" in alert["summary"] and "25.00 EUR" in alert["summary"]
    entry = ctx.deferrals.get("p1").entry(seq)
    assert entry.status is EntryStatus.DEFERRED
    assert entry.orderless_alerted_at == clock.now()
    assert deferred_sequence_numbers(broker) == [seq]  # it waits on

    clock.advance(timedelta(minutes=15))  # past duplicate detection: a second alert would reach the queue
    assert peek_sweep(ctx).alerted == 0
    assert len(orderless_alerts(broker)) == 1

    send(broker, order())  # the order comes after all
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred_sequence_numbers(broker) == []


def test_an_alert_that_cannot_be_sent_is_not_noted_and_the_next_run_sends_it(functions, ctx, broker, clock):
    ctx, seq = waiting_notification(functions, ctx, broker)
    clock.advance(ctx.settings.orderless_payment_alert + timedelta(minutes=1))

    with while_using(ctx, sender=AlertsRefused(broker)) as refusing:
        report = peek_sweep(refusing)
    assert (report.alerted, report.failed) == (0, 1)
    assert ctx.deferrals.get("p1").entry(seq).orderless_alerted_at is None

    clock.advance(timedelta(minutes=5))
    assert peek_sweep(ctx).alerted == 1
    assert [a["details"]["sequenceNumber"] for a in orderless_alerts(broker)] == [seq]


def test_a_notification_for_a_refused_order_is_dead_lettered_not_alerted_as_orderless(
    functions, ctx, broker, clock, monkeypatch
):
    ctx, seq = waiting_notification(functions, ctx, broker)
    monkeypatch.setattr("submission.intake._pending_full", lambda ctx: True)  # admission control refuses p1
    send(broker, order())
    deliver_all(functions, broker)
    assert [d.sequence_number for d in broker.dead_letters("orders")] == [seq]

    clock.advance(ctx.settings.orderless_payment_alert + timedelta(minutes=1))
    assert peek_sweep(ctx).alerted == 0
    assert orderless_alerts(broker) == []
