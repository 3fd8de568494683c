"""Red team (store_outage, b18486a): an OrderSubmitted that met the outage is now handled 10 s .. 1 min
LATER (a scheduled copy), so messages the client sent after it overtake it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.states import ProcessState
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingClient, StateStoreThatFails
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


def deliver(functions: dict[str, Any], message: FakeReceivedMessage, client: Any = None) -> RecordingActions:
    actions = RecordingActions()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=actions, client=client or RecordingClient()))
    return actions


def test_redteam_store_outage_cancel_sent_after_the_order_is_dead_lettered_and_the_order_then_runs(
    functions, app_context, sender
):
    """Expected: a client submits an order, then cancels it. The order meets a short Cosmos DB blip (one
    503 / 429: no outage window needed, ``cosmos.throttle_rate`` / ``unavailable_rate`` do this in the
    all-faults profile); the cancellation, sent after it and handled when the store answers, is honoured
    (the order ends cancelled / compensating, or the cancellation waits for it).
    On b18486a: the order's message is COMPLETED and a copy scheduled 10 s later; the CancelOrder (round 0:
    it did not meet the outage itself, so ``cancel_order`` does not wait) finds no state record and is
    dead-lettered ``UnknownOrder``; then the copy creates the order and claims it for attempt 1: the
    order is processed (charged, shipped) although the client cancelled it. Before b18486a the order was
    abandoned and redelivered at once, ahead of the cancellation. In the runner:
    ``--orders 200 --seed 4`` with cosmos outages 10-40 s, 60-90 s, 150-210 s: ``ord-00009:cancel`` and
    ``ord-00159:cancel`` dead-lettered ``UnknownOrder``, both orders ``Processed``."""
    ctx = app_context
    blip = context_with(ctx, states=StateStoreThatFails(ctx.states, "get"))  # the blip
    assert deliver(functions, FakeReceivedMessage.of(order(), "ord-1")).only[0] == "complete"
    [copy] = [m for q, m in sender.sent if q == ORDERS_QUEUE]
    context_with(blip, states=ctx.states)  # the store answers again

    cancel = {"type": "CancelOrder", "schemaVersion": 1, "orderId": "ord-1", "reason": "changed my mind"}
    cancelled = deliver(functions, FakeReceivedMessage.of(cancel, "ord-1:cancel")).only
    assert cancelled[0] == "complete"  # not dead-lettered: it looks again later (its own copy)
    [cancel_copy] = [m for q, m in sender.sent if q == ORDERS_QUEUE and m.message_id.startswith("ord-1:cancel")]

    client = RecordingClient()
    deliver(functions, FakeReceivedMessage.from_sent(copy), client)  # the order's copy, 10 s later
    deliver(functions, FakeReceivedMessage.from_sent(cancel_copy))  # the cancellation's, at the same delay after it

    record = ctx.states.get("ord-1")
    assert record is not None
    assert record.process_state in (ProcessState.COMPENSATING, ProcessState.COMPENSATED), (
        f"cancellation settled {cancelled}; the order then went ahead: {record.process_state}, "
        f"{len(client.started)} orchestration(s) started"
    )
