"""A ``RetryDeferred`` that comes while a delivery of its message still holds it (not deferred yet: the
delivery that sent the retry stalled past its lock, or the host restarted under it) found the message
"present" and was completed, doing nothing. The message's next delivery then records the same round and
sends the same retry, which duplicate detection drops (the same MessageId, sent less than 10 minutes
before): the message was deferred with no retry coming, and only the peek sweep, once the round was 10
minutes overdue, tried it again. Such a retry is now handled again later (a store-retry copy of it, 10 s,
30 s, then a minute apart), until the message is deferred and it acts, or the message is decided. Through
the registered trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
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
from tests.deferral.test_deferred_all_the_same_looks_again import SettlementLost
from tests.fakes import OrderStoreThatFailsOnRead

pytestmark = pytest.mark.cosmos


def deliver_unsettled(functions: Any, broker: Any) -> int:
    """Delivers the next orders message, whose settlement is then lost (the handler stalled past its lock);
    returns its sequence number."""
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    return int(message.sequence_number)


def test_a_rounds_retry_that_finds_its_message_held_by_a_delivery_comes_back_until_it_can_act(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    from tests.contexts import context_with

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True  # the order database is down: the notification waits for a dependency's round
    send(broker, notification())
    seq = deliver_unsettled(functions, broker)  # round 1 recorded, its retry sent; the defer lost with the lock

    clock.advance(ctx.settings.defer_retry_delay)
    assert deliver(functions, broker)  # round 1's retry, while the stalled delivery still holds the message
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration - ctx.settings.defer_retry_delay + timedelta(seconds=1))
    assert deliver(functions, broker)  # the message again: round 1 recorded again, its retry a duplicate
    assert deferred_sequence_numbers(broker) == [seq]

    orders.failing = False  # the order database is back
    clock.advance(STORE_RETRY_DELAYS[0] + STORE_RETRY_DELAYS[1])
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq  # well before the peek sweep could
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred_sequence_numbers(broker) == []


class StatesReadTooEarly:
    """The state store as a delivery sees it when it read before the order's record was written (the race
    the look again covers): no record; every other call goes to the real store."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def get(self, order_id: str) -> Any:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_look_again_that_finds_its_message_held_comes_back_and_applies_it_once_its_order_exists(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """The look again came while the delivery that sent it still held the message and its order did not
    exist: ignored. The order's submission found the message held and left it; the message's next delivery,
    having read before the order's record was written, deferred it again and sent the same look again,
    dropped as a duplicate: nothing but the peek sweep would apply the payment."""
    from tests.contexts import context_with

    states = ctx.states
    send(broker, notification())
    seq = deliver_unsettled(functions, broker)  # recorded, its look again sent; the defer lost with the lock
    clock.advance(ctx.settings.defer_retry_delay)
    assert deliver(functions, broker)  # the look again: the order does not exist, the message is held
    clock.advance(timedelta(seconds=5))
    send(broker, order())
    assert deliver(functions, broker)  # the order's submission: the notification held by a delivery, left
    assert ctx.states.get("p1").payment is None

    clock.advance(STORE_RETRY_DELAYS[0] - timedelta(seconds=5))
    assert deliver(functions, broker)  # the look again's copy: the order exists, the message still held
    assert ctx.states.get("p1").payment is None
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration - ctx.settings.defer_retry_delay - STORE_RETRY_DELAYS[0])
    clock.advance(timedelta(seconds=1))  # the stalled delivery's lock has lapsed
    ctx = context_with(ctx, states=StatesReadTooEarly(states))
    assert deliver(functions, broker)  # the message again, its order read before it was written: deferred
    ctx = context_with(ctx, states=states)
    assert deferred_sequence_numbers(broker) == [seq]

    for _ in range(3):
        clock.advance(STORE_RETRY_DELAYS[1])
        deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq  # well before the peek sweep could
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred_sequence_numbers(broker) == []


def test_a_retry_that_finds_its_message_gone_while_a_copy_of_it_is_due_waits_for_the_copy(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """The delivery holding the message met a store failure and copied it (the original completed): a retry
    that came before the copy was decided found the message gone and reported it ``DeferredMessageExpired``
    (an alert), to be corrected by the copy's outcome a moment later (harsh refusal profile, 80 orders,
    seed 2, once retries came back while a message was held)."""
    from tests.contexts import context_with
    from tests.deferral.test_deferred_all_the_same_looks_again import FailsOnCall, refused

    refused(functions, ctx, broker, monkeypatch)
    states = ctx.states
    send(broker, notification())
    ctx = context_with(ctx, states=FailsOnCall(states, "get", 2))
    seq = deliver_unsettled(functions, broker)  # recorded, its look again sent; the defer lost with the lock
    ctx = context_with(ctx, states=states)
    clock.advance(ctx.settings.defer_retry_delay)
    assert deliver(functions, broker)  # the look again: the message held, handled again in 10 s

    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration - ctx.settings.defer_retry_delay + timedelta(seconds=1))
    ctx = context_with(ctx, states=FailsOnCall(states, "get", 1))
    assert deliver(functions, broker)  # the message again: a store failure, copied (the original completed)
    ctx = context_with(ctx, states=states)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED  # its message gone, a copy due

    for _ in range(12):
        clock.advance(STORE_RETRY_DELAYS[0])
        deliver_all(functions, broker)
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "OrderRejected" and ":store-retry:" in dead.message_id  # the copy, decided
    settled = ctx.deferrals.get("p1").entry(seq)
    assert (settled.status, settled.detail) == (
        EntryStatus.DEAD_LETTERED,
        f"OrderRejected: decided on its copy #{dead.sequence_number}",
    )
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]
    assert not [m for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name == "SCHEDULED"]  # nothing left coming
