"""``DEFER_MAX_ROUNDS`` is not bounded by the queue's max delivery count: a notification waiting out the order
database's outage is read by a peek on each round (no lock, no delivery counted), recorded for its next round
and left deferred, never fetched to wait. docs/deferral.md and the setting's description said the rounds were
"kept below the queue's max delivery count" because "every fetch counts as a delivery": true of the fetch-first
rounds of before, no longer of any round but those of a message within ``EXPIRY_MARGIN`` of its time to live.
Through the registered trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from domain.deferral import EntryStatus
from tests.contexts import context_with
from tests.deferral.support import deferred_for_the_order_database, deferred_sequence_numbers, deliver_all

pytestmark = pytest.mark.cosmos


def test_more_rounds_than_the_queue_has_deliveries_leave_the_notification_deferred_then_applied(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    rounds = QUEUE_MAX_DELIVERY_COUNT + 3
    ctx = context_with(ctx, settings=dataclasses.replace(ctx.settings, defer_max_rounds=rounds))
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    for _ in range(rounds - 1):  # every round but the last meets the order database down
        clock.advance(with_orders.settings.defer_retry_delay)
        deliver_all(functions, broker)
    entry = with_orders.deferrals.get("p1").entry(seq)
    assert (entry.status, entry.rounds) == (EntryStatus.DEFERRED, rounds)
    assert broker.dead_letters(ORDERS_QUEUE) == [] and deferred_sequence_numbers(broker) == [seq]
    [peeked] = broker.peek(ORDERS_QUEUE, 1, seq)
    assert peeked.delivery_count == 1  # its one delivery to the trigger: no round fetched it

    orders.failing = False  # back for the last round
    clock.advance(with_orders.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert with_orders.states.get("p1").payment is not None
    assert with_orders.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert broker.dead_letters(ORDERS_QUEUE) == []
