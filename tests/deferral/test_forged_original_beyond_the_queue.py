"""A store-retry copy names its original by ``storeRetryOriginal`` (submission/store_outage.py
``original_sequence``), and a refusal is written under that number (``rejectedSequenceNumber``), which names the
refused message's status MessageId, alert id and courier instance. A client may set the property on its own
``OrderSubmitted``; a number no original can have (not below the message's own: a copy is always sent after its
original was enqueued) is not taken for one. Past 2**53 Cosmos DB rounds the number it stores, so the refusal
written under it was not found again when the same message came back.

Through the registered trigger, the in-process broker and Cosmos, as tests/deferral/test_refusal_written_first.py."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import ORIGINAL_PROPERTY, ROUND_PROPERTY
from tests.deferral.support import DurableClientStub, deliver, order
from tests.deferral.test_refusal_written_first import Cap, SettlementLost, alert_kinds, told

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize("forged", [2**60 + 1, 10**30], ids=["2**60+1", "10**30"])
def test_a_refused_message_naming_an_original_past_the_queue_is_never_accepted_when_it_comes_back(
    functions, ctx, broker, clock, monkeypatch, forged: int
):
    """Input: an ``OrderSubmitted`` of p1 sent with ``storeRetryRound`` 1 and ``storeRetryOriginal`` ``forged``
    (a number past 2**53, above its own sequence number), refused by the pending cap; its settlement is lost,
    the cap has room when Service Bus redelivers it.

    Expected: the redelivery finishes the refusal (its ids collapse): the submitter heard ``Rejected`` only, the
    order is not accepted.
    Before: the refusal was written under ``forged``, which Cosmos DB stored rounded; the redelivery, not found
    refused, was accepted: its submitter heard ``Rejected``, then ``Received``."""
    cap = Cap(monkeypatch, full=True)
    broker.send_from_client(  # a client's message: it may carry an integer the Python SDK could not send
        ORDERS_QUEUE,
        OutgoingMessage(
            body=json.dumps(order()),
            message_id="p1",
            application_properties={ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: forged},
        ),
    )
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    assert told(broker) == ["Rejected"] and alert_kinds(broker) == ["OrderRejected"]

    cap.full = False
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    assert deliver(functions, broker)  # the same message again
    assert told(broker) == ["Rejected"]
    assert ctx.states.get("p1") is None
    assert alert_kinds(broker) == ["OrderRejected"]
