"""A payment notification of a refused order whose entry is resolved already (``DeadLettered`` ``OrderRejected``:
an earlier delivery wrote the refusal's outcome and then failed) and whose redeliveries meet state store failures
is settled as recorded where it is (dead-lettered ``OrderRejected``, its alert sent again; a refused copy's
originals took the refusal in its own write): before, each such redelivery was abandoned ("decided before"), a
delivery spent each time, until Service Bus dead-lettered it ``MaxDeliveryCountExceeded`` with no
``NotificationForRejectedOrder`` alert, and the entries of its originals (the same notification under the numbers
its earlier copies had) were reported ``DeferredMessageExpired`` for an order that was refused (harsh-refusals
profile, 300 orders, seed 3: order ord-00241, the copy #1770 of #911 and #1323). Through the registered trigger,
the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from domain.deferral import EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import (
    DurableClientStub,
    alerts,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)
from tests.deferral.test_deferred_all_the_same_looks_again import FailsOnCall, SettlementLost, refused
from tests.deferral.test_recovery_resends_a_rounds_retry import RetrySendFailsOnce

pytestmark = pytest.mark.cosmos


def _finished_as_refused(functions: Any, ctx: Any, broker: Any, clock: Any) -> None:
    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert deferred_sequence_numbers(broker) == []
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "OrderRejected"
    assert [a["kind"] for a in alerts(broker)].count("NotificationForRejectedOrder") == 1
    doc = ctx.deferrals.get("p1")
    assert [r.sequence_number for r in doc.refused_notifications] == [dead.sequence_number]


def test_a_decided_notification_whose_redeliveries_meet_store_and_send_failures_is_settled_as_recorded(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    refused(functions, ctx, broker, monkeypatch)
    send(broker, notification())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status is EntryStatus.DEAD_LETTERED  # decided, then its dead-lettering lost with its lock
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    # every redelivery's second look (the state record's read) meets a blip, and a look again could not be sent
    # (harsh-refusals, 300 orders, seed 7: ord-00071)
    failing = ctx
    for _ in range(QUEUE_MAX_DELIVERY_COUNT - 1):
        failing = context_with(failing, states=FailsOnCall(ctx.states, "get", 2), sender=RetrySendFailsOnce(broker))
        deliver(functions, broker)
    context_with(failing, states=ctx.states, sender=broker)
    assert [d.reason for d in broker.dead_letters(ORDERS_QUEUE)] == ["OrderRejected"]
    _finished_as_refused(functions, ctx, broker, clock)


def test_a_refused_copy_whose_redeliveries_meet_store_failures_is_settled_as_recorded_with_its_originals(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """The harsh-refusals interleaving: the notification recorded, its look again not sent (abandoned), its
    redelivery's record met a blip (copied, the original completed); the copy, its order refused, wrote its
    refusal, then the read that settled its original's entry (a second write, then) failed and its look again
    could not be sent (abandoned); every redelivery of it then met a blip."""
    refused(functions, ctx, broker, monkeypatch)
    send(broker, notification())
    blipping = context_with(ctx, states=FailsOnCall(ctx.states, "get", 2), sender=RetrySendFailsOnce(broker))
    assert deliver(functions, broker)  # recorded; its second look fails and its look again cannot be sent
    [original] = ctx.deferrals.get("p1").entries
    blipping = context_with(blipping, states=FailsOnCall(ctx.states, "get", 1), sender=broker)
    assert deliver(functions, broker)  # redelivered into a store failure: copied, the original completed
    blipping = context_with(blipping, states=ctx.states)

    clock.advance(STORE_RETRY_DELAYS[0])
    # the copy: recorded (1st read of the document), refused (2nd), its original not settled (3rd read fails)
    blipping = context_with(blipping, deferrals=FailsOnCall(ctx.deferrals, "get", 3), sender=RetrySendFailsOnce(broker))
    assert deliver(functions, broker)
    copy = next(e for e in ctx.deferrals.get("p1").entries if e.sequence_number != original.sequence_number)
    assert ctx.deferrals.get("p1").entry(copy.sequence_number).status is EntryStatus.DEAD_LETTERED
    for _ in range(QUEUE_MAX_DELIVERY_COUNT - 1):
        blipping = context_with(blipping, deferrals=ctx.deferrals, sender=broker)
        blipping = context_with(blipping, states=FailsOnCall(ctx.states, "get", 2))
        deliver(functions, broker)
    context_with(blipping, states=ctx.states)

    _finished_as_refused(functions, ctx, broker, clock)
    settled = ctx.deferrals.get("p1").entry(original.sequence_number)
    assert (settled.status, settled.detail) == (
        EntryStatus.DEAD_LETTERED,
        f"OrderRejected: decided on its copy #{copy.sequence_number}",
    )
    clock.advance(ctx.settings.peek_sweep_age * 2)  # any absence check or sweep due
    deliver_all(functions, broker)
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]


class ReadAfterRefusalFails:
    """The deferral log, whose first read after the write that lists a notification as dead-lettered under a
    refusal (``refusedNotifications``) fails (a 503)."""

    def __init__(self, inner: Any) -> None:
        self._inner, self.armed, self.fired = inner, False, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def save(self, doc: Any) -> Any:
        saved = self._inner.save(doc)
        self.armed = self.armed or bool(doc.refused_notifications)
        return saved

    def get(self, order_id: str) -> Any:
        if self.armed and not self.fired:
            self.fired = True
            raise StoreUnavailable("Cosmos DB 503 on get")
        return self._inner.get(order_id)


def test_a_copy_released_by_its_orders_refusal_settles_its_original_in_the_same_write(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """The refusal of the order dead-lettered a waiting store-retry copy of its notification, and the read that
    was to settle the copy's original's entry (the same notification under the number it had before it was
    copied) failed: the submission was handled again later, and the copy, resolved and still deferred, was no
    longer among the notifications waiting (left to the peek sweep), nor its original settled: once old, the
    original's entry was reported ``DeferredMessageExpired`` for the refused order (harsh-refusals, 300 orders,
    seed 3, ord-00012). The copy's refusal and its original's now share one write."""
    send(broker, notification())
    blipping = context_with(ctx, sender=RetrySendFailsOnce(broker))
    assert deliver(functions, broker)  # recorded, its look again cannot be sent: abandoned
    [original] = ctx.deferrals.get("p1").entries
    blipping = context_with(blipping, states=FailsOnCall(ctx.states, "get", 1), sender=broker)
    assert deliver(functions, broker)  # redelivered into a store failure: copied, the original completed
    blipping = context_with(blipping, states=ctx.states)
    clock.advance(STORE_RETRY_DELAYS[0])
    assert deliver(functions, broker)  # the copy, waiting for its order: deferred
    [copy_seq] = deferred_sequence_numbers(broker)
    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)  # its look again: its order does not exist yet, nothing done

    failing = ReadAfterRefusalFails(ctx.deferrals)
    blipping = context_with(blipping, deferrals=failing)
    with monkeypatch.context() as patched:
        patched.setattr("submission.intake._pending_full", lambda ctx: True)
        send(broker, order())
        deliver_all(functions, broker)
        for _ in range(3):  # the submission handled again later, if it was
            clock.advance(STORE_RETRY_DELAYS[-1])
            deliver_all(functions, broker)
    assert failing.armed
    context_with(blipping, deferrals=ctx.deferrals)
    assert ctx.states.get("p1") is None

    clock.advance(ctx.settings.peek_sweep_age * 2)  # the original's absence check, if one was sent
    deliver_all(functions, broker)
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]
    settled = ctx.deferrals.get("p1").entry(original.sequence_number)
    assert (settled.status, settled.detail) == (
        EntryStatus.DEAD_LETTERED,
        f"OrderRejected: decided on its copy #{copy_seq}",
    )
    assert deferred_sequence_numbers(broker) == []
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (copy_seq, "OrderRejected")


def _found_gone_while_its_copy_keeps_failing(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> Any:
    """A notification recorded, then copied by a redelivery that met a store failure (the original completed);
    its order refused meanwhile (the original's entry young: an absence check scheduled); the copy meeting a
    store failure on every round for longer than ``PEEK_SWEEP_AGE_MINUTES``, so the absence check finds the
    original gone while the refusal stands. Returns the original's entry."""
    send(broker, notification())
    blipping = context_with(ctx, sender=RetrySendFailsOnce(broker))
    assert deliver(functions, broker)  # recorded, its look again cannot be sent: abandoned
    [original] = ctx.deferrals.get("p1").entries
    blipping = context_with(blipping, states=FailsOnCall(ctx.states, "get", 1), sender=broker)
    assert deliver(functions, broker)  # redelivered into a store failure: copied, the original completed
    blipping = context_with(blipping, states=ctx.states)
    refused(functions, ctx, broker, monkeypatch)  # the original young: an absence check scheduled

    fn = functions["submit_order"].func.client_function
    end = clock.now() + ctx.settings.peek_sweep_age + timedelta(minutes=2)
    while clock.now() < end:  # every round of the copy meets a store failure
        clock.advance(timedelta(seconds=10))
        for message in iter(lambda: broker.receive(ORDERS_QUEUE), None):
            copy = ":store-retry:" in (message.message_id or "") and "PaymentNotification" in str(message.body)
            states = FailsOnCall(ctx.states, "get", 1) if copy else ctx.states
            blipping = context_with(blipping, states=states)
            asyncio.run(fn(message=message, message_actions=broker.actions, client=DurableClientStub()))
    context_with(blipping, states=ctx.states)
    return original


def test_a_refused_orders_notification_found_gone_while_its_copy_is_still_coming_is_not_reported_expired(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """The notification was recorded, then copied by a redelivery that met a store failure (the original
    completed); its order was refused meanwhile, the original's entry young (an absence check scheduled). The
    copy met a store failure on each of its rounds for longer than ``PEEK_SWEEP_AGE_MINUTES``: the absence
    check found the original gone and reported it ``DeferredMessageExpired``, for an order that was refused
    (harsh-refusals, 300 orders, seed 1, ord-00099). While a refusal stands, a notification found gone is in the
    dead-letter queue or on its way there as a copy: it is alerted and listed as the notifications dead-lettered
    under the refusal are, and the copy, decided, settles its entry."""
    original = _found_gone_while_its_copy_keeps_failing(functions, ctx, broker, clock, monkeypatch)
    kinds = [a["kind"] for a in alerts(broker)]
    assert "DeferredMessageExpired" not in kinds and "NotificationForRejectedOrder" in kinds
    doc = ctx.deferrals.get("p1")
    assert [r.sequence_number for r in doc.refused_notifications] == [original.sequence_number]

    clock.advance(STORE_RETRY_DELAYS[-1])
    deliver_all(functions, broker)  # the copy, decided at last
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "OrderRejected" and ":store-retry:" in dead.message_id
    settled = ctx.deferrals.get("p1").entry(original.sequence_number)
    assert (settled.status, settled.detail) == (
        EntryStatus.DEAD_LETTERED,
        f"OrderRejected: decided on its copy #{dead.sequence_number}",
    )
    assert deferred_sequence_numbers(broker) == []


def test_a_refused_orders_notification_found_gone_and_then_dead_lettered_as_its_copy_is_named_once(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """The notification found gone while its order's refusal stood was listed under its original number; its copy,
    refused when it came, is listed under its own and stands for it (the original's entry takes the copy's
    refusal): a later accepted submission's ``NotificationsForAcceptedOrder`` alert names the copy, the message in
    the dead-letter queue, and not the original, which never was there (it was completed when it was copied)."""
    original = _found_gone_while_its_copy_keeps_failing(functions, ctx, broker, clock, monkeypatch)
    assert [r.sequence_number for r in ctx.deferrals.get("p1").refused_notifications] == [original.sequence_number]
    clock.advance(STORE_RETRY_DELAYS[-1])
    deliver_all(functions, broker)  # the copy, decided at last: dead-lettered OrderRejected
    [dead] = broker.dead_letters(ORDERS_QUEUE)

    send(broker, order(), message_id="p1-again")  # a later submission, accepted
    deliver_all(functions, broker)
    assert ctx.states.get("p1") is not None
    [flagged] = [a for a in alerts(broker) if a["kind"] == "NotificationsForAcceptedOrder"]
    assert [n["sequenceNumber"] for n in flagged["details"]["notifications"]] == [dead.sequence_number]


def test_a_decided_notification_redelivered_while_the_order_database_is_down_is_settled_as_recorded(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """Its refusal written and its dead-lettering lost with its lock; a later submission of the order accepted
    (the notification named in ``NotificationsForAcceptedOrder``: resubmit it from the dead-letter queue); its
    redelivery met the order database down (``DependencyUnavailable``). It was deferred with nothing scheduled
    (a resolved entry gets no retry round), not in the dead-letter queue the alert points to until the peek sweep
    settled it as recorded, ten minutes and more later. It is settled as recorded where it is, as for a store
    failure (``finish_in_hand``): nothing defers a resolved entry's message."""
    from tests.fakes import OrderStoreThatFailsOnRead

    refused(functions, ctx, broker, monkeypatch)
    send(broker, notification())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status is EntryStatus.DEAD_LETTERED
    send(broker, order(), message_id="p1-again")  # accepted: the notification flagged
    assert deliver(functions, broker)
    assert ctx.states.get("p1") is not None
    assert "NotificationsForAcceptedOrder" in [a["kind"] for a in alerts(broker)]

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    orders.failing = True
    failing = context_with(ctx, orders=orders)
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    deliver_all(functions, broker)  # the notification redelivered
    context_with(failing, orders=ctx.orders)
    assert deferred_sequence_numbers(broker) == []
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (entry.sequence_number, "OrderRejected")


class OrderWritesFail:
    """The order database, whose writes (``create_or_verify``) fail with a 503 while ``failing`` is set."""

    def __init__(self, inner: Any) -> None:
        self._inner, self.failing = inner, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_or_verify(self, order: Any) -> Any:
        if self.failing:
            raise StoreUnavailable("orders container: 503 on write")
        return self._inner.create_or_verify(order)


def test_a_decided_notification_redelivered_while_its_orders_refusal_is_being_withdrawn_is_not_left_deferred(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """Its refusal written and its dead-lettering lost with its lock; a later submission of the order withdrew the
    refusal and then met a failure before its state record was written (handled again later). The notification's
    redelivery in between found neither a refusal nor its order: it was deferred, and its look again, for a
    resolved entry, never sent; the accepted submission's recovery skipped it (resolved) and its
    ``NotificationsForAcceptedOrder`` alert pointed to the dead-letter queue, where it was not until the peek sweep
    settled it as recorded, ten minutes and more later. It is settled as recorded where it is."""
    refused(functions, ctx, broker, monkeypatch)
    send(broker, notification())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status is EntryStatus.DEAD_LETTERED

    orders = OrderWritesFail(ctx.orders)
    failing = context_with(ctx, orders=orders)
    send(broker, order(), message_id="p1-again")
    assert deliver(functions, broker)  # the refusal withdrawn, the order not written: handled again later
    assert ctx.deferrals.get("p1").rejected_at is None and ctx.states.get("p1") is None
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    for again in iter(lambda: broker.receive(ORDERS_QUEUE), None):  # the notification redelivered (and the copy)
        asyncio.run(fn(message=again, message_actions=broker.actions, client=DurableClientStub()))
    assert deferred_sequence_numbers(broker) == []
    orders.failing = False
    context_with(failing, orders=ctx.orders)
    clock.advance(STORE_RETRY_DELAYS[-1])
    deliver_all(functions, broker)  # the submission accepted
    assert ctx.states.get("p1") is not None
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (entry.sequence_number, "OrderRejected")
    [flagged] = [a for a in alerts(broker) if a["kind"] == "NotificationsForAcceptedOrder"]
    assert [n["sequenceNumber"] for n in flagged["details"]["notifications"]] == [entry.sequence_number]
