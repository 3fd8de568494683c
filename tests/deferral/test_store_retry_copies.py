"""The copies ``submission.store_outage`` sends of an ``orders`` message that met a store failure, through
the registered trigger and the in-process broker (duplicate detection included)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import while_using
from tests.deferral.support import deliver, deliver_all, order
from tests.fakes import StateStoreThatFails

pytestmark = pytest.mark.cosmos


def test_an_order_whose_client_messageid_looks_like_a_copy_is_still_handled_after_a_store_failure(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Found by the red team on 3737d51: MessageId ``batch-7:store-retry:1`` from a client, a blip of the
    state store: the copy was named ``batch-7:store-retry:1`` too, duplicate detection dropped it, and
    the order, its original completed, was never written."""
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(order("p9")), message_id="batch-7:store-retry:1"))
    with while_using(ctx, states=StateStoreThatFails(ctx.states, "get")):
        assert deliver(functions, broker)
    clock.advance(STORE_RETRY_DELAYS[0])
    deliver_all(functions, broker)
    assert broker.counters(ORDERS_QUEUE).duplicates_dropped == 0
    assert ctx.states.get("p9") is not None


class DeferLost:
    """The broker's message actions; ``defer`` is lost (the lock lapsed first): the message is redelivered."""

    def __init__(self, actions: Any) -> None:
        self._actions = actions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._actions, name)

    def defer(self, message: Any) -> None:
        return None


def test_a_notification_recorded_then_redelivered_into_a_store_failure_is_deferred_under_its_number_not_copied(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Found in the runner on c1fada6 (fault red team's combo1, seed 2): the first delivery recorded the
    deferral (#S) and its defer was lost with its lock; the redelivery met the Cosmos outage and was copied
    and completed, so #S, still tracked, pointed at nothing: ``DeferredMessageExpired`` when the order
    came, while the copy was applied later. A redelivered notification meeting a store failure is now
    deferred all the same, under the number an earlier delivery may have recorded."""
    import asyncio

    from tests.contexts import context_with
    from tests.deferral.support import DurableClientStub, alerts, deferred_sequence_numbers, notification, send

    send(broker, notification())
    first = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=first, message_actions=DeferLost(broker.actions), client=DurableClientStub()))
    seq = first.sequence_number
    assert ctx.deferrals.get("p1").entry(seq) is not None  # recorded; the message itself not deferred

    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration)
    down = context_with(ctx, states=StateStoreThatFails(ctx.states, "get"))
    assert deliver(functions, broker)  # delivery 2, the store down
    context_with(down, states=ctx.states)
    assert deferred_sequence_numbers(broker) == [seq]
    assert [m for m in broker.peek(ORDERS_QUEUE, 10) if ":store-retry:" in (m.message_id or "")] == []

    send(broker, order())
    deliver_all(functions, broker)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert alerts(broker) == []
