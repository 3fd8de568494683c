"""An order's deferral document tracks at most ``WAITING_LIMIT`` messages still deferred: it is one Cosmos DB
document (2 MB at most), and a flood of notifications for an order that never comes would otherwise grow
it until every write to it failed (HTTP 413, on every later notification of that order). Red team on
3737d51 (a hypothesis: about 6,000 waiting notifications). Past the limit a new one is dead-lettered
``TooManyDeferred``, whichever path would have recorded it."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from deferral.apply import make_room
from deferral.sweep import peek_sweep
from domain.deferral import WAITING_LIMIT, DeferralDocument, DeferralReason, DeferredEntry, EntryStatus, document_id
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver_all, notification, order, send

pytestmark = pytest.mark.cosmos


def test_notifications_past_the_limit_are_dead_lettered_and_those_kept_are_applied(functions, ctx, broker) -> None:
    for n in range(WAITING_LIMIT + 2):
        send(broker, notification(notification_id=f"n-{n}"))
    deliver_all(functions, broker)
    assert len(deferred_sequence_numbers(broker)) == WAITING_LIMIT
    dead = broker.dead_letters(ORDERS_QUEUE)
    assert [d.reason for d in dead] == ["TooManyDeferred"] * 2
    assert f"order p1 has {WAITING_LIMIT} messages deferred already" in (dead[0].description or "")
    assert len(ctx.deferrals.get("p1").waiting()) == WAITING_LIMIT
    assert [a["kind"] for a in alerts(broker)].count("TooManyDeferred") >= 1  # the real one may be among them

    send(broker, order())  # the order arrives: the first is applied, the others do not fit it
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.notification_id == "n-0"
    assert len(ctx.deferrals.get("p1").waiting()) == 0
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]


def test_the_peek_sweep_dead_letters_an_untracked_message_its_full_order_cannot_take(
    functions, ctx, broker, clock
) -> None:
    for n in range(WAITING_LIMIT):
        send(broker, notification(notification_id=f"n-{n}"))
    deliver_all(functions, broker)
    # one more deferred by a handler whose tracking write was lost (a crash between defer and record)
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(notification(notification_id="x")), message_id="x"))
    untracked = broker.receive(ORDERS_QUEUE)
    broker.actions.defer(untracked)

    clock.advance(ctx.settings.peek_sweep_age + timedelta(seconds=1))
    report = peek_sweep(ctx)
    assert report.dead_lettered == 1 and report.failed == 0
    assert [(d.message_id, d.reason) for d in broker.dead_letters(ORDERS_QUEUE)] == [("x", "TooManyDeferred")]
    assert len(deferred_sequence_numbers(broker)) == WAITING_LIMIT


def entries_gone_from_the_queue(ctx: Any, order_id: str, seqs: range, reason: DeferralReason) -> None:
    """Order ``order_id``'s document with an entry waiting for each of ``seqs``, none of them on the queue: left
    so by a message that expired or was dead-lettered ``MaxDeliveryCountExceeded`` with no retry in flight, or by
    one settled on delivery before such a delivery resolved its own entry. Recorded ``PEEK_SWEEP_AGE_MINUTES``
    ago: a younger entry is not looked for (its message may have a store-retry copy on the way)."""
    now = ctx.clock.now() - ctx.settings.peek_sweep_age
    entries = [
        DeferredEntry(
            sequence_number=seq,
            message_id=f"gone-{seq}",
            message_type="PaymentNotification",
            reason=reason,
            deferred_at=now,
            recorded_by="submission",
            rounds=1 if reason is DeferralReason.DEPENDENCY_UNAVAILABLE else 0,
            updated_at=now,
            notification_id=f"gone-{seq}",
        )
        for seq in seqs
    ]
    ctx.deferrals.save(DeferralDocument(id=document_id(order_id), order_id=order_id, entries=entries, updated_at=now))


GONE = range(9000, 9000 + WAITING_LIMIT)


def test_a_full_list_of_entries_whose_messages_are_gone_makes_room_for_a_new_one(functions, ctx, broker) -> None:
    """Before, the order's list stayed full for good: every later notification of it was dead-lettered
    ``TooManyDeferred``, the real payment among them. Now the waiting messages are looked for on the queue
    first: those gone are resolved as everywhere else (``Expired``, alerted; ``Applied`` if the state record
    has the payment), and the new one is deferred for its retry."""
    from tests.contexts import context_with
    from tests.fakes import OrderStoreThatFailsOnRead

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    with_orders: Any = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    entries_gone_from_the_queue(with_orders, "p1", GONE, DeferralReason.DEPENDENCY_UNAVAILABLE)
    orders.failing = True
    send(broker, notification())
    deliver_all(functions, broker)
    assert broker.dead_letters(ORDERS_QUEUE) == []
    doc = with_orders.deferrals.get("p1")
    assert [e.sequence_number for e in doc.waiting()] == deferred_sequence_numbers(broker)  # the new one
    assert {doc.entry(seq).status for seq in GONE} == {EntryStatus.EXPIRED}
    assert doc.absent_checked_at == with_orders.clock.now()
    assert [a["kind"] for a in alerts(broker)].count("DeferredMessageExpired") == WAITING_LIMIT


def test_an_entry_left_waiting_for_a_message_applied_on_delivery_is_made_room_of_as_applied(
    functions, ctx, broker, clock
) -> None:
    """An entry a redelivery left waiting before notifications decided on delivery resolved their own (its
    message applied and completed): found gone with its payment on the state record, it is ``Applied``, no alert."""
    send(broker, order())
    send(broker, notification())
    deliver_all(functions, broker)
    applied = ctx.states.get("p1").payment.sequence_number
    entries_gone_from_the_queue(ctx, "p1", range(applied, applied + WAITING_LIMIT), DeferralReason.ORDER_NOT_SUBMITTED)
    report = peek_sweep(ctx)  # nothing deferred on the queue: the sweep never looks at these entries
    assert report.deferred_seen == 0 and len(ctx.deferrals.get("p1").waiting()) == WAITING_LIMIT
    assert make_room(ctx, "p1")
    doc = ctx.deferrals.get("p1")
    assert doc.entry(applied).status is EntryStatus.APPLIED
    expired = [a for a in alerts(broker) if a["kind"] == "DeferredMessageExpired"]
    assert applied not in [a["details"]["sequenceNumber"] for a in expired]


def test_the_peek_sweep_makes_room_for_an_untracked_message_when_the_entries_filling_its_list_are_gone(
    functions, ctx, broker, clock
) -> None:
    entries_gone_from_the_queue(ctx, "p1", GONE, DeferralReason.ORDER_NOT_SUBMITTED)
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(notification(notification_id="x")), message_id="x"))
    untracked = broker.receive(ORDERS_QUEUE)
    broker.actions.defer(untracked)  # deferred by a handler whose tracking write was lost

    clock.advance(ctx.settings.peek_sweep_age + timedelta(seconds=1))
    report = peek_sweep(ctx)
    assert (report.recorded, report.dead_lettered, report.failed) == (1, 0, 0)
    assert [e.sequence_number for e in ctx.deferrals.get("p1").waiting()] == [untracked.sequence_number]


def test_the_waiting_messages_of_a_full_order_are_looked_for_at_most_once_per_sweep_age(
    functions, ctx, broker, clock, monkeypatch
) -> None:
    """A flood of notifications for one order costs ``WAITING_LIMIT`` peeks a ``PEEK_SWEEP_AGE_MINUTES``, not a
    message: the waiting ones are all still deferred, so every one past the limit is refused as before."""
    import deferral.apply

    looked_for: list[int] = []
    account = deferral.apply.account_for_absent

    def counted(ctx: Any, receiver: Any, order_id: str, seq: int) -> str:
        looked_for.append(seq)
        return account(ctx, receiver, order_id, seq)

    monkeypatch.setattr(deferral.apply, "account_for_absent", counted)
    for n in range(WAITING_LIMIT):
        send(broker, notification(notification_id=f"n-{n}"))
    deliver_all(functions, broker)
    clock.advance(ctx.settings.peek_sweep_age)  # old enough to be looked for
    for n in range(WAITING_LIMIT, WAITING_LIMIT + 3):
        send(broker, notification(notification_id=f"n-{n}"))
    deliver_all(functions, broker)
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["TooManyDeferred"] * 3
    assert len(looked_for) == WAITING_LIMIT  # the first refused looked for them; the next two did not
    clock.advance(ctx.settings.peek_sweep_age)
    send(broker, notification(notification_id="late"))
    deliver_all(functions, broker)
    assert len(looked_for) == 2 * WAITING_LIMIT
    assert len(broker.dead_letters(ORDERS_QUEUE)) == 4


def test_a_full_order_whose_waiting_messages_cannot_be_looked_for_refuses_the_new_one_as_before(
    functions, ctx, broker
) -> None:
    """A receiver failure while looking never fails the handler: the message is refused ``TooManyDeferred``."""
    from tests.contexts import context_with

    class NoReceiver:
        def open(self, queue: str) -> Any:
            raise ConnectionError("amqp: connection reset")

    entries_gone_from_the_queue(ctx, "p1", GONE, DeferralReason.ORDER_NOT_SUBMITTED)
    context_with(ctx, deferred=NoReceiver())
    send(broker, notification())
    deliver_all(functions, broker)
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["TooManyDeferred"]
    assert len(ctx.deferrals.get("p1").waiting()) == WAITING_LIMIT
