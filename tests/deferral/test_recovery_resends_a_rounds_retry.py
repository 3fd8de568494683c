"""A notification waiting for its order, met by the order's submission while the order database (a
dependency) is down: its next round is recorded and its ``RetryDeferred`` sent. When that send fails, the
``OrderSubmitted`` is abandoned and redelivered, but its recovery looks only at the notifications waiting
for the order: the entry said a retry was scheduled that never was, and only the peek sweep, once that
retry was 10 minutes overdue, applied the payment (harsh refusal profile, 80 orders, seed 2: after the
prepaid order had used up its attempts and gone to ``Error``). The redelivery now sends the round's retry
again: the same MessageId and due time, collapsed by duplicate detection if the first send went out.
Through the registered trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import ORDERS_QUEUE
from domain.deferral import DeferralReason, EntryStatus
from tests.contexts import context_with
from tests.deferral.support import (
    deferred_for_the_order_database,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
    send,
)
from tests.fakes import OrderStoreThatFailsOnRead

pytestmark = pytest.mark.cosmos


class RetrySendFailsOnce:
    """The broker, except that the first ``RetryDeferred`` sent fails (Service Bus answering an error)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.armed = inner, True

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if self.armed and message.subject == "RetryDeferred":
            self.armed = False
            raise SendError(f"send to {queue!r} failed: ServiceBusError")
        self.inner.send(queue, message)


def retry_ids(broker: Any) -> list[str]:
    """The scheduled ``RetryDeferred`` MessageIds, without their token."""
    scheduled = [m for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name == "SCHEDULED"]
    return [m.message_id.rsplit(":", 1)[0] for m in scheduled if m.message_id.startswith("retry-deferred:")]


def test_a_rounds_retry_whose_send_failed_during_recovery_is_sent_by_the_redelivered_submission(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    send(broker, notification())
    assert deliver(functions, broker)  # deferred: its order does not exist yet
    [seq] = deferred_sequence_numbers(broker)
    assert retry_ids(broker) == [f"retry-deferred:{seq}:1:order"]  # its look again, scheduled

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    orders.failing = True  # the order database cannot be read (its writes go through)
    failing = context_with(ctx, orders=orders, sender=RetrySendFailsOnce(broker))
    send(broker, order())
    assert deliver(functions, broker)  # the record is written; the round's retry cannot be sent: abandoned
    entry = ctx.deferrals.get("p1").entry(seq)
    assert (entry.reason, entry.rounds, entry.status) == (
        DeferralReason.DEPENDENCY_UNAVAILABLE,
        1,
        EntryStatus.DEFERRED,
    )
    assert retry_ids(broker) == [f"retry-deferred:{seq}:1:order"]  # no round retry

    context_with(failing, sender=broker)  # Service Bus sends again; the order database is still down
    assert deliver(functions, broker)  # the OrderSubmitted's redelivery
    assert retry_ids(broker) == [f"retry-deferred:{seq}:1:order", f"retry-deferred:{seq}:1"]  # now sent

    orders.failing = False
    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred_sequence_numbers(broker) == []
    assert ctx.settings.defer_retry_delay < ctx.settings.peek_sweep_age  # well before the sweep could


def test_a_duplicate_submission_sends_a_rounds_retry_again_only_as_a_duplicate_that_collapses(
    functions: Any, ctx: Any, broker: Any
) -> None:
    _, _ = deferred_for_the_order_database(functions, ctx, broker)  # round 1 recorded, its retry sent
    [seq] = deferred_sequence_numbers(broker)
    assert retry_ids(broker) == [f"retry-deferred:{seq}:1"]
    send(broker, order(), message_id="p1-again")  # the order submitted again
    assert deliver(functions, broker)
    assert retry_ids(broker) == [f"retry-deferred:{seq}:1"]  # the same retry: one, not two
