"""A payment notification recorded as waiting for its order, whose second look then meets a state store
failure (the state record's read, or the refusal's write), is deferred all the same under its tracked
number, and its look again is scheduled with it: before, nothing was, and it waited for the peek sweep (10
minutes and more; in the runner's harsh profile, past the end of the run): a notification for a refused
order sat deferred instead of being dead-lettered ``OrderRejected``, and one whose order was submitted
meanwhile waited past the few minutes a prepaid order waits for its payment. Through the registered
trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from tests.contexts import context_with, while_using
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
from tests.deferral.test_retry_sweep_expiry import scheduled_retries
from tests.fakes import DeferralLogReadTooEarly

pytestmark = pytest.mark.cosmos


class FailsOnCall:
    """``inner``, except that its ``number``-th call of ``name`` raises ``StoreUnavailable`` (a 429 past the
    SDK's retries): the one store operation of a handler that meets a blip."""

    def __init__(self, inner: Any, name: str, number: int) -> None:
        self._inner, self._name, self._left = inner, name, number

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._inner, name)
        if name != self._name:
            return member

        def call(*args: Any, **kwargs: Any) -> Any:
            self._left -= 1
            if self._left == 0:
                raise StoreUnavailable(f"Cosmos DB 429 on {name} (throttled past the SDK's retries)")
            return member(*args, **kwargs)

        return call


def refused(functions: Any, ctx: Any, broker: Any, monkeypatch: Any) -> None:
    """Order p1 refused by the pending cap (its deferral document marked rejected)."""
    with monkeypatch.context() as patched:
        patched.setattr("submission.intake._pending_full", lambda ctx: True)
        send(broker, order())
        assert deliver(functions, broker)
    assert ctx.states.get("p1") is None and ctx.deferrals.get("p1").rejected_at is not None


@pytest.mark.parametrize(
    "blip",
    [
        ("states", "get", 2),  # the second look's read of the state record (the first found none)
        ("deferrals", "save", 2),  # the refusal's write of its entry (the first save recorded it)
    ],
    ids=["second-read", "refusal-write"],
)
def test_a_notification_for_a_refused_order_whose_second_look_fails_is_dead_lettered_by_its_look_again(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, blip: tuple[str, str, int]
) -> None:
    refused(functions, ctx, broker, monkeypatch)
    store, operation, number = blip
    blipping = context_with(ctx, **{store: FailsOnCall(getattr(ctx, store), operation, number)})
    send(broker, notification())
    assert deliver(functions, broker)
    context_with(blipping, **{store: getattr(ctx, store)})

    [seq] = deferred_sequence_numbers(broker)  # deferred all the same, under its tracked number
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED
    assert [(r["sequenceNumber"], r["round"]) for r in scheduled_retries(broker)] == [(seq, 1)]  # its look again

    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert deferred_sequence_numbers(broker) == []
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (seq, "OrderRejected")
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEAD_LETTERED
    assert "NotificationForRejectedOrder" in [a["kind"] for a in alerts(broker)]
    assert ctx.settings.defer_retry_delay < ctx.settings.peek_sweep_age  # well before the sweep could


def test_a_notification_whose_second_look_fails_while_its_order_is_submitted_is_applied_by_its_look_again(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    blipping = context_with(ctx, states=FailsOnCall(ctx.states, "get", 2))
    send(broker, notification())
    assert deliver(functions, broker)
    ctx = context_with(blipping, states=ctx.states)  # installed again, without the blip
    [seq] = deferred_sequence_numbers(broker)

    send(broker, order())
    with while_using(ctx, deferrals=DeferralLogReadTooEarly(ctx.deferrals)):  # it looked before the deferral
        assert deliver(functions, broker)
    assert ctx.states.get("p1").payment is None

    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred_sequence_numbers(broker) == []


class SettlementLost:
    """Message actions whose settlement never reaches Service Bus (the lock lapsed first): the message is
    delivered again once its lock expires."""

    def complete(self, message: Any) -> None: ...

    def abandon(self, message: Any) -> None: ...

    def deadletter(
        self, message: Any, deadletter_reason: Any = None, deadletter_error_description: Any = None
    ) -> None: ...

    def defer(self, message: Any) -> None: ...


def test_a_decided_notification_redelivered_into_a_failing_second_look_is_settled_as_recorded(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """Its entry is resolved (``DeadLettered``, by the delivery whose settlement was lost). Deferred all the same
    (a look again then did nothing for a resolved entry), it waited for the peek sweep (harsh refusal profile, 80
    orders, seed 1); abandoned then, every redelivery into a store failure spent a delivery, until Service Bus
    dead-lettered it ``MaxDeliveryCountExceeded`` (harsh refusals, 300 orders, seed 3:
    ``test_refused_notification_decided_through_store_failures``). Now settled as recorded where it is, its alert
    sent again under the same id."""
    refused(functions, ctx, broker, monkeypatch)
    send(broker, notification())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status is EntryStatus.DEAD_LETTERED  # decided, then its dead-lettering lost with its lock
    assert broker.dead_letters(ORDERS_QUEUE) == []

    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    blipping = context_with(ctx, states=FailsOnCall(ctx.states, "get", 2))
    assert deliver(functions, broker)  # redelivered: recorded (resolved, unchanged), its second look fails
    context_with(blipping, states=ctx.states)
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (entry.sequence_number, "OrderRejected")
    assert deferred_sequence_numbers(broker) == [] and scheduled_retries(broker) == []
