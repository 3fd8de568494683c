"""A payment notification for an order not yet submitted, deferred on its last allowed delivery (its earlier
deliveries abandoned: failed invocations, a lost lock), is dead-lettered by that very defer
(``MaxDeliveryCountExceeded``: a defer counts the delivery, as an abandon does; Azure/azure-service-bus#375),
while its entry says it waits. Before, the payment stayed in the dead-letter queue: its entry was reported expired
(``DeferredMessageExpired``) once ``PEEK_SWEEP_AGE_MINUTES`` old, and its order, submitted meanwhile, waited for a
payment only an operator could bring back. Now the trigger looks for it after the defer (a peek) and, gone, hands
it over as a store-retry copy, which waits for the order and is applied to it. Through the registered trigger, the
in-process broker and the Cosmos protocol server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from domain.deferral import EntryStatus
from localrun.servicebus import MAX_DELIVERY_COUNT_EXCEEDED
from tests.deferral.support import alerts, deliver, deliver_all, notification, order, send

pytestmark = pytest.mark.cosmos


def deferred_on_its_last_delivery(functions: Any, broker: Any) -> int:
    """p1's notification, its first deliveries abandoned, then handled on its last: its sequence number."""
    send(broker, notification())
    for _ in range(QUEUE_MAX_DELIVERY_COUNT - 1):  # deliveries whose invocations failed
        message = broker.receive(ORDERS_QUEUE)
        assert message is not None
        broker.actions.abandon(message)
    assert deliver(functions, broker)  # its last delivery: recorded, its look again sent, deferred
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == MAX_DELIVERY_COUNT_EXCEEDED
    seq: int = dead.sequence_number
    return seq


def test_a_notification_dead_lettered_by_its_defer_is_copied_and_applied_when_its_order_comes(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    seq = deferred_on_its_last_delivery(functions, broker)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED
    for _ in range(3):  # the copy (10 s), deferred for the order in its turn; the original's look again
        clock.advance(ctx.settings.defer_retry_delay)
        deliver_all(functions, broker)

    send(broker, order())
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment is not None
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=2))
    deliver_all(functions, broker)
    entries = {e.sequence_number: e.status for e in ctx.deferrals.get("p1").entries}
    assert entries[seq] is EntryStatus.APPLIED, entries
    assert set(entries.values()) == {EntryStatus.APPLIED}, entries
    assert [a["kind"] for a in alerts(broker) if a["kind"] == "DeferredMessageExpired"] == []
    assert len(broker.dead_letters(ORDERS_QUEUE)) == 1  # the original, dead-lettered by its defer


def test_a_notification_deferred_before_its_last_delivery_is_not_copied(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    send(broker, notification())
    assert deliver(functions, broker)
    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert not [m for m in broker.contents(ORDERS_QUEUE) if ":store-retry:" in (m.message_id or "")]
