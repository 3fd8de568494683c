"""Deferral for a temporarily unavailable dependency (RetryDeferred rounds), the peek sweep, and
deferred messages that expired: through the registered trigger, the in-process broker and Cosmos."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from deferral.sweep import peek_sweep
from dependencies import AppContext
from domain.deferral import DeferralReason, EntryStatus, document_id
from localrun.servicebus import TTL_EXPIRED
from tests.contexts import context_with, while_using
from tests.deferral.conftest import ORDERS_TTL
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver, notification, order, send
from tests.fakes import DeferralLogReadTooEarly, OrderStoreThatFailsOnRead

pytestmark = pytest.mark.cosmos


@pytest.fixture
def orders_ctx(ctx: AppContext) -> AppContext:
    """``ctx`` over an order database that a test takes down and brings back (``order_database``), installed in
    its place: a test of that dependency uses this context, never ``ctx``."""
    return context_with(ctx, orders=OrderStoreThatFailsOnRead(ctx.orders))


@pytest.fixture
def order_database(orders_ctx: AppContext) -> OrderStoreThatFailsOnRead:
    """The order database of ``orders_ctx``, which a test takes down (``failing``) and brings back."""
    store = orders_ctx.orders
    assert isinstance(store, OrderStoreThatFailsOnRead)
    return store


def scheduled_retries(broker: Any) -> list[dict[str, Any]]:
    return [json.loads(m.body) for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name == "SCHEDULED"]


def test_unavailable_dependency_defers_and_schedules_a_retry_that_applies_it_later(
    functions, orders_ctx, broker, clock, order_database
):
    send(broker, order())
    deliver(functions, broker)
    order_database.failing = True
    send(broker, notification())
    deliver(functions, broker)

    [seq] = deferred_sequence_numbers(broker)
    [retry] = scheduled_retries(broker)
    assert (retry["sequenceNumber"], retry["round"], retry["orderId"]) == (seq, 1, "p1")
    [scheduled] = [m for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name == "SCHEDULED"]
    assert scheduled.scheduled_enqueue_time_utc == clock.now() + orders_ctx.settings.defer_retry_delay
    assert orders_ctx.deferrals.get("p1").entry(seq).reason is DeferralReason.DEPENDENCY_UNAVAILABLE

    assert not deliver(functions, broker)  # the retry is not due yet
    order_database.failing = False  # the dependency is back
    clock.advance(orders_ctx.settings.defer_retry_delay)
    assert deliver(functions, broker)
    assert orders_ctx.states.get("p1").payment.sequence_number == seq
    assert orders_ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert broker.peek(ORDERS_QUEUE, 10) == []


def test_a_dependency_that_stays_down_is_dead_lettered_after_the_bounded_rounds(
    functions, orders_ctx, broker, clock, order_database
):
    send(broker, order())
    deliver(functions, broker)  # the order itself is written before the dependency fails
    order_database.failing = True  # down from here on
    send(broker, notification())
    deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)

    rounds = 0
    while scheduled_retries(broker):
        clock.advance(orders_ctx.settings.defer_retry_delay)
        assert deliver(functions, broker)
        rounds += 1
        assert rounds <= 10, "never loops"
    assert rounds == orders_ctx.settings.defer_max_rounds
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, "DependencyUnavailable")
    assert f"{rounds} retry rounds" in (dead.description or "")
    assert orders_ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert [a["kind"] for a in alerts(broker)] == ["DeferredMessageGaveUp"]
    assert broker.peek(ORDERS_QUEUE, 10) == []


def lose_tracking(ctx: Any, order_id: str) -> None:
    ctx.deferrals._c.delete_item(document_id(order_id), partition_key=order_id)


def test_the_peek_sweep_records_and_applies_a_deferred_message_nobody_tracks(functions, ctx, broker, clock):
    send(broker, notification())
    deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    lose_tracking(ctx, "p1")
    send(broker, order())
    deliver(functions, broker)  # the submission knows of no deferred message
    assert ctx.states.get("p1").payment is None
    assert deferred_sequence_numbers(broker) == [seq]

    young = peek_sweep(ctx)
    assert (young.deferred_seen, young.recovered) == (0, 0)  # younger than the sweep threshold

    clock.advance(ctx.settings.peek_sweep_age)
    report = peek_sweep(ctx)
    assert (report.deferred_seen, report.recorded, report.recovered) == (1, 1, 1)
    entry = ctx.deferrals.get("p1").entry(seq)
    assert (entry.recorded_by, entry.status) == ("sweep", EntryStatus.APPLIED)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert [m.subject for m in broker.peek(ORDERS_QUEUE, 10)] == ["RetryDeferred"]  # its look-again, not delivered
    again = peek_sweep(ctx)
    assert (again.deferred_seen, again.recovered) == (0, 0)


def test_the_peek_sweep_applies_a_tracked_message_whose_order_arrived_meanwhile(functions, ctx, broker, clock):
    send(broker, notification())
    deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    send(broker, order())
    # the order's submission looked before the notification was deferred (the race the sweep covers):
    # create the order without its recovery: its submission reads the deferral log too early
    with while_using(ctx, deferrals=DeferralLogReadTooEarly(ctx.deferrals)):
        deliver(functions, broker)
    clock.advance(ctx.settings.peek_sweep_age)
    report = peek_sweep(ctx)
    assert (report.recorded, report.recovered) == (0, 1)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED


def test_the_peek_sweep_leaves_a_message_whose_order_does_not_exist_yet_unfetched(functions, ctx, broker, clock):
    send(broker, notification())
    deliver(functions, broker)
    lose_tracking(ctx, "p1")
    clock.advance(ctx.settings.peek_sweep_age)
    for _ in range(3):
        report = peek_sweep(ctx)
        assert report.waiting == 1 and report.recovered == 0
    assert ctx.deferrals.get("p1").waiting(DeferralReason.ORDER_NOT_SUBMITTED)  # recorded once more
    assert broker.counters(ORDERS_QUEUE).deferred_received == 0  # never fetched: no delivery counted
    assert len(deferred_sequence_numbers(broker)) == 1


def test_a_deferred_message_that_expired_is_recorded_and_alerted_once_when_its_order_arrives(
    functions, ctx, broker, clock
):
    send(broker, notification())
    deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(ORDERS_TTL + timedelta(minutes=1))
    send(broker, order())
    deliver(functions, broker)

    [dead] = [d for d in broker.dead_letters(ORDERS_QUEUE) if d.sequence_number == seq]
    assert (dead.sequence_number, dead.reason) == (seq, TTL_EXPIRED)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.EXPIRED
    assert [a["kind"] for a in alerts(broker)] == ["DeferredMessageExpired"]
    assert ctx.states.get("p1").payment is None
    # nothing loops on it: neither the sweep nor a duplicate submission
    clock.advance(ctx.settings.peek_sweep_age)
    assert peek_sweep(ctx).expired == 0
    send(broker, order(), message_id="p1-again")
    deliver(functions, broker)
    assert len(alerts(broker)) == 1


def test_the_peek_sweep_moves_an_expired_deferred_message_to_the_dead_letter_queue_and_alerts(
    functions, orders_ctx, broker, clock, order_database
):
    send(broker, order())
    deliver(functions, broker)
    # deferred for a dependency, then the RetryDeferred is lost: the sweep is all that is left
    order_database.failing = True
    send(broker, notification())
    deliver(functions, broker)
    order_database.failing = False
    [seq] = deferred_sequence_numbers(broker)
    [retry] = [m for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name == "SCHEDULED"]
    clock.advance(orders_ctx.settings.defer_retry_delay)
    lost = broker.receive(ORDERS_QUEUE)
    assert lost is not None and lost.message_id == retry.message_id
    broker.actions.complete(lost)  # the retry message is lost
    clock.advance(ORDERS_TTL)
    report = peek_sweep(orders_ctx)
    assert report.expired == 1
    assert [d.sequence_number for d in broker.dead_letters(ORDERS_QUEUE)] == [seq]
    assert orders_ctx.deferrals.get("p1").entry(seq).status is EntryStatus.EXPIRED
    assert [a["kind"] for a in alerts(broker)] == ["DeferredMessageExpired"]
    assert peek_sweep(orders_ctx).expired == 0  # gone from the queue: never seen again


def test_the_peek_sweep_retries_a_message_whose_retry_was_lost(functions, orders_ctx, broker, clock, order_database):
    send(broker, order())
    deliver(functions, broker)
    order_database.failing = True
    send(broker, notification())
    deliver(functions, broker)
    order_database.failing = False
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(orders_ctx.settings.defer_retry_delay)
    broker.actions.complete(broker.receive(ORDERS_QUEUE))  # the RetryDeferred is lost
    assert peek_sweep(orders_ctx).recovered == 0  # not overdue yet: the retry owns it
    clock.advance(orders_ctx.settings.peek_sweep_age + orders_ctx.settings.defer_retry_delay)
    assert peek_sweep(orders_ctx).recovered == 1
    assert orders_ctx.states.get("p1").payment.sequence_number == seq
