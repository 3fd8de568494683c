"""A payment notification whose deferral write fails: was it written? A copy (``submission.store_outage``)
is right only when it was not: the copy has a new sequence number, so a tracked original would point at a
message that is gone, reported ``DeferredMessageExpired`` while its copy is applied. A 429, a 503 or a
request never sent wrote nothing; a lost response, a timeout or a 500 (``StoreOutcomeUnknown``) may have:
then the document is read back. Landed: the message goes on as deferred and tracked. Not landed: a copy.
The read failing too: abandoned, and its redelivery records it again (landed or not) and goes on.
Through the registered trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cosmos.errors import StoreOutcomeUnknown, StoreUnavailable
from contracts.names import ORDERS_QUEUE
from domain.deferral import DeferralReason, EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import (
    alerts,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)
from tests.deferral.test_retry_sweep_expiry import scheduled_retries
from tests.fakes import OrderStoreThatFailsOnRead

pytestmark = pytest.mark.cosmos


class SaveFails:
    """The deferral log; its next ``save`` raises ``error``, after writing it when ``lands``."""

    def __init__(self, log: Any, error: StoreUnavailable, *, lands: bool) -> None:
        self._log, self._error, self._lands, self.armed = log, error, lands, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def save(self, doc: Any) -> Any:
        if not self.armed:
            return self._log.save(doc)
        self.armed = False
        if self._lands:
            self._log.save(doc)
        raise self._error


def copies(broker: Any) -> list[Any]:
    return [m for m in broker.peek(ORDERS_QUEUE, 100) if ":store-retry:" in (m.message_id or "")]


def test_a_lost_response_to_the_deferral_write_defers_the_tracked_message_and_raises_no_false_expiry(
    functions: Any, ctx: Any, broker: Any
) -> None:
    lossy = context_with(ctx, deferrals=SaveFails(ctx.deferrals, StoreOutcomeUnknown("no response"), lands=True))
    send(broker, notification())  # its order has not arrived
    assert deliver(functions, broker)
    context_with(lossy, deferrals=ctx.deferrals)

    [seq] = deferred_sequence_numbers(broker)  # deferred under its own number, not copied
    assert copies(broker) == []
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED  # the write had landed

    send(broker, order())
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]


def test_an_unknown_outcome_read_back_as_not_written_is_handled_again_soon(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Red team on 5257408: deferred untracked, it waited for the peek sweep (10 minutes and more), past
    the few minutes a prepaid order waits for its payment. Read back, the write is known not to have
    landed: the message is copied (due in 10 s), as for any store failure."""
    timeout = StoreOutcomeUnknown("Cosmos DB 408: request timeout")
    unwritten = context_with(ctx, deferrals=SaveFails(ctx.deferrals, timeout, lands=False))
    send(broker, notification())
    assert deliver(functions, broker)
    context_with(unwritten, deferrals=ctx.deferrals)
    assert deferred_sequence_numbers(broker) == [] and len(copies(broker)) == 1

    send(broker, order())
    deliver_all(functions, broker)
    clock.advance(STORE_RETRY_DELAYS[0])
    deliver_all(functions, broker)  # the copy
    assert ctx.states.get("p1").payment is not None
    assert [a["kind"] for a in alerts(broker)] == []


