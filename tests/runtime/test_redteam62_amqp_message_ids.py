"""Red team (hostile62), through the real runtime: an ``orders`` message whose AMQP ``message-id`` is a uuid, a ulong
or binary reaches the trigger as the extension's converter and the SDK decode it (``uuid.UUID``, ``int``, ``bytes``:
``localrun/servicebus/wire.py`` encodes it as Service Bus sends it). A prepaid order's payment notification sent so,
before its order, is applied when the order comes, and nothing is dead-lettered (before: the uuid's failed every
delivery until ``MaxDeliveryCountExceeded``; the ulong's made the order's deferral document unreadable, and the
order was never accepted). tests/deferral/test_redteam62_amqp_message_ids.py has the story."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from tests.deferral.support import notification, order
from tests.runtime.harness import RuntimeHarness

pytestmark = pytest.mark.cosmos


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


@pytest.mark.parametrize("message_id", [uuid.UUID(int=7), 12345, b"\xff\xfe"], ids=lambda value: type(value).__name__)
def test_a_notification_sent_under_a_message_id_that_is_no_text_is_applied_to_its_order(
    harness: RuntimeHarness, message_id: Any
) -> None:
    note = OutgoingMessage(body=json.dumps(notification("p-amqp")), message_id=message_id)
    harness.broker.send_from_client(ORDERS_QUEUE, note)
    harness.run_until_idle()
    harness.send(ORDERS_QUEUE, json.dumps(order("p-amqp")), "order-p-amqp")
    harness.run_until_idle()
    assert harness.ctx is not None
    record = harness.ctx.states.get("p-amqp")
    assert record is not None and record.payment is not None and record.payment.notification_id == "n-1"
    assert harness.broker.dead_letters(ORDERS_QUEUE) == []
