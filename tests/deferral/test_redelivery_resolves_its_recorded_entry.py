"""A notification recorded as deferred by one delivery that never deferred it (the host stopped between the
record and the defer, or the RetryDeferred or look again could not be sent and the message was abandoned)
comes back as a redelivery. If its redelivery settles it where it is delivered (applied, a repeat,
rejected), the entry its first delivery recorded takes that outcome: nothing else would ever resolve it
(no message to fetch by its number, no retry in flight, nothing deferred for the peek sweep to find), and
left ``Deferred`` it would count against ``WAITING_LIMIT`` for its order for good.

Found by red team 7 (``submission/payments.py`` ``defer_for_retry``: record, then ``schedule_round``, then
defer; a crash between the first two). The record-then-defer order predates the retry tokens and due times:
not a regression of them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import submission.payments as payments
from adapters.servicebus.sender import SendError
from contracts.names import ORDERS_QUEUE
from domain.deferral import DeferralReason, EntryStatus
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver, deliver_all, notification, order, send

pytestmark = pytest.mark.cosmos


def fails(exc: Exception, times: int = 1) -> Callable[..., None]:
    """A stand-in for a send that raises ``exc`` on its first ``times`` calls, then does nothing more (the
    test only needs the handler to get past it)."""
    calls = [0]

    def send(*_: Any, **__: Any) -> None:
        calls[0] += 1
        if calls[0] <= times:
            raise exc

    return send


def crashed_after_recording(
    functions: Any, ctx: Any, broker: Any, monkeypatch: pytest.MonkeyPatch, what: str, **body: Any
) -> tuple[Any, Any]:
    """Order p1 written; its notification (``body`` overrides) delivered while the order database is down:
    recorded for a retry (round 1), then the host stops before ``what`` (``schedule_round``) is done: no
    retry scheduled, the message not deferred (still locked by the dead delivery). Returns the order
    database (``failing``) and the context using it."""
    from tests.contexts import context_with
    from tests.fakes import OrderStoreThatFailsOnRead

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    with_orders: Any = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True
    send(broker, notification(**body))
    monkeypatch.setattr(payments, what, fails(RuntimeError("host stopped")))
    with pytest.raises(RuntimeError):
        deliver(functions, broker)
    monkeypatch.undo()
    [entry] = with_orders.deferrals.get("p1").entries
    assert (entry.status, entry.reason, entry.rounds) == (
        EntryStatus.DEFERRED,
        DeferralReason.DEPENDENCY_UNAVAILABLE,
        1,
    )
    assert [m.state.name for m in broker.peek(ORDERS_QUEUE, 100)] == ["ACTIVE"]  # redelivered once its lock lapses
    return orders, with_orders


def test_an_entry_recorded_before_a_crash_is_applied_when_the_redelivery_applies_the_message(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders, with_orders = crashed_after_recording(functions, ctx, broker, monkeypatch, "schedule_round")
    [entry] = with_orders.deferrals.get("p1").entries
    orders.failing = False
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    deliver_all(functions, broker)  # the redelivery: applied directly, completed
    assert with_orders.states.get("p1").payment.sequence_number == entry.sequence_number
    assert deferred_sequence_numbers(broker) == []
    resolved = with_orders.deferrals.get("p1").entry(entry.sequence_number)
    assert (resolved.status, resolved.detail) == (EntryStatus.APPLIED, "applied")
    clock.advance(with_orders.settings.peek_sweep_age * 3)
    deliver_all(functions, broker)
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]


def test_an_entry_recorded_before_a_crash_is_dead_lettered_when_the_redelivery_rejects_the_message(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders, with_orders = crashed_after_recording(functions, ctx, broker, monkeypatch, "schedule_round", amount=1)
    [entry] = with_orders.deferrals.get("p1").entries
    orders.failing = False
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    deliver_all(functions, broker)
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["PaymentAmountMismatch"]
    resolved = with_orders.deferrals.get("p1").entry(entry.sequence_number)
    assert resolved.status is EntryStatus.DEAD_LETTERED
    assert resolved.detail.startswith("PaymentAmountMismatch: ")  # as the peek sweep would settle it again


def test_an_entry_recorded_before_a_crash_is_applied_when_the_redelivery_is_a_repeat(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders, with_orders = crashed_after_recording(functions, ctx, broker, monkeypatch, "schedule_round")
    [entry] = with_orders.deferrals.get("p1").entries
    orders.failing = False
    send(broker, notification(), message_id="provider-resend")  # the provider sends it again: applied first
    deliver_all(functions, broker)
    assert with_orders.states.get("p1").payment.sequence_number != entry.sequence_number
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    deliver_all(functions, broker)  # the redelivery: a repeat of the applied one, completed
    assert broker.dead_letters(ORDERS_QUEUE) == []
    resolved = with_orders.deferrals.get("p1").entry(entry.sequence_number)
    assert (resolved.status, resolved.detail) == (EntryStatus.APPLIED, "duplicate")


def test_an_entry_whose_retry_could_not_be_sent_is_applied_when_the_abandoned_message_is_applied(
    functions: Any, ctx: Any, broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No crash: the RetryDeferred's send fails, the message is abandoned (redelivered at once), and the
    order database is back by then."""
    from tests.contexts import context_with
    from tests.fakes import OrderStoreThatFailsOnRead

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    with_orders: Any = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True
    send(broker, notification())
    monkeypatch.setattr(payments, "schedule_round", fails(SendError("orders: 503")))
    assert deliver(functions, broker)  # recorded, the retry not sent: abandoned
    [entry] = with_orders.deferrals.get("p1").entries
    orders.failing = False
    deliver_all(functions, broker)
    assert with_orders.states.get("p1").payment is not None
    assert with_orders.deferrals.get("p1").entry(entry.sequence_number).status is EntryStatus.APPLIED


