"""Red team: a ``RetryDeferred`` that points nowhere, through the real runtime. ``RetryDeferred`` is
the app's message to itself, but it arrives on the public ``orders`` queue, where anyone who may submit
an order may send one. A retry whose order has no deferral document and whose sequence number is no
message is not one this app scheduled: it should be dead-lettered with a reason, and write nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE, STATE_CONTAINER
from tests.runtime.harness import RuntimeHarness

pytestmark = pytest.mark.cosmos


@pytest.fixture
def harness(cosmos_db) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


def _retry(order_id: str, sequence_number: int) -> str:
    return json.dumps(
        {
            "type": "RetryDeferred",
            "schemaVersion": 1,
            "sequenceNumber": sequence_number,
            "orderId": order_id,
            "messageId": "n-ghost",
            "round": 1,
        }
    )


def test_a_retry_for_an_untracked_sequence_number_of_an_unknown_order_is_dead_lettered_and_writes_nothing(
    harness, cosmos_db
):
    """FINDING. submission/retry_deferred.py ``retry_deferred`` goes on when the order has no deferral
    document (``entry is None``), fetches nothing, and deferral/apply.py ``account_for_absent`` treats
    the number as a tracked message that expired: ``resolve`` writes a deferral document
    ``deferred:ord-ghost`` for an order that does not exist (``update_deferrals`` starts an empty one),
    a ``DeferredMessageExpired`` alert tells operators a payment of ``ord-ghost`` expired, and the
    message is completed: no dead-letter, no reason. Each such message is another alert."""
    harness.send(ORDERS_QUEUE, _retry("ord-ghost", 424242), "retry-ghost")
    harness.host.run_until(harness.clock.now() + timedelta(minutes=2))

    docs = [d["id"] for d in cosmos_db.get_container_client(STATE_CONTAINER).read_all_items()]
    alerts = [json.loads(m.body) for m in harness.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    dead = {d.message_id: d for d in harness.broker.dead_letters(ORDERS_QUEUE)}
    letter = dead.get("retry-ghost")
    seen = {
        "documents": docs,
        "alerts": [a["kind"] for a in alerts],
        "dead-letter": None if letter is None else (letter.reason, letter.delivery_count, letter.description),
    }
    assert docs == [] and alerts == [] and letter is not None, seen
    assert letter.reason not in (None, "MaxDeliveryCountExceeded") and letter.delivery_count == 1, seen
    assert "424242" in (letter.description or ""), seen


@pytest.mark.parametrize("sequence_number", [2**63, 2**70])
def test_a_retry_whose_sequence_number_is_past_int64_is_dead_lettered_invalid_fields(harness, sequence_number):
    """FINDING. Service Bus sequence numbers are 64-bit; contracts/messages.py ``RetryDeferred`` takes any
    ``sequenceNumber >= 0``. With the SDK (adapters/servicebus/deferred_sdk.py ``receive_deferred``),
    ``receive_deferred_messages([2**70])`` fails encoding the request (pyamqp: "ValueError: Value supplied
    for long invalid"), which nothing on the path catches (submission/intake.py ``handle_orders_message``
    catches ``StoreUnavailable`` and ``SendError``): the message fails on every delivery until Service Bus
    dead-letters it ``MaxDeliveryCountExceeded``. The runner's broker returns nothing instead, and the
    retry is completed as an expired deferral (the finding above). Expected: ``InvalidFields``."""
    harness.send(ORDERS_QUEUE, _retry("ord-ghost", sequence_number), "retry-huge-seq")
    harness.host.run_until(harness.clock.now() + timedelta(minutes=2))

    dead = {d.message_id: d for d in harness.broker.dead_letters(ORDERS_QUEUE)}
    letter = dead.get("retry-huge-seq")
    assert letter is not None, "not dead-lettered"
    assert (letter.reason, letter.delivery_count) == ("InvalidFields", 1), (letter.reason, letter.description)
    assert "sequenceNumber" in (letter.description or "")
