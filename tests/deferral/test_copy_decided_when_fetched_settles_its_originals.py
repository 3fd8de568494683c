"""A store-retry copy of a payment notification, deferred (waiting for its order) and decided when fetched by
sequence number (``deferral.apply``), settles its originals' entries (the same notification under the numbers it
had before it was copied) in the write that resolves its own, as a copy refused for its order does
(``resolve_refused``). Written apart (its own entry, then a read and a write for its originals), a store failure
between the two left the copy resolved, no longer among the messages its order's submission recovers, and its
original waiting for a message that was gone: reported ``DeferredMessageExpired`` (an alert for a notification
that was decided, and dead-lettered under its copy's number). Through the registered trigger, the in-process
broker and the Cosmos protocol server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import (
    TOTAL,
    alerts,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)
from tests.deferral.test_deferred_all_the_same_looks_again import FailsOnCall
from tests.deferral.test_recovery_resends_a_rounds_retry import RetrySendFailsOnce

pytestmark = pytest.mark.cosmos


class ReadAfterCopyResolvedFails:
    """The deferral log, whose first read after a write that resolves entry ``seq`` fails (a 503)."""

    def __init__(self, inner: Any, seq: int) -> None:
        self._inner, self._seq, self.armed, self.fired = inner, seq, False, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def save(self, doc: Any) -> Any:
        saved = self._inner.save(doc)
        entry = doc.entry(self._seq)
        self.armed = self.armed or (entry is not None and entry.status is not EntryStatus.DEFERRED)
        return saved

    def get(self, order_id: str) -> Any:
        if self.armed and not self.fired:
            self.fired = True
            raise StoreUnavailable("Cosmos DB 503 on get")
        return self._inner.get(order_id)


@pytest.mark.parametrize(
    ("amount", "status", "detail"),
    [
        (TOTAL - 1, EntryStatus.DEAD_LETTERED, "PaymentAmountMismatch: decided on its copy #{copy}"),
        (TOTAL, EntryStatus.APPLIED, "applied as #{copy}"),
    ],
    ids=["rejected", "applied"],
)
def test_a_copy_decided_on_its_orders_submission_settles_its_original_in_the_same_write(
    functions: Any, ctx: Any, broker: Any, clock: Any, amount: int, status: EntryStatus, detail: str
) -> None:
    send(broker, notification(amount=amount))
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

    failing = ReadAfterCopyResolvedFails(ctx.deferrals, copy_seq)
    blipping = context_with(blipping, deferrals=failing)
    send(broker, order())  # recovers the copy: decided, its own entry written, then a read fails
    deliver_all(functions, broker)
    assert failing.armed  # the copy decided (before: the read that followed failed)
    context_with(blipping, deferrals=ctx.deferrals)
    for _ in range(3):  # the submission handled again, any absence check due
        clock.advance(ctx.settings.peek_sweep_age)
        deliver_all(functions, broker)

    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]
    settled = ctx.deferrals.get("p1").entry(original.sequence_number)
    assert (settled.status, settled.detail) == (status, detail.format(copy=copy_seq))


def test_a_copy_that_gives_up_on_the_order_database_settles_its_original(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """The notification recorded for the order database's retry rounds, its deferral lost with its lock, then
    redelivered into a state store failure and copied (the original completed); the copy deferred for the order
    database in turn, which stayed down through its rounds: dead-lettered ``DependencyUnavailable`` with a
    ``DeferredMessageGaveUp`` alert. Its original's entry, left waiting for a message that was gone, was then
    reported ``DeferredMessageExpired`` by its own round's retry, a second alert for the one notification
    dead-lettered under its copy's number. The copy's give-up settles it, as any decision of a copy does."""
    import asyncio

    from tests.deferral.support import DurableClientStub
    from tests.deferral.test_deferred_all_the_same_looks_again import SettlementLost
    from tests.fakes import OrderStoreThatFailsOnRead

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    blipping = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True
    send(broker, notification())
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    [original] = ctx.deferrals.get("p1").entries  # recorded, its round's retry sent, its deferral lost
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    blipping = context_with(blipping, states=FailsOnCall(ctx.states, "get", 1))
    assert deliver(functions, broker)  # redelivered into a store failure: copied, the original completed
    blipping = context_with(blipping, states=ctx.states)
    for _ in range(int((ctx.settings.peek_sweep_age * 2) / timedelta(seconds=10))):
        clock.advance(timedelta(seconds=10))
        deliver_all(functions, broker)
    context_with(blipping, orders=ctx.orders)

    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "DependencyUnavailable" and ":store-retry:" in dead.message_id
    kinds = [a["kind"] for a in alerts(broker)]
    assert "DeferredMessageGaveUp" in kinds and "DeferredMessageExpired" not in kinds
    settled = ctx.deferrals.get("p1").entry(original.sequence_number)
    assert (settled.status, settled.detail) == (
        EntryStatus.DEAD_LETTERED,
        f"DependencyUnavailable: decided on its copy #{dead.sequence_number}",
    )
