"""A store-retry copy of a payment notification, decided ``OrderRejected`` (its order refused by the pending
cap), settles its original's entry as it does for every other outcome (docs/deferral.md, "Expired deferred
messages"). The original was recorded and never deferred (its look again could not be sent: abandoned),
then redelivered into a store failure and copied, the original completed: its entry waited for a message
that was gone, and when a later submission of the order was accepted, its recovery reported it
``DeferredMessageExpired`` (harsh refusal profile, 80 orders, seed 3: two such alerts for one order, the
notification dead-lettered under its copy's MessageId). Through the registered trigger, the in-process
broker and the Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver, deliver_all, notification, order, send
from tests.deferral.test_deferred_all_the_same_looks_again import FailsOnCall, refused
from tests.deferral.test_recovery_resends_a_rounds_retry import RetrySendFailsOnce

pytestmark = pytest.mark.cosmos


def test_a_copy_dead_lettered_for_a_refused_order_settles_its_originals_entry(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    refused(functions, ctx, broker, monkeypatch)
    send(broker, notification())
    blipping = context_with(ctx, states=FailsOnCall(ctx.states, "get", 2), sender=RetrySendFailsOnce(broker))
    assert deliver(functions, broker)  # recorded; its second look fails and its look again cannot be sent
    [original] = ctx.deferrals.get("p1").entries
    blipping = context_with(blipping, states=FailsOnCall(ctx.states, "get", 1), sender=broker)
    assert deliver(functions, broker)  # redelivered into a store failure: copied, the original completed
    context_with(blipping, states=ctx.states)
    assert deferred_sequence_numbers(broker) == [] and ctx.deferrals.get("p1").entry(original.sequence_number)

    clock.advance(STORE_RETRY_DELAYS[0])
    assert deliver(functions, broker)  # the copy: its order refused, dead-lettered
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == "OrderRejected" and ":store-retry:" in dead.message_id
    settled = ctx.deferrals.get("p1").entry(original.sequence_number)
    assert (settled.status, settled.detail) == (
        EntryStatus.DEAD_LETTERED,
        f"OrderRejected: decided on its copy #{dead.sequence_number}",
    )

    send(broker, order(), message_id="p1-again")  # a later submission, accepted: nothing waits for it
    deliver_all(functions, broker)
    assert ctx.states.get("p1") is not None
    assert "DeferredMessageExpired" not in [a["kind"] for a in alerts(broker)]
