"""A payment notification for an order not yet submitted, deferred on its last allowed delivery (its earlier
deliveries abandoned: failed invocations, a lost lock), is dead-lettered by that very defer
(``MaxDeliveryCountExceeded``: a defer counts the delivery, as an abandon does; Azure/azure-service-bus#375),
while its entry says it waits. Through the registered trigger, the in-process broker and the Cosmos protocol
server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from domain.deferral import EntryStatus
from localrun.servicebus import MAX_DELIVERY_COUNT_EXCEEDED
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver, deliver_all, notification, order, send

pytestmark = pytest.mark.cosmos


def test_a_notification_deferred_on_its_last_delivery_is_reported_gone_not_left_waiting(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    send(broker, notification())
    for _ in range(QUEUE_MAX_DELIVERY_COUNT - 1):  # deliveries whose invocations failed
        message = broker.receive(ORDERS_QUEUE)
        assert message is not None
        broker.actions.abandon(message)
    assert deliver(functions, broker)  # its last delivery: recorded, its look again sent, deferred
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == MAX_DELIVERY_COUNT_EXCEEDED and deferred_sequence_numbers(broker) == []
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.sequence_number == dead.sequence_number

    send(broker, order())
    clock.advance(ctx.settings.defer_retry_delay + timedelta(seconds=1))
    deliver_all(functions, broker)
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=2))
    deliver_all(functions, broker)
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=2))
    deliver_all(functions, broker)
    assert ctx.deferrals.get("p1").entry(dead.sequence_number).status is EntryStatus.EXPIRED
    kinds = [a["kind"] for a in alerts(broker)]
    assert kinds.count("DeferredMessageExpired") == 1, kinds
