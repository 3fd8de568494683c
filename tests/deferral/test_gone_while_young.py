"""A notification recorded as waiting for its order, then handed over as a store-retry copy (a new sequence
number, the original completed) by a later delivery that met a store failure, is not on the queue when its
order's submission looks for it. Reported expired at once, as before, an operator was told
``DeferredMessageExpired`` ("see the orders dead-letter queue") for a payment its copy applied a few seconds
later (harsh-refusals profile, 300 orders, seed 1: 10 such alerts). An entry younger than
``PEEK_SWEEP_AGE_MINUTES`` found gone is now left waiting, with one ``RetryDeferred`` due once it is that old:
the copy settles it first, or the retry reports it expired then. Through the registered trigger, the
in-process broker and the Cosmos protocol server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import SendError
from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from tests.contexts import context_with
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver, deliver_all, notification, order, send
from tests.deferral.test_deferred_all_the_same_looks_again import FailsOnCall

pytestmark = pytest.mark.cosmos


class FirstSendFails:
    """The sender, whose first send raises ``SendError`` (Service Bus failing past the SDK's retries)."""

    def __init__(self, inner: Any) -> None:
        self._inner, self._failed = inner, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send(self, queue: str, message: Any) -> None:
        if not self._failed:
            self._failed = True
            raise SendError("send to 'orders' failed (injected)")
        self._inner.send(queue, message)


def expiry_alerts(broker: Any) -> list[dict[str, Any]]:
    return [a for a in alerts(broker) if a["kind"] == "DeferredMessageExpired"]


def recorded_then_copied(functions: Any, ctx: Any, broker: Any) -> int:
    """p1's notification: its first delivery records it and fails to send its look again (abandoned); its
    second meets a store failure on its first read and is handed over as a copy. Returns its number."""
    send(broker, notification())
    failing = context_with(ctx, sender=FirstSendFails(ctx.sender))
    assert deliver(functions, broker)  # recorded; its look again not sent: abandoned
    context_with(failing, sender=ctx.sender, states=FailsOnCall(ctx.states, "get", 1))
    assert deliver(functions, broker)  # redelivered at once: the store fails, a copy is scheduled
    context_with(ctx, states=ctx.states)
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status is EntryStatus.DEFERRED and deferred_sequence_numbers(broker) == []
    assert [m for m in broker.contents(ORDERS_QUEUE) if ":store-retry:" in (m.message_id or "")]
    seq: int = entry.sequence_number
    return seq


def test_an_order_submitted_while_its_notifications_copy_is_due_raises_no_expiry_and_takes_the_payment(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    seq = recorded_then_copied(functions, ctx, broker)
    send(broker, order())
    assert deliver(functions, broker)  # the submission looks for #seq: gone, its entry young
    assert expiry_alerts(broker) == []
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED

    clock.advance(timedelta(seconds=15))
    deliver_all(functions, broker)  # the copy: applied, and the original's entry settled by it
    assert ctx.states.get("p1").payment is not None
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED

    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=1))
    deliver_all(functions, broker)  # the absence check: its entry resolved, nothing to report
    assert expiry_alerts(broker) == []
    assert broker.dead_letters(ORDERS_QUEUE) == []


def test_a_message_gone_for_good_while_young_is_reported_expired_once_its_entry_is_old(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    send(broker, notification())  # recorded, its look again scheduled, deferred
    assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)  # its look again: no order yet, nothing more scheduled for it
    with ctx.deferred.open(ORDERS_QUEUE) as receiver:  # then gone for good: dead-lettered, as on expiry
        [message] = receiver.receive_deferred([seq])
        receiver.dead_letter(message, "TTLExpiredException", "expired")
    send(broker, order())
    assert deliver(functions, broker)  # the submission looks for #seq: gone, its entry young
    assert expiry_alerts(broker) == []
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED

    for _ in range(int(ctx.settings.peek_sweep_age / timedelta(minutes=1)) + 2):
        clock.advance(timedelta(minutes=1))
        deliver_all(functions, broker)
    [alert] = expiry_alerts(broker)
    assert alert["details"]["sequenceNumber"] == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.EXPIRED


def test_a_message_gone_for_good_while_young_is_alerted_as_refused_after_its_order_is_refused(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """The same when the order is refused by the pending cap: its release of the waiting notifications finds
    this one gone, its entry young, and leaves it to the retry that accounts for it once it is old. Its order
    refused, it is alerted as the notifications dead-lettered under the refusal are (``NotificationForRejectedOrder``,
    not ``DeferredMessageExpired``) and listed with them."""
    send(broker, notification())
    assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)  # its look again: no order yet, nothing more scheduled for it
    with ctx.deferred.open(ORDERS_QUEUE) as receiver:
        [message] = receiver.receive_deferred([seq])
        receiver.dead_letter(message, "TTLExpiredException", "expired")
    with monkeypatch.context() as patched:
        patched.setattr("submission.intake._pending_full", lambda ctx: True)
        send(broker, order())
        assert deliver(functions, broker)  # refused: the waiting notification is gone, its entry young
    assert ctx.deferrals.get("p1").rejected_at is not None
    assert expiry_alerts(broker) == []

    for _ in range(int(ctx.settings.peek_sweep_age / timedelta(minutes=1)) + 2):
        clock.advance(timedelta(minutes=1))
        deliver_all(functions, broker)
    assert expiry_alerts(broker) == []
    [alert] = [a for a in alerts(broker) if a["kind"] == "NotificationForRejectedOrder"]
    assert alert["details"]["sequenceNumber"] == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.EXPIRED
    assert [r.sequence_number for r in ctx.deferrals.get("p1").refused_notifications] == [seq]
