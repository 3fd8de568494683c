"""``orders`` messages whose work was taken over by another path are not abandoned into a dead letter after their
last store-retry round (``localrun fuzz`` seed 6050 found the ``OrderSubmitted`` case:
tests/deferral/test_submission_handed_over_at_its_last_round.py). Two more of the same class:

* a ``RetryDeferred`` that met the deferral log failing through every round: it only points at a deferred
  message, which the peek sweep tries once its round is overdue; it is completed (``IntakeLeftToSweep``);
* a ``PaymentNotification`` applied to its order's record (or a repeat of the payment there) whose deferral
  entries could not be written in its last round: settled as decided (``NotificationSettledUnrecorded``).

Before, both were abandoned after their last round until Service Bus dead-lettered them
``MaxDeliveryCountExceeded``, and the dead-letter watch paged an operator for a payment that was, or was about to
be, applied. Through the registered trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ALL_QUEUES, ORDERS_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from deferral.sweep import peek_sweep
from domain.deferral import EntryStatus
from localrun.servicebus import InProcessBroker, QueuePolicy
from submission.store_outage import STORE_RETRY_DELAYS
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
from tests.fakes import DeferralLogThatFails

pytestmark = pytest.mark.cosmos


@pytest.fixture
def broker(clock: Any) -> InProcessBroker:
    """The deferral tests' broker, its ``orders`` keeping a message 14 days as the Bicep's queue does (theirs keep
    it an hour): a message deferred through an hour of rounds is still there for the sweep."""
    broker = InProcessBroker(clock)
    for queue in dict.fromkeys(ALL_QUEUES):
        broker.declare_queue(queue, QueuePolicy(default_ttl=timedelta(days=14)) if queue == ORDERS_QUEUE else None)
    return broker


def dead_letter_reasons(broker: Any) -> list[str | None]:
    return [d.reason for d in broker.dead_letters(ORDERS_QUEUE)]


def undecided(broker: Any) -> list[Any]:
    """The messages on ``orders`` neither deferred nor settled (active or scheduled)."""
    return [m for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name != "DEFERRED"]


def test_a_retry_whose_rounds_are_used_up_is_completed_and_the_sweep_applies_its_message(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Input: n-1 deferred while the order database is down (its round 1 retry scheduled); the database comes
    back, but the deferral log fails every read and write for longer than the store-retry rounds (an hour).

    Expected: the retry, copied round after round, is completed after its last round, not dead-lettered; once
    the log is back, the peek sweep applies the notification (its round long overdue).
    Before: the last round's copy abandoned five times, ``MaxDeliveryCountExceeded``."""
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    orders.failing = False
    log = DeferralLogThatFails(ctx.deferrals)
    down = context_with(with_orders, deferrals=log)
    for _ in range(len(STORE_RETRY_DELAYS) + 5):
        clock.advance(timedelta(minutes=1))
        deliver_all(functions, broker)
    assert undecided(broker) == []  # the retry and its copies all settled
    assert dead_letter_reasons(broker) == []

    log.failing = False
    swept = peek_sweep(down)
    assert swept.recovered == 1
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred_sequence_numbers(broker) == []


def test_a_notification_applied_in_its_last_round_is_completed_though_its_entries_are_not_written(
    functions: Any, ctx: Any, broker: Any
) -> None:
    """Input: order p1 exists; its payment notification arrives as the last store-retry copy, and the deferral
    log (read to resolve an entry an earlier delivery may have recorded) fails on every delivery.

    Expected: the payment is applied and the message completed: no dead letter.
    Before: applied on its first delivery, then abandoned five times, ``MaxDeliveryCountExceeded``."""
    send(broker, order())
    deliver_all(functions, broker)
    last = len(STORE_RETRY_DELAYS)
    context_with(ctx, deferrals=DeferralLogThatFails(ctx.deferrals))
    broker.send(
        ORDERS_QUEUE,
        OutgoingMessage(
            body=json.dumps(notification()),
            message_id=f"n-1:store-retry:{last}",
            application_properties={ROUND_PROPERTY: last},
        ),
    )
    for _ in range(5):
        if not deliver(functions, broker):
            break
    assert ctx.states.get("p1").payment.notification_id == "n-1"
    assert undecided(broker) == []
    assert dead_letter_reasons(broker) == []
