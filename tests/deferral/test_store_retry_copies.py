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