def test_an_entry_recorded_before_its_order_then_crashed_is_applied_when_the_redelivery_finds_the_order(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded while its order did not exist, the host stopped before its look again was sent; the order
    arrives (its submission finds the message on the queue, not deferred, and leaves it), then the
    redelivery applies the notification to the order."""
    send(broker, notification())
    monkeypatch.setattr(payments, "schedule_look_again", fails(RuntimeError("host stopped")))
    with pytest.raises(RuntimeError):
        deliver(functions, broker)
    monkeypatch.undo()
    [entry] = ctx.deferrals.get("p1").entries
    assert (entry.status, entry.reason) == (EntryStatus.DEFERRED, DeferralReason.ORDER_NOT_SUBMITTED)
    send(broker, order())
    deliver_all(functions, broker)  # the order; the notification is still locked by the dead delivery
    assert ctx.deferrals.get("p1").entry(entry.sequence_number).status is EntryStatus.DEFERRED
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == entry.sequence_number
    assert ctx.deferrals.get("p1").entry(entry.sequence_number).status is EntryStatus.APPLIED
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]


def test_a_notification_applied_on_its_first_delivery_writes_no_deferral_document(
    functions: Any, ctx: Any, broker: Any
) -> None:
    send(broker, order())
    send(broker, notification())
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment is not None
    assert ctx.deferrals.get("p1") is None


def test_a_copy_applied_by_its_retry_settles_the_entry_its_original_left(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded for a retry, the host stopped before the retry was sent; the redelivery met a state store
    failure and was copied (a new number) and completed; the copy, the order database still down, was
    deferred for a retry of its own and applied by it. The original's entry takes the copy's outcome
    there too (before: only a copy decided on delivery settled its original)."""
    from submission.store_outage import STORE_RETRY_DELAYS
    from tests.contexts import context_with
    from tests.fakes import StateStoreThatFails

    orders, with_orders = crashed_after_recording(functions, ctx, broker, monkeypatch, "schedule_round")
    [original] = with_orders.deferrals.get("p1").entries
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    down = context_with(with_orders, states=StateStoreThatFails(ctx.states, "get"))
    assert deliver(functions, broker)  # the redelivery: copied, completed
    context_with(down, states=ctx.states)
    clock.advance(STORE_RETRY_DELAYS[0])
    assert deliver(functions, broker)  # the copy: the order database still down, deferred for its retry
    [copy] = [e for e in with_orders.deferrals.get("p1").entries if e.sequence_number != original.sequence_number]
    assert deferred_sequence_numbers(broker) == [copy.sequence_number]
    orders.failing = False
    clock.advance(with_orders.settings.defer_retry_delay)
    deliver_all(functions, broker)  # its RetryDeferred applies it
    doc = with_orders.deferrals.get("p1")
    assert with_orders.states.get("p1").payment.sequence_number == copy.sequence_number
    assert doc.entry(copy.sequence_number).status is EntryStatus.APPLIED
    assert doc.entry(original.sequence_number).status is EntryStatus.APPLIED
    assert doc.entry(original.sequence_number).detail == f"applied as #{copy.sequence_number}"
