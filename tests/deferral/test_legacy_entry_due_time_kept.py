"""An entry stored before due times were kept (no ``retryDueAt``) is due ``DEFER_RETRY_DELAY_SECONDS`` after
its ``updatedAt`` (``DeferredEntry.retry_due``). Re-recording the same round (the round before coming back:
a redelivery or a store-retry copy, which ``retry_not_for_now`` acts on at any time) leaves that time alone
(domain/deferral.py ``with_entry``): it stamped a new ``updatedAt`` before, so the round's own retry, already
in flight, arrived "early" and was ignored, and the payment waited for the peek sweep."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.deferral.support import deferred_for_the_order_database, deferred_sequence_numbers, deliver, deliver_all
from tests.deferral.test_retry_deferred_not_for_now import send_retry

pytestmark = pytest.mark.cosmos


def test_a_legacy_entrys_round_is_not_pushed_back_by_the_round_before_coming_back(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    delay = with_orders.settings.defer_retry_delay
    clock.advance(delay)
    deliver_all(functions, broker)  # round 1 decided, still down: round 2 recorded now, its retry in flight
    recorded_at = clock.now()

    # The same document as an older version stored it: no due time, no token (its retries carry none).
    doc = with_orders.deferrals.get("p1")
    legacy = [
        dataclasses.replace(e, retry_due_at=None, retry_token="") if e.sequence_number == seq else e
        for e in doc.entries
    ]
    with_orders.deferrals.save(dataclasses.replace(doc, entries=legacy))
    entry = with_orders.deferrals.get("p1").entry(seq)
    assert (entry.rounds, entry.retry_due_at, entry.updated_at) == (2, None, recorded_at)

    clock.advance(delay / 2)
    send_retry(broker, seq, 1, 1)  # round 1's retry again (a redelivery or a store-retry copy): no token, as then
    assert deliver(functions, broker)
    entry = with_orders.deferrals.get("p1").entry(seq)
    assert entry.rounds == 2
    due_now = entry.retry_due(delay)

    orders.failing = False
    clock.advance(delay / 2)  # round 2's own retry arrives when it was scheduled
    deliver_all(functions, broker)
    assert with_orders.states.get("p1").payment is not None, (
        f"round 2's genuine retry (scheduled for {recorded_at + delay}) was ignored as early: "
        f"re-recording round 2 moved its due time to {due_now}"
    )