class ReadFailsAfterSaveFails(SaveFails):
    """``SaveFails``, and the read back after it fails too (the store still unreachable)."""

    def get(self, order_id: str) -> Any:
        if not self.armed:
            raise StoreUnavailable("Cosmos DB 503 reading the deferral document back")
        return self._log.get(order_id)


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "not-landed"])
def test_an_unknown_outcome_that_cannot_be_read_back_is_abandoned_and_its_redelivery_tracks_it(
    functions: Any, ctx: Any, broker: Any, lands: bool
) -> None:
    """Deferred all the same before, it had nothing scheduled to decide it: if the write had not landed,
    nobody tracked it and its order's submission could not find it; either way only the peek sweep (10
    minutes and more) would, past the few minutes a prepaid order waits for its payment."""
    timeout = StoreOutcomeUnknown("Cosmos DB 408: request timeout")
    unknown = context_with(ctx, deferrals=ReadFailsAfterSaveFails(ctx.deferrals, timeout, lands=lands))
    send(broker, notification())
    assert deliver(functions, broker)
    context_with(unknown, deferrals=ctx.deferrals)
    assert deferred_sequence_numbers(broker) == [] and copies(broker) == []  # abandoned: on the queue again

    assert deliver(functions, broker)  # its redelivery, the store back
    [seq] = deferred_sequence_numbers(broker)  # deferred under its own number, tracked, its look again sent
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.DEFERRED
    assert [(r["sequenceNumber"], r["round"]) for r in scheduled_retries(broker)] == [(seq, 1)]

    send(broker, order())  # its submission finds the tracked number at once, no sweep needed
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert [a["kind"] for a in alerts(broker)] == []


def test_a_dependency_deferral_whose_write_cannot_be_read_back_is_abandoned_and_its_redelivery_retries_it(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Deferred all the same before, with no RetryDeferred: only the peek sweep, once its retry was overdue
    (10 minutes after it was due), tried it again."""
    orders = OrderStoreThatFailsOnRead(ctx.orders)
    with_orders = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True  # the order database (a dependency, not the state store) is down
    timeout = StoreOutcomeUnknown("Cosmos DB 408: request timeout")
    unknown = context_with(with_orders, deferrals=ReadFailsAfterSaveFails(ctx.deferrals, timeout, lands=True))
    send(broker, notification())
    assert deliver(functions, broker)
    context_with(unknown, deferrals=ctx.deferrals)
    assert deferred_sequence_numbers(broker) == [] and scheduled_retries(broker) == []  # abandoned

    assert deliver(functions, broker)  # its redelivery: the same round recorded, its retry sent
    [seq] = deferred_sequence_numbers(broker)
    assert [(r["sequenceNumber"], r["round"]) for r in scheduled_retries(broker)] == [(seq, 1)]

    orders.failing = False
    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED


@pytest.mark.parametrize(
    "refused", [StoreUnavailable("Cosmos DB 503: service unavailable"), StoreUnavailable("Cosmos DB 429")]
)
def test_a_deferral_write_refused_outright_is_copied_and_the_original_completed(
    functions: Any, ctx: Any, broker: Any, clock: Any, refused: StoreUnavailable
) -> None:
    down = context_with(ctx, deferrals=SaveFails(ctx.deferrals, refused, lands=False))
    send(broker, notification())
    assert deliver(functions, broker)
    context_with(down, deferrals=ctx.deferrals)
    assert deferred_sequence_numbers(broker) == [] and len(copies(broker)) == 1  # handled again later

    send(broker, order())
    deliver_all(functions, broker)
    clock.advance(STORE_RETRY_DELAYS[0])  # the copy is due
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment is not None
    assert [a["kind"] for a in alerts(broker)] == []


def test_a_dependency_deferral_whose_write_landed_unheard_goes_on_with_its_retry(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    orders = OrderStoreThatFailsOnRead(ctx.orders)
    with_orders = context_with(ctx, orders=orders)
    send(broker, order())
    deliver_all(functions, broker)
    orders.failing = True  # the order database (a dependency, not the state store) is down
    lossy = context_with(
        with_orders, deferrals=SaveFails(ctx.deferrals, StoreOutcomeUnknown("no response"), lands=True)
    )
    send(broker, notification())
    assert deliver(functions, broker)
    context_with(lossy, deferrals=ctx.deferrals)

    [seq] = deferred_sequence_numbers(broker)
    entry = ctx.deferrals.get("p1").entry(seq)
    assert (entry.reason, entry.status, entry.rounds) == (
        DeferralReason.DEPENDENCY_UNAVAILABLE,
        EntryStatus.DEFERRED,
        1,
    )
    assert [r["round"] for r in scheduled_retries(broker)] == [1] and copies(broker) == []  # read back: landed

    orders.failing = False
    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]
