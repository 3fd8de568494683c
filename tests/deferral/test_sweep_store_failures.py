"""The peek sweep under state store failures. Found by the fault red team on 3737d51: the sweep stopped its
whole run at the first ``StoreUnavailable``, so under 3-5 % throttled requests a deferred notification
whose order existed waited about 45 minutes. Now one failure skips that message and the run goes on;
``STORE_FAILURES_IN_A_ROW`` in a row is an outage: the run stops, the next one goes on after them."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from deferral.sweep import STORE_FAILURES_IN_A_ROW, SweepCursor, peek_sweep
from tests.contexts import while_using
from tests.deferral.support import deferred_sequence_numbers, deliver_all, notification, order, send
from tests.deferral.test_retry_deferred_not_for_now import delivery_count
from tests.deferral.test_retry_sweep_expiry import lose_tracking
from tests.fakes import StateStoreThatFails

pytestmark = pytest.mark.cosmos


class DeferralsFailingFor:
    """The deferral log; reading the documents of ``orders`` raises ``StoreUnavailable`` (a 429)."""

    def __init__(self, log: Any, orders: set[str]) -> None:
        self._log, self._orders = log, orders

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def get(self, order_id: str) -> Any:
        if order_id in self._orders:
            raise StoreUnavailable(f"Cosmos DB 429 reading the deferral document of {order_id}")
        return self._log.get(order_id)


def untracked_notifications_of_existing_orders(functions: Any, ctx: Any, broker: Any, ids: list[str]) -> None:
    for order_id in ids:
        send(broker, notification(order_id, notification_id=f"n-{order_id}"))
    deliver_all(functions, broker)
    for order_id in ids:
        lose_tracking(ctx, order_id)
        send(broker, order(order_id))
    deliver_all(functions, broker)  # the submissions know of no deferred message: the sweep's work
    assert len(deferred_sequence_numbers(broker)) == len(ids)


def test_one_message_the_store_fails_on_is_skipped_and_the_run_goes_on(functions, ctx, broker, clock):
    untracked_notifications_of_existing_orders(functions, ctx, broker, ["p1", "p2"])
    clock.advance(ctx.settings.peek_sweep_age)
    with while_using(ctx, deferrals=DeferralsFailingFor(ctx.deferrals, {"p1"})) as flaky:
        report = peek_sweep(flaky)
    assert (report.failed, report.recovered) == (1, 1)
    assert ctx.states.get("p2").payment is not None and ctx.states.get("p1").payment is None
    assert peek_sweep(ctx).recovered == 1  # the next run comes back to it
    assert ctx.states.get("p1").payment is not None


def test_failures_in_a_row_stop_the_run_and_the_next_goes_on_after_them(functions, ctx, broker, clock):
    """Red team on 5257408: the next run started FROM the failed ones, so three messages of one order whose
    partition is throttled (every read of it a 429) stopped every run there, and nothing after them was
    ever reached."""
    hot = [f"p{n}" for n in range(STORE_FAILURES_IN_A_ROW)]
    untracked_notifications_of_existing_orders(functions, ctx, broker, [*hot, "q1"])
    clock.advance(ctx.settings.peek_sweep_age)
    cursor = SweepCursor()
    with while_using(ctx, deferrals=DeferralsFailingFor(ctx.deferrals, set(hot))) as throttled:
        first = peek_sweep(throttled, cursor)
        assert (first.failed, first.recovered) == (STORE_FAILURES_IN_A_ROW, 0)  # stopped before q1
        peek_sweep(throttled, cursor)
    assert ctx.states.get("q1").payment is not None
    assert peek_sweep(ctx, cursor).recovered == len(hot)  # the store is back: the next round takes them


def test_store_failures_while_applying_never_wear_a_deferred_message_out(functions, ctx, broker, clock):
    """Found by the fault red team on 3737d51 (5 % unavailable, 3 % throttled, 5 % lost responses):
    notifications were dead-lettered ``MaxDeliveryCountExceeded``, some of them already applied, others
    then reported expired. Each processing fetched the message first (a delivery) and abandoned it on a
    store failure; five failures from the submission, its retries and the sweep used up its deliveries.
    Now a deferred message is read by peeking, decided and written first, and fetched only to settle."""
    untracked_notifications_of_existing_orders(functions, ctx, broker, ["p1"])
    [seq] = deferred_sequence_numbers(broker)
    deliveries = delivery_count(broker, seq)  # its one delivery to the trigger, which deferred it
    clock.advance(ctx.settings.peek_sweep_age)
    for _ in range(2 * QUEUE_MAX_DELIVERY_COUNT):
        with while_using(ctx, states=StateStoreThatFails(ctx.states, "replace")) as failing:
            assert peek_sweep(failing).failed == 1  # the payment cannot be written
    assert delivery_count(broker, seq) == deliveries  # never fetched
    assert peek_sweep(ctx).recovered == 1
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert broker.dead_letters(ORDERS_QUEUE) == []
